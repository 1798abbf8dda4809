"""Records sources (JSONL, Parquet, CSV, a ``datasets`` folder), Hugging Face tokenizer folders,
and the streamed build: bounded chunks, the files' identity in the cache key, clear errors that
leave no partial cache. Every file is written here; nothing is downloaded."""

from __future__ import annotations

import csv
import gzip
import json
import os
import random
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import DataConfig
from tlmsearch.data import prepare as prep
from tlmsearch.data import prepare_data, stream
from tlmsearch.data.text import UNIT_BYTES
from tlmsearch.data.tokenizer import load_hf_dir
from tlmsearch.errors import ConfigError

runner = CliRunner()
WORDS = [
    "the",
    "of",
    "and",
    "to",
    "in",
    "that",
    "he",
    "shall",
    "unto",
    "for",
    "his",
    "lord",
    "they",
    "be",
    "is",
    "him",
    "not",
    "them",
    "it",
    "with",
]


def docs(n: int, seed: int = 0, words: tuple[int, int] = (30, 90)) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(*words))).capitalize() + "."
        for _ in range(n)
    ]


def write_jsonl(path: Path, texts: list[str], field: str = "text") -> Path:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as fh:
        for i, t in enumerate(texts):
            fh.write(json.dumps({"id": i, field: t}) + "\n")
    return path


def write_parquet(path: Path, texts: list[str], field: str = "text") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(len(texts))), field: texts}), path, row_group_size=7)
    return path


def write_csv(path: Path, texts: list[str], field: str = "text") -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["id", field])
        w.writerows(enumerate(texts))
    return path


def write_datasets(path: Path, texts: list[str], field: str = "text") -> Path:
    from datasets import Dataset

    Dataset.from_dict({"id": list(range(len(texts))), field: texts}).save_to_disk(str(path))
    return path


def cfg(sources: list[str], cache: Path, **kw: object) -> DataConfig:
    base: dict = {"sources": sources, "cache_dir": str(cache), "seq_len": 16, "val_tokens": 512}
    base.setdefault("tokenizer", {"kind": "bytes"})
    base.update(kw)
    return DataConfig.model_validate(base)


def arrays(data: object) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(data.train_tokens()), np.asarray(data.val_tokens())  # type: ignore[attr-defined]


@pytest.fixture
def texts() -> list[str]:
    return docs(120)


# -------------------------------------------------------------------------------------------------
# Every kind reads the same records the same way


def test_every_format_of_the_same_records_prepares_the_same_tokens(
    tmp_path: Path, texts: list[str]
) -> None:
    (tmp_path / "gz").mkdir()
    made = {
        "jsonl": write_jsonl(tmp_path / "corpus.jsonl", texts),
        "gz": write_jsonl(tmp_path / "gz" / "corpus.jsonl.gz", texts),
        "parquet": write_parquet(tmp_path / "corpus.parquet", texts),
        "csv": write_csv(tmp_path / "corpus.csv", texts),
        "datasets": write_datasets(tmp_path / "corpus", texts),
    }
    out = {
        k: prepare_data(cfg([str(p)], tmp_path / f"c-{k}"), progress=False)
        for k, p in made.items()
    }
    ref = out["jsonl"]
    assert ref.manifest["inputs"]["kind"] == "stream"
    train, val = arrays(ref)
    n_units = sum(s["units"] for s in ref.manifest["splits"].values())
    assert n_units == len(texts) and ref.manifest["splits"]["val"]["units"] >= 1
    for kind, data in out.items():
        t, v = arrays(data)
        np.testing.assert_array_equal(t, train, err_msg=kind)
        np.testing.assert_array_equal(v, val, err_msg=kind)
        assert data.manifest["splits"] == ref.manifest["splits"], kind
    # Bytes tokens are the text: every train record is there, in order, joined by a blank line.
    body = bytes(train.astype(np.uint8)).decode()
    train_docs = [d for d in body.split("\n\n") if d]
    assert (
        set(train_docs) <= set(texts)
        and len(train_docs) == ref.manifest["splits"]["train"]["units"]
    )
    assert train_docs == [t for t in texts if t in set(train_docs)]


def test_folders_of_shards_prefixes_and_a_dataset_dict(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    (shards / "sub").mkdir(parents=True)
    for i in range(3):
        write_jsonl(shards / f"part-{i}.jsonl", docs(20, seed=i))
    write_jsonl(shards / "sub" / "part-9.jsonl", docs(20, seed=9))
    data = prepare_data(cfg([str(shards)], tmp_path / "c1"), progress=False)
    assert sum(s["units"] for s in data.manifest["splits"].values()) == 80
    files = data.manifest["inputs"]["sources"][0]["files"]
    assert [f[0] for f in files] == [f"part-{i}.jsonl" for i in range(3)] + ["sub/part-9.jsonl"]

    # A prefix names the kind: any suffix, or one kind out of a folder holding two.
    odd = write_jsonl(tmp_path / "records.txt", docs(30, seed=5))
    assert prepare_data(cfg([f"jsonl:{odd}"], tmp_path / "c2"), progress=False).n_train_tokens
    write_parquet(shards / "extra.parquet", docs(10, seed=6))
    with pytest.raises(ConfigError, match="jsonl and parquet"):
        prepare_data(cfg([str(shards)], tmp_path / "c3"), progress=False)
    only = prepare_data(cfg([f"parquet:{shards}"], tmp_path / "c3"), progress=False)
    assert sum(s["units"] for s in only.manifest["splits"].values()) == 10

    from datasets import Dataset, DatasetDict

    dd = tmp_path / "dd"
    DatasetDict(
        {
            "train": Dataset.from_dict({"body": docs(40)}),
            "validation": Dataset.from_dict({"body": docs(5, seed=3)}),
        }
    ).save_to_disk(str(dd))
    got = prepare_data(cfg([str(dd)], tmp_path / "c4", text_field="body"), progress=False)
    assert sum(s["units"] for s in got.manifest["splits"].values()) == 45


def test_records_mix_with_text_files(tmp_path: Path) -> None:
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("\n\n".join(docs(60, seed=2)))
    rec = write_jsonl(tmp_path / "r.jsonl", docs(50, seed=1))
    text_only = prepare_data(cfg([str(notes)], tmp_path / "c"), progress=False)
    assert text_only.manifest["inputs"]["kind"] == "text"
    both = prepare_data(cfg([str(notes), str(rec)], tmp_path / "c"), progress=False)
    assert both.manifest["inputs"]["kind"] == "stream"
    assert both.n_train_tokens > text_only.n_train_tokens
    assert [lic["name"] for lic in both.manifest["licenses"]] == [str(notes), str(rec)]
    # A folder of both (a README beside the shards) names its kind, never guessed.
    write_jsonl(notes / "shard.jsonl", docs(5, seed=4))
    with pytest.raises(ConfigError, match=r"holds jsonl and text files.*'jsonl:"):
        prepare_data(cfg([str(notes)], tmp_path / "c"), progress=False)
    as_text = prepare_data(cfg([f"text:{notes}"], tmp_path / "c"), progress=False)
    assert as_text.n_train_tokens == text_only.n_train_tokens
    as_jsonl = prepare_data(cfg([f"jsonl:{notes}"], tmp_path / "c"), progress=False)
    assert sum(s["units"] for s in as_jsonl.manifest["splits"].values()) == 5


# -------------------------------------------------------------------------------------------------
# Larger than memory: bounded chunks, a memory-mappable result


def write_text_folder(folder: Path, texts: list[str], per_file: int = 40) -> Path:
    folder.mkdir()
    for i in range(0, len(texts), per_file):
        (folder / f"{i:06d}.txt").write_text("\n\n".join(texts[i : i + per_file]))
    return folder


def _peak_prepare(texts: list[str], folder: Path, kind: str) -> tuple[int, object]:
    if kind == "jsonl":
        src = write_jsonl(folder / "big.jsonl", texts)
    else:
        src = write_text_folder(folder / "notes", texts)
    tracemalloc.start()
    try:
        data = prepare_data(cfg([str(src)], folder / "c"), progress=False)
        return tracemalloc.get_traced_memory()[1], data
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("kind", ["jsonl", "text"])
def test_the_build_reads_and_encodes_in_bounded_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    chunk = 16_384
    monkeypatch.setattr(stream, "CHUNK_CHARS", chunk)
    small = docs(400, seed=7, words=(40, 120))  # ~130 KB, 8x the chunk
    big = docs(1600, seed=8, words=(40, 120))  # 4x that
    (tmp_path / "s").mkdir()
    (tmp_path / "b").mkdir()
    peak_small, _ = _peak_prepare(small, tmp_path / "s", kind)
    peak_big, data = _peak_prepare(big, tmp_path / "b", kind)
    size = sum(len(t) for t in big)
    # The most text held at once is one chunk (plus the record or ~8 KB unit that filled it) ...
    unit = max(len(t) + 2 for t in big) + (UNIT_BYTES if kind == "text" else 0)
    assert data.manifest["peak_chunk_chars"] <= chunk + unit
    # ... and Python's peak memory does not grow with the corpus: 4x the text, about the same
    # peak (measured within 2%; holding the text and its token lists, > 8 bytes a character,
    # would add > 3 MB to the big one's).
    assert peak_big < 1.5 * peak_small, (peak_small, peak_big, size)
    arr = data.train_tokens()
    assert isinstance(arr, np.memmap) and arr.size == data.n_train_tokens
    n = sum(data.manifest["splits"][s]["tokens"] for s in ("train", "val", "test"))
    assert n == sum(len(t) + 2 for t in big)  # bytes: every character and its blank line


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 2**16 - 1), max_size=50), max_size=6),
    st.sampled_from([np.uint16, np.uint32]),
)
def test_a_token_file_built_in_chunks_equals_np_save(chunks: list, dtype: type) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.npy"
        tf = stream.TokenWriter(path, np.dtype(dtype))
        for c in chunks:
            tf.write(np.asarray(c, dtype=np.int64))
        tf.close()
        want = np.asarray([i for c in chunks for i in c], dtype=dtype)
        got = np.load(path, mmap_mode="r")
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert path.stat().st_size == tf.data_start + want.nbytes


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3000), st.integers(20, 200), st.integers(0, 10**6))
def test_the_chunk_size_never_changes_the_tokens(chunk: int, n: int, seed: int) -> None:
    import tempfile

    texts = docs(n, seed=seed, words=(5, 40))  # a val unit of one window at least
    old = stream.CHUNK_CHARS
    with tempfile.TemporaryDirectory() as tmp:
        src = write_jsonl(Path(tmp) / "c.jsonl", texts)
        try:
            stream.CHUNK_CHARS = chunk
            small = prepare_data(cfg([str(src)], Path(tmp) / "a", seq_len=8), progress=False)
        finally:
            stream.CHUNK_CHARS = old
        whole = prepare_data(cfg([str(src)], Path(tmp) / "b", seq_len=8), progress=False)
        assert small.manifest["splits"] == whole.manifest["splits"]


def test_streamed_val_is_ordered_by_key_hash_like_the_in_memory_split(tmp_path: Path) -> None:
    import hashlib

    from tlmsearch.data.text import assign

    texts = docs(600, seed=11, words=(5, 12))
    src = write_jsonl(tmp_path / "c.jsonl", texts)
    data = prepare_data(cfg([str(src)], tmp_path / "c"), progress=False)
    want = assign(prep.text.Unit(f"rec:c:{i}", t) for i, t in enumerate(texts))
    assert len(want["val"]) > 5 and len(want["test"]) > 5
    for name in ("val", "test"):
        raw = bytes(np.load(Path(data.dir) / f"{name}.npy").astype(np.uint8)).decode()
        assert raw == "".join(t + "\n\n" for t in want[name])
        info = data.manifest["splits"][name]
        assert info["text_sha256"] == hashlib.sha256(raw.encode()).hexdigest()
        assert info["units"] == len(want[name])


# -------------------------------------------------------------------------------------------------
# Errors name the file and the line or field, and leave no partial cache


def _bad(tmp_path: Path, case: str) -> tuple[list[str], dict, str]:
    good = docs(30)
    if case == "bad_json":
        p = write_jsonl(tmp_path / "a.jsonl", good)
        with open(p, "a") as fh:
            fh.write('{"text": "unterminated\n')
        return [str(p)], {}, r"a\.jsonl' line 31 is not JSON"
    if case == "bad_json_under_bpe":  # raised inside the BPE trainer's pass over the records
        p = write_jsonl(tmp_path / "a.jsonl", good)
        with open(p, "a") as fh:
            fh.write("{bad\n")
        return [str(p)], {"tokenizer": {"kind": "bpe", "vocab_size": 300}}, r"line 31 is not"
    if case == "missing_field":
        p = write_jsonl(tmp_path / "a.jsonl", good, field="content")
        return [str(p)], {}, r"data\.text_field: .*a\.jsonl' line 1 has no field 'text'.*content"
    if case == "not_a_string":
        p = tmp_path / "a.jsonl"
        p.write_text('{"text": "fine"}\n{"text": 7}\n')
        return [str(p)], {}, r"a\.jsonl' line 2 has 'text' = '7' \(int\)"
    if case == "unreadable_parquet":
        p = tmp_path / "a.parquet"
        p.write_bytes(b"PAR1 not really")
        return [str(p)], {}, r"a\.parquet' is not a readable Parquet file"
    if case == "parquet_column":
        p = write_parquet(tmp_path / "a.parquet", good)
        return [str(p)], {"text_field": "body"}, r"a\.parquet' has no column 'body'.*id, text"
    if case == "csv_column":
        p = write_csv(tmp_path / "a.csv", good, field="body")
        return [str(p)], {}, r"a\.csv' has no column 'text' \(its header: id, body\)"
    if case == "datasets_column":
        p = write_datasets(tmp_path / "ds", good)
        return [str(p)], {"text_field": "body"}, r"ds' has no column 'body'"
    if case == "not_datasets":
        (tmp_path / "plain").mkdir()
        return [f"datasets:{tmp_path / 'plain'}"], {}, "not a folder written by datasets"
    if case == "truncated_gz":
        p = write_jsonl(tmp_path / "a.jsonl.gz", docs(400))
        p.write_bytes(p.read_bytes()[:-40])
        return [str(p)], {}, r"cannot read .*a\.jsonl\.gz"
    if case == "not_utf8":
        p = tmp_path / "a.csv"
        p.write_bytes(b"text\ncaf\xe9\n")
        return [str(p)], {}, r"a\.csv' is not UTF-8"
    assert case == "late_bad_line"  # after several chunks were written
    p = write_jsonl(tmp_path / "a.jsonl", docs(600, seed=1))
    with open(p, "a") as fh:
        fh.write("[1, 2]\n")
    return [str(p)], {}, r"a\.jsonl' line 601 has no field 'text' \(its keys: none\)"


@pytest.mark.parametrize(
    "case",
    [
        "bad_json",
        "bad_json_under_bpe",
        "missing_field",
        "not_a_string",
        "unreadable_parquet",
        "parquet_column",
        "csv_column",
        "datasets_column",
        "not_datasets",
        "truncated_gz",
        "not_utf8",
        "late_bad_line",
    ],
)
def test_a_bad_file_is_a_clear_error_and_leaves_no_cache(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stream, "CHUNK_CHARS", 2048)  # so the late error comes after writes
    sources, kw, message = _bad(tmp_path, case)
    cache = tmp_path / "cache"
    with pytest.raises(ConfigError, match=message):
        prepare_data(cfg(sources, cache, **kw), progress=False)
    left = list((cache / "prepared").iterdir()) if (cache / "prepared").exists() else []
    assert left == []


# -------------------------------------------------------------------------------------------------
# The cache key: the files' identity, the text field, the tokenizer


def test_cache_key_follows_the_files_and_the_field(tmp_path: Path, texts: list[str]) -> None:
    src = write_jsonl(tmp_path / "a.jsonl", texts)
    cache = tmp_path / "cache"
    first = prepare_data(cfg([str(src)], cache), progress=False)
    assert prepare_data(cfg([str(src)], cache), progress=False).dir == first.dir
    st = src.stat()
    os.utime(src, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # touched: same bytes, new key
    touched = prepare_data(cfg([str(src)], cache), progress=False)
    assert touched.key != first.key
    np.testing.assert_array_equal(touched.train_tokens(), first.train_tokens())
    write_jsonl(src, texts[:-1])
    assert prep.cache_key(cfg([str(src)], cache))[0] not in (first.key, touched.key)
    assert (
        prep.cache_key(cfg([str(src)], cache, text_field="body"))[0]
        != prep.cache_key(cfg([str(src)], cache))[0]
    )


# -------------------------------------------------------------------------------------------------
# A local Hugging Face tokenizer folder


def make_tokenizer_dir(path: Path, texts: list[str]) -> Path:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<s>"],
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>").save_pretrained(str(path))
    return path


def test_hf_tokenizer_folder_encodes_as_auto_tokenizer_does(
    tmp_path: Path, texts: list[str]
) -> None:
    from transformers import AutoTokenizer

    tok_dir = make_tokenizer_dir(tmp_path / "tok", texts)
    (tok_dir / "model.safetensors").write_bytes(b"weights are no part of the key")
    src = write_parquet(tmp_path / "a.parquet", texts)
    hf = {"kind": "hf", "path": str(tok_dir)}
    data = prepare_data(cfg([str(src)], tmp_path / "c", tokenizer=hf), progress=False)
    auto = AutoTokenizer.from_pretrained(str(tok_dir), local_files_only=True)
    assert data.vocab_size == len(auto)
    train = np.asarray(data.train_tokens())
    decoded = auto.decode(train.tolist())  # the train records, in order, each ending in \n\n
    got = decoded.split("\n\n")
    assert got[-1] == "" and 0 < len(got) - 1 < len(texts)
    assert got[:-1] == [t for t in texts if t in set(got)]
    first = decoded.split("\n\n")[0]
    want = auto(first + "\n\n", add_special_tokens=False)["input_ids"]
    assert train[: len(want)].tolist() == want
    # bits per byte counts the predicted text exactly (byte-level BPE)
    val_text = auto.decode(np.asarray(data.val_tokens())[1:].tolist())
    assert data.val_bytes == len(val_text.encode())
    # A plain text folder (the in-memory path) encodes with it the same way.
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.txt").write_text("\n\n".join(texts))
    plain = prepare_data(cfg([str(notes)], tmp_path / "c", tokenizer=hf), progress=False)
    assert plain.manifest["inputs"]["kind"] == "text" and plain.vocab_size == len(auto)
    assert auto.decode(np.asarray(plain.train_tokens()).tolist()).startswith(texts[0][:50])
    # The folder's weights are no part of the key; its tokenizer files are.
    (tok_dir / "model.safetensors").write_bytes(b"changed weights: same key")
    assert prepare_data(cfg([str(src)], tmp_path / "c", tokenizer=hf), progress=False).key == (
        data.key
    )
    cfg_json = json.loads((tok_dir / "tokenizer_config.json").read_text())
    cfg_json["model_max_length"] = 77
    (tok_dir / "tokenizer_config.json").write_text(json.dumps(cfg_json))
    assert prep.cache_key(cfg([str(src)], tmp_path / "c", tokenizer=hf))[0] != data.key
    assert load_hf_dir(tok_dir).vocab_size == len(auto)


@pytest.mark.parametrize("case", ["missing", "a_file", "not_a_tokenizer"])
def test_bad_hf_tokenizer_path_names_the_field(tmp_path: Path, case: str) -> None:
    src = write_jsonl(tmp_path / "a.jsonl", docs(20))
    path = tmp_path / "tok"
    if case == "a_file":
        path.write_text("{}")
    elif case == "not_a_tokenizer":
        path.mkdir()
        (path / "notes.md").write_text("nothing here")
    hf = {"kind": "hf", "path": str(path)}
    with pytest.raises(ConfigError, match=r"data\.tokenizer\.path: .*tok"):
        prepare_data(cfg([str(src)], tmp_path / "c", tokenizer=hf), progress=False)
    assert not (tmp_path / "c" / "prepared").exists() or not any(
        (tmp_path / "c" / "prepared").iterdir()
    )


# -------------------------------------------------------------------------------------------------
# Validation and the command


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"sources": ["jsnl:a.jsonl"]}, "data.sources[0]"),
        ({"sources": ["classics", "parquet:"]}, "data.sources[1]"),
        ({"text_field": ""}, "data.text_field"),
        ({"tokenizer": {"kind": "hf"}}, "data.tokenizer"),
        ({"tokenizer": {"kind": "sentencepiece", "path": "x"}}, "data.tokenizer.kind"),
    ],
)
def test_validate_exits_2_naming_the_field(tmp_path: Path, data: dict, field: str) -> None:
    import yaml

    root = Path(__file__).resolve().parent.parent
    doc = yaml.safe_load((root / "studies" / "quickstart.yaml").read_text())
    doc.setdefault("data", {}).update(data)
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump(doc))
    res = runner.invoke(app, ["validate", str(study), "--no-config"])
    assert res.exit_code == 2, res.output
    assert field in res.output


def test_cli_prepares_records_with_a_tokenizer_folder(tmp_path: Path) -> None:
    texts = docs(600)
    src = write_csv(tmp_path / "a.csv", texts, field="body")
    tok_dir = make_tokenizer_dir(tmp_path / "tok", texts)
    args = ["data", "prepare", str(src), "--tokenizer-path", str(tok_dir)]
    args += ["--cache-dir", str(tmp_path / "c")]
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "no column 'text'" in res.output
    res = runner.invoke(app, [*args, "--text-field", "body"])
    assert res.exit_code == 0, res.output
    assert "key " in res.output and f"vocab {load_hf_dir(tok_dir).vocab_size};" in res.output


def test_token_files_with_a_tokenizer_folder_know_their_bytes(tmp_path: Path) -> None:
    from tlmsearch.data.tokens import val_bytes_problem

    texts = docs(200)
    tok_dir = make_tokenizer_dir(tmp_path / "tok", texts)
    ids = load_hf_dir(tok_dir).encode(["\n\n".join(texts)])[0]
    src = tmp_path / "train.npy"
    np.save(src, np.asarray(ids, dtype=np.uint16))
    assert val_bytes_problem([str(src)], "bytes") is not None  # no sidecar, no tokenizer
    assert val_bytes_problem([str(src)], "hf") is None
    hf = {"kind": "hf", "path": str(tok_dir)}
    vocab = load_hf_dir(tok_dir).vocab_size
    data = prepare_data(
        cfg([str(src)], tmp_path / "c", tokenizer=hf, token_vocab_size=vocab), progress=False
    )
    assert data.tokenizer_path and Path(data.tokenizer_path).is_file()
    predicted = load_hf_dir(tok_dir).decode(np.asarray(data.val_tokens())[1:].tolist())
    assert data.val_bytes == len(predicted.encode())


def test_every_yaml_example_in_docs_data_md_validates() -> None:
    import re

    import yaml

    doc = (Path(__file__).resolve().parent.parent / "docs" / "data.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.DOTALL)
    assert len(blocks) >= 6
    for block in blocks:
        DataConfig.model_validate(yaml.safe_load(block)["data"])


@pytest.mark.parametrize("tok", [{"kind": "bytes"}, {"kind": "bpe", "vocab_size": 400}])
# (3, 40): 3 units, none hashed into val, so the last train unit moves there; (4, 700): 60 units,
# one in val and three in test by their hash.
@pytest.mark.parametrize(("files", "paras"), [(3, 40), (4, 700)])
def test_streamed_text_equals_the_in_memory_build(
    tmp_path: Path, tok: dict, files: int, paras: int
) -> None:
    """A text folder streams now; its arrays (and so its cache key) are the in-memory path's."""
    from test_data import make_corpus

    corpus = make_corpus(tmp_path / "corpus", n_files=files, paras=paras)
    data_cfg = cfg([str(corpus)], tmp_path / "c", tokenizer=tok)
    _, sources = prep.classify(data_cfg)
    bodies = {}
    for name, build in (("memory", prep._build_text), ("stream", prep._build_stream)):
        (tmp_path / name).mkdir()
        with prep._Steps(False) as steps:
            bodies[name] = build(data_cfg, sources, tmp_path, tmp_path / name, steps)
        bodies[name].pop("peak_chunk_chars", None)
    assert bodies["memory"] == bodies["stream"]
    splits = bodies["stream"]["splits"]
    assert (splits["val"]["units"], splits["test"]["units"]) == ((1, 0) if files == 3 else (1, 3))
    for split in ("train", "val", "test"):
        a, b = (np.load(tmp_path / name / f"{split}.npy") for name in ("memory", "stream"))
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    assert (tmp_path / "memory" / "tokenizer.json").read_bytes() == (
        tmp_path / "stream" / "tokenizer.json"
    ).read_bytes()
    assert sorted(p.name for p in (tmp_path / "stream").iterdir()) == [
        "test.npy",
        "tokenizer.json",
        "train.npy",
        "val.npy",
    ]
