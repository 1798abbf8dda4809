"""The checkpoint format: atomic writes, refused half-written or corrupt folders, retention."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.config import ModelConfig
from tlmsearch.models import build_model
from tlmsearch.train import checkpoints as ck

MODEL = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64, vocab_size=64)
WIDTHS = [64, 32]


def _meta(tokens: int, final: bool = False, number: int | None = 0) -> dict:
    return {
        "number": number,
        "candidate": {"shape": "linear"},
        "seed": 1,
        "widths": WIDTHS,
        "tokens": tokens,
        "model": MODEL.model_dump(mode="json"),
        "arch": MODEL.arch,
        "final": final,
    }


def _write(folder: Path, tokens: int, **kw) -> Path:
    model = build_model(MODEL, WIDTHS, 64, seed=tokens)  # weights that differ per checkpoint
    return ck.write_checkpoint(
        folder, {"model": model.state_dict(), "tokens": tokens}, _meta(tokens, **kw)
    )


def test_a_checkpoint_round_trips_and_rebuilds_its_model(tmp_path: Path) -> None:
    folder = _write(tmp_path / "checkpoint_000000", 4096, final=True)
    assert sorted(p.name for p in folder.iterdir()) == ["meta.json", "state.pt"]  # no temporaries
    state, meta = ck.load_checkpoint(folder)
    assert meta["bytes"] == (folder / "state.pt").stat().st_size and len(meta["sha256"]) == 64
    model, meta2 = ck.load_model(folder)
    assert meta2 == meta and not model.training
    for name, w in model.state_dict().items():
        assert torch.equal(w, state["model"][name])


def test_half_written_and_corrupt_checkpoints_are_refused(tmp_path: Path) -> None:
    trial = tmp_path / "trial_x"
    good = _write(trial / "checkpoint_000000", 2048)
    # a later one killed before its meta landed: state.pt (or its temporary) only
    half = _write(trial / "checkpoint_000001", 4096)
    (half / "meta.json").unlink()
    assert ck.load_checkpoint(half) is None
    assert ck.latest_checkpoint(trial) == good
    # a later one whose state.pt changed after its meta: same size, another checksum
    bad = _write(trial / "checkpoint_000002", 6144)
    raw = bytearray((bad / "state.pt").read_bytes())
    raw[-1] ^= 0xFF
    (bad / "state.pt").write_bytes(bytes(raw))
    assert ck.read_meta(bad) is not None and ck.read_meta(bad, verify=True) is None
    assert ck.load_checkpoint(bad) is None
    assert ck.latest_checkpoint(trial) == good
    # truncated: the size alone refuses it
    cut = _write(trial / "checkpoint_000003", 8192)
    (cut / "state.pt").write_bytes((cut / "state.pt").read_bytes()[:100])
    assert ck.read_meta(cut) is None and ck.latest_checkpoint(trial) == good
    # a meta that is not JSON, or lacks a field
    (good / "meta.json").write_text("{")
    assert ck.latest_checkpoint(trial) is None
    with pytest.raises(ValueError, match="not a complete checkpoint"):
        ck.load_model(good)
    meta = _meta(2048)
    (good / "meta.json").write_text(json.dumps(meta))  # no bytes / sha256
    assert ck.read_meta(good) is None


def test_latest_is_the_most_tokens_not_the_latest_name(tmp_path: Path) -> None:
    _write(tmp_path / "checkpoint_000001", 2048)
    newest = _write(tmp_path / "checkpoint_000000", 4096)
    assert ck.latest_checkpoint(tmp_path) == newest
    assert ck.latest_checkpoint(tmp_path / "missing") is None


@settings(max_examples=40, deadline=None)
@given(
    keep=st.sampled_from(ck.KEEP_WEIGHTS),
    completed=st.booleans(),
    n=st.integers(0, 3),
    with_final=st.booleans(),
)
def test_retention_rules(tmp_path_factory, keep: str, completed: bool, n: int, with_final: bool):
    trial = tmp_path_factory.mktemp("trial")
    for i in range(n):
        _write(trial / f"checkpoint_{i:06d}", 2048 * (i + 1))
    final = _write(trial / f"checkpoint_{n:06d}", 99_999, final=True) if with_final else None
    before = ck.checkpoint_dirs(trial)
    kept = ck.retain(trial, keep, completed)
    after = ck.checkpoint_dirs(trial)
    # the final weights stay exactly when the trial completed and the study keeps weights
    assert kept == (final if completed and keep != "none" else None)
    if keep == "all":
        assert after == before
    else:
        assert after == ([kept] if kept else [])


def test_kept_weights_lists_final_weights_and_best_thins_them(tmp_path: Path) -> None:
    run = tmp_path / "run"
    for number in (0, 1, 2):
        trial = run / "ray" / "session-0" / f"trial_{number}"
        _write(trial / "checkpoint_000000", 2048, number=number)  # intermediate: not listed
        _write(trial / "checkpoint_000001", 8192, final=True, number=number)
    kept = ck.kept_weights(run)
    assert [w["number"] for w in kept] == [0, 1, 2]
    assert all(w["tokens"] == 8192 and Path(w["path"]).name == "checkpoint_000001" for w in kept)
    assert {k for k in ("number", "candidate", "seed", "widths", "tokens", "path")} <= set(kept[0])
    gone = ck.keep_only(run, {0, 2})
    assert [w["number"] for w in gone] == [1]
    assert [w["number"] for w in ck.kept_weights(run)] == [0, 2]


def test_an_unknown_retention_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="keep_weights"):
        ck.retain(tmp_path, "some", True)
