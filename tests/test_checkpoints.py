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


# -------------------------------------------------------------------------------------------------
# Safe loading: tensors and plain data only, read with weights_only=True


def _pickled(folder: Path, tokens: int = 2048) -> Path:
    """A checkpoint as an older tlmsearch could write it: a numpy scalar in its curve, which
    only pickle loads (state.pt rewritten, its meta's size and checksum to match)."""
    import numpy as np

    _write(folder, tokens)
    model = build_model(MODEL, WIDTHS, 64, seed=tokens)
    state = {
        "model": model.state_dict(),
        "tokens": tokens,
        "loop": {"curve": [{"tokens": tokens, "val_loss": np.float64(3.5)}]},
    }
    torch.save(state, folder / "state.pt")
    meta = json.loads((folder / "meta.json").read_text())
    meta.update(bytes=(folder / "state.pt").stat().st_size, sha256=ck._sha256(folder / "state.pt"))
    (folder / "meta.json").write_text(json.dumps(meta))
    return folder


def test_a_new_checkpoint_loads_without_pickle(tmp_path: Path) -> None:
    import numpy as np

    model = build_model(MODEL, WIDTHS, 64, seed=0)
    state = {
        "model": model.state_dict(),
        "tokens": 4096,
        "rng": {"torch": torch.get_rng_state()},
        "batches": {"bit_generator": np.random.default_rng(0).bit_generator.state},
        "loop": {"curve": [{"tokens": 4096, "val_loss": np.float64(3.5)}]},
    }
    folder = ck.write_checkpoint(tmp_path / "c", state, _meta(4096))
    raw = torch.load(folder / "state.pt", weights_only=True)  # no pickle needed
    assert type(raw["loop"]["curve"][0]["val_loss"]) is float
    assert raw["batches"] == {"bit_generator": np.random.default_rng(0).bit_generator.state}
    assert torch.equal(raw["rng"]["torch"], state["rng"]["torch"])
    assert ck.upgrade(folder) is False  # safe already: left alone


def test_a_pickled_checkpoint_is_refused_unless_trusted(tmp_path: Path) -> None:
    folder = _pickled(tmp_path / "checkpoint_000000")
    with pytest.raises(ck.UnsafeCheckpoint, match="--trust-checkpoints") as err:
        ck.load_checkpoint(folder)
    assert "np" in str(err.value) or "numpy" in str(err.value)  # what it holds, named
    with pytest.raises(ck.UnsafeCheckpoint):
        ck.load_model(folder)
    with pytest.raises(ck.UnsafeCheckpoint):
        ck.upgrade(folder)
    state, _ = ck.load_checkpoint(folder, trust=True)
    assert state["loop"]["curve"][0]["val_loss"] == 3.5
    model, _ = ck.load_model(folder, trust=True)
    # upgraded once (trusted), it loads without pickle from then on, the same weights
    assert ck.upgrade(folder, trust=True) is True and ck.upgrade(folder) is False
    again, meta = ck.load_checkpoint(folder)
    assert type(again["loop"]["curve"][0]["val_loss"]) is float and meta["tokens"] == 2048
    for name, w in model.state_dict().items():
        assert torch.equal(w, again["model"][name])


def test_resume_refuses_a_pickled_checkpoint_before_any_trial_starts(tmp_path: Path) -> None:
    import optuna

    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.search.runner import safe_resume_points

    folder = _pickled(tmp_path / "checkpoint_000000")
    study = optuna.create_study()
    study.enqueue_trial({}, user_attrs={RESUME_FROM: str(folder)})
    with pytest.raises(ck.UnsafeCheckpoint, match="delete the checkpoint folder"):
        safe_resume_points(study)
    assert safe_resume_points(study, trust=True) == 1
    assert safe_resume_points(study) == 0 and ck.load_checkpoint(folder) is not None


def test_the_cli_takes_trust_checkpoints_on_resume_and_analyze() -> None:
    from typer.testing import CliRunner

    from tlmsearch.cli import app

    for cmd in ("resume", "analyze"):
        out = CliRunner().invoke(app, [cmd, "--help"], env={"COLUMNS": "200"})
        assert "--trust-checkpoints" in out.output, out.output


def test_what_cannot_load_without_pickle_is_refused_when_written(tmp_path: Path) -> None:
    import numpy as np

    with pytest.raises(TypeError, match=r"state\['x'\]\[1\]: a numpy.ndarray"):
        ck.write_checkpoint(tmp_path / "c", {"x": [1, np.zeros(2)]}, _meta(0))
    with pytest.raises(TypeError, match="Path"):
        ck.plain({"path": tmp_path})


_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**130), 2**130),
    st.floats(allow_nan=False),
    st.text(max_size=5),
    st.integers(-(2**62), 2**62).map(lambda i: __import__("numpy").int64(i)),
    st.floats(allow_nan=False).map(lambda f: __import__("numpy").float64(f)),
)
_PLAIN = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=3),
    ),
    max_leaves=12,
)


@settings(max_examples=60, deadline=None)
@given(value=_PLAIN)
def test_plain_data_round_trips_without_pickle(value) -> None:
    """Whatever :func:`plain` passes loads with weights_only=True, equal to what was saved
    (numpy scalars as the Python numbers they equal; ints beyond 64 bits, as PCG64's state)."""
    import io

    out = ck.plain(value)
    buf = io.BytesIO()
    torch.save(out, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True) == out == value
