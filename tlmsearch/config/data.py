"""``data``: the corpus sources, the tokenizer, the sequence length and the validation split.

What ``data.sources`` may name is checked here without reading a file (a ``kind:`` prefix must
be a known kind); what the files hold is read by ``tlmsearch/data/``. Pure data: no torch, no
ray.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from tlmsearch.config.limits import MAX_SEQ_LEN, MAX_VOCAB
from tlmsearch.errors import Strict


class TokenizerConfig(Strict):
    # bpe: trained on the train split; bytes: 256; file: path (a tokenizer.json); hf: path (a
    # local Hugging Face tokenizer folder)
    kind: Literal["bpe", "bytes", "file", "hf"] = "bpe"
    vocab_size: int = Field(8192, ge=257, le=MAX_VOCAB)  # bpe only
    # kind: file -> a tokenizer.json; kind: hf -> a local Hugging Face tokenizer directory
    # (AutoTokenizer.from_pretrained, offline)
    path: str | None = None

    @model_validator(mode="after")
    def _path(self) -> TokenizerConfig:
        if self.kind == "file" and not self.path:
            raise ValueError("kind: file needs path: a tokenizer.json")
        if self.kind == "hf" and not self.path:
            raise ValueError(
                "kind: hf needs path: a local Hugging Face tokenizer directory (the folder "
                "save_pretrained wrote, with tokenizer.json or vocab files)"
            )
        return self


# A source may name its kind before a colon ('jsonl:shards/'); without one, the kind comes from
# the file's suffix (tlmsearch/data/records.py). Two letters at least, so 'C:' stays a path.
SOURCE_KINDS = ("text", "jsonl", "parquet", "csv", "datasets")
_SOURCE_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9_]+):(?!//)(.*)$", re.DOTALL)


def split_source(source: str) -> tuple[str | None, str]:
    """``'jsonl:a/b'`` -> ``('jsonl', 'a/b')``; ``'a/b.jsonl'`` -> ``(None, 'a/b.jsonl')``."""
    m = _SOURCE_PREFIX.match(source)
    if m is None:
        return None, source
    return m.group(1), m.group(2)


def _known_source_kind(source: str) -> str:
    kind, path = split_source(source)
    if kind is not None and kind not in SOURCE_KINDS:
        raise ValueError(
            f"{kind!r} before the colon is not a source kind; give one of "
            f"{', '.join(SOURCE_KINDS)} (e.g. 'jsonl:shards/'), or write './{source}' for a file "
            "whose name has a colon"
        )
    if kind is not None and not path:
        raise ValueError(f"'{kind}:' names no path; give e.g. '{kind}:data/'")
    return source


Source = Annotated[str, AfterValidator(_known_source_kind)]


class DataConfig(Strict):
    # 'classics' (built in, from packages), text files / folders, token files (.bin, .npy),
    # records (.jsonl, .jsonl.gz, .parquet, .csv files or folders of them) or a local `datasets`
    # folder (save_to_disk); 'kind:path' names the kind (docs/data.md)
    sources: list[Source] = Field(default_factory=lambda: ["classics"], min_length=1)
    # the column (or JSON key) that holds a record's text
    text_field: str = Field("text", min_length=1, max_length=256)
    tokenizer: TokenizerConfig = TokenizerConfig()
    token_vocab_size: int | None = Field(None, ge=2, le=MAX_VOCAB)  # token files without sidecar
    seq_len: int = Field(256, ge=8, le=MAX_SEQ_LEN)  # tokens per training and val sequence
    val_tokens: int = Field(65536, ge=1, le=2**32)  # held in memory as one array
    cache_dir: str | None = None  # default: $TLMSEARCH_CACHE or ~/.cache/tlmsearch

    @field_validator("sources", mode="before")
    @classmethod
    def _one_source(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v
