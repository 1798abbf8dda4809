"""Search spaces: YAML validation, grid enumeration, Optuna define-by-run, widths."""

from __future__ import annotations

import optuna
import pytest

from tlmsearch.errors import ConfigError
from tlmsearch.schedules import plan_from_params
from tlmsearch.space import (
    SPACES_DIR,
    describe,
    find_space,
    load_space,
    space_from_mapping,
    taper_strength,
)


def test_shipped_spaces_load() -> None:
    names = sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))
    assert names == ["blocks", "continuous", "paper"]
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
    with pytest.raises(ConfigError, match="shipped spaces: blocks, continuous, paper"):
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


def test_a_space_without_shape_is_an_error() -> None:
    with pytest.raises(ConfigError, match="needs a 'shape' dimension"):
        space_from_mapping({"dimensions": {"r_start": {"type": "float", "low": 1.0, "high": 1.5}}})
