"""What ``tlmsearch data prepare`` does, kept out of ``tlmsearch/cli.py`` so that stays thin."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tlmsearch.config import DataConfig, TokenizerConfig
from tlmsearch.errors import ConfigError, problems_from


def data_config(
    *,
    sources: Sequence[str],
    study: Path | None,
    tokenizer: str | None,
    vocab_size: int | None,
    tokenizer_path: str | None,
    token_vocab_size: int | None,
    cache_dir: str | None,
    text_field: str | None = None,
    overrides: Sequence[str] = (),
) -> DataConfig:
    """The study's data section (or the defaults), with the command line's choices on top."""
    if study is not None:
        from tlmsearch.config import load_study

        base = load_study(study, overrides).data.model_dump()
    else:
        base = DataConfig().model_dump()
    if sources:
        base["sources"] = list(sources)
    tok = dict(base["tokenizer"])
    if tokenizer is not None:
        tok["kind"] = tokenizer
    if vocab_size is not None:
        tok["vocab_size"] = vocab_size
    if tokenizer_path is not None:
        tok["path"] = tokenizer_path
        if tokenizer is None:  # a path alone: a tokenizer.json, or a folder for AutoTokenizer
            tok["kind"] = "hf" if Path(tokenizer_path).expanduser().is_dir() else "file"
    base["tokenizer"] = tok
    if token_vocab_size is not None:
        base["token_vocab_size"] = token_vocab_size
    if cache_dir is not None:
        base["cache_dir"] = cache_dir
    if text_field is not None:
        base["text_field"] = text_field
    try:
        return DataConfig.model_validate(base)
    except ValidationError as err:
        raise ConfigError(problems_from(err, prefix="data", model=DataConfig)) from None


def prepare_command(*, console: Any, **kwargs: Any) -> None:
    from rich.table import Table

    from tlmsearch.data import prepare_data

    cfg = data_config(**kwargs)
    data = prepare_data(cfg, progress=True)
    splits = data.manifest.get("splits", {})
    table = Table(title=f"prepared {', '.join(cfg.sources)}")
    for col in ("split", "units", "bytes", "tokens", "sha256 (text or tokens)"):
        table.add_column(col, justify="right" if col in ("units", "bytes", "tokens") else "left")
    for name, info in splits.items():
        table.add_row(
            name,
            str(info.get("units", "")),
            f"{info['bytes']:,}" if "bytes" in info else "",
            f"{info['tokens']:,}",
            (info.get("text_sha256") or info["tokens_sha256"])[:16],
        )
    console.print(table)
    bpt = data.bytes_per_token
    console.print(
        f"key {data.key}; vocab {data.vocab_size}; "
        + (f"{bpt:.2f} bytes/token; " if bpt else "bits per byte unavailable (no byte count); ")
        + f"val set {data.n_val_tokens:,} tokens; in {data.dir}"
    )


__all__ = ["TokenizerConfig", "data_config", "prepare_command"]
