"""Trial arrays (tlmsearch/train/trial_array.py): K members as one fused model train as each alone.

Tolerance: on a CPU in fp32 every curve value of a member (train and val loss, val bpb, the
EMA's and the raw weights') agrees with its solo Trainer's to rtol 1e-6 (measured: 4.3e-8 at
worst over 3 members x 4 evals), and its weights after 16 steps to 1e-6 (measured: 1.2e-7):
the batched matmuls sum in another order than the solo ones; AdamW is torch's own kernel. LR
and token counts agree exactly.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import test_train
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.config import ModelConfig
from tlmsearch.data import PreparedData
from tlmsearch.errors import ConfigError
from tlmsearch.train.loop import train_proxy
from tlmsearch.train.runtime import TrainSummary
from tlmsearch.train.trainer import Trainer
from tlmsearch.train.trial_array import (
    Member,
    TrialArray,
    clip_rows_,
    pad_units,
    padded_widths,
    train_array,
    unit_slice,
)

ROOT = Path(__file__).resolve().parent.parent
TINY = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64, multiple_of=16)
data = test_train.data  # a fixture: test_train's tiny byte-level corpus
throwaway_cache = test_train._cache  # autouse: MFU calibration and data to a tmp cache
RTOL = 1e-6
BASE = {"tokens": 8192, "eval_every_tokens": 2048, "warmup_tokens": 1024}
# uniform, the paper's cosine taper 1.5 -> 0.5 and its mirror, through the study's planner
CANDIDATES = [
    {"shape": "uniform"},
    {"shape": "cosine", "r_start": 1.5, "r_end": 0.5},
    {"shape": "cosine", "r_start": 0.5, "r_end": 1.5},
]
WIDTHS = [tuple(TINY.plan(c).widths) for c in CANDIDATES]  # (64, 64), (96, 32), (32, 96)
# Per-member train settings that differ: LR, clipping (tight: it acts), weight decay, betas,
# averaged weights (EMA reads the live weights every step) and muP (per-group LR scales).
SETTINGS = [
    {"eval_weights": "ema"},
    {"lr": 2e-3, "grad_clip": 0.3, "weight_decay": 0.0, "betas": (0.8, 0.99)},
    {"lr": 4e-3, "parametrization": "mup"},
]


def _members(settings: list[dict] | None = None) -> list[Member]:
    settings = settings or SETTINGS
    return [
        Member(TINY, w, test_train.tcfg(**BASE, **s), seed=seed)
        for seed, (w, s) in enumerate(zip(WIDTHS, settings, strict=True))
    ]


def _solo(m: Member, data: PreparedData, **kw: object) -> list[dict]:
    return train_proxy(
        m.model, m.widths, data, m.train, seed=m.seed, threads=1, device="cpu", **kw
    ).curve


@pytest.fixture(scope="module")
def solo_curves(data: PreparedData, tmp_path_factory: pytest.TempPathFactory) -> list[list[dict]]:
    # module-scoped: set up before the per-test throwaway cache, so it brings its own (the MFU
    # calibration would go to the user's ~/.cache otherwise)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TLMSEARCH_CACHE", str(tmp_path_factory.mktemp("solo") / "cache"))
        return [_solo(m, data) for m in _members()]


def _same_curves(got: list[TrainSummary], want: list[list[dict]]) -> None:
    """Each member's curve is its solo curve (:func:`_same_curve`)."""
    for summary, curve in zip(got, want, strict=True):
        _same_curve(summary.curve, curve)


def _same_curve(got: list[dict], want: list[dict]) -> None:
    assert [r["tokens"] for r in got] == [r["tokens"] for r in want]
    for g, w in zip(got, want, strict=True):
        assert g["lr"] == w["lr"]
        for key in ("train_loss", "val_loss", "val_bpb", "val_loss_raw"):
            if key in w:
                assert g[key] == pytest.approx(w[key], rel=RTOL, abs=0), (key, g, w)


# -------------------------------------------------------------------------------------------------
# Padding, clipping: the pure pieces


@settings(deadline=None)
@given(
    st.integers(1, 4),
    st.integers(1, 9),
    st.integers(0, 9),
    st.integers(0, 1),
)
def test_padding_then_slicing_gives_the_tensor_back_and_zeros_elsewhere(
    fan: int, width: int, extra: int, unit_dim: int
) -> None:
    t = torch.randn((width, fan) if unit_dim == 0 else (fan, width))
    padded = pad_units(t, width + extra, unit_dim)
    assert padded.size(unit_dim) == width + extra and padded.size(1 - unit_dim) == fan
    assert torch.equal(unit_slice(padded, width, unit_dim), t)
    assert not padded.narrow(unit_dim, width, extra).any()


@settings(deadline=None)  # torch: a loaded machine's first call can take longer than 200 ms
@given(st.integers(1, 8), st.integers(1, 12), st.integers(1, 12), st.integers(0, 2**16))
def test_a_zero_padded_swiglu_computes_the_same_and_its_padding_gets_zero_gradient(
    d: int, width: int, extra: int, seed: int
) -> None:
    """The reason padding is exact: padded units output 0 and get gradient exactly 0."""
    from tlmsearch.models.common import SwiGLU

    torch.manual_seed(seed)
    small, big = SwiGLU(d, width), SwiGLU(d, width + extra)
    with torch.no_grad():
        for name, dim in (("w1", 0), ("w3", 0), ("w2", 1)):
            w = getattr(small, name).weight
            getattr(big, name).weight.copy_(pad_units(w, width + extra, dim))
    x = torch.randn(3, d)
    out = big(x)
    out.square().sum().backward()
    assert torch.allclose(out, small(x), rtol=1e-5, atol=1e-6)
    for name, dim in (("w1", 0), ("w3", 0), ("w2", 1)):
        grad = getattr(big, name).weight.grad
        assert not grad.narrow(dim, width, extra).any(), name


@given(st.lists(st.lists(st.integers(1, 512), min_size=3, max_size=3), min_size=1, max_size=6))
def test_padded_widths_are_each_layers_widest(widths: list[list[int]]) -> None:
    padded = padded_widths(widths)
    for layer, w in enumerate(padded):
        assert w == max(m[layer] for m in widths)


@settings(deadline=None)
@given(st.lists(st.floats(0.01, 10.0), min_size=1, max_size=5), st.floats(0.1, 5.0))
def test_clipping_rows_is_clip_grad_norm_on_each_member_alone(
    scales: list[float], max_norm: float
) -> None:
    grads = torch.randn(len(scales), 7) * torch.tensor(scales)[:, None]
    want = grads.clone()
    for row in want:
        p = torch.nn.Parameter(torch.zeros(7))
        p.grad = row.clone()
        torch.nn.utils.clip_grad_norm_([p], max_norm)
        row.copy_(p.grad)
    clip_rows_(grads, torch.full((len(scales),), max_norm))
    assert torch.allclose(grads, want, rtol=1e-6, atol=0)


# -------------------------------------------------------------------------------------------------
# Equivalence with solo runs


def test_an_array_reproduces_each_members_solo_curve(
    data: PreparedData, solo_curves: list[list[dict]]
) -> None:
    got = train_array(_members(), data, device="cpu", threads=1)
    assert [s.status for s in got] == ["completed"] * 3
    _same_curves(got, solo_curves)
    assert got[0].curve[-1]["val_loss"] != got[0].curve[-1]["val_loss_raw"]  # EMA evaluated


def test_a_gated_attention_array_reproduces_its_members_solo_curves(data: PreparedData) -> None:
    """The other fusable architecture (FUSABLE_ARCHS): its gates run under vmap as well."""
    model = TINY.model_copy(update={"arch": "gated_attention"})
    train = test_train.tcfg(**{**BASE, "tokens": 4096})
    members = [Member(model, w, train, seed=s) for s, w in enumerate(WIDTHS[:2])]
    got = train_array(members, data, device="cpu", threads=1)
    for m, summary in zip(members, got, strict=True):
        _same_curve(summary.curve, _solo(m, data))


def test_members_with_per_layer_heads_and_gqa_match_their_solo_runs(data: PreparedData) -> None:
    """Members sharing a heads layout with grouped-query attention fuse (the repeated key/value
    heads run under vmap), one of them under muP, whose attention output projections of
    2 and 6 heads get groups of their own between the other matrices."""
    heads = {"n_head": 4, "n_kv_head": 2, "layer_heads": [2, 6]}
    model = ModelConfig(**{**TINY.model_dump(), **heads})
    members = [
        Member(model, w, test_train.tcfg(**{**BASE, "tokens": 4096}, **s), seed=i)
        for i, (w, s) in enumerate(zip(WIDTHS[1:], [{}, {"parametrization": "mup"}], strict=True))
    ]
    got = train_array(members, data, device="cpu", threads=1)
    for m, summary in zip(members, got, strict=True):
        _same_curve(summary.curve, _solo(m, data))


def test_the_array_matches_torchs_adamw_and_clipping_weight_for_weight(
    data: PreparedData,
) -> None:
    """After 16 steps (the whole run) every member's weights equal its solo Trainer's to 1e-6
    (measured 1.2e-7; weights are ~0.02)."""
    members = _members()
    arr = TrialArray(members, data, device="cpu", threads=1)
    solos = [
        Trainer(m.model, m.widths, data, m.train, seed=m.seed, threads=1, device="cpu")
        for m in members
    ]
    try:
        for _ in range(16):
            arr.step()
            for t in solos:
                t.step()
        for t, solo in zip(arr.trainers, solos, strict=True):
            got, want = t.model.state_dict(), solo.model.state_dict()
            for name, w in want.items():
                assert (got[name] - w).abs().max() <= 1e-6, name
    finally:
        arr.close()
        for t in solos:
            t.close()


def test_padded_weights_and_moments_stay_exactly_zero(data: PreparedData) -> None:
    arr = TrialArray(_members(), data, device="cpu", threads=1)
    try:
        for _ in range(5):
            arr.step()
        pk = arr._pack
        assert pk is not None and pk.steps == [5, 5, 5]
        checked = 0
        for row, i in enumerate(pk.ids):
            for name, off, shape, dim in pk.layout:
                if dim is None:
                    continue
                layer = int(name.split(".")[1])
                w = arr.members[i].widths[layer]
                for buf in (pk.flat, pk.exp_avg, pk.exp_avg_sq):
                    block = buf[row, off : off + math.prod(shape)].view(shape)
                    pad = block.narrow(dim, w, shape[dim] - w)
                    assert not pad.any(), (i, name)
                    checked += pad.numel() > 0
        assert checked > 0  # the tapers are narrower than the padding somewhere
    finally:
        arr.close()


def test_a_wrong_clipping_breaks_the_equivalence(
    data: PreparedData, solo_curves: list[list[dict]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The equivalence test can fail: one norm over all members (HFTA done wrong) changes the
    curves of members that clip."""
    import tlmsearch.train.trial_array as ta

    def global_clip(
        grad: torch.Tensor, max_norm: torch.Tensor, frame: torch.Tensor | None = None
    ) -> torch.Tensor:
        norm = torch.linalg.vector_norm(grad if frame is None else grad * frame)
        grad.mul_((max_norm / (norm + 1e-6)).clamp(max=1.0)[:, None])
        return norm

    monkeypatch.setattr(ta, "clip_rows_", global_clip)
    got = train_array(_members(), data, device="cpu", threads=1)
    with pytest.raises(AssertionError):
        _same_curve(got[1].curve, solo_curves[1])


# -------------------------------------------------------------------------------------------------
# Kill and resume; drops


def _states_at_first_eval(members: list[Member], data: PreparedData) -> list[dict]:
    arr = TrialArray(members, data, device="cpu", threads=1)
    states: dict[int, dict] = {}
    try:
        while len(states) < len(members):
            arr.step()
            for i in arr.evals_due():
                assert arr.evaluate(i) is not None
                states[i] = test_train._through_disk(arr.state_dict(i))
    finally:
        arr.close()
    return [states[i] for i in range(len(members))]


def test_an_array_killed_at_an_eval_resumes_as_if_it_had_not_stopped(
    data: PreparedData, solo_curves: list[list[dict]]
) -> None:
    members = _members()
    states = _states_at_first_eval(members, data)
    assert [Trainer.evals_of(s)[-1]["tokens"] for s in states] == [2048] * 3
    got = train_array(members, data, device="cpu", threads=1, resume=states)
    _same_curves(got, solo_curves)


def test_a_member_state_resumes_in_a_solo_trainer_and_back(
    data: PreparedData, solo_curves: list[list[dict]]
) -> None:
    members = _members()
    states = _states_at_first_eval(members, data)
    for m, state, want in zip(members, states, solo_curves, strict=True):  # array -> solo
        _same_curve(_solo(m, data, resume=state), want)
    solo_states = []  # solo -> array
    for m in members:
        t = Trainer(m.model, m.widths, data, m.train, seed=m.seed, threads=1, device="cpu")
        try:
            while not t.eval_due:
                t.step()
            assert t.evaluate() is not None
            solo_states.append(test_train._through_disk(t.state_dict()))
        finally:
            t.close()
    got = train_array(members, data, device="cpu", threads=1, resume=solo_states)
    _same_curves(got, solo_curves)


def test_a_diverging_member_leaves_and_the_others_do_not_change(
    data: PreparedData, solo_curves: list[list[dict]]
) -> None:
    members = _members()
    bad = test_train.tcfg(**{**BASE, "warmup_tokens": 0}, lr=50.0, grad_clip=0)
    members[1] = Member(TINY, WIDTHS[1], bad, seed=1)
    got = train_array(members, data, device="cpu", threads=1)
    alone = train_proxy(TINY, WIDTHS[1], data, bad, seed=1, threads=1, device="cpu")
    assert got[1].status == alone.status == "diverged"
    # the same step and rule (the losses an exploding run prints agree to no tolerance)
    assert got[1].tokens == alone.tokens and len(got[1].curve) == len(alone.curve)
    rule = re.compile(r"\d+(\.\d+)?")
    assert rule.sub("#", got[1].reason) == rule.sub("#", alone.reason), (
        got[1].reason,
        alone.reason,
    )
    for i in (0, 2):
        assert got[i].status == "completed"
        _same_curve(got[i].curve, solo_curves[i])


def test_a_pruned_member_stops_at_its_eval_and_the_others_do_not_change(
    data: PreparedData, solo_curves: list[list[dict]]
) -> None:
    def prune_the_widest_first(i: int, row: dict) -> str | None:
        return "stop" if i == 1 and row["tokens"] >= 4096 else None

    got = train_array(_members(), data, device="cpu", threads=1, on_eval=prune_the_widest_first)
    assert got[1].status == "stopped" and got[1].tokens == 4096
    _same_curve(got[1].curve, solo_curves[1][:2])
    for i in (0, 2):
        _same_curve(got[i].curve, solo_curves[i])


# -------------------------------------------------------------------------------------------------
# What an array refuses, what it imports


def test_members_of_another_model_or_batch_shape_are_refused(data: PreparedData) -> None:
    members = _members()
    other = TINY.model_copy(update={"d_model": 64})
    with pytest.raises(ConfigError, match=r"members\[1\]\.model\.d_model"):
        TrialArray([members[0], Member(other, WIDTHS[1], members[1].train, 1)], data, device="cpu")
    odd = members[1].train.model_copy(update={"micro_batch_size": 4})
    with pytest.raises(ConfigError, match="batch_tokens / micro_batch_size"):
        TrialArray([members[0], Member(TINY, WIDTHS[1], odd, 1)], data, device="cpu")
    headed = ModelConfig(**{**TINY.model_dump(), "layer_heads": [1, 3]})  # another heads layout
    with pytest.raises(ConfigError, match=r"members\[1\]\.model\.layer_heads \(\[1, 3\]\)"):
        TrialArray(
            [members[0], Member(headed, WIDTHS[1], members[1].train, 1)], data, device="cpu"
        )
    titans = TINY.model_copy(update={"arch": "titans"})
    with pytest.raises(ConfigError, match=r"model\.arch: 'titans' does not run as a trial array"):
        TrialArray([Member(titans, WIDTHS[0], members[0].train, 0)], data, device="cpu")


def test_an_mlp_whose_padding_would_not_stay_zero_is_refused() -> None:
    from tlmsearch.models import build_model
    from tlmsearch.train.trial_array import _check_template

    model = build_model(TINY, (64, 64), 256)
    _check_template(model)  # the built-in SwiGLU passes
    mlp = model.blocks[0].mlps[0]
    mlp.w1 = torch.nn.Linear(32, 64, bias=True)
    mlp.w1.unit_dim = 0
    with pytest.raises(ConfigError, match="SwiGLU with a bias"):
        _check_template(model)


def test_the_array_imports_neither_ray_nor_optuna() -> None:
    code = (
        "import sys, tlmsearch.train.trial_array\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'ray', 'optuna'})\n"
        "assert not bad, bad"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
