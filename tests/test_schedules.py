"""Width schedules: exact budget, multiples, positivity, monotonicity, the paper's closed forms."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tlmsearch.widths.schedules import (
    BLOCK_PRESETS,
    SHAPES,
    ScheduleError,
    check_params,
    plan_from_params,
    plan_widths,
    profile,
)

MULTIPLES = [1, 8, 16, 32, 64, 128, 256]
ratio = st.floats(min_value=0.05, max_value=2.0, allow_nan=False)


@st.composite
def requests(draw: st.DrawFn) -> dict:
    """A random width request over every shape, n_layer 1..96 and the usual multiples."""
    shape = draw(st.sampled_from(["uniform", "linear", "cosine", "sigmoid", "blocks", "custom"]))
    n_layer = draw(st.integers(1, 96))
    multiple_of = draw(st.sampled_from(MULTIPLES))
    d_ff = multiple_of * draw(st.integers(1, 48))
    params: dict = {}
    if shape in ("linear", "cosine", "sigmoid"):
        params["r_start"] = draw(ratio)
        params["r_end"] = draw(st.one_of(st.none(), ratio))
        if params["r_end"] is None:
            assume(params["r_start"] < 1.95)
        if shape == "sigmoid":
            params["k"] = draw(st.floats(0.5, 60.0))
            params["midpoint"] = draw(st.floats(0.1, 0.9))
    elif shape == "blocks":
        b1 = draw(st.floats(0.05, 0.9))
        params["b1"], params["b2"] = b1, draw(st.floats(b1 + 0.01, 0.99))
        if draw(st.booleans()):
            params["preset"] = draw(st.sampled_from(sorted(BLOCK_PRESETS)))
        else:
            params.update(m_early=draw(ratio), m_middle=draw(ratio), m_late=draw(ratio))
    elif shape == "custom":
        params["ratios"] = draw(st.lists(ratio, min_size=n_layer, max_size=n_layer))
    return {"shape": shape, "n_layer": n_layer, "d_ff": d_ff, "multiple_of": multiple_of, **params}


def _targets(req: dict) -> list[float]:
    """The real-valued widths, in units of multiple_of, that rounding approximates."""
    rest = {k: v for k, v in req.items() if k not in ("shape", "n_layer", "d_ff", "multiple_of")}
    prof = profile(req["shape"], req["n_layer"], **rest)
    units = req["d_ff"] // req["multiple_of"]
    mean = sum(prof) / len(prof)
    return [p / mean * units for p in prof]


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(requests())
def test_every_request_keeps_the_budget_exactly_or_says_why(req: dict) -> None:
    targets = _targets(req)
    args = {k: v for k, v in req.items() if k != "shape"}
    try:
        plan = plan_widths(req["shape"], **args)
    except ScheduleError as err:
        # Only a layer whose ideal width is under one unit may make a request impossible.
        assert min(targets) < 1.0, err
        assert "unit" in str(err)
        return
    widths, n, m = plan.widths, req["n_layer"], req["multiple_of"]
    assert len(widths) == n
    assert sum(widths) == n * req["d_ff"]
    assert all(w > 0 and w % m == 0 for w in widths)
    # within one rounding unit of the exact, renormalised profile
    assert all(abs(w / m - x) < 1.0 + 1e-9 for w, x in zip(widths, targets, strict=True))
    # order-preserving: a wider layer in the profile is never narrower after rounding
    for i in range(n - 1):
        if targets[i] > targets[i + 1] + 1e-9:
            assert widths[i] >= widths[i + 1]
        elif targets[i] < targets[i + 1] - 1e-9:
            assert widths[i] <= widths[i + 1]
    if min(targets) >= 1.0:
        assert min(widths) >= m


@settings(max_examples=1500, deadline=None)
@given(
    shape=st.sampled_from(["linear", "cosine", "sigmoid"]),
    n_layer=st.integers(2, 96),
    multiple_of=st.sampled_from(MULTIPLES),
    units=st.integers(4, 64),
    r_start=ratio,
    r_end=ratio,
)
def test_ramps_are_monotone_in_their_direction(
    shape: str, n_layer: int, multiple_of: int, units: int, r_start: float, r_end: float
) -> None:
    d_ff = units * multiple_of
    try:
        plan = plan_widths(
            shape,
            n_layer=n_layer,
            d_ff=d_ff,
            multiple_of=multiple_of,
            r_start=r_start,
            r_end=r_end,
        )
    except ScheduleError:
        return
    w = plan.widths
    pairs = list(itertools.pairwise(w))
    if r_start >= r_end:
        assert all(a >= b for a, b in pairs)  # tapering: non-increasing
    else:
        assert all(a <= b for a, b in pairs)  # growing (wider-late, OpenELM): non-decreasing


@settings(max_examples=1500, deadline=None)
@given(
    n_layer=st.integers(2, 96),
    multiple_of=st.sampled_from(MULTIPLES),
    units=st.integers(8, 64),
    r_start=st.floats(1.0, 1.9),
)
def test_symmetric_linear_and_cosine_match_the_paper_closed_forms(
    n_layer: int, multiple_of: int, units: int, r_start: float
) -> None:
    d_ff = units * multiple_of
    r_end = 2.0 - r_start
    d_start, d_end = r_start * d_ff, r_end * d_ff
    lin = plan_widths(
        "linear", n_layer=n_layer, d_ff=d_ff, multiple_of=multiple_of, r_start=r_start, r_end=r_end
    )
    cos = plan_widths(
        "cosine", n_layer=n_layer, d_ff=d_ff, multiple_of=multiple_of, r_start=r_start, r_end=r_end
    )
    for layer in range(n_layer):
        t = layer / (n_layer - 1)
        closed_lin = d_start - (d_start - d_end) * t
        closed_cos = d_end + (d_start - d_end) * (1 + math.cos(math.pi * t)) / 2
        assert abs(lin.widths[layer] - closed_lin) < multiple_of + 1e-6
        assert abs(cos.widths[layer] - closed_cos) < multiple_of + 1e-6


def test_paper_main_method_24_layers() -> None:
    plan = plan_widths("cosine", n_layer=24, d_ff=4096, multiple_of=16, r_start=1.5, r_end=0.5)
    assert sum(plan.widths) == 24 * 4096
    assert plan.widths[0] == 6144 and plan.widths[-1] == 2048
    assert (plan.realised_start, plan.realised_end) == (1.5, 0.5)


@pytest.mark.parametrize("k", [0.5, 5.0, 10.0, 40.0])
def test_sigmoid_profile_hits_both_ratios_exactly(k: float) -> None:
    prof = profile("sigmoid", 9, r_start=1.7, r_end=0.3, k=k)
    assert prof[0] == pytest.approx(1.7, abs=1e-12) and prof[-1] == pytest.approx(0.3, abs=1e-12)
    # steeper k concentrates the drop mid-stack: the middle step is the largest
    steps = [a - b for a, b in itertools.pairwise(prof)]
    assert max(steps) == pytest.approx(steps[len(steps) // 2], rel=1e-9) or k < 1


def test_asymmetric_pairs_are_renormalised_and_reported() -> None:
    plan = plan_widths("linear", n_layer=4, d_ff=64, multiple_of=1, r_start=2.0, r_end=1.0)
    assert sum(plan.widths) == 256
    # (2, 1.667, 1.333, 1) / 1.5 -> ratios start 4/3 and end 2/3 of the uniform width
    assert plan.realised_start == pytest.approx(4 / 3, abs=1 / 64)
    assert plan.realised_end == pytest.approx(2 / 3, abs=1 / 64)


def test_blocks_presets_follow_the_paper() -> None:
    early = plan_widths("blocks", n_layer=12, d_ff=512, multiple_of=16, preset="wider_early")
    assert early.widths == (768,) * 4 + (512,) * 4 + (256,) * 4
    late = plan_widths("blocks", n_layer=12, d_ff=512, multiple_of=16, preset="wider_late")
    assert late.widths == tuple(reversed(early.widths))
    uneven = plan_widths(
        "blocks",
        n_layer=10,
        d_ff=512,
        multiple_of=16,
        b1=0.2,
        b2=0.5,
        m_early=2.0,
        m_middle=1.0,
        m_late=1.0,
    )
    assert sum(uneven.widths) == 10 * 512 and uneven.widths[0] > uneven.widths[-1]


def test_growing_profile_is_expressible() -> None:
    openelm = plan_widths("linear", n_layer=8, d_ff=512, multiple_of=64, r_start=0.5, r_end=4.0)
    assert list(openelm.widths) == sorted(openelm.widths)
    assert openelm.widths[0] < openelm.widths[-1]


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"shape": "cosine", "n_layer": 4, "d_ff": 100, "multiple_of": 16}, "d_ff"),
        ({"shape": "cosine", "n_layer": 0, "d_ff": 64, "multiple_of": 16}, "n_layer"),
        ({"shape": "cosine", "n_layer": 4, "d_ff": 64, "multiple_of": 0}, "multiple_of"),
        (
            {"shape": "cosine", "n_layer": 8, "d_ff": 64, "multiple_of": 32, "r_start": 1.9},
            "r_end",
        ),
        (
            {
                "shape": "linear",
                "n_layer": 8,
                "d_ff": 64,
                "multiple_of": 32,
                "r_start": 0.1,
                "r_end": 1.9,
            },
            "r_start",
        ),
        ({"shape": "zigzag", "n_layer": 4, "d_ff": 64}, "shape"),
        ({"shape": "cosine", "n_layer": 4, "d_ff": 64, "r_start": -1.0}, "r_start"),
        ({"shape": "custom", "n_layer": 4, "d_ff": 64, "ratios": [1, 1]}, "ratios"),
        ({"shape": "blocks", "n_layer": 4, "d_ff": 64, "b1": 0.7, "b2": 0.3}, "b1/b2"),
        ({"shape": "blocks", "n_layer": 4, "d_ff": 64, "preset": "wide"}, "preset"),
        ({"shape": "cosine", "n_layer": 4, "d_ff": 64, "steepness": 3}, "steepness"),
    ],
)
def test_impossible_requests_name_the_field(kwargs: dict, field: str) -> None:
    shape = kwargs.pop("shape")
    with pytest.raises(ScheduleError) as info:
        plan_widths(shape, **kwargs)
    assert info.value.field == field
    assert str(info.value).startswith(f"{field}: ")


def test_d_ff_error_suggests_a_valid_value() -> None:
    with pytest.raises(ScheduleError, match="try 96"):
        plan_widths("cosine", n_layer=4, d_ff=100, multiple_of=16)


def test_plan_from_params_is_the_same_function() -> None:
    cand = {"shape": "sigmoid", "r_start": 1.6, "r_end": 0.4, "k": 8.0}
    assert plan_from_params(cand, n_layer=6, d_ff=256, multiple_of=32) == plan_widths(
        "sigmoid", n_layer=6, d_ff=256, multiple_of=32, r_start=1.6, r_end=0.4, k=8.0
    )


# -- a candidate means what it says -----------------------------------------------------------

_VALUES = {
    "r_start": 1.25,
    "r_end": 0.75,
    "k": 8.0,
    "midpoint": 0.5,
    "preset": "wider_early",
    "b1": 0.25,
    "b2": 0.75,
    "m_early": 1.5,
    "m_middle": 1.0,
    "m_late": 0.5,
    "ratios": [1.5, 1.0, 0.5],
}


@settings(max_examples=200, deadline=None)
@given(
    shape=st.sampled_from(list(SHAPES)),
    names=st.sets(st.sampled_from(sorted(_VALUES)), max_size=4),
)
def test_a_shape_accepts_exactly_the_parameters_it_reads(shape: str, names: set[str]) -> None:
    params = {name: _VALUES[name] for name in names}
    foreign = names - set(SHAPES[shape].params)
    both = shape == "blocks" and "preset" in names and names & {"m_early", "m_middle", "m_late"}
    if foreign or both:
        with pytest.raises(ScheduleError) as info:
            check_params(shape, params)
        assert info.value.field in names  # the message names the offending field
    else:
        check_params(shape, params)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"r_start": 1.5}, "shape"),  # no shape: never a silent uniform model
        ({"shape": "uniform", "r_start": 1.5}, "r_start"),
        ({"shape": "cosine", "r_start": 1.5, "k": 10.0}, "k"),
        ({"shape": "blocks", "preset": "wider_early", "m_early": 2.0}, "m_early"),
        ({"shape": "zigzag"}, "shape"),
    ],
)
def test_a_candidate_that_does_not_mean_what_it_says_is_an_error(params, field) -> None:
    with pytest.raises(ScheduleError) as info:
        plan_from_params(params, n_layer=3, d_ff=64, multiple_of=8)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        # sizes are checked before the per-layer lists are built (2**63 layers: test_cli.py)
        ({"shape": "cosine", "n_layer": 1025, "d_ff": 64}, "n_layer"),
        ({"shape": "uniform", "n_layer": 1025, "d_ff": 64}, "n_layer"),
        ({"shape": "cosine", "n_layer": True, "d_ff": 64}, "n_layer"),
        ({"shape": "cosine", "n_layer": 4, "d_ff": 2**21}, "d_ff"),
        ({"shape": "cosine", "n_layer": 4, "d_ff": 64, "multiple_of": 2**40}, "multiple_of"),
        # parameters of the wrong type or past any sensible size are errors, not tracebacks
        ({"shape": "cosine", "n_layer": 4, "d_ff": 64, "r_start": 10**400}, "r_start"),
        ({"shape": "cosine", "n_layer": 4, "d_ff": 64, "r_start": True}, "r_start"),
        ({"shape": "cosine", "n_layer": 4, "d_ff": 64, "r_start": "median"}, "r_start"),
        ({"shape": "linear", "n_layer": 4, "d_ff": 64, "r_end": math.inf}, "r_end"),
        ({"shape": "sigmoid", "n_layer": 4, "d_ff": 64, "k": 1000.0}, "k"),
        ({"shape": "sigmoid", "n_layer": 4, "d_ff": 64, "k": 1e-20}, "k"),
        ({"shape": "sigmoid", "n_layer": 4, "d_ff": 64, "midpoint": True}, "midpoint"),
        ({"shape": "blocks", "n_layer": 4, "d_ff": 64, "b1": "x"}, "b1/b2"),
        ({"shape": "blocks", "n_layer": 4, "d_ff": 64, "preset": ["wider_early"]}, "preset"),
        ({"shape": "blocks", "n_layer": 4, "d_ff": 64, "m_late": math.nan}, "m_late"),
        ({"shape": "custom", "n_layer": 4, "d_ff": 64, "ratios": "1111"}, "ratios"),
        ({"shape": "custom", "n_layer": 2, "d_ff": 64, "ratios": [1, False]}, "ratios[1]"),
    ],
)
def test_out_of_range_and_mistyped_requests_name_the_field(kwargs: dict, field: str) -> None:
    shape = kwargs.pop("shape")
    with pytest.raises(ScheduleError) as info:
        plan_widths(shape, **kwargs)
    assert info.value.field == field


def test_the_steepest_sigmoid_allowed_is_a_clean_step() -> None:
    plan = plan_widths("sigmoid", n_layer=8, d_ff=64, multiple_of=8, r_start=1.5, k=500.0)
    assert plan.widths == (96, 96, 96, 96, 32, 32, 32, 32)
