"""Heads schedules (tlmsearch/widths/heads.py): per-layer heads at an exact budget, and their
errors."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tlmsearch.config import ModelConfig, load_study, study_from_mapping
from tlmsearch.errors import ConfigError
from tlmsearch.widths.budget import count_params, flops_per_token
from tlmsearch.widths.heads import costs, heads_schedule, mlp_schedule
from tlmsearch.widths.schedules import ScheduleError
from tlmsearch.widths.space import describe, is_flat

RAMPS = ("linear", "cosine", "sigmoid")


@st.composite
def models(draw: st.DrawFn, hold: str = "params") -> ModelConfig:
    n_head = draw(st.sampled_from([1, 2, 4, 6, 8, 12]))
    kv = draw(st.sampled_from([d for d in range(1, n_head + 1) if n_head % d == 0]))
    head_dim = draw(st.sampled_from([2, 4, 8, 16, 24]))
    multiple_of = draw(st.sampled_from([1, 8, 16, 32]))
    d_model = n_head * head_dim
    return ModelConfig(
        arch=draw(st.sampled_from(["transformer", "gated_attention"])),
        n_layer=draw(st.integers(1, 12)),
        d_model=d_model,
        n_head=n_head,
        n_kv_head=kv,
        d_ff=multiple_of * draw(st.integers(2, 12)),
        multiple_of=multiple_of,
        gated_attention={"gate": draw(st.sampled_from(["elementwise", "headwise"]))},
        attention={"hold": hold, "seq_len": draw(st.sampled_from([16, 128, 1000]))},
    )


def _counts(model: ModelConfig, candidate: dict) -> tuple[int, int]:
    plan = model.plan(candidate)
    headed = model.built_for(candidate)
    assert headed.heads == plan.heads
    seq = model.attention.seq_len or 128
    return (
        count_params(headed, plan.widths, 256).total,
        flops_per_token(headed, plan.widths, 256, seq).training,
    )


@settings(max_examples=400, deadline=None)
@given(models(), st.sampled_from(RAMPS), st.floats(0.3, 1.7))
def test_heads_keep_their_budget_in_groups_and_the_profile_order(
    model: ModelConfig, shape: str, r_start: float
) -> None:
    cand = {"shape": "uniform", "heads.shape": shape, "heads.r_start": r_start}
    try:
        plan = model.plan(cand)
    except ScheduleError as err:  # a layer left without a head: named, as for widths
        assert err.field.startswith("heads.")
        return
    g, n = model.kv_group, model.n_layer
    assert sum(plan.heads) == n * model.n_head
    assert all(h >= g and h % g == 0 for h in plan.heads)
    pairs = list(zip(plan.heads, plan.heads[1:], strict=False))
    assert all(a >= b for a, b in pairs) if r_start > 1 else all(a <= b for a, b in pairs)
    assert plan.widths == (model.d_ff_uniform,) * n and plan.heads_share == 1.0
    # each half keeps its own budget: parameters and FLOPs both equal uniform's
    assert _counts(model, cand) == _counts(model, {"shape": "uniform"})


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(["params", "flops"]).flatmap(models),
    st.floats(0.3, 2.5),
    st.sampled_from(["uniform", "cosine"]),
)
def test_a_share_moves_capacity_at_exactly_uniforms_budget(
    model: ModelConfig, share: float, mlp_shape: str
) -> None:
    cand = {"shape": mlp_shape, "heads.shape": "uniform", "heads.share": share}
    try:
        plan = model.plan(cand)
    except ScheduleError as err:  # more attention than the MLPs can pay, or a layer left bare
        assert err.field in ("heads.share", "heads.uniform", "r_start", "r_end")
        return
    params, flops = _counts(model, cand)
    uniform_params, uniform_flops = _counts(model, {"shape": "uniform"})
    held = (
        params == uniform_params if model.attention.hold == "params" else (flops == uniform_flops)
    )
    assert held, (plan, model.attention.hold)
    assert sum(plan.heads) % model.kv_group == 0
    # the nearest payable total: never further from the share than half a step, unless clamped
    # at one group a layer
    c_g, c_u = costs(model)
    step = c_u // math.gcd(c_g, c_u)
    uniform_groups = model.n_layer * model.n_head // model.kv_group
    total = round(plan.heads_share * uniform_groups)
    assert total == sum(plan.heads) // model.kv_group
    clamped = total == uniform_groups - (uniform_groups - model.n_layer) // step * step
    assert abs(total - share * uniform_groups) <= step / 2 + 1e-9 or clamped


def test_a_share_is_realised_to_the_nearest_payable_total() -> None:
    model = ModelConfig(n_layer=4, d_model=64, n_head=4, d_ff=128)  # a group: 4 d hd = 4,096
    plan = model.plan({"shape": "cosine", "heads.share": 0.5})  # an MLP unit: 3 d 16 = 3,072
    assert plan.heads_share == 7 / 16 and sum(plan.heads) == 7  # steps of 3 heads from 16
    assert sum(plan.widths) == 4 * 128 + 9 * 4096 // 192  # 3 x 4,096 / 192 = 64 units of 1
    assert plan.heads == (2, 2, 2, 1) and plan.widths == (256, 224, 128, 96)  # cosine of MLP: none


def test_candidates_name_their_heads_and_only_flat_ones_are_the_baseline() -> None:
    both = {"shape": "cosine", "r_start": 1.5, "heads.shape": "linear", "heads.r_start": 0.5}
    assert describe(both) == "cosine 1.5->0.5 | heads linear 0.5->1.5"
    assert (
        describe({"shape": "uniform", "heads.share": 1.25}) == "uniform | heads uniform share=1.25"
    )
    assert heads_schedule(both) == {"shape": "linear", "r_start": 0.5}
    assert mlp_schedule(both) == {"shape": "cosine", "r_start": 1.5}
    assert not is_flat({"shape": "uniform", "heads.shape": "cosine"}, [4])
    assert not is_flat({"shape": "uniform", "heads.share": 0.5}, [4])
    assert is_flat({"shape": "uniform", "heads.shape": "uniform", "heads.share": 1}, [4])


TINY = {
    "name": "heads",
    "model": {"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 128, "multiple_of": 16},
    "data": {"tokenizer": {"kind": "bytes"}},
}


def _study(dims: dict, **model: object) -> dict:
    return {**TINY, "model": {**TINY["model"], **model}, "space": {"dimensions": dims}}


def test_a_study_with_a_heads_dimension_plans_headed_candidates() -> None:
    cfg = study_from_mapping(
        _study(
            {
                "heads.shape": {"type": "categorical", "choices": ["uniform", "cosine"]},
                "heads.r_start": {
                    "type": "fixed",
                    "value": 1.5,
                    "when": {"heads.shape": "cosine"},
                },
            }
        )
    )
    cands = cfg.candidates()
    assert cands[0] == {"shape": "uniform"}  # the baseline; heads uniform is the same model
    assert cands[1:] == [{"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}]
    trial = cfg.for_candidate(cands[1])
    assert trial.model.layer_heads == [6, 5, 3, 2] and cfg.model.layer_heads is None
    assert len(cfg.trainings()) == 2  # same widths, other heads: another model


def test_flops_are_held_at_the_datas_sequence_length_unless_named() -> None:
    dims = {"heads.share": {"type": "categorical", "choices": [0.5, 1.5]}}
    data = {"tokenizer": {"kind": "bytes"}, "seq_len": 64}
    cfg = study_from_mapping({**_study(dims, attention={"hold": "flops"}), "data": data})
    assert cfg.model.attention.seq_len == 64
    for cand in cfg.candidates()[1:]:
        plan, model = cfg.model.plan(cand), cfg.for_candidate(cand).model
        assert (
            flops_per_token(model, plan.widths, 256, 64).training
            == flops_per_token(cfg.model, [128] * 4, 256, 64).training
        )


@pytest.mark.parametrize(
    ("study", "needle"),
    [
        (
            _study({"heads.shape": {"type": "fixed", "value": "zigzag"}}),
            "heads.shape.value: 'zigzag' is not one of",
        ),
        (
            _study(
                {
                    "heads.shape": {"type": "fixed", "value": "cosine"},
                    "heads.k": {"type": "fixed", "value": 5.0},
                }
            ),
            "heads.k",
        ),
        (_study({"heads.share": {"type": "fixed", "value": 40.0}}), "heads.share: must be"),
        (_study({"heads.share": {"type": "fixed", "value": 6.0}}), "heads.share"),
        (
            _study({"heads.shape": {"type": "fixed", "value": "cosine"}}, arch="titans"),
            "heads.shape: arch titans has the same heads in every layer",
        ),
        (
            _study({"heads.shape": {"type": "fixed", "value": "cosine"}}, layer_heads=[4] * 4),
            "model.layer_heads fixes every candidate's heads",
        ),
        (
            _study({"shape": {"type": "fixed", "value": "cosine"}}, n_kv_head=3),
            "n_kv_head (3) must divide n_head (4)",
        ),
        (
            _study({"shape": {"type": "fixed", "value": "cosine"}}, layer_heads=[4, 4]),
            "layer_heads has 2 entries but n_layer is 4",
        ),
        (
            _study(
                {"shape": {"type": "fixed", "value": "cosine"}},
                n_kv_head=2,
                layer_heads=[4, 3, 5, 4],
            ),
            "layer_heads[1] = 3",
        ),
        # candidates listed with heads keys while layer_heads fixes the baseline's (review)
        (
            {
                **_study({"shape": {"type": "fixed", "value": "cosine"}}, layer_heads=[8] * 4),
                "search": {
                    "candidates": [
                        {"shape": "uniform", "heads.shape": "linear", "heads.r_start": 1.5}
                    ]
                },
            },
            "model.layer_heads fixes every candidate's heads",
        ),
        (
            {
                **_study({"heads.shape": {"type": "fixed", "value": "uniform"}}),
                "target": {**TINY["model"], "layer_heads": [2] * 4},
            },
            "target.layer_heads fixes every candidate's heads",
        ),
        # a string where a number is read: named, not a crash in the message's label (review)
        (
            {
                **_study({"shape": {"type": "fixed", "value": "cosine"}}),
                "search": {"candidates": [{"shape": "cosine", "heads.share": "2"}]},
            },
            "heads.share: must be a number",
        ),
        (
            {
                **_study({"shape": {"type": "fixed", "value": "cosine"}}),
                "search": {
                    "candidates": [
                        {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": "abc"}
                    ]
                },
            },
            "heads.r_start: must be a finite number",
        ),
        (
            _study(
                {"shape": {"type": "fixed", "value": "cosine"}},
                arch="tests.plugin_model:build",
                n_kv_head=2,
            ),
            "n_kv_head: arch tests.plugin_model:build has multi-head",
        ),
        (
            _study(
                {
                    "heads.shape": {"type": "fixed", "value": "cosine"},
                    "heads.r_start": {"type": "fixed", "value": 1.99},
                }
            ),
            "would get no head",
        ),
    ],
)
def test_bad_heads_are_errors_that_name_the_field(
    tmp_path: Path, study: dict, needle: str
) -> None:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError) as info:
        load_study(path)
    assert needle in str(info.value), str(info.value)


@settings(max_examples=200, deadline=None)
@given(st.floats(0.05, 20.0), st.integers(1, 6))
def test_every_share_in_range_plans_or_names_heads_share(share: float, n_layer: int) -> None:
    model = ModelConfig(n_layer=n_layer, d_model=32, n_head=2, d_ff=64, multiple_of=8)
    assume(share != 1.0)
    try:
        plan = model.plan({"shape": "uniform", "heads.share": share})
    except ScheduleError as err:
        assert err.field in ("heads.share", "heads.uniform")
        return
    assert min(plan.heads) >= 1 and min(plan.widths) >= 8


@pytest.mark.parametrize("space", ["openelm", "joint"])
def test_the_shipped_heads_spaces_plan_exact_budgets(space: str) -> None:
    root = Path(__file__).resolve().parent.parent
    cfg = load_study(
        root / "studies/attention_depth.yaml",
        [
            f"space={space}",
            "search.candidates=null",
            "search.sampler=random",
            "search.n_trials=4",
            "stats.contrasts=[]",  # they name the study's own candidates
        ],
    )
    cands = cfg.candidates()  # the grid, or a continuous space's corners
    assert len(cands) > 4 and cands[0] == {"shape": "uniform"}
    uniform = _counts(cfg.model, cands[0])[0]
    for cand in cands:
        assert _counts(cfg.model, cand)[0] == uniform, cand  # hold: params


def test_a_ladder_rung_holds_flops_at_its_own_sequence_length() -> None:
    data = {"tokenizer": {"kind": "bytes"}, "seq_len": 128}
    study = {
        **_study({"heads.share": {"type": "fixed", "value": 0.5}}, attention={"hold": "flops"}),
        "data": data,
        "ladder": [{"data": {"seq_len": 32}}, {}],
    }
    cfg = study_from_mapping(study)
    for index, seq in ((0, 32), (1, 128)):
        rung = cfg.rung(index)
        assert rung.model.attention.seq_len == seq
        cand = rung.candidates()[1]
        plan, model = rung.model.plan(cand), rung.for_candidate(cand).model
        assert (
            flops_per_token(model, plan.widths, 256, seq).training
            == flops_per_token(rung.model, [128] * 4, 256, seq).training
        )


def test_validate_notes_a_share_realised_far_from_its_request(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tlmsearch.cli import app

    study = _study(
        {"heads.share": {"type": "categorical", "choices": [0.95, 0.5]}}, multiple_of=64
    )
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    out = " ".join(CliRunner().invoke(app, ["validate", str(path)]).output.split())
    assert "heads.share 0.95 is realised as 1 at the proxy" in out
    assert "the same model as share 1" in out
    assert "heads.share 0.5 is realised as 0.4375 at the proxy" in out  # 12.5% off: the nearest
