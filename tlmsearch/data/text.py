"""Text in, clean units out: normalisation, unit chunking and a deterministic train/val/test split.

A *unit* is a chapter or a ~8 KB run of paragraphs. Units are assigned to a split by hashing a
group key, so parallel material (the same chapter in two editions) never straddles train and val,
and the split never depends on file order or on the machine.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from tlmsearch.errors import ConfigError

TEXT_SUFFIXES = (".txt", ".md", ".text", ".rst")
UNIT_BYTES = 8192
VAL_FRACTION = 0.02
TEST_FRACTION = 0.02

_QUOTES = str.maketrans(
    {
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u201b": "'",
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2032": "'",
        "\u2033": '"',
        "\u00a0": " ",
        "\ufeff": "",
    }
)
# A verse line number set off by a wide gap at the end of the line ("... servants          10").
_LINE_NUMBER = re.compile(r"[ \t]{3,}\d{1,4}[ \t]*$", re.MULTILINE)
_BLANKS = re.compile(r"\n{3,}")


@dataclass(frozen=True)
class Unit:
    """A piece of clean text and the key that decides its split."""

    group: str
    text: str


def normalize(text: str, *, verse: bool = True) -> str:
    """NFC, ASCII quotes, no trailing line numbers or indentation, at most one blank line.

    ``verse=False`` also joins hard-wrapped lines of a paragraph into one line (prose).
    """
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = text.translate(_QUOTES)
    text = _LINE_NUMBER.sub("", text)
    lines = [line.strip() for line in text.split("\n")]
    text = "\n".join(lines)
    text = _BLANKS.sub("\n\n", text).strip()
    if not verse:
        text = "\n\n".join(" ".join(p.split("\n")) for p in text.split("\n\n"))
    return text


def chunk(text: str, target: int = UNIT_BYTES) -> list[str]:
    """Split at paragraph breaks into pieces of about ``target`` characters."""
    out: list[str] = []
    cur: list[str] = []
    size = 0
    for para in text.split("\n\n"):
        if not para:
            continue
        cur.append(para)
        size += len(para) + 2
        if size >= target:
            out.append("\n\n".join(cur))
            cur, size = [], 0
    if cur:
        out.append("\n\n".join(cur))
    return out


def split_of(group: str, val: float = VAL_FRACTION, test: float = TEST_FRACTION) -> str:
    """'train', 'val' or 'test', from sha256 of the group key: stable across machines and runs."""
    h = int.from_bytes(hashlib.sha256(group.encode()).digest()[:8], "big") / 2.0**64
    return "val" if h < val else "test" if h < val + test else "train"


def assign(units: Iterable[Unit]) -> dict[str, list[str]]:
    """Units -> {'train': [...], 'val': [...], 'test': [...]}.

    Train keeps the input order; val and test are ordered by the hash of their group key, so a
    prefix of the validation tokens (``data.val_tokens``) samples every source, not the first.
    """
    out: dict[str, list[Unit]] = {"train": [], "val": [], "test": []}
    for u in units:
        out[split_of(u.group)].append(u)
    for name in ("val", "test"):
        out[name].sort(key=lambda u: hashlib.sha256(u.group.encode()).digest())
    return {name: [u.text for u in us] for name, us in out.items()}


def ensure_nonempty(splits: dict[str, list[str]], what: str) -> dict[str, list[str]]:
    """Tiny corpora may hash no unit into val: then move the last train unit(s) there."""
    if not splits["train"]:
        raise ConfigError(f"data.sources: {what} has no text after cleaning; give more text")
    if not splits["val"]:
        if len(splits["train"]) < 2:
            raise ConfigError(
                f"data.sources: {what} is too small to split into train and val "
                f"(one unit of ~{UNIT_BYTES} characters); give more text"
            )
        splits["val"].append(splits["train"].pop())
    return splits


def sha256_texts(texts: Sequence[str]) -> str:
    """The sha256 of the texts as written to disk (joined by a blank line)."""
    return hashlib.sha256(join(texts).encode()).hexdigest()


def join(texts: Sequence[str]) -> str:
    return "".join(t + "\n\n" for t in texts)


# -------------------------------------------------------------------------------------------------
# A user's own text files and folders


def text_files(path: Path) -> list[Path]:
    """A file, or every text file under a folder (sorted, so the order is the same everywhere)."""
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(
            p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES
        )
        if not files:
            raise ConfigError(
                f"data.sources: folder {str(path)!r} holds no text files "
                f"({', '.join(TEXT_SUFFIXES)})"
            )
        return files
    raise ConfigError(
        f"data.sources: {str(path)!r} does not exist; give 'classics', a text file or folder, "
        "or a token file (.bin, .npy)"
    )


def read_text(path: Path) -> str:
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"data.sources: {str(path)!r} is not UTF-8 text (byte {err.start}); "
            "convert it, e.g. iconv -t UTF-8"
        ) from None
    except OSError as err:
        raise ConfigError(f"data.sources: cannot read {str(path)!r}: {err.strerror}") from None


def file_units(path: Path, root: Path) -> Iterator[Unit]:
    """Units of one user file: paragraphs kept, lines kept (we cannot tell verse from prose)."""
    rel = path.relative_to(root).as_posix() if path != root else path.name
    for i, piece in enumerate(chunk(normalize(read_text(path)))):
        yield Unit(f"file:{rel}:{i}", piece)
