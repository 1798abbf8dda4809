"""The study's ETA: tokens left over the throughput of the trials at once (known answers)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.search.eta import (
    Running,
    format_eta,
    progress_text,
    shown_metric,
    study_eta,
    trial_eta,
    trial_rate,
)

M = 2_000_000  # tokens per trial, as in the quickstart


def test_three_at_once_after_the_first_ends_the_eta_is_the_others_remaining_time():
    # Three trials started together at the same pace (1,000 tok/s each while sharing the
    # cores). The first ends at 2,000 s; the other two reported their last evals 400,000 tokens
    # before the end, 395 s ago: both end in 5 s. (The old ETA, mean finished-trial duration x
    # trials left / concurrency, said 2,000 s here.)
    others = [Running(1_600_000, M, rate=1000.0, age_s=395.0)] * 2
    assert study_eta(others, queued=0, tokens_per_trial=M, slots=3) == pytest.approx(5.0)
    # The same case at the moment the others report the end: nothing left.
    done = [Running(M, M, rate=1000.0)] * 2
    assert study_eta(done, queued=0, tokens_per_trial=M, slots=3) == 0.0


def test_every_slot_busy_is_tokens_left_over_the_aggregate_rate():
    # 2 slots at 100 tok/s each: 500 tokens left on each (5 s), then 2 queued x 1,000 tokens,
    # one per slot (10 s): 15 s = (2 x 500 + 2 x 1,000) / (2 x 100).
    running = [Running(500, 1000, rate=100.0), Running(500, 1000, rate=100.0)]
    assert study_eta(running, queued=2, tokens_per_trial=1000, slots=2) == pytest.approx(15.0)
    # A third queued trial cannot be split over the two slots: one slot runs two of them.
    assert study_eta(running, queued=3, tokens_per_trial=1000, slots=2) == pytest.approx(25.0)


def test_queued_trials_take_the_slot_that_frees_first():
    # One trial ends in 1 s, the other in 9 s; the queued one (10 s) starts at 1 s: ends at 11.
    running = [Running(900, 1000, rate=100.0), Running(100, 1000, rate=100.0)]
    assert study_eta(running, queued=1, tokens_per_trial=1000, slots=2) == pytest.approx(11.0)


def test_free_slots_start_queued_trials_now():
    # One running (5 s left) on 3 slots; 2 queued at its rate (10 s each) start at once.
    running = [Running(500, 1000, rate=100.0)]
    assert study_eta(running, queued=2, tokens_per_trial=1000, slots=3) == pytest.approx(10.0)


def test_trials_without_an_eval_yet_train_at_the_mean_measured_rate():
    running = [Running(0, 1000, rate=None), Running(0, 1000, rate=50.0), Running(0, 1000, 150.0)]
    # the unmeasured one at the mean (100 tok/s): 10 s; the slowest measured one: 20 s
    assert study_eta(running, queued=0, tokens_per_trial=1000, slots=3) == pytest.approx(20.0)


def test_running_beyond_the_slots_wait_for_one():
    # 3 trials RUNNING for the searcher, 2 slots: the unmeasured one waits for the first slot.
    running = [Running(500, 1000, rate=100.0), Running(0, 1000, 100.0), Running(0, 1000, None)]
    assert study_eta(running, queued=0, tokens_per_trial=1000, slots=2) == pytest.approx(15.0)


def test_unknown_rates_mean_no_eta_unless_a_typical_rate_is_given():
    assert study_eta([Running(0, 1000)], queued=1, tokens_per_trial=1000, slots=2) is None
    eta = study_eta([Running(0, 1000)], 1, 1000, slots=2, typical_rate=200.0)
    assert eta == pytest.approx(5.0)
    assert study_eta([], queued=0, tokens_per_trial=1000, slots=1) == 0.0
    assert study_eta([], queued=4, tokens_per_trial=1000, slots=2, typical_rate=100.0) == 20.0


def test_the_time_since_the_last_eval_is_already_spent():
    assert trial_eta(Running(800, 2000, rate=100.0, age_s=2.0)) == pytest.approx(10.0)
    assert trial_eta(Running(800, 2000, rate=100.0, age_s=60.0)) == 0.0  # overdue: not negative
    assert trial_eta(Running(800, 2000)) is None
    assert trial_eta(Running(800, 2000, age_s=5.0), rate=100.0) == pytest.approx(12.0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="slots=0"):
        study_eta([], 1, 1000, slots=0)
    with pytest.raises(ValueError, match="queued=-1"):
        study_eta([], -1, 1000, slots=1)


@settings(max_examples=60, deadline=None)
@given(
    lefts=st.lists(st.integers(0, 10_000), min_size=1, max_size=6),
    rate=st.floats(1.0, 1e4),
    queued=st.integers(0, 20),
    slots=st.integers(1, 6),
)
def test_bounds_when_every_trial_trains_at_one_rate(lefts, rate, queued, slots):
    """Never below tokens left / (rate x slots) nor the longest running trial; never above the
    whole queue run through one slot."""
    running = [Running(10_000 - x, 10_000, rate=rate) for x in lefts]
    eta = study_eta(running, queued, 10_000, slots)
    total = sum(lefts) + queued * 10_000
    lower = max(total / (rate * slots), max(lefts) / rate)
    assert eta >= lower * (1 - 1e-9)
    assert eta <= total / rate * (1 + 1e-9)


def test_trial_rate_is_the_last_interval():
    curve = [
        {"tokens": 400_000, "wall_s": 150.0},  # includes set-up and compile
        {"tokens": 800_000, "wall_s": 250.0},
        {"tokens": 1_200_000, "wall_s": 330.0},
    ]
    assert trial_rate(curve) == pytest.approx(400_000 / 80)
    assert trial_rate(curve[:1]) == pytest.approx(400_000 / 150)
    assert trial_rate([]) is None
    assert trial_rate([{"tokens": 10, "wall_s": None}]) is None
    assert trial_rate([{"tokens": 10, "wall_s": 2.0}, {"tokens": 10, "wall_s": 2.0}]) == 5.0


def test_progress_text_and_formats():
    text = progress_text(800_000, 2_000_000, "val_bpb", 2.34567, 4000.0, 300.0)
    assert text == "800,000/2,000,000 tokens (40%), val_bpb 2.3457, 4,000 tok/s, ETA 5m00s"
    assert progress_text(0, None, "val_bpb", None, None, None) == "0 tokens, ETA ?"
    assert progress_text(1, 2, "val_bpb", math.nan, math.inf, None) == "1/2 tokens (50%), ETA ?"
    assert [format_eta(x) for x in (5, 75, 3700, None, math.inf)] == [
        "5s",
        "1m15s",
        "1h01m",
        "?",
        "?",
    ]
    assert shown_metric("val_bpb") == "val_bpb" and shown_metric("params") == "val_loss"


def test_the_mid_run_table_refresh_never_takes_more_than_its_share_of_the_driver(monkeypatch):
    """A refresh reads every trial, so it slows as the study grows: after one that took d
    seconds the next waits d / WRITE_SHARE (never less than min_interval_s)."""
    import tlmsearch.search.export as export
    from tlmsearch.search import progress

    clock = {"now": 1000.0}
    took = {"s": 0.5}
    writes: list[float] = []

    def write_tables(run_dir, study, cfg):
        writes.append(clock["now"])
        clock["now"] += took["s"]  # the refresh's own time

    monkeypatch.setattr(progress.time, "time", lambda: clock["now"])
    monkeypatch.setattr(export, "open_run", lambda run_dir: (None, None))
    monkeypatch.setattr(export, "write_tables", write_tables)
    w = progress.TableWriter("run", min_interval_s=20.0)
    for step in range(200):  # a trial ends every second
        if step == 60:
            took["s"] = 4.0  # the study has grown: a refresh now takes 4 s
        w.on_trial_complete(0, [], None)
        clock["now"] += 1.0
    gaps = [b - a for a, b in itertools.pairwise(writes)]
    busy = sum(4.0 if t >= writes[0] + 60 else 0.5 for t in writes)
    assert 20.0 <= gaps[0] <= 21.0  # 0.5 s refreshes: the 20 s floor
    assert max(gaps) >= 4.0 / progress.WRITE_SHARE  # 4 s refreshes: 80 s apart
    assert busy / (clock["now"] - 1000.0) <= progress.WRITE_SHARE + 0.03
