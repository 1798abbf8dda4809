"""Divergence rules on synthetic loss curves (no torch)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.train.divergence import DivergenceMonitor

V = 16384  # the quickstart's vocabulary: ln V = 9.70 nats


def _first_alarm(monitor: DivergenceMonitor, losses: list[float]) -> int | None:
    for i, x in enumerate(losses):
        if monitor.step(x):
            return i
    return None


def test_a_blow_up_after_a_good_start_is_caught_long_before_3x_the_first_loss() -> None:
    good = [9.7 - 0.05 * i for i in range(100)]  # down to ~4.75
    blow = [4.75 + 0.5 * i for i in range(1, 20)]  # back up towards ln V, never 3 x 9.7
    at = _first_alarm(DivergenceMonitor(1.5, V), good + blow)
    assert at is not None and 100 <= at < 110
    assert max(good + blow) < 3 * good[0]  # the old rule would never have fired


def test_single_spikes_are_smoothed_away() -> None:
    losses = [9.7 - 0.05 * i for i in range(100)]
    for i in range(20, 100, 10):
        losses[i] += 3.0  # one bad batch in ten
    assert _first_alarm(DivergenceMonitor(1.5, V), losses) is None


@settings(max_examples=100, deadline=None)
@given(
    start=st.floats(2.0, 12.0),
    drops=st.lists(st.floats(0.0, 0.2), min_size=1, max_size=200),
)
def test_a_non_increasing_curve_never_diverges(start: float, drops: list[float]) -> None:
    losses, x = [], start
    for d in drops:
        x -= d
        losses.append(x)
    assert _first_alarm(DivergenceMonitor(0.5, V), losses) is None


def test_non_finite_losses() -> None:
    m = DivergenceMonitor(1.5, V)
    assert m.step(math.inf) == "loss is inf"
    assert m.eval(math.nan) == "val loss is nan"


def test_stuck_at_ln_v_is_caught_at_an_eval_after_the_first_steps() -> None:
    m = DivergenceMonitor(1.5, V)
    assert m.eval(math.log(V)) is None  # before min_steps: every run starts there
    for _ in range(10):
        m.step(math.log(V))
    assert "not learning" in (m.eval(math.log(V) - 0.01) or "")
    assert m.eval(math.log(V) - 1.0) is None  # learned something


@pytest.mark.parametrize(
    ("kw", "needle"),
    [({"margin_nats": 0}, "margin_nats"), ({"beta": 1.0}, "beta"), ({"vocab_size": 1}, "vocab")],
)
def test_bad_arguments_name_themselves(kw: dict, needle: str) -> None:
    args = {"margin_nats": 1.0, "vocab_size": V, **kw}
    with pytest.raises(ValueError, match=needle):
        DivergenceMonitor(**args)


def test_inside_the_warm_up_a_loss_at_ln_v_is_not_yet_stuck() -> None:
    m = DivergenceMonitor(1.5, V)
    for _ in range(20):
        m.step(math.log(V))
    assert m.eval(math.log(V), warmed_up=False) is None
    assert m.eval(math.log(V), warmed_up=True)


def test_an_overshoot_in_the_first_steps_sets_no_minimum() -> None:
    # With no warm-up a high LR may dip and climb back before it settles: not a divergence.
    early = [9.7, 6.0, 3.0, 8.0, 9.0, 9.0, 8.5]
    settle = [9.0 - 0.05 * i for i in range(60)]
    assert _first_alarm(DivergenceMonitor(1.5, V), early + settle) is None
