"""Data: cleaning, splitting, tokenizers, token files, the content-hash cache, batches."""

from __future__ import annotations

import json
import pickle
import random
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import DataConfig
from tlmsearch.data import PreparedData, prepare_data
from tlmsearch.data import prepare as prep
from tlmsearch.data.batches import Batches, val_windows
from tlmsearch.data.text import Unit, assign, chunk, normalize, split_of
from tlmsearch.data.tokenizer import ByteTokenizer, train_bpe
from tlmsearch.errors import ConfigError

runner = CliRunner()
_WORDS = (
    "the of and to in that he shall unto for his i lord they be is him not them it with all thou "
    "thy was god which my me said but ye their have will thee from as are when this out were upon"
)
WORDS = _WORDS.split()


def make_corpus(folder: Path, n_files: int = 3, paras: int = 120, seed: int = 0) -> Path:
    """Pseudo-English made here: a few files of paragraphs of random words."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(n_files):
        body = []
        for _ in range(paras):
            words = [rng.choice(WORDS) for _ in range(rng.randint(20, 60))]
            body.append(" ".join(words).capitalize() + ".")
        (folder / f"book{f}.txt").write_text("\n\n".join(body))
    return folder


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "cache"
    monkeypatch.setenv("TLMSEARCH_CACHE", str(path))
    return path


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return make_corpus(tmp_path / "corpus")


def cfg_for(source: Path | str, cache: Path, **kw: object) -> DataConfig:
    base: dict = {"sources": [str(source)], "cache_dir": str(cache), "seq_len": 32}
    base.setdefault("tokenizer", {"kind": "bytes"})
    base.update(kw)
    return DataConfig.model_validate(base)


# -------------------------------------------------------------------------------------------------
# Cleaning and splitting


def test_normalize_cleans_quotes_numbers_and_blank_lines() -> None:
    raw = "\ufeff\u201cHail,\u201d she said\u2019s \r\n  Of man's first          10\n\n\n\nEnd  "
    assert normalize(raw) == "\"Hail,\" she said's\nOf man's first\n\nEnd"
    assert normalize("a hard\nwrapped line\n\nnext", verse=False) == "a hard wrapped line\n\nnext"
    assert normalize("e\u0301") == "\u00e9"  # NFC


@given(st.lists(st.text(alphabet="abc \n", min_size=1, max_size=40), min_size=1, max_size=30))
def test_chunk_keeps_every_paragraph_in_order(paras: list[str]) -> None:
    text = normalize("\n\n".join(paras))
    pieces = chunk(text, target=50)
    assert "\n\n".join(pieces) == text
    assert all(pieces)


@given(st.text(min_size=1, max_size=30))
def test_split_of_is_a_pure_function_of_the_key(key: str) -> None:
    assert split_of(key) == split_of(key) in ("train", "val", "test")


def test_split_fractions_and_groups_stay_together() -> None:
    keys = [f"book:{i}" for i in range(20000)]
    counts = {s: sum(split_of(k) == s for k in keys) for s in ("train", "val", "test")}
    assert 0.015 < counts["val"] / len(keys) < 0.025
    assert 0.015 < counts["test"] / len(keys) < 0.025
    # Two editions of one chapter share a group key, so they land in the same split.
    units = [Unit(f"bible:Genesis:{c}", f"{ed} {c}") for c in range(300) for ed in ("kjv", "web")]
    splits = assign(units)
    for name, texts in splits.items():
        chapters = {t.split()[1] for t in texts}
        for c in chapters:
            assert f"kjv {c}" in texts and f"web {c}" in texts, name


def test_prepare_is_deterministic_across_caches(corpus: Path, tmp_path: Path) -> None:
    a = prepare_data(
        cfg_for(corpus, tmp_path / "c1", tokenizer={"kind": "bpe", "vocab_size": 300}),
        progress=False,
    )
    b = prepare_data(
        cfg_for(corpus, tmp_path / "c2", tokenizer={"kind": "bpe", "vocab_size": 300}),
        progress=False,
    )
    assert a.key == b.key and a.dir != b.dir
    for split in ("train", "val", "test"):
        sa, sb = a.manifest["splits"][split], b.manifest["splits"][split]
        assert sa["text_sha256"] == sb["text_sha256"]
        assert sa["tokens_sha256"] == sb["tokens_sha256"]
    assert a.manifest["splits"]["val"]["units"] >= 1


# -------------------------------------------------------------------------------------------------
# Tokenizers


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_byte_tokenizer_round_trips(text: str) -> None:
    tok = ByteTokenizer()
    (ids,) = tok.encode([text])
    assert max(ids, default=0) < 256 and tok.decode(ids) == text


@pytest.fixture(scope="module")
def bpe() -> object:
    rng = random.Random(1)
    texts = [" ".join(rng.choice(WORDS) for _ in range(50)) for _ in range(200)]
    return train_bpe(texts, 400)


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=200))
def test_bpe_round_trips_any_text(bpe: object, text: str) -> None:
    (ids,) = bpe.encode([text])  # type: ignore[attr-defined]
    assert bpe.decode(ids) == text  # type: ignore[attr-defined]


def test_bpe_compresses_and_has_the_asked_vocab(bpe: object) -> None:
    assert 256 < bpe.vocab_size <= 400  # type: ignore[attr-defined]
    text = "the lord said unto them that he shall be with thee"
    (ids,) = bpe.encode([text])  # type: ignore[attr-defined]
    assert len(ids) < len(text) / 2


def test_val_bytes_counts_the_predicted_text(corpus: Path, cache: Path) -> None:
    for tok in ({"kind": "bytes"}, {"kind": "bpe", "vocab_size": 320}):
        data = prepare_data(cfg_for(corpus, cache, tokenizer=tok, val_tokens=1000), progress=False)
        assert (data.n_val_tokens - 1) % data.seq_len == 0
        val = np.load(data.val_path)[: data.n_val_tokens]
        if tok["kind"] == "bytes":
            assert data.val_bytes == data.n_val_tokens - 1
        else:
            from tlmsearch.data.tokenizer import load_file

            t = load_file(data.tokenizer_path)  # type: ignore[arg-type]
            whole = len(t.decode(val).encode())
            first = len(t.decode(val[:1]).encode())
            assert data.val_bytes == whole - first


# -------------------------------------------------------------------------------------------------
# Token files


def test_token_files_of_both_formats_load(tmp_path: Path, cache: Path) -> None:
    rng = np.random.default_rng(0)
    train = rng.integers(0, 1000, size=5000).astype(np.uint16)
    val = rng.integers(0, 1000, size=700).astype(np.uint16)
    train.tofile(tmp_path / "train.bin")
    val.tofile(tmp_path / "val.bin")
    (tmp_path / "meta.json").write_text(json.dumps({"vocab_size": 1000, "bytes_per_token": 3.0}))
    cfg = DataConfig(
        sources=[str(tmp_path / "train.bin"), str(tmp_path / "val.bin")],
        cache_dir=str(cache),
        seq_len=32,
    )
    data = prepare_data(cfg, progress=False)
    assert data.vocab_size == 1000 and data.n_train_tokens == 5000
    np.testing.assert_array_equal(data.train_tokens(), train)
    np.testing.assert_array_equal(data.val_tokens(), val[: data.n_val_tokens])
    assert data.val_bytes == 3 * (data.n_val_tokens - 1)

    big = rng.integers(0, 70000, size=6000).astype(np.uint32)
    (tmp_path / "npy").mkdir()
    np.save(tmp_path / "npy" / "tokens.npy", big)
    cfg = DataConfig(
        sources=[str(tmp_path / "npy" / "tokens.npy")],
        token_vocab_size=70000,
        cache_dir=str(cache),
        seq_len=32,
        val_tokens=500,
    )
    data = prepare_data(cfg, progress=False)
    assert data.vocab_size == 70000 and data.train_tokens().dtype == np.uint32
    assert data.n_train_tokens == 5500  # the tail held out as val
    # a different val_tokens holds out a different tail: a new cache entry, not the old split
    bigger = prepare_data(cfg.model_copy(update={"val_tokens": 1000}), progress=False)
    assert bigger.dir != data.dir and bigger.n_train_tokens < data.n_train_tokens
    np.testing.assert_array_equal(np.asarray(data.train_tokens()), big[:5500])
    assert data.val_bytes is None


def test_token_files_with_a_tokenizer_count_special_tokens_as_no_text(
    tmp_path: Path, cache: Path
) -> None:
    """GPT-2-style token files: <|endoftext|> separates documents and stands for no bytes."""
    from tlmsearch.data.tokenizer import train_bpe

    tok = train_bpe(["héllo wörld, the lord said unto them"] * 50, vocab_size=300)
    tok.tok.add_special_tokens(["<|endoftext|>"])
    tok.tok.add_tokens(["ünïcode"])  # an added token that is text: its UTF-8 bytes count
    tok.save(tmp_path / "tok.json")
    eot, word = tok.tok.token_to_id("<|endoftext|>"), tok.tok.token_to_id("ünïcode")
    docs = ["héllo wörld", "the lord said", "unto them ünïcode"]
    ids: list[int] = []
    for doc in docs:
        ids += [*tok.tok.encode(doc).ids, eot]
    assert word in ids
    # val = one context token, then the documents 16 times: exactly the predicted tokens
    val = np.array([eot] + ids * 16, dtype=np.uint16)
    val.tofile(tmp_path / "val.bin")
    np.array(ids * 40, dtype=np.uint16).tofile(tmp_path / "train.bin")
    cfg = DataConfig(
        sources=[str(tmp_path / "train.bin"), str(tmp_path / "val.bin")],
        token_vocab_size=tok.tok.get_vocab_size(),
        tokenizer={"kind": "file", "path": str(tmp_path / "tok.json")},
        cache_dir=str(cache),
        seq_len=16,
        val_tokens=len(val),
    )
    data = prepare_data(cfg, progress=False)
    assert data.n_val_tokens == len(val)
    assert data.val_bytes == 16 * sum(len(doc.encode("utf-8")) for doc in docs)


@pytest.mark.parametrize(
    "case",
    [
        "missing",
        "odd_bin",
        "corrupt_npy",
        "no_vocab",
        "id_too_big",
        "float_npy",
        "not_utf8",
        "empty_dir",
    ],
)
def test_bad_sources_raise_config_error(tmp_path: Path, cache: Path, case: str) -> None:
    kw: dict = {}
    src = tmp_path / "x.npy"
    if case == "missing":
        src = tmp_path / "nowhere.txt"
    elif case == "odd_bin":
        src = tmp_path / "x.bin"
        src.write_bytes(b"\x01\x02\x03")
    elif case == "corrupt_npy":
        src.write_bytes(b"\x93NUMPY garbage")
    elif case == "no_vocab":
        np.save(src, np.arange(100, dtype=np.uint16))
    elif case == "id_too_big":
        np.save(src, np.arange(100, dtype=np.uint16))
        kw["token_vocab_size"] = 50
    elif case == "float_npy":
        np.save(src, np.zeros(100, dtype=np.float32))
        kw["token_vocab_size"] = 50
    elif case == "not_utf8":
        src = tmp_path / "x.txt"
        src.write_bytes(b"caf\xe9 " * 100)
    elif case == "empty_dir":
        src = tmp_path / "empty"
        src.mkdir()
    with pytest.raises(ConfigError, match="data"):
        prepare_data(cfg_for(src, cache, **kw), progress=False)


# -------------------------------------------------------------------------------------------------
# The cache


def test_second_prepare_is_cached_and_a_changed_source_is_detected(
    corpus: Path, cache: Path
) -> None:
    cfg = cfg_for(corpus, cache)
    first = prepare_data(cfg, progress=False)
    t0 = time.perf_counter()
    again = prepare_data(cfg, progress=False)
    assert time.perf_counter() - t0 < 1.0
    assert again.key == first.key and again.dir == first.dir
    (corpus / "book1.txt").write_text((corpus / "book1.txt").read_text() + "\n\nA new ending.")
    changed = prepare_data(cfg, progress=False)
    assert changed.key != first.key
    other_tok = prepare_data(
        cfg_for(corpus, cache, tokenizer={"kind": "bpe", "vocab_size": 300}), progress=False
    )
    assert other_tok.key not in (first.key, changed.key)


def test_a_killed_prepare_leaves_nothing_used(
    corpus: Path, cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = cfg_for(corpus, cache)
    real_close = prep.stream.TokenWriter.close
    calls = []

    def dying_close(self: object) -> None:
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt  # as if killed between two files
        real_close(self)  # type: ignore[arg-type]

    monkeypatch.setattr(prep.stream.TokenWriter, "close", dying_close)
    with pytest.raises(KeyboardInterrupt):
        prepare_data(cfg, progress=False)
    monkeypatch.setattr(prep.stream.TokenWriter, "close", real_close)
    assert not any((cache / "prepared").iterdir())
    # A half-written folder under the final name (e.g. a crash from an older version) is rebuilt.
    key, _ = prep.cache_key(cfg)
    half = cache / "prepared" / key
    half.mkdir()
    (half / "train.npy").write_bytes(b"partial")
    data = prepare_data(cfg, progress=False)
    assert data.n_train_tokens > 0 and (half / "manifest.json").is_file()
    (half / "val.npy").unlink()  # damaged by hand: rebuilt too
    assert prepare_data(cfg, progress=False).n_val_tokens == data.n_val_tokens


# -------------------------------------------------------------------------------------------------
# Batches and the in-memory form


def test_batches_are_deterministic_per_seed() -> None:
    tokens = np.arange(10_000, dtype=np.uint16)
    a, b, c = Batches(tokens, 16, seed=3), Batches(tokens, 16, seed=3), Batches(tokens, 16, seed=4)
    for _ in range(3):
        (xa, ya), (xb, yb), (xc, _) = a.next(8), b.next(8), c.next(8)
        assert torch.equal(xa, xb) and torch.equal(ya, yb) and not torch.equal(xa, xc)
        assert xa.shape == (8, 16) and xa.dtype == torch.int64
        assert torch.equal(ya[:, :-1], xa[:, 1:])  # targets are inputs shifted by one


@given(st.integers(1, 40), st.integers(2, 400))
def test_val_windows_predict_every_token_but_the_first_once(seq: int, n: int) -> None:
    if n < seq + 1:
        return
    tokens = np.arange(n, dtype=np.int64)
    x, y = val_windows(tokens, seq)
    k = (n - 1) // seq
    assert x.shape == y.shape == (k, seq)
    assert y.flatten().tolist() == list(range(1, 1 + k * seq))


def test_in_memory_is_picklable_and_equivalent(corpus: Path, cache: Path) -> None:
    data = prepare_data(cfg_for(corpus, cache), progress=False)
    mem = pickle.loads(pickle.dumps(data.in_memory()))
    assert isinstance(mem, PreparedData) and mem.train_array is not None
    np.testing.assert_array_equal(mem.train_tokens(), data.train_tokens())
    np.testing.assert_array_equal(mem.val_tokens(), data.val_tokens())
    assert (mem.key, mem.val_bytes, mem.n_val_tokens) == (
        data.key,
        data.val_bytes,
        data.n_val_tokens,
    )


# -------------------------------------------------------------------------------------------------
# The command


def test_cli_data_prepare(corpus: Path, cache: Path, tmp_path: Path) -> None:
    res = runner.invoke(
        app, ["data", "prepare", str(corpus), "--tokenizer", "bytes", "--cache-dir", str(cache)]
    )
    assert res.exit_code == 0, res.output
    assert "train" in res.output and "key " in res.output
    res = runner.invoke(
        app, ["data", "prepare", str(tmp_path / "missing.txt"), "--cache-dir", str(cache)]
    )
    assert res.exit_code == 2 and "does not exist" in res.output
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not numpy")
    res = runner.invoke(
        app, ["data", "prepare", str(bad), "--token-vocab-size", "10", "--cache-dir", str(cache)]
    )
    assert res.exit_code == 2 and "bad.npy" in res.output
    res = runner.invoke(
        app, ["data", "prepare", str(corpus), "--tokenizer", "bpe", "--vocab-size", "100"]
    )
    assert res.exit_code == 2 and "vocab_size" in res.output


def test_prepare_with_a_tokenizer_path_uses_that_file() -> None:
    from tlmsearch.data.cli import data_config

    args = dict(
        sources=["x.txt"], study=None, vocab_size=None, token_vocab_size=None, cache_dir=None
    )
    cfg = data_config(tokenizer=None, tokenizer_path="/tmp/tok.json", **args)
    assert (cfg.tokenizer.kind, cfg.tokenizer.path) == ("file", "/tmp/tok.json")
    assert data_config(tokenizer="bpe", tokenizer_path=None, **args).tokenizer.kind == "bpe"


# -------------------------------------------------------------------------------------------------
# Prefetch: batches drawn ahead on a thread


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 3), st.integers(1, 6), st.integers(0, 99))
def test_prefetched_steps_are_the_steps_drawn_in_order(
    micro: int, accum: int, steps: int, seed: int
) -> None:
    from tlmsearch.data.batches import Prefetch

    tokens = np.arange(1000, dtype=np.uint16) * 7 % 251
    direct = Batches(tokens, 8, seed=seed)
    want, positions = [], []
    for _ in range(steps):
        want.append([direct.next(micro) for _ in range(accum)])
        positions.append(direct.state_dict())
    ahead_of = Batches(tokens, 8, seed=seed)
    ahead = Prefetch(lambda: [ahead_of.next(micro) for _ in range(accum)], ahead_of, depth=2)
    try:
        assert ahead.position == Batches(tokens, 8, seed=seed).state_dict()  # nothing handed out
        for step, position in zip(want, positions, strict=True):
            got = ahead.next()
            assert len(got) == accum
            for (x, y), (wx, wy) in zip(got, step, strict=True):
                assert torch.equal(x, wx) and torch.equal(y, wy)
            # the data position is after the steps handed out, not the ones drawn ahead
            assert ahead.position == position
    finally:
        ahead.close()
    resumed = Batches(tokens, 8, seed=0)
    resumed.load_state_dict(positions[-1])
    assert torch.equal(resumed.next(micro)[0], direct.next(micro)[0])


def test_a_failed_draw_is_raised_to_the_consumer() -> None:
    from tlmsearch.data.batches import Prefetch

    def draw() -> list:
        raise OSError("the shared file system went away")

    ahead = Prefetch(draw, Batches(np.arange(100, dtype=np.uint16), 8, seed=0))
    with pytest.raises(OSError, match="went away"):
        ahead.next()
    ahead.close()
