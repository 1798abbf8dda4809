"""The registry of shapes: every entry keeps the budget, labels and taper strength come from it,
unknown shapes are errors naming the valid ones, and a new shape is one entry (a toy ``step``)."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir.tables import _derive
from tlmsearch.widths.schedules import (
    SHAPES,
    ScheduleError,
    Shape,
    check_params,
    plan_from_params,
    profile,
    ramp_ends,
    schedule_params,
    searchable_shapes,
    shape_spec,
    shapes_table,
)
from tlmsearch.widths.space import describe, space_from_mapping, taper_strength, value_names

ROOT = Path(__file__).resolve().parent.parent
MULTIPLES = [1, 8, 16, 32, 64, 128]
ratio = st.floats(min_value=0.05, max_value=2.0, allow_nan=False)

# A valid value of every schedule parameter, given the depth (custom's ratios need one per
# layer). b1 and b2 never cross, so only the rules of a shape's ``check`` can reject a draw.
VALUES: dict[str, Callable[[int], st.SearchStrategy[Any]]] = {
    "r_start": lambda n: ratio,
    "r_end": lambda n: ratio,
    "k": lambda n: st.floats(0.5, 60.0),
    "midpoint": lambda n: st.floats(0.1, 0.9),
    "b1": lambda n: st.floats(0.05, 0.45),
    "b2": lambda n: st.floats(0.55, 0.95),
    "preset": lambda n: st.sampled_from(value_names()["preset"]),
    "m_early": lambda n: ratio,
    "m_middle": lambda n: ratio,
    "m_late": lambda n: ratio,
    "ratios": lambda n: st.lists(ratio, min_size=n, max_size=n),
    "at": lambda n: st.floats(0.1, 0.9),  # the toy step shape's own parameter
}


# -- a toy shape, registered in one entry --------------------------------------------------------


def _step(n_layer: int, p: Mapping[str, Any]) -> list[float]:
    """r_start before depth ``at``, r_end from there on (each layer at the centre of its slot)."""
    rs, re_ = ramp_ends(p)
    for name, value in (("r_start", rs), ("r_end", re_)):
        if not 0 < value <= 1e6:
            raise ScheduleError(name, f"must be a finite number > 0, but got {value!r}")
    at = p["at"]
    if not (isinstance(at, int | float) and 0 < at < 1):
        raise ScheduleError("at", f"must lie in (0, 1), but got {at!r}")
    return [rs if (i + 0.5) / n_layer < at else re_ for i in range(n_layer)]


STEP = Shape(
    "step",
    _step,
    "r_start before depth fraction at, r_end after",
    params={"r_start": 1.5, "r_end": None, "at": 0.5},
)


@contextmanager
def step_registered() -> Iterator[None]:
    """``step`` in the registry for the block; nothing else changes, and it is gone after."""
    with mock.patch.dict(SHAPES, {"step": STEP}):
        yield


@pytest.fixture
def step(monkeypatch: pytest.MonkeyPatch) -> Shape:
    monkeypatch.setitem(SHAPES, "step", STEP)
    return STEP


@st.composite
def candidates(draw: st.DrawFn, shape: str, n_layer: int) -> dict[str, Any]:
    """``shape`` with a random subset of its parameters, each a valid value."""
    params = list(SHAPES[shape].params)
    names = draw(st.sets(st.sampled_from(params), max_size=6)) if params else set()
    cand: dict[str, Any] = {"shape": shape}
    for name in sorted(names):
        cand[name] = draw(VALUES[name](n_layer))
    if shape == "custom":  # its one parameter has no default
        cand["ratios"] = draw(VALUES["ratios"](n_layer))
    return cand


def _widths_or_why(cand: dict[str, Any], n_layer: int, d_ff: int, multiple_of: int) -> None:
    """Validation, then widths that keep the budget exactly, within one unit of the
    renormalised profile and in its order; or an error that names a field and says why."""
    rest = {k: v for k, v in cand.items() if k != "shape"}
    try:  # values valid one by one may still clash: r_start 2 leaves r_end = 2 - 2 = 0
        check_params(cand["shape"], rest)
        prof = profile(cand["shape"], n_layer, **rest)
    except ScheduleError as err:
        named = set(err.field.partition("[")[0].split("/"))  # b1/b2, ratios[3]
        assert named <= set(SHAPES[cand["shape"]].params), err
        return
    units = d_ff // multiple_of
    targets = [p / (sum(prof) / n_layer) * units for p in prof]
    try:
        plan = plan_from_params(cand, n_layer=n_layer, d_ff=d_ff, multiple_of=multiple_of)
    except ScheduleError as err:
        assert min(targets) < 1.0 and "would get no width" in err.message, err
        return
    w = plan.widths
    assert len(w) == n_layer and sum(w) == n_layer * d_ff
    assert all(x > 0 and x % multiple_of == 0 for x in w)
    assert all(abs(x / multiple_of - t) < 1 + 1e-9 for x, t in zip(w, targets, strict=True))
    for (a, b), (ta, tb) in zip(itertools.pairwise(w), itertools.pairwise(targets), strict=True):
        if ta > tb + 1e-9:
            assert a >= b
        elif ta < tb - 1e-9:
            assert a <= b


# -- every entry ---------------------------------------------------------------------------------


@settings(max_examples=600, deadline=None)
@given(data=st.data(), shape=st.sampled_from([*SHAPES, "step"]))
def test_every_entry_round_trips_to_budget_exact_widths(data: st.DataObject, shape: str) -> None:
    n_layer = data.draw(st.integers(1, 64), label="n_layer")
    multiple_of = data.draw(st.sampled_from(MULTIPLES), label="multiple_of")
    d_ff = multiple_of * data.draw(st.integers(1, 48), label="units")
    with step_registered():
        cand = data.draw(candidates(shape, n_layer), label="candidate")
        _widths_or_why(cand, n_layer, d_ff, multiple_of)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), shape=st.sampled_from([*SHAPES, "step"]))
def test_taper_strength_is_first_minus_last_of_the_entry_profile(
    data: st.DataObject, shape: str
) -> None:
    # 96 layers: the first and the last sit in blocks' outer groups for any b1 < 0.45 < b2
    with step_registered():
        cand = data.draw(candidates(shape, 96))
        rest = {k: v for k, v in cand.items() if k != "shape"}
        try:  # values valid one by one may still clash: r_start 2 leaves r_end = 2 - 2 = 0
            check_params(shape, rest)
            prof = profile(shape, 96, **rest)
        except ScheduleError:
            return
        first, last = SHAPES[shape].ends_of(cand)
        assert taper_strength(cand) == first - last
        assert taper_strength(cand) == pytest.approx(prof[0] - prof[-1], abs=1e-9)


def test_every_parameter_has_a_value_strategy_and_one_default() -> None:
    # a parameter shared by shapes must mean the same: one default wherever it is read
    with step_registered():
        assert set(schedule_params()) - {"shape"} <= set(VALUES), "add a strategy to VALUES"
        for name in schedule_params()[1:]:
            defaults = {repr(s.params[name]) for s in SHAPES.values() if name in s.params}
            assert len(defaults) == 1, (name, defaults)


@pytest.mark.parametrize("shape", list(SHAPES))
def test_each_entry_is_what_every_reader_sees(shape: str) -> None:
    spec = SHAPES[shape]
    cand = {"shape": shape, **spec.example}
    assert shape_spec(shape) is spec
    assert describe(cand) == spec.label_of(cand) and describe(cand).startswith(shape)
    assert taper_strength(cand) == spec.ends_of(cand)[0] - spec.ends_of(cand)[1]
    assert set(spec.params) <= set(schedule_params())
    if spec.searchable:
        assert shape in value_names()["shape"] and shape in searchable_shapes()
        assert set(spec.params) <= set(schedule_params(searchable=True))
        plan_from_params(cand, n_layer=12, d_ff=512, multiple_of=16)  # its example is valid
        result = CliRunner().invoke(app, ["widths", "--shape", shape, "--json"])
        assert result.exit_code == 0, result.output
    else:
        assert shape not in value_names()["shape"]
        result = CliRunner().invoke(app, ["widths", "--shape", shape])
        assert result.exit_code == 2 and "no option for" in result.output
    row = _derive({"params": cand})
    assert row["candidate"] == describe(cand) and row["taper"] == taper_strength(cand)
    assert ("r_start" in row) == spec.ratio_columns


def test_labels_come_from_the_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    cand = {"shape": "cosine", "r_start": 1.25, "train.lr": 0.01}
    assert describe(cand) == "cosine 1.25->0.75 @ lr=0.01"
    relabelled = dataclasses.replace(SHAPES["cosine"], label=lambda c: "from the entry")
    monkeypatch.setitem(SHAPES, "cosine", relabelled)
    assert describe(cand) == "cosine from the entry @ lr=0.01"
    assert _derive({"params": cand})["schedule"] == "cosine from the entry"
    # no label function: the name, then each parameter the candidate gives, in entry order
    plain = dataclasses.replace(SHAPES["sigmoid"], label=None)
    monkeypatch.setitem(SHAPES, "sigmoid", plain)
    assert describe({"shape": "sigmoid", "midpoint": 0.3, "r_start": 1.5}) == (
        "sigmoid r_start=1.5 midpoint=0.3"
    )


def test_the_docs_table_is_the_registry() -> None:
    text = (ROOT / "docs/concepts.md").read_text()
    marker = "<!-- shapes table: generated by tlmsearch.widths.schedules.shapes_table() -->"
    start = text.index(marker)
    table = text[start:].split("\n", 1)[1].split("\n<!-- end of shapes table -->", 1)[0]
    assert table == shapes_table(), (
        "paste tlmsearch.widths.schedules.shapes_table() into concepts.md"
    )


def test_an_entry_names_only_parameters_it_reads() -> None:
    with pytest.raises(ValueError, match=r"shape 'bad': names / example give \['x'\]"):
        Shape("bad", _step, "", params={"at": 0.5}, example={"x": 1})
    with pytest.raises(TypeError):  # entries are shared by every caller: read-only
        SHAPES["cosine"].params["r_start"] = 2.0  # type: ignore[index]


# -- unknown shapes ------------------------------------------------------------------------------

VALID = "uniform, linear, cosine, sigmoid, blocks, custom"


@pytest.mark.parametrize(
    "call",
    [
        lambda s: taper_strength({"shape": s}),
        lambda s: check_params(s, {}),
        lambda s: profile(s, 4),
        lambda s: plan_from_params({"shape": s}, n_layer=4, d_ff=64),
        lambda s: shape_spec(s),
    ],
    ids=["taper_strength", "check_params", "profile", "plan_from_params", "shape_spec"],
)
@pytest.mark.parametrize("shape", ["zigzag", None, 3, ["cosine"]])
def test_an_unknown_shape_is_an_error_naming_the_field_and_the_valid_names(
    call: Callable[[Any], object], shape: Any
) -> None:
    with pytest.raises(ScheduleError) as info:
        call(shape)
    assert info.value.field == "shape"
    assert str(info.value) == f"shape: {shape!r} is not one of {VALID}"


def test_an_unknown_shape_is_never_passed_off_as_uniform() -> None:
    # a record of a shape this version does not know: labelled by all it says, taper unknown
    row = _derive({"params": {"shape": "zigzag", "r_start": 1.5}, "widths": [64, 64]})
    assert row["candidate"] == "zigzag r_start=1.5" and math.isnan(row["taper"])
    assert "r_start" not in row and row["is_baseline"] is False
    with pytest.raises(ConfigError, match=r"shape\.value: 'zigzag' is not one of uniform, "):
        space_from_mapping({"dimensions": {"shape": {"type": "fixed", "value": "zigzag"}}})
    result = CliRunner().invoke(app, ["widths", "--shape", "zigzag"])
    assert result.exit_code == 2 and f"shape: 'zigzag' is not one of {VALID}" in result.output


# -- adding a shape is one entry -----------------------------------------------------------------


def test_a_new_shape_is_one_entry(step: Shape) -> None:
    # validation: its parameters are accepted, its own one is refused by the other shapes
    check_params("step", {"r_start": 1.25, "at": 0.25})
    with pytest.raises(ScheduleError, match=r"use a shape that reads it \(step\)") as info:
        check_params("cosine", {"at": 0.25})
    assert info.value.field == "at"
    with pytest.raises(ScheduleError, match="at: must lie in"):
        plan_from_params({"shape": "step", "at": 1.5}, n_layer=4, d_ff=64)
    # budget-exact widths, as its profile says
    cand = {"shape": "step", "r_start": 1.25, "at": 0.5}
    plan = plan_from_params(cand, n_layer=8, d_ff=64, multiple_of=8)
    assert plan.widths == (80,) * 4 + (48,) * 4 and sum(plan.widths) == 8 * 64
    uneven = plan_from_params({**cand, "at": 0.25}, n_layer=8, d_ff=64, multiple_of=8)
    assert uneven.widths == (88,) * 2 + (56,) * 6  # 1.25 / 0.875 and 0.75 / 0.875, rounded
    # a label, a taper strength and the trials table's columns
    assert describe(cand) == "step r_start=1.25 at=0.5"
    assert taper_strength(cand) == pytest.approx(0.5)
    row = _derive({"params": cand, "widths": list(plan.widths)})
    assert (row["r_start"], row["r_end"], row["taper"]) == (1.25, 0.75, pytest.approx(0.5))
    # a space searches it and its parameter, conditionally
    space = space_from_mapping(
        {
            "dimensions": {
                "shape": {"type": "categorical", "choices": ["cosine", "step"]},
                "at": {"type": "categorical", "choices": [0.25, 0.75], "when": {"shape": "step"}},
            }
        }
    )
    labels = [describe(c) for c in space.grid()]
    assert labels == ["cosine 1.5->0.5", "step at=0.25", "step at=0.75"]
    # the CLI previews it
    args = ["widths", "--shape", "step", "--layers", "4", "--d-ff", "64"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0 and result.output.startswith("96 96 32 32\n"), result.output
    assert shapes_table().endswith(
        "| `step` | `r_start` (1.5), `r_end`, `at` (0.5) | "
        "r_start before depth fraction at, r_end after |"
    )


def test_a_study_over_the_new_shape_validates(step: Shape, tmp_path: Path) -> None:
    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    study["space"] = {
        "dimensions": {
            "shape": {"type": "categorical", "choices": ["step", "cosine"]},
            "at": {"type": "categorical", "choices": [0.25, 0.5], "when": {"shape": "step"}},
        }
    }
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    result = CliRunner().invoke(app, ["validate", str(path), "--no-config"])
    assert result.exit_code == 0, result.output
    assert "step at=0.25" in result.output and "step at=0.5" in result.output
    study["space"]["dimensions"]["at"]["choices"] = [0.25, 2.0]
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    result = CliRunner().invoke(app, ["validate", str(path), "--no-config"])
    assert result.exit_code == 2 and "at: must lie in (0, 1), but got 2.0" in result.output


def test_the_toy_shape_is_gone_after_the_test() -> None:
    assert "step" not in SHAPES and "at" not in schedule_params()
    with pytest.raises(ScheduleError, match="'step' is not one of"):
        plan_from_params({"shape": "step"}, n_layer=4, d_ff=64)
