"""Pre-tokenized token files: nanoGPT-style uint16 ``.bin`` and ``.npy`` arrays (e.g. uint32).

A file whose name contains ``val`` is the validation set (nanoGPT's ``train.bin`` / ``val.bin``);
with none, the tail of the tokens is held out. The vocabulary size comes from
``data.token_vocab_size`` or a sidecar JSON (``NAME.json`` or ``meta.json`` beside the file, key
``vocab_size``; optional ``bytes_per_token`` makes bits per byte available).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tlmsearch.errors import ConfigError

TOKEN_SUFFIXES = (".bin", ".npy")


@dataclass(frozen=True)
class TokenFile:
    path: Path
    tokens: np.ndarray  # 1-D, memory-mapped
    vocab_size: int | None
    bytes_per_token: float | None

    @property
    def is_val(self) -> bool:
        return "val" in self.path.stem.lower()


def is_token_file(path: Path) -> bool:
    return path.suffix.lower() in TOKEN_SUFFIXES


def _sidecar(path: Path) -> dict[str, object]:
    for side in (path.with_suffix(".json"), path.parent / "meta.json"):
        if side.is_file():
            try:
                data = json.loads(side.read_text())
            except (OSError, json.JSONDecodeError) as err:
                raise ConfigError(
                    f"data.sources: sidecar {str(side)!r} is not JSON ({err})"
                ) from None
            if not isinstance(data, dict):
                raise ConfigError(f"data.sources: sidecar {str(side)!r} must hold a JSON object")
            return data
    return {}


def load(path: Path) -> TokenFile:
    """Memory-map one token file, checking its format."""
    if not path.is_file():
        raise ConfigError(f"data.sources: token file {str(path)!r} does not exist")
    try:
        if path.suffix.lower() == ".bin":
            size = path.stat().st_size
            if size == 0 or size % 2:
                raise ConfigError(
                    f"data.sources: {str(path)!r} has {size} bytes; a .bin token file holds "
                    "uint16 tokens (an even, non-zero number of bytes)"
                )
            arr = np.memmap(path, dtype=np.uint16, mode="r")
        else:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ConfigError:
        raise
    except (ValueError, OSError, EOFError) as err:
        raise ConfigError(
            f"data.sources: {str(path)!r} is not a readable .npy file ({err})"
        ) from None
    if arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.size < 2:
        raise ConfigError(
            f"data.sources: {str(path)!r} must be a 1-D integer token array with >= 2 tokens, "
            f"but got shape {arr.shape} and dtype {arr.dtype}"
        )
    side = _sidecar(path)
    vocab = side.get("vocab_size")
    bpt = side.get("bytes_per_token")
    return TokenFile(
        path,
        arr,
        int(vocab) if isinstance(vocab, int | float) else None,
        float(bpt) if isinstance(bpt, int | float) else None,
    )


def resolve_vocab(files: list[TokenFile], given: int | None) -> int:
    """The vocabulary size: given, else from sidecars; every token must be below it."""
    sides = {f.vocab_size for f in files if f.vocab_size is not None}
    if given is None:
        if len(sides) > 1:
            raise ConfigError(f"data.sources: token files disagree on vocab_size: {sorted(sides)}")
        if not sides:
            names = ", ".join(str(f.path) for f in files)
            raise ConfigError(
                f"data.token_vocab_size: required for token files without a sidecar ({names}); "
                'set data.token_vocab_size, or write NAME.json with {"vocab_size": N}'
            )
        given = sides.pop()
    for f in files:
        top = int(f.tokens.max())
        if top >= given:
            raise ConfigError(
                f"data.sources: {str(f.path)!r} holds token id {top} >= vocab_size {given}; "
                "set data.token_vocab_size (or the sidecar's vocab_size) above it"
            )
    return given


def _expanded(source: str) -> Path:
    try:
        return Path(source).expanduser()
    except RuntimeError:  # ~nosuchuser/...: left as written (and so not found)
        return Path(source)


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # e.g. a name too long for the file system
        return False


def val_bytes_problem(sources: list[str], tokenizer_kind: str) -> str | None:
    """Why bits per byte cannot be computed for these token files, or None when it can.

    Text sources always know their bytes, and a tokenizer (file or folder) decodes tokens back;
    token files alone need a sidecar ``bytes_per_token`` (one value for all of them, as
    :mod:`tlmsearch.data.prepare` uses it).
    """
    paths = [_expanded(s) for s in sources]
    if not paths or not all(is_token_file(p) for p in paths) or tokenizer_kind in ("file", "hf"):
        return None
    if not all(_is_file(p) for p in paths):
        return None  # preparing the data says which file is missing
    found = {_sidecar(p).get("bytes_per_token") for p in paths}
    found = {b for b in found if isinstance(b, int | float) and not isinstance(b, bool) and b > 0}
    if len(found) == 1:
        return None
    why = "disagree" if found else "carry no byte count"
    return (
        f"val_bpb needs the UTF-8 bytes of the validation text, but the token files {why}; "
        "give data.tokenizer {kind: file, path: tokenizer.json} or {kind: hf, path: a tokenizer "
        "folder} (the tokenizer that made them), "
        'or a sidecar NAME.json with {"bytes_per_token": X}, or use objective val_loss'
    )
