"""Tokenizers: byte-level BPE trained on the train split, raw bytes, a user's tokenizer.json, or
a local Hugging Face tokenizer directory.

All three share ``encode(texts) -> list of id lists``, ``decode(ids) -> str`` and ``vocab_size``.
Byte-level BPE (GPT-2 style, arXiv 1909.03341 for the byte-level idea) round-trips any UTF-8 text.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from tlmsearch.errors import ConfigError


class Tokenizer(Protocol):
    vocab_size: int

    def encode(self, texts: Sequence[str]) -> list[list[int]]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def save(self, path: Path) -> None: ...


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocab 256): needs no training, a useful baseline."""

    vocab_size = 256

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        return [list(t.encode("utf-8")) for t in texts]

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(int(i) for i in ids).decode("utf-8", "replace")

    def save(self, path: Path) -> None:
        path.write_text(json.dumps({"kind": "bytes", "vocab_size": 256}))


class HFTokenizer:
    """A HuggingFace ``tokenizers`` model (trained here or a user's tokenizer.json)."""

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.vocab_size = int(tok.get_vocab_size(with_added_tokens=True))

    def encode(self, texts: Sequence[str]) -> list[list[int]]:
        # encode_batch on units: one giant string is slower and takes GBs (docs/platform.md).
        return [e.ids for e in self.tok.encode_batch(list(texts), add_special_tokens=False)]

    def decode(self, ids: Sequence[int]) -> str:
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    def save(self, path: Path) -> None:
        self.tok.save(str(path))


def train_bpe(texts: Iterable[str], vocab_size: int) -> HFTokenizer:
    """Byte-level BPE with ``vocab_size`` tokens (all 256 bytes included), trained on ``texts``."""
    from tokenizers import Tokenizer as HFTok
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = HFTok(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return HFTokenizer(tok)


def load_file(path: str | Path) -> HFTokenizer:
    """A user's tokenizer.json."""
    from tokenizers import Tokenizer as HFTok

    p = Path(path).expanduser()
    if not p.is_file():
        raise ConfigError(
            f"data.tokenizer.path: {str(p)!r} does not exist; give a tokenizer.json "
            "(HuggingFace tokenizers format)"
        )
    try:
        return HFTokenizer(HFTok.from_file(str(p)))
    except Exception as err:  # tokenizers raises a bare Exception on a bad file
        raise ConfigError(
            f"data.tokenizer.path: {str(p)!r} is not a valid tokenizer.json ({err})"
        ) from None


def load_hf_dir(path: str | Path) -> HFTokenizer:
    """A local Hugging Face tokenizer directory, read offline by ``AutoTokenizer``.

    Its fast backend (a ``tokenizers`` model, converted from vocab files where the folder has
    no tokenizer.json) encodes, so the prepared folder's tokenizer.json is that same model.
    """
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ConfigError(
            f"data.tokenizer.path: {str(p)!r} is not a folder; kind: hf needs a Hugging Face "
            "tokenizer directory (what save_pretrained wrote); for a lone tokenizer.json use "
            "kind: file"
        )
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise ConfigError(
            "data.tokenizer.kind: hf needs the transformers package: pip install "
            "'tlmsearch[data]' (or give kind: file with the folder's tokenizer.json)"
        ) from None
    try:
        tok = AutoTokenizer.from_pretrained(str(p), local_files_only=True)
    except Exception as err:  # transformers raises OSError, ValueError, KeyError, ...
        raise ConfigError(
            f"data.tokenizer.path: {str(p)!r} could not be loaded by AutoTokenizer "
            f"({type(err).__name__}: {str(err)[:200]})"
        ) from None
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        raise ConfigError(
            f"data.tokenizer.path: {str(p)!r} loads as a slow {type(tok).__name__} with no fast "
            "(tokenizers) backend; save a tokenizer.json for it (e.g. with "
            "convert_slow_tokenizer) or use kind: bpe"
        )
    return HFTokenizer(backend)


def load_saved(path: Path) -> Tokenizer:
    """The tokenizer saved in a prepared data folder."""
    data = json.loads(path.read_text())
    if data.get("kind") == "bytes":
        return ByteTokenizer()
    return load_file(path)
