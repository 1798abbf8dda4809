"""Sources and the cache key: what ``data.sources`` names, and the hash of what tokens depend on.

A source is a built-in corpus, text files, token files or records (tlmsearch/data/records.py);
the key hashes the sources' contents (records: their files' paths, sizes and mtimes), the
tokenizer and ``FORMAT_VERSION``, so a second prepare is instant and a changed source gets a new
prepared folder.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlmsearch.config import DataConfig, split_source
from tlmsearch.data import corpus, debian, records, text, tokens
from tlmsearch.data.tokenizer import load_hf_dir
from tlmsearch.errors import ConfigError

FORMAT_VERSION = 1


def cache_root(cfg: DataConfig) -> Path:
    root = cfg.cache_dir or os.environ.get("TLMSEARCH_CACHE") or "~/.cache/tlmsearch"
    return Path(root).expanduser()


def _sha256_file(path: Path) -> str:
    return corpus.sha256_file(path)


# The built-in corpora: 'classics' (pip only) and 'classics_plus' (classics + Debian packages).
BUILT_IN = ("classics", debian.NAME)


@dataclass(frozen=True)
class Source:
    """One entry of ``data.sources``: its name as written, its path, and its records kind."""

    name: str
    path: Path | None  # None: a built-in corpus
    records: str | None = None  # 'jsonl' | 'parquet' | 'csv' | 'datasets'; None: text or tokens


def classify(cfg: DataConfig) -> tuple[str, list[Source]]:
    """('text' | 'tokens' | 'stream', the sources); 'stream' when any source is records."""
    kinds = set()
    out: list[Source] = []
    for src in cfg.sources:
        if src in BUILT_IN:
            kinds.add("text")
            out.append(Source(src, None))
            continue
        prefix, raw = split_source(src)
        path = Path(raw).expanduser()
        kind = records.kind_of(path, prefix)
        if kind is not None:
            kinds.add("text")
        elif prefix is None and tokens.is_token_file(path):
            kinds.add("tokens")
        elif path.exists():
            kinds.add("text")
        else:
            raise ConfigError(
                f"data.sources: {src!r} is not a built-in corpus ('classics', 'classics_plus') "
                "and does not exist; give 'classics', a text file or folder, records (.jsonl, "
                ".parquet, .csv, a datasets folder) or a token file (.bin, .npy)"
            )
        out.append(Source(src, path, kind))
    if len(kinds) > 1:
        raise ConfigError(
            "data.sources: mixes text and token files; tokenize the text the same way or use "
            "one kind"
        )
    kind = kinds.pop()
    if any(s.records for s in out):
        kind = "stream"
    return kind, out


# Files of a model folder that are no part of a tokenizer: left out of its cache key.
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx")


def tokenizer_key(cfg: DataConfig) -> dict[str, Any]:
    tok = cfg.tokenizer
    if tok.kind == "bpe":
        return {"kind": "bpe", "vocab_size": tok.vocab_size}
    if tok.kind == "bytes":
        return {"kind": "bytes"}
    assert tok.path is not None
    path = Path(tok.path).expanduser()
    if tok.kind == "hf":
        if not path.is_dir():
            load_hf_dir(path)  # raises the error that names the field
        files = sorted(
            f for f in path.rglob("*") if f.is_file() and f.suffix not in _WEIGHT_SUFFIXES
        )
        return {
            "kind": "hf",
            "files": [[f.relative_to(path).as_posix(), _sha256_file(f)] for f in files],
        }
    if not path.is_file():
        raise ConfigError(
            f"data.tokenizer.path: {tok.path!r} does not exist; give a tokenizer.json"
        )
    return {"kind": "file", "sha256": _sha256_file(path)}


def cache_key(cfg: DataConfig) -> tuple[str, dict[str, Any]]:
    """The content hash naming the prepared folder, and what went into it."""
    kind, sources = classify(cfg)
    described: list[Any] = []
    for src in sources:
        name, path = src.name, src.path
        if path is None:
            described.append(
                corpus.describe_source() if name == "classics" else debian.describe_source()
            )
        elif kind == "tokens":
            described.append({"tokens": path.name, "sha256": _sha256_file(path)})
        elif src.records is not None:
            described.append(
                {
                    "records": src.records,
                    "source": name,
                    "root": str(path.resolve()),
                    "files": records.identity(path, src.records),
                }
            )
        else:
            files = text.text_files(path)
            root = path if path.is_dir() else path.parent
            described.append(
                {
                    "text": name,
                    "files": [[f.relative_to(root).as_posix(), _sha256_file(f)] for f in files],
                }
            )
    what: dict[str, Any] = {"format": FORMAT_VERSION, "kind": kind, "sources": described}
    if kind == "stream":
        what["text_field"] = cfg.text_field
    if kind != "tokens":
        what["tokenizer"] = tokenizer_key(cfg)
    else:
        what["token_vocab_size"] = cfg.token_vocab_size
        # Both shape the folder too: the tokenizer.json copied for bits per byte, and the size
        # of the val tail held out when no source is a val file.
        what["val_tokens"] = cfg.val_tokens
        if cfg.tokenizer.kind in ("file", "hf"):
            what["tokenizer"] = tokenizer_key(cfg)
    blob = json.dumps(what, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:24], what
