"""Streaming preparation: units in, token arrays on disk, in bounded chunks.

For corpora larger than memory: records (tlmsearch/data/records.py) and the user's text files.
Units arrive one at a time and go to their split by the hash of their group key
(``text.split_of``). Train text is encoded ``CHUNK_CHARS`` at a time and appended to
``train.npy``; val and test units are parked in 64 bucket files by the first bits of that hash
and encoded bucket by bucket at the end, each bucket sorted by the full hash: the order
``text.assign`` gives (so a prefix of the val tokens samples every source) while only one
bucket, about 1/64 of the val split, is ever in memory. The arrays are byte for byte those of
the in-memory path (``prepare._build_text``, kept for the built-in corpora); a test checks it.

Each ``.npy`` is written header first with length 0 and appended to; the header is rewritten
with the final length when the split is done (numpy pads headers so the length can grow in
place), so the arrays memory-map like any ``np.save`` output.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from tlmsearch.data.text import UNIT_BYTES, Unit, split_of
from tlmsearch.data.tokenizer import Tokenizer
from tlmsearch.errors import ConfigError

CHUNK_CHARS = 1 << 21  # characters of text encoded at once (about 2 MB; ~0.5 s of BPE)
N_BUCKETS = 64  # val/test bucket files; one bucket is held in memory at the end


class TokenWriter:
    """A 1-D ``.npy`` built by appending chunks; ``close()`` writes the final length."""

    def __init__(self, path: Path, dtype: np.dtype) -> None:
        self.dtype = np.dtype(dtype)
        self.fh = open(path, "wb")  # noqa: SIM115 (closed by close())
        self.n = 0
        self.sha = hashlib.sha256()
        np.lib.format.write_array_header_1_0(self.fh, self._header(0))
        self.data_start = self.fh.tell()

    def _header(self, n: int) -> dict[str, Any]:
        descr = np.lib.format.dtype_to_descr(self.dtype)
        return {"descr": descr, "fortran_order": False, "shape": (n,)}

    def write(self, ids: np.ndarray) -> None:
        raw = np.ascontiguousarray(ids, dtype=self.dtype).tobytes()
        self.fh.write(raw)
        self.sha.update(raw)
        self.n += int(ids.size)

    def close(self) -> None:
        self.fh.seek(0)
        np.lib.format.write_array_header_1_0(self.fh, self._header(self.n))
        assert self.fh.tell() == self.data_start, "the .npy header changed length"
        self.fh.close()


class _Split:
    """One split's token file and the counts and hashes its manifest entry records."""

    def __init__(self, path: Path, tok: Tokenizer, dtype: np.dtype, files: ExitStack) -> None:
        self.tokens = TokenWriter(path, dtype)
        files.callback(self.tokens.fh.close)  # on an error too (closing twice is a no-op)
        self.tok = tok
        self.text_sha = hashlib.sha256()
        self.units = 0
        self.bytes = 0
        self.pending: list[str] = []
        self.pending_chars = 0
        self.peak_chars = 0  # the most text held at once (tests assert it stays bounded)

    def add(self, text: str) -> None:
        self.pending.append(text + "\n\n")  # the text as written: text.join()
        self.pending_chars += len(text) + 2
        self.peak_chars = max(self.peak_chars, self.pending_chars)
        if self.pending_chars >= CHUNK_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        for ids in self.tok.encode(self.pending):
            self.tokens.write(np.asarray(ids, dtype=self.tokens.dtype))
        for piece in self.pending:
            raw = piece.encode()
            self.text_sha.update(raw)
            self.bytes += len(raw)
        self.units += len(self.pending)
        self.pending, self.pending_chars = [], 0

    def close(self) -> dict[str, Any]:
        self.flush()
        self.tokens.close()
        return {
            "units": self.units,
            "bytes": self.bytes,
            "text_sha256": self.text_sha.hexdigest(),
            "tokens": self.tokens.n,
            "tokens_sha256": self.tokens.sha.hexdigest(),
            "dtype": str(self.tokens.dtype),
        }


class _Buckets:
    """Val or test units parked on disk by the first 6 bits of their key's sha256."""

    def __init__(self, folder: Path, name: str) -> None:
        self.folder = folder
        self.name = name
        self.held: dict[int, list[str]] = {}
        self.held_chars = 0
        self.count = 0
        self.peak_chars = 0

    def _path(self, b: int) -> Path:
        return self.folder / f"{self.name}.{b:02d}.jsonl"

    def add(self, unit: Unit) -> None:
        digest = hashlib.sha256(unit.group.encode()).digest()
        b = digest[0] * N_BUCKETS // 256
        line = json.dumps([digest.hex(), unit.text]) + "\n"
        self.held.setdefault(b, []).append(line)
        self.held_chars += len(line)
        self.count += 1
        self.peak_chars = max(self.peak_chars, self.held_chars)
        if self.held_chars >= CHUNK_CHARS:
            self.spill()

    def spill(self) -> None:
        for b, lines in self.held.items():
            with open(self._path(b), "a", encoding="utf-8") as fh:
                fh.writelines(lines)
        self.held, self.held_chars = {}, 0

    def drain(self, split: _Split, tick: Callable[[], None]) -> None:
        """Every unit into ``split`` in the order of its key's hash; the buckets are deleted."""
        self.spill()
        for b in range(N_BUCKETS):
            path = self._path(b)
            tick()
            if not path.is_file():
                continue
            with open(path, encoding="utf-8") as fh:
                rows = sorted(json.loads(line) for line in fh)
            path.unlink()
            for _, body in rows:
                split.add(body)


def write_splits(
    units: Callable[[], Iterable[Unit]],
    tokenizer: Callable[[Callable[[], Iterable[str]]], Tokenizer],
    out: Path,
    steps: Any,
    what: str,
) -> dict[str, Any]:
    """Stream ``units()`` into ``out/{train,val,test}.npy``; the manifest's body.

    ``tokenizer(train_texts)`` returns the tokenizer; it may call ``train_texts()`` for a pass
    over the train split (to train BPE), so ``units`` is a factory: each call reads again.
    """

    def train_texts() -> Iterator[str]:
        # The train split exactly as encoded below: without its last unit when that moves to val.
        last, any_val = None, False
        for u in units():
            split = split_of(u.group)
            any_val = any_val or split == "val"
            if split == "train":
                if last is not None:
                    yield last
                last = u.text
        if last is not None and any_val:
            yield last

    tok = tokenizer(train_texts)
    tok.save(out / "tokenizer.json")
    dtype = np.dtype(np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32)
    with ExitStack() as files:
        body = _write(units, _Split(out / "train.npy", tok, dtype, files), out, steps, what, files)
    return {"vocab_size": tok.vocab_size, **body}


def _write(
    units: Callable[[], Iterable[Unit]],
    train: _Split,
    out: Path,
    steps: Any,
    what: str,
    files: ExitStack,
) -> dict[str, Any]:
    work = out / ".buckets"
    work.mkdir()
    held = {name: _Buckets(work, name) for name in ("val", "test")}
    last: Unit | None = None  # held back: the val unit of a corpus that hashed none there
    with steps.step("encode train; park val and test") as tick:
        for unit in units():
            split = split_of(unit.group)
            if split != "train":
                held[split].add(unit)
                continue
            if last is not None:
                train.add(last.text)
                tick()
            last = unit
    if last is None:
        raise ConfigError(f"data.sources: {what} has no text after cleaning; give more text")
    if held["val"].count == 0:  # as text.ensure_nonempty: the last train unit moves to val
        if train.units + len(train.pending) == 0:
            raise ConfigError(
                f"data.sources: {what} is too small to split into train and val "
                f"(one unit of ~{UNIT_BYTES} characters); give more text"
            )
        held["val"].add(last)
    else:
        train.add(last.text)
    splits = {"train": train.close()}
    peak = max(train.peak_chars, *(h.peak_chars for h in held.values()))
    for name, buckets in held.items():
        with steps.step(f"encode {name}", total=N_BUCKETS) as tick:
            split = _Split(out / f"{name}.npy", train.tok, train.tokens.dtype, files)
            buckets.drain(split, tick)
            splits[name] = split.close()
            peak = max(peak, split.peak_chars)
    work.rmdir()
    return {"splits": splits, "peak_chunk_chars": peak}
