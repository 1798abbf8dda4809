"""Search spaces: YAML validation, grid enumeration, Optuna define-by-run, widths."""

from __future__ import annotations

import optuna
import pytest

from tlmsearch.errors import ConfigError
from tlmsearch.widths.schedules import ScheduleError, plan_from_params
from tlmsearch.widths.space import (
    SPACES_DIR,
    describe,
    find_space,
    is_baseline,
    is_flat,
    load_space,
    space_from_mapping,
    taper_strength,
)


def test_shipped_spaces_load() -> None:
    names = sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))
    assert names == ["blocks", "continuous", "joint", "openelm", "paper"]
    paper = load_space(find_space("paper"))
    assert paper.size() == 15
    grid = paper.grid()
    assert {c["shape"] for c in grid} == {"linear", "cosine", "sigmoid"}
    assert sorted({c["r_start"] for c in grid}) == [1.25, 1.375, 1.5, 1.625, 1.75]
    assert all(("k" in c) == (c["shape"] == "sigmoid") for c in grid)  # conditional
    blocks = load_space(find_space("blocks.yaml"))
    # uniform ignores the boundaries: 1 + 3 presets x 2 x 2 boundaries
    assert blocks.size() == 13
    cont = load_space(find_space("continuous"))
    assert not cont.finite and cont.size() is None
    with pytest.raises(ConfigError, match="continuous"):
        cont.grid()


def test_paper_grid_widths_keep_the_budget() -> None:
    paper = load_space(find_space("paper"))
    for cand in paper.grid():
        plan = plan_from_params(cand, n_layer=12, d_ff=1024, multiple_of=16)
        assert sum(plan.widths) == 12 * 1024


def test_define_by_run_sampling_respects_conditions() -> None:
    space = load_space(find_space("continuous"))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        trial = study.ask()
        cand = space.suggest(trial)
        seen.add(cand["shape"])
        assert ("k" in cand) == (cand["shape"] == "sigmoid")
        assert 0.5 <= cand["r_start"] <= 2.0
        assert set(trial.params) == set(cand)
        plan = plan_from_params(cand, n_layer=8, d_ff=512, multiple_of=16)
        study.tell(trial, plan.realised_start)
    assert seen == {"linear", "cosine", "sigmoid"}


def test_fixed_values_are_returned_not_sampled() -> None:
    space = load_space(find_space("paper"))
    study = optuna.create_study()
    trial = study.ask({})
    cand = space.suggest(trial)
    if cand["shape"] == "sigmoid":
        assert cand["k"] == 10.0 and "k" not in trial.params
    assert space.fixed_values({"shape": "sigmoid"}) == {"k": 10.0}
    assert space.fixed_values({"shape": "cosine"}) == {}


def test_int_and_log_dimensions() -> None:
    space = space_from_mapping(
        {
            "dimensions": {
                "shape": {"type": "fixed", "value": "sigmoid"},
                "k": {"type": "int", "low": 2, "high": 8, "step": 2},
                "r_start": {"type": "categorical", "choices": [1.5]},
            }
        }
    )
    assert [c["k"] for c in space.grid()] == [2, 4, 6, 8]


@pytest.mark.parametrize(
    ("dims", "needle"),
    [
        ({"width": {"type": "fixed", "value": 1}}, "'width' is not a schedule parameter"),
        ({"shape": {"type": "categorical", "choices": ["zigzag"]}}, "zigzag"),
        ({"shape": {"type": "categorical"}}, "choices"),
        ({"r_start": {"type": "float", "low": 2.0, "high": 1.0}}, "low <= high"),
        ({"r_start": {"type": "float", "low": 1.0, "high": 2.0, "step": 0.3}}, "multiple of step"),
        ({"r_start": {"type": "float", "low": 1.0, "high": 2.0, "log": True, "step": 0.5}}, "log"),
        ({"k": {"type": "fixed", "value": 3, "when": {"shape": "sigmoid"}}}, "listed before"),
        ({"r_start": {"type": "float", "low": 1.0, "hi": 2.0}}, "unknown key"),
        ({"r_start": {"type": "range"}}, "dimensions.r_start.type"),
    ],
)
def test_bad_spaces_name_the_path(dims: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        space_from_mapping({"dimensions": dims})
    assert needle in str(info.value)
    assert "space.dimensions" in str(info.value)


def test_find_space_lists_shipped_spaces_when_missing() -> None:
    with pytest.raises(ConfigError, match="shipped spaces: blocks, continuous, joint, open"):
        find_space("nope")


def test_labels_and_taper_strength() -> None:
    assert describe({"shape": "uniform"}) == "uniform"
    assert describe({"shape": "cosine", "r_start": 1.5}) == "cosine 1.5->0.5"
    assert describe({"shape": "sigmoid", "r_start": 1.25, "k": 10.0}) == "sigmoid 1.25->0.75 k=10"
    # every searched parameter shows, so distinct candidates never share a label
    assert describe({"shape": "sigmoid", "r_start": 1.5, "midpoint": 0.3}).endswith("mid=0.3")
    assert describe({"shape": "custom", "ratios": [1.5, 0.5]}) == "custom 1.5/0.5"
    assert (
        describe({"shape": "blocks", "preset": "wider_early"}) == "blocks wider_early @0.333/0.667"
    )
    assert taper_strength({"shape": "cosine", "r_start": 1.5}) == pytest.approx(1.0)
    assert taper_strength({"shape": "linear", "r_start": 0.5, "r_end": 1.5}) == pytest.approx(-1)
    assert taper_strength({"shape": "blocks", "preset": "wider_late"}) == pytest.approx(-1.0)
    assert taper_strength({"shape": "uniform"}) == 0.0
    # a shape the registry does not know is an error, never a silent 0.0 (uniform's taper)
    with pytest.raises(ScheduleError, match="shape: 'zigzag' is not one of uniform, linear"):
        taper_strength({"shape": "zigzag"})


def test_a_space_without_shape_is_an_error() -> None:
    with pytest.raises(ConfigError, match="needs a 'shape' dimension"):
        space_from_mapping({"dimensions": {"r_start": {"type": "float", "low": 1.0, "high": 1.5}}})


COSINE = {"shape": {"type": "fixed", "value": "cosine"}}


@pytest.mark.parametrize(
    ("dim", "needle"),
    [
        (
            {"type": "categorical", "choices": [1.5, "median"]},
            "space.dimensions: r_start.choices[1]: 'median' is not a number; r_start takes "
            "numbers, e.g. 1.5",
        ),
        ({"type": "categorical", "choices": [True]}, "r_start.choices[0]: True is not a number"),
        ({"type": "fixed", "value": "1.5"}, "r_start.value: '1.5' is not a number"),
        (
            {"type": "categorical", "choices": [10**400]},
            "is out of range; r_start takes numbers within +-1,000,000",
        ),
        ({"type": "categorical", "choices": [float("nan")]}, "Input should be a finite number"),
        ({"type": "float", "low": 0.5, "high": float("inf")}, "r_start.high: inf is invalid"),
        ({"type": "float", "low": -1e300, "high": 1e300}, "r_start.low: -1e+300 is invalid"),
    ],
)
def test_every_choice_is_type_checked_against_its_parameter(dim: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        space_from_mapping({"dimensions": {**COSINE, "r_start": dim}})
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("dims", "needle"),
    [
        ({"shape": {"type": "float", "low": 0, "high": 1}}, "shape takes names (uniform, linear"),
        ({"shape": {"type": "categorical", "choices": ["cosine", 3]}}, "shape.choices[1]: 3 is"),
        ({**COSINE, "preset": {"type": "fixed", "value": 1}}, "preset.value: 1 is not one of"),
    ],
)
def test_shape_and_preset_take_names(dims: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        space_from_mapping({"dimensions": dims})
    assert needle in str(info.value)


def test_grids_are_counted_before_they_are_built() -> None:
    # step 2**-30 divides the range exactly: 2**30 + 1 values, once a list of a billion floats
    fine = {"type": "float", "low": 0.5, "high": 1.5, "step": 2**-30}
    with pytest.raises(
        ConfigError,
        match=r"r_start: \(high - low\) / step gives 1.07e\+09 grid "
        r"values, more than 10,000; raise step to at least 0.0001",
    ):
        space_from_mapping({"dimensions": {**COSINE, "r_start": fine}})
    wide = {"type": "int", "low": 1, "high": 10**6}
    with pytest.raises(ConfigError, match="1,000,000 grid values, more than 10,000; give a step"):
        space_from_mapping({"dimensions": {**COSINE, "k": wide}})
    # each dimension is small, their product is not
    dims = {
        "shape": {"type": "categorical", "choices": ["linear", "cosine"]},
        "r_start": {"type": "float", "low": 0.5, "high": 1.5, "step": 0.001},
        "r_end": {"type": "float", "low": 0.5, "high": 1.5, "step": 0.01},
    }
    with pytest.raises(ConfigError) as info:
        space_from_mapping({"dimensions": dims})
    assert str(info.value) == (
        "space: the grid has more than 10,000 candidates (shape 2 x r_start 1001 x r_end 101, "
        "less any `when`); raise a step, narrow a range or drop choices"
    )
    # a continuous space's corners are counted too, as `when` makes them: 250 r_start x 2
    # r_end corners x (9 k x 2 midpoint corners for sigmoid + 1 for cosine) = 9,500
    dims = {
        "shape": {"type": "categorical", "choices": ["sigmoid", "cosine"]},
        "r_start": {"type": "categorical", "choices": [0.01 * i for i in range(1, 251)]},
        "r_end": {"type": "float", "low": 0.25, "high": 1.5},
        "k": {"type": "categorical", "choices": list(range(2, 11)), "when": {"shape": "sigmoid"}},
        "midpoint": {"type": "float", "low": 0.25, "high": 0.75, "when": {"shape": "sigmoid"}},
    }
    assert len(space_from_mapping({"dimensions": dims}).corners()) == 9_500
    dims["r_start"]["choices"] = [0.01 * i for i in range(1, 301)]  # 11,400
    with pytest.raises(ConfigError, match="continuous space has more than 10,000 candidates"):
        space_from_mapping({"dimensions": dims})


def test_count_is_the_length_of_values() -> None:
    from tlmsearch.widths.space import Dimension

    for dim in [
        Dimension(type="float", low=1.25, high=1.75, step=0.125),
        Dimension(type="int", low=2, high=8),
        Dimension(type="float", low=0.5, high=2.0),
        Dimension(type="float", low=1.0, high=1.0),
        Dimension(type="categorical", choices=[1, 2, 3]),
        Dimension(type="fixed", value="cosine"),
    ]:
        assert dim.count() == len(dim.values())
        assert dim.count(corners=True) == len(dim.values(corners=True))


def test_repeated_choices_are_counted_not_enumerated_forever() -> None:
    # 10**20 paths to one candidate: counting distinct candidates would never finish
    dims = {"shape": {"type": "categorical", "choices": ["cosine"] * 10_000}}
    dims |= {p: {"type": "categorical", "choices": [1.0] * 10_000} for p in ("r_start", "r_end")}
    with pytest.raises(ConfigError, match="more than 10,000 candidates"):
        space_from_mapping({"dimensions": dims})
    dims = {"shape": {"type": "categorical", "choices": ["cosine", "cosine"]}}
    assert space_from_mapping({"dimensions": dims}).grid() == [{"shape": "cosine"}]


def test_a_parameter_its_shape_does_not_read_makes_no_baseline() -> None:
    # taken for a copy of the baseline, uniform with an r_start was dropped unseen
    assert not is_flat({"shape": "uniform", "r_start": 1.5}, [4])
    assert not is_flat({"shape": "blocks", "preset": "uniform", "r_start": 1.5}, [4, 24])
    assert is_flat({"shape": "uniform"}, [4]) and is_flat({"shape": "linear", "r_start": 1.0}, [4])


# an attention-only taper: MLPs uniform, heads moving
ATTENTION_ONLY = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}


@pytest.mark.parametrize(
    "candidate, baseline",
    [
        ({"shape": "uniform"}, True),
        ({"shape": "uniform", "train.lr": 0.003}, True),  # the baseline of its setting
        # the same model, but a flat candidate: one baseline row per seed (the grid drops these)
        ({"shape": "uniform", "heads.shape": "uniform"}, False),
        ({"shape": "uniform", "heads.share": 1.0}, False),
        ({"shape": "cosine", "r_start": 1.5}, False),
        (ATTENTION_ONLY, False),
        ({**ATTENTION_ONLY, "train.lr": 0.003}, False),
        ({"shape": "uniform", "heads.share": 0.5}, False),  # capacity moved to the MLPs
        ({"shape": "uniform", "heads.shape": "uniform", "heads.share": 1.5}, False),
        ({"shape": "cosine", "heads.shape": "uniform"}, False),
    ],
)
def test_the_baseline_is_uniform_in_both_halves_of_the_block(candidate: dict, baseline: bool):
    assert is_baseline(candidate) is baseline
    # a candidate that moves capacity is one of its own; one that does not is a flat copy
    moves = (
        candidate.get("heads.shape", "uniform") != "uniform"
        or candidate.get("heads.share", 1) != 1
        or candidate.get("shape") != "uniform"
    )
    if not baseline:
        assert is_flat(candidate, [4]) is not moves
