"""Depth profiles (tlmsearch/widths/profiles.py): per-layer LR and init multipliers planned from
a schedule shape, through the space, the study's planning, twins, the optimizer and the init."""

from __future__ import annotations

import itertools
import json

import optuna
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import tiny_config

from tlmsearch.config import ModelConfig, TrainConfig, study_from_mapping
from tlmsearch.errors import ConfigError
from tlmsearch.models import build_model
from tlmsearch.search.attrs import CANDIDATE, SEED
from tlmsearch.train import parametrization
from tlmsearch.train.parametrization import LR_MULT, LR_SCALE
from tlmsearch.widths.profiles import QUANTITIES, plan_profile, train_update
from tlmsearch.widths.schedules import ScheduleError
from tlmsearch.widths.space import UNIFORM, describe, is_baseline, is_flat

LR = QUANTITIES["lr"]
STEPS = {"shape": "uniform", "lr.shape": "cosine", "lr.r_start": 1.5, "lr.r_end": 0.5}
TAPER = {"shape": "cosine", "r_start": 1.5, "r_end": 0.5}
MODEL4 = ModelConfig(n_layer=4, d_model=32, n_head=2, d_ff=64, multiple_of=8)


# -------------------------------------------------------------------------------------------------
# Planning


@given(
    st.sampled_from(["linear", "cosine", "sigmoid"]),
    st.floats(0.1, 1.9),
    st.integers(1, 64),
)
def test_a_profile_has_layer_mean_one_and_keeps_its_shapes_order(
    shape: str, r_start: float, n_layer: int
) -> None:
    mults = plan_profile({"lr.shape": shape, "lr.r_start": r_start}, LR, n_layer)
    if mults is None:  # flat: r_start 1, or one layer
        assert n_layer == 1 or abs(r_start - 1) < 1e-6
        return
    assert sum(mults) / n_layer == pytest.approx(1.0)
    pairs = list(itertools.pairwise(mults))
    assert (
        all(a >= b - 1e-12 for a, b in pairs)
        if r_start > 1
        else all(a <= b + 1e-12 for a, b in pairs)
    )


def test_the_taper_profile_is_the_tapers_width_ratios() -> None:
    """Arm B of the step-or-capacity experiment: uniform widths stepped as the taper's layers."""
    mults = plan_profile(STEPS, LR, 4)
    ratios = MODEL4.plan(TAPER).ratios
    assert mults == pytest.approx(ratios, abs=0.02)  # the widths round to multiple_of 8
    assert mults[0] == pytest.approx(1.5) and mults[-1] == pytest.approx(0.5)


def test_a_bad_profile_names_its_prefixed_field() -> None:
    with pytest.raises(ScheduleError) as err:
        plan_profile({"lr.shape": "cosine", "lr.k": 3}, LR, 4)
    assert err.value.field == "lr.k"
    with pytest.raises(ScheduleError) as err:
        train_update({"lr.shape": "linear", "lr.part": "attention"}, 4)
    assert err.value.field == "lr.part" and "block, mlp, down" in str(err.value)


# -------------------------------------------------------------------------------------------------
# The three traps: an LR-only candidate is neither uniform nor its twin, and clipping keeps muP's


def test_an_lr_only_candidate_is_not_flat_nor_the_baseline() -> None:
    """Old code: is_flat read only the MLP and heads schedules, so the grid dropped the
    candidate as a copy of uniform."""
    assert not is_flat(STEPS, [4, 24])
    assert not is_baseline(STEPS)
    assert is_flat({"shape": "uniform", "lr.shape": "uniform"}, [4])  # flat: the same run
    assert describe(STEPS) == "uniform | lr cosine 1.5->0.5"


def test_the_grid_trains_an_lr_profile_on_uniform_widths(tmp_path) -> None:
    cfg = tiny_config(tmp_path, search={"candidates": [STEPS, TAPER], "seeds": [0]})
    trainings = cfg.trainings()
    assert [t.candidate for t in trainings] == [UNIFORM, STEPS, TAPER]
    assert trainings[0].widths == trainings[1].widths  # same widths, another training
    train = cfg.for_candidate(STEPS).train
    assert train.lr_profile == pytest.approx([1.5, 0.5]) and train.lr_profile_part == "mlp"
    assert cfg.for_candidate(UNIFORM).train.lr_profile is None


def test_a_sampler_never_replays_uniforms_curve_for_an_lr_profile(tmp_path) -> None:
    """Old code: find_twin compared widths, heads and settings, so a draw of STEPS replayed
    the uniform model's curve as its own."""
    from tlmsearch.search.sampling.samplers import find_twin

    cfg = tiny_config(tmp_path, search={"sampler": "random", "n_trials": 3})
    study = optuna.create_study()
    attrs = {
        SEED: 0,
        CANDIDATE: json.dumps(UNIFORM),
        "curve": [{"tokens": 1, "val_bpb": 2.0}],
        "widths": list(cfg.model.plan(UNIFORM).widths),
    }
    study.add_trial(optuna.trial.create_trial(value=2.0, user_attrs=attrs))
    assert find_twin(study, cfg, STEPS, 0) is None
    assert find_twin(study, cfg, {"shape": "uniform", "lr.shape": "uniform"}, 0) is not None
    steps = {**attrs, CANDIDATE: json.dumps(STEPS)}
    study.add_trial(optuna.trial.create_trial(value=2.0, user_attrs=steps))
    assert find_twin(study, cfg, dict(STEPS), 0).number == 1
    assert find_twin(study, cfg, {**STEPS, "lr.part": "down"}, 0) is None  # another part


def test_an_lr_profile_leaves_clippings_frame_to_mup() -> None:
    """Old trap: reusing muP's lr_scale for a profile would change the clipping frame."""
    train = TrainConfig(lr_profile=[1.5, 0.5], parametrization="standard")
    model = build_model(MODEL4.model_copy(update={"n_layer": 2}), [64, 64], 64)
    groups = parametrization.param_groups(model, MODEL4, train, vocab_size=64)
    assert parametrization.readout_factors(groups) == {}
    assert all(LR_SCALE not in g for g in groups)


# -------------------------------------------------------------------------------------------------
# The optimizer and the init


def _optimizer(cfg, candidate: dict, par: str) -> tuple[torch.nn.Module, torch.optim.AdamW]:
    c = cfg.for_candidate(candidate)
    train = c.train.model_copy(update={"parametrization": par})
    widths = c.model.plan(candidate).widths
    model = build_model(c.model, widths, 256, seed=0)
    groups = parametrization.param_groups(model, c.model, train, vocab_size=256)
    opt = torch.optim.AdamW(groups, lr=train.lr)
    parametrization.set_lr(opt, train.lr)
    return model, opt


@pytest.mark.parametrize("par", parametrization.PARAMETRIZATIONS)
def test_adamw_groups_carry_the_per_layer_lrs(tmp_path, par: str) -> None:
    """uniform widths with lr.shape cosine 1.5 -> 0.5: each layer's MLP matrices step at
    lr x p_i, read off the optimizer, under standard and muP (uniform widths: muP x1)."""
    cfg = tiny_config(tmp_path, model={"n_layer": 4, "multiple_of": 8})
    model, opt = _optimizer(cfg, STEPS, par)
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    want = plan_profile(STEPS, LR, 4)
    for name, p in model.named_parameters():
        if ".mlps." in name:
            layer = int(name.split(".")[1])
            assert lr_of[id(p)] == pytest.approx(cfg.train.lr * want[layer]), name
        else:
            assert lr_of[id(p)] == cfg.train.lr, name  # attention, norms, embedding
    assert want[0] == pytest.approx(1.5) and want[-1] == pytest.approx(0.5)


def test_mup_and_a_down_profile_compose(tmp_path) -> None:
    """The taper under muP with a down-projection profile: w2's LR is lr x (1/m_i) x p_i."""
    cfg = tiny_config(tmp_path, model={"n_layer": 4, "multiple_of": 8})
    cand = {**TAPER, "lr.shape": "linear", "lr.r_start": 1.25, "lr.part": "down"}
    model, opt = _optimizer(cfg, cand, "mup")
    lr_of = {id(p): g["lr"] for g in opt.param_groups for p in g["params"]}
    widths = MODEL4.plan(cand).widths
    prof = plan_profile(cand, LR, 4, widths)  # mean 1 weighted by the down projections' widths
    assert sum(p * w for p, w in zip(prof, widths, strict=True)) == pytest.approx(sum(widths))
    for name, p in model.named_parameters():
        if name.endswith("w2.weight"):
            i = int(name.split(".")[1])
            assert lr_of[id(p)] == pytest.approx(cfg.train.lr * 64 / widths[i] * prof[i])
        elif ".mlps." in name:
            assert lr_of[id(p)] == cfg.train.lr  # w1, w3: muP's input weights, not the part


def test_an_init_profile_scales_each_layers_matrices_from_the_same_draws() -> None:
    model_cfg = MODEL4.model_copy(update={"n_layer": 2})
    plain = build_model(model_cfg, [64, 64], 64, seed=3)
    scaled = build_model(model_cfg, [64, 64], 64, seed=3)
    train = TrainConfig(init_profile=[2.0, 0.5], init_profile_part="block")
    parametrization.param_groups(scaled, model_cfg, train, vocab_size=64)
    want = {n: p for n, p in plain.named_parameters()}
    for name, p in scaled.named_parameters():
        factor = {"blocks.0.": 2.0, "blocks.1.": 0.5}.get(name[:9], 1.0) if p.ndim >= 2 else 1.0
        torch.testing.assert_close(p, want[name] * factor, rtol=0, atol=0)


@pytest.mark.parametrize("par", parametrization.PARAMETRIZATIONS)
def test_no_profile_keeps_the_groups_as_they_were(par: str) -> None:
    """Bit-identical training where no new key is used: the very groups of before."""
    model = build_model(MODEL4, [96, 80, 48, 32], 64)
    train = TrainConfig(parametrization=par)
    groups = parametrization._parametrized_groups(model, MODEL4, train, vocab_size=64)
    assert parametrization.profile_groups(model, groups, train) is groups
    again = build_model(MODEL4, [96, 80, 48, 32], 64)
    full = parametrization.param_groups(again, MODEL4, train, vocab_size=64)
    assert [{k: v for k, v in g.items() if k != "params"} for g in full] == [
        {k: v for k, v in g.items() if k != "params"} for g in groups
    ]
    assert all(LR_MULT not in g for g in full)


def test_under_mup_a_profile_leaves_clippings_frame_as_it_was() -> None:
    """The frame gradient clipping reads (muP's 1/m per down projection) is the same with and
    without a profile on top."""
    widths = [96, 80, 48, 32]
    plain = build_model(MODEL4, widths, 64)
    profiled = build_model(MODEL4, widths, 64)
    mup = TrainConfig(parametrization="mup")
    with_profile = TrainConfig(parametrization="mup", lr_profile=[1.5, 1.2, 0.8, 0.5])
    a = parametrization.param_groups(plain, MODEL4, mup, vocab_size=64)
    b = parametrization.param_groups(profiled, MODEL4, with_profile, vocab_size=64)
    names_a = {id(p): n for n, p in plain.named_parameters()}
    names_b = {id(p): n for n, p in profiled.named_parameters()}
    frame_a = {names_a[i]: f for i, f in parametrization.readout_factors(a).items()}
    frame_b = {names_b[i]: f for i, f in parametrization.readout_factors(b).items()}
    assert frame_a == frame_b and len(frame_a) == 4


def test_the_embedding_multiplier_reaches_its_group() -> None:
    model = build_model(MODEL4, [64] * 4, 64)
    train = TrainConfig(embedding_lr_mult=4.0)
    groups = parametrization.param_groups(model, MODEL4, train, vocab_size=64)
    (emb,) = [g for g in groups if g.get(LR_MULT) == 4.0]
    assert emb["params"] == [model.wte.weight]


# -------------------------------------------------------------------------------------------------
# Validation


def _study(tmp_path, **extra):
    from search_helpers import tiny_study

    return tiny_study(tmp_path, **extra)


def test_a_fixed_profile_of_the_wrong_length_is_an_error_naming_the_field(tmp_path) -> None:
    data = _study(tmp_path, train={"lr_profile": [1.5, 1.0, 0.5]})
    with pytest.raises(ConfigError, match=r"train\.lr_profile has 3 multipliers but model"):
        study_from_mapping(data)


def test_a_fixed_profile_and_a_scheduled_one_are_refused_together(tmp_path) -> None:
    data = _study(tmp_path, train={"lr_profile": [1.5, 0.5]}, search={"candidates": [STEPS]})
    with pytest.raises(ConfigError, match=r"train\.lr_profile fixes it for every candidate"):
        study_from_mapping(data)


def test_a_profile_multiplier_out_of_range_names_the_layer() -> None:
    with pytest.raises(ValueError, match=r"lr_profile\.1|\[1\] is 0\.0"):
        TrainConfig(lr_profile=[1.0, 0.0])


def test_a_space_searches_lr_dimensions(tmp_path) -> None:
    space = {
        "dimensions": {
            "shape": {"type": "categorical", "choices": ["uniform", "cosine"]},
            "lr.shape": {"type": "fixed", "value": "cosine"},
            "lr.r_start": {"type": "categorical", "choices": [1.5, 0.5]},
            "lr.part": {"type": "categorical", "choices": ["mlp", "block"]},
        }
    }
    cfg = tiny_config(tmp_path, space=space)
    labels = [describe(t.candidate) for t in cfg.trainings()]
    assert labels[0] == "uniform" and "uniform | lr cosine 1.5->0.5" in labels
    assert "cosine 1.5->0.5 | lr cosine 0.5->1.5 block" in labels
    assert len(labels) == 1 + 2 * 2 * 2
    bad = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "uniform"},
            "lr.part": {"type": "fixed", "value": "attention"},
        }
    }
    with pytest.raises(ConfigError, match=r"lr\.part.*block, mlp, down"):
        tiny_config(tmp_path, space=bad)


def test_muPs_lr_rule_without_its_init_is_a_width_power_profile(tmp_path) -> None:
    """Arm D of the step-or-capacity experiment: the taper under standard with its down
    projections at lr / m_i (lr.width_power -1, part down) steps every MLP output x1, as muP
    does, while the init stays standard's."""
    from tlmsearch.config.summary import effective_lr_of

    cfg = tiny_config(tmp_path, model={"n_layer": 4, "multiple_of": 8})
    capacity = {**TAPER, "lr.width_power": -1, "lr.part": "down"}
    widths = cfg.model.plan(capacity).widths
    train = cfg.for_candidate(capacity).train
    assert train.lr_profile == pytest.approx([64 / w for w in widths])
    e = effective_lr_of(cfg, capacity)
    assert e.step == pytest.approx((1.0,) * 4) and e.init == (1.0,) * 4
    mup = parametrization.effective_lr(widths, 64, "mup")
    assert e.lr == pytest.approx(mup.lr)
    assert "x width^-1" in describe(capacity)


def test_an_embedding_multiplier_is_a_candidate_not_the_baseline(tmp_path) -> None:
    emb = {"shape": "uniform", "lr.embedding": 4.0}
    assert not is_baseline(emb) and not is_flat(emb, [2])
    cfg = tiny_config(tmp_path, search={"candidates": [emb]})
    assert [t.candidate for t in cfg.trainings()] == [UNIFORM, emb]
    assert cfg.for_candidate(emb).train.embedding_lr_mult == 4.0
    data = {
        **_study(tmp_path, search={"candidates": [emb]}),
        "train": {**_study(tmp_path)["train"], "embedding_lr_mult": 2.0},
    }
    with pytest.raises(ConfigError, match=r"train\.embedding_lr_mult fixes it"):
        study_from_mapping(data)


def test_a_candidate_without_widths_is_reported_not_raised_by_the_profile_check(tmp_path) -> None:
    """Found by the fuzzer: the profile check planned widths a candidate could not meet."""
    space = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "cosine"},
            "r_start": {"type": "fixed", "value": 1.99},
        }
    }
    with pytest.raises(ConfigError, match="cannot be met"):
        tiny_config(tmp_path, space=space, model={"n_layer": 4, "multiple_of": 16})


def test_the_output_layers_multiplier_reaches_its_own_group_when_untied() -> None:
    model_cfg = MODEL4.model_copy(update={"tie_embeddings": False})
    model = build_model(model_cfg, [64] * 4, 64)
    train = TrainConfig(embedding_lr_mult=2.0, head_lr_mult=0.5)
    groups = parametrization.param_groups(model, model_cfg, train, vocab_size=64)
    by_mult = {g.get(LR_MULT): g["params"] for g in groups if LR_MULT in g}
    assert by_mult == {2.0: [model.wte.weight], 0.5: [model.lm_head.weight]}
    tied = build_model(MODEL4, [64] * 4, 64)
    with pytest.raises(ValueError, match=r"train\.head_lr_mult \(0\.5\) differs"):
        parametrization.param_groups(tied, MODEL4, train, vocab_size=64)


def test_a_tied_model_with_two_end_multipliers_is_refused_at_validate(tmp_path) -> None:
    cand = {"shape": "uniform", "lr.embedding": 2.0, "lr.head": 0.5}
    with pytest.raises(ConfigError, match=r"tie_embeddings makes the embedding"):
        tiny_config(tmp_path, search={"candidates": [cand]})
    untied = tiny_config(tmp_path, search={"candidates": [cand]}, model={"tie_embeddings": False})
    train = untied.for_candidate(cand).train
    assert (train.embedding_lr_mult, train.head_lr_mult) == (2.0, 0.5)


@pytest.mark.parametrize("par", parametrization.PARAMETRIZATIONS)
def test_a_profile_moves_the_steps_not_the_decay(tmp_path, par: str) -> None:
    """Each group keeps the study's lr x weight_decay: AdamW's decay would otherwise follow
    the profile (layer 0's MLP shrinking 1.5x faster), which the taper's wide layers do not."""
    cfg = tiny_config(tmp_path, model={"n_layer": 4, "multiple_of": 8})
    _, opt = _optimizer(cfg, STEPS, par)
    wd = cfg.train.weight_decay
    for g in opt.param_groups:
        if g["weight_decay"]:
            assert g["lr"] * g["weight_decay"] == pytest.approx(cfg.train.lr * wd), g.get(LR_MULT)
    assert {round(g.get(LR_MULT, 1.0), 6) for g in opt.param_groups} > {1.0}


def test_a_setting_dimension_and_a_candidate_key_for_one_field_are_refused(tmp_path) -> None:
    """Found in review: train.embedding_lr_mult as a dimension crossed with lr.embedding
    trained both at the candidate's value under labels that named the setting's."""
    space = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "uniform"},
            "lr.embedding": {"type": "categorical", "choices": [2.0]},
            "train.embedding_lr_mult": {"type": "categorical", "choices": [1.0, 3.0]},
        }
    }
    with pytest.raises(ConfigError, match=r"train\.embedding_lr_mult fixes it"):
        tiny_config(tmp_path, space=space, model={"tie_embeddings": False})
    part = _study(
        tmp_path,
        train={**_study(tmp_path)["train"], "lr_profile_part": "block"},
        search={"candidates": [STEPS]},
    )
    with pytest.raises(ConfigError, match=r"train\.lr_profile_part fixes it"):
        study_from_mapping(part)
