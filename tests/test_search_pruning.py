"""The pruning scheduler and the searcher's end states, fed synthetic results (no Ray cluster)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray.tune.schedulers import TrialScheduler
from search_helpers import search_pair, tiny_config

from tlmsearch.search.attrs import BASELINE, CANDIDATE, UNPRUNED
from tlmsearch.search.execution.failures import error_reason
from tlmsearch.search.progress import LiveProgress, format_eta, outcome
from tlmsearch.search.records import trial_records
from tlmsearch.search.sampling.pruning import OptunaPruningScheduler
from tlmsearch.search.sampling.samplers import unpruned
from tlmsearch.search.sampling.searcher import searcher_of

optuna.logging.set_verbosity(optuna.logging.WARNING)
S = optuna.trial.TrialState
STEPS = (2048, 4096, 6144, 8192)


def _setup(tmp: Path, pruner: str = "median", objectives=None, **search):
    """A pruning scheduler and searcher over the tiny grid; no candidate unpruned unless
    ``unpruned_candidates`` says (these tests judge the pruner on the grid's first ones)."""
    extra = {"objectives": objectives} if objectives else {}
    search = {"unpruned_candidates": 0, **search}
    cfg = tiny_config(tmp, search={"pruner": pruner, **search}, **extra)
    searcher, sched = search_pair(cfg)
    # Ray wraps the searcher (SearchGenerator, ConcurrencyLimiter): the scheduler unwraps it.
    ctrl = SimpleNamespace(search_alg=SimpleNamespace(searcher=SimpleNamespace(searcher=searcher)))
    return cfg, searcher, sched, ctrl


def _trial(searcher, sched, ctrl, tid: str) -> SimpleNamespace:
    trial = SimpleNamespace(
        trial_id=tid, error_file=None, get_error=lambda: None, should_recover=lambda: False
    )
    trial.config = searcher.suggest(tid)
    sched.on_trial_add(ctrl, trial)
    return trial


def _result(tokens: int, value: float, final: bool = False, **extra) -> dict:
    return {
        "tokens": tokens,
        "val_bpb": value,
        "val_loss": value,
        "wall_s": tokens / 1000,
        "widths": [64, 64],
        "node": "127.0.0.2",
        "n_params": 100,
        "final": final,
        **extra,
    }


def _complete(searcher, sched, ctrl, tid: str, values) -> None:
    trial = _trial(searcher, sched, ctrl, tid)
    for step, v in zip(STEPS, values, strict=True):
        assert sched.on_trial_result(ctrl, trial, _result(step, v)) == TrialScheduler.CONTINUE
    final = _result(STEPS[-1], values[-1], final=True, status="completed")
    assert sched.on_trial_result(ctrl, trial, final) == TrialScheduler.CONTINUE
    searcher.on_trial_complete(tid, result=final)


def _frozen(searcher, number: int) -> optuna.trial.FrozenTrial:
    return searcher.study.get_trials()[number]


def test_median_pruner_stops_a_worse_trial_and_records_pruned(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path)
    _complete(searcher, sched, ctrl, "a", [3.0, 2.5, 2.2, 2.0])
    _complete(searcher, sched, ctrl, "b", [3.2, 2.6, 2.3, 2.1])
    bad = _trial(searcher, sched, ctrl, "c")
    assert sched.on_trial_result(ctrl, bad, _result(2048, 4.0)) == TrialScheduler.STOP
    searcher.on_trial_complete("c", result=_result(2048, 4.0))  # Ray's follow-up: a no-op
    ft = _frozen(searcher, 2)
    assert ft.state == S.PRUNED
    assert ft.intermediate_values == {2048: 4.0}  # step = tokens seen
    assert "pruned by Median at 2,048 tokens" in ft.user_attrs["reason"]
    done = _frozen(searcher, 0)
    assert done.state == S.COMPLETE and done.value == 2.0
    assert sorted(done.intermediate_values) == list(STEPS)
    assert [e["tokens"] for e in done.user_attrs["curve"]] == list(STEPS)
    assert done.user_attrs["widths"] == [64, 64] and done.user_attrs["node"] == "127.0.0.2"


def test_no_pruning_before_the_grace_period(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path, grace_tokens=5000)
    _complete(searcher, sched, ctrl, "a", [3.0, 2.5, 2.2, 2.0])
    _complete(searcher, sched, ctrl, "b", [3.0, 2.5, 2.2, 2.0])
    bad = _trial(searcher, sched, ctrl, "c")
    decisions = [sched.on_trial_result(ctrl, bad, _result(s, 9.0)) for s in STEPS[:3]]
    assert decisions == [TrialScheduler.CONTINUE, TrialScheduler.CONTINUE, TrialScheduler.STOP]


# tmp_path only holds the study's text file: sharing it between examples is fine.
@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    good=st.lists(st.floats(1.0, 5.0), min_size=4, max_size=4),
    worse_by=st.floats(0.01, 3.0),
)
def test_never_prunes_a_trial_at_least_as_good_as_every_finished_one(tmp_path, good, worse_by):
    """Median rule: a trial no worse than the best finished trial at each step survives."""
    _, searcher, sched, ctrl = _setup(tmp_path)
    _complete(searcher, sched, ctrl, "a", [v + worse_by for v in good])
    _complete(searcher, sched, ctrl, "b", [v + 2 * worse_by for v in good])
    t = _trial(searcher, sched, ctrl, "c")
    for step, v in zip(STEPS, good, strict=True):
        assert sched.on_trial_result(ctrl, t, _result(step, v)) == TrialScheduler.CONTINUE


def test_the_uniform_baseline_is_never_pruned(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path, seeds=[0, 1], sampler="random", n_trials=2)
    _complete(searcher, sched, ctrl, "base0", [3.0, 2.5, 2.2, 2.0])  # queue: uniform per seed
    base1 = _trial(searcher, sched, ctrl, "base1")
    assert base1.config["candidate"] == {"shape": "uniform"} and base1.config["seed"] == 1
    _complete(searcher, sched, ctrl, "c", [3.0, 2.5, 2.2, 2.0])
    for step in STEPS:
        assert sched.on_trial_result(ctrl, base1, _result(step, 9.0)) == TrialScheduler.CONTINUE


def test_the_first_unpruned_candidates_are_never_pruned_and_say_so(tmp_path):
    # the pruner's survivors are selected; the first search.unpruned_candidates
    # distinct candidates (queue order: chosen before any data) run on, whatever they report,
    # and measure a pruned study's noise. The tiny grid queue, per seed: uniform, then its two
    # distinct models
    _, searcher, sched, ctrl = _setup(tmp_path, unpruned_candidates=1, seeds=[0, 1])
    _complete(searcher, sched, ctrl, "u", [3.0, 2.5, 2.2, 2.0])
    first = _trial(searcher, sched, ctrl, "c1")
    assert first.config[UNPRUNED] is True
    for step in STEPS:  # far worse than uniform at every eval: a median pruner would stop it
        assert sched.on_trial_result(ctrl, first, _result(step, 9.0)) == TrialScheduler.CONTINUE
    final = _result(STEPS[-1], 9.0, final=True, status="completed")
    sched.on_trial_result(ctrl, first, final)
    searcher.on_trial_complete("c1", result=final)
    second = _trial(searcher, sched, ctrl, "c2")
    assert UNPRUNED not in second.config
    assert sched.on_trial_result(ctrl, second, _result(2048, 9.5)) == TrialScheduler.STOP
    # on the next seed the unpruned candidate is unpruned again (the same row), the other not
    again = [_trial(searcher, sched, ctrl, t).config for t in ("u1", "c1s1", "c2s1")]
    assert [c["seed"] for c in again] == [1, 1, 1]
    assert [bool(c.get(UNPRUNED)) for c in again] == [False, True, False]
    assert again[1]["candidate"] == first.config["candidate"]
    attrs = [t.user_attrs for t in searcher.study.get_trials()]
    assert [bool(a.get(UNPRUNED)) for a in attrs] == [False, True, False, False, True, False]
    rows = trial_records(searcher.study)[0]
    assert [r.get("unpruned", False) for r in rows] == [False, True, False, False, True, False]


def test_unpruned_is_per_setting_skips_uniform_and_is_off_without_a_pruner(tmp_path):
    cfg = tiny_config(tmp_path, search={"pruner": "median", "unpruned_candidates": 1})
    study = optuna.create_study()
    for cand in (
        {"shape": "uniform"},
        {"shape": "linear", "train.lr": 0.1},
        {"shape": "cosine", "train.lr": 0.1},
        {"shape": "cosine", "train.lr": 0.2},
    ):
        study.enqueue_trial(
            {},
            user_attrs={
                CANDIDATE: json.dumps(cand, sort_keys=True),
                **({BASELINE: True} if len(cand) == 1 else {}),
            },
        )
    assert not unpruned(study, cfg, {"shape": "uniform"})
    assert unpruned(study, cfg, {"shape": "linear", "train.lr": 0.1})
    assert not unpruned(study, cfg, {"shape": "cosine", "train.lr": 0.1})  # lr 0.1's one is linear
    assert unpruned(study, cfg, {"shape": "cosine", "train.lr": 0.2})  # the first at lr 0.2
    off = cfg.model_copy(update={"search": cfg.search.model_copy(update={"pruner": "none"})})
    assert not unpruned(study, off, {"shape": "linear", "train.lr": 0.1})


def test_a_sampled_uniform_takes_no_unpruned_slot_and_the_cache_answers_alike(tmp_path):
    # review: a sampler that draws shape uniform records no BASELINE attribute; it is still the
    # baseline, never an unpruned row
    cfg = tiny_config(tmp_path, search={"pruner": "median", "unpruned_candidates": 2})
    study = optuna.create_study()
    cands = [
        {"shape": "uniform"},
        {"shape": "linear", "r_start": 1.5},
        {"shape": "cosine", "r_start": 1.5},
        {"shape": "cosine", "r_start": 1.25},
    ]
    for cand in cands:
        study.enqueue_trial({}, user_attrs={CANDIDATE: json.dumps(cand, sort_keys=True)})
    plain = [unpruned(study, cfg, c) for c in cands]
    assert plain == [False, True, True, False]
    cache: dict = {}
    reads = []
    real = study.get_trials
    study.get_trials = lambda **kw: reads.append(1) or real(**kw)
    assert [unpruned(study, cfg, c, cache) for c in cands * 3] == plain * 3
    assert len(reads) == 1  # the setting's two firsts found once, then read from the cache


def test_never_pruned_at_the_last_eval(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path)
    _complete(searcher, sched, ctrl, "a", [1.0, 1.0, 1.0, 1.0])
    _complete(searcher, sched, ctrl, "b", [1.0, 1.0, 1.0, 1.0])
    t = _trial(searcher, sched, ctrl, "c")
    assert sched.on_trial_result(ctrl, t, _result(8192, 9.0)) == TrialScheduler.CONTINUE


def test_pruner_none_reports_but_never_stops(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path, pruner="none")
    _complete(searcher, sched, ctrl, "a", [1.0, 1.0, 1.0, 1.0])
    t = _trial(searcher, sched, ctrl, "b")
    for step in STEPS:
        assert sched.on_trial_result(ctrl, t, _result(step, 50.0)) == TrialScheduler.CONTINUE
    assert sorted(_frozen(searcher, 1).intermediate_values) == list(STEPS)


def test_divergence_and_nan_are_fail_with_reason(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path)
    t = _trial(searcher, sched, ctrl, "a")
    reason = "loss 99.0 > 3 x its start 5.5 at 2,048 tokens"
    final = _result(2048, 9.0, final=True, status="diverged", reason=reason)
    sched.on_trial_result(ctrl, t, final)
    searcher.on_trial_complete("a", result=final)
    t2 = _trial(searcher, sched, ctrl, "b")
    nan_final = _result(8192, math.nan, final=True, status="completed")
    sched.on_trial_result(ctrl, t2, nan_final)
    searcher.on_trial_complete("b", result=nan_final)
    a, b = _frozen(searcher, 0), _frozen(searcher, 1)
    assert a.state == S.FAIL and a.user_attrs["reason"] == reason
    assert b.state == S.FAIL and "not a finite number" in b.user_attrs["reason"]


def test_a_raising_trial_is_fail_with_the_exception_line(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path)
    t = _trial(searcher, sched, ctrl, "a")
    err = tmp_path / "error.txt"
    err.write_text(
        'Failure # 1\nTraceback (most recent call last):\n  File "x.py", line 1, in f\n'
        "    raise ValueError('boom: widths')\nValueError: boom: widths\n"
    )
    t.error_file = str(err)
    sched.on_trial_error(ctrl, t)
    searcher.on_trial_complete("a", error=True)
    ft = _frozen(searcher, 0)
    assert ft.state == S.FAIL and ft.user_attrs["reason"] == "ValueError: boom: widths"
    assert error_reason(SimpleNamespace(error_file=None, get_error=lambda: None)) == (
        "the trial raised an exception"
    )


def test_an_interrupted_trial_stays_running_for_resume(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path)
    t = _trial(searcher, sched, ctrl, "a")
    sched.on_trial_result(ctrl, t, _result(2048, 3.0))
    searcher.on_trial_complete("a", result=_result(2048, 3.0))  # stopped, no final report
    assert _frozen(searcher, 0).state == S.RUNNING


def test_multi_objective_records_without_pruning(tmp_path):
    objs = [{"metric": "val_bpb"}, {"metric": "params"}]
    _, searcher, sched, ctrl = _setup(tmp_path, pruner="none", objectives=objs)
    t = _trial(searcher, sched, ctrl, "a")
    assert sched.on_trial_result(ctrl, t, _result(2048, 3.0)) == TrialScheduler.CONTINUE
    final = _result(8192, 2.0, final=True, status="completed", params=1234)
    sched.on_trial_result(ctrl, t, final)
    searcher.on_trial_complete("a", result=final)
    ft = _frozen(searcher, 0)
    assert ft.state == S.COMPLETE and ft.values == [2.0, 1234.0]
    assert ft.intermediate_values == {}  # Optuna keeps none for several objectives


def test_searcher_of_unwraps_and_gives_none_otherwise(tmp_path):
    _, searcher, _, ctrl = _setup(tmp_path)
    assert searcher_of(ctrl) is searcher
    assert searcher_of(SimpleNamespace(search_alg=SimpleNamespace(searcher=None))) is None


def test_grace_must_be_non_negative():
    with pytest.raises(ValueError, match="grace_tokens=-1"):
        OptunaPruningScheduler(-1, "val_bpb")


# -- progress -----------------------------------------------------------------------------------


def _ray_trial(tid, status, last=None, cand=None):
    return SimpleNamespace(
        trial_id=tid,
        status=status,
        last_result=last or {},
        config={"candidate": cand or {"shape": "uniform"}, "seed": 0},
    )


def test_progress_counts_and_best():
    p = LiveProgress(10, "val_bpb", "minimize", 2, prior={"complete": 3}, tty=False)
    done = _ray_trial("a", "TERMINATED", {"final": True, "status": "completed", "val_bpb": 2.0})
    pruned = _ray_trial("b", "TERMINATED", {"final": False, "val_bpb": 3.0})
    failed = _ray_trial("c", "ERROR")
    diverged = _ray_trial("d", "TERMINATED", {"final": True, "status": "diverged"})
    running = _ray_trial("e", "RUNNING")
    trials = [done, pruned, failed, diverged, running]
    assert [outcome(t) for t in trials] == ["complete", "pruned", "failed", "failed", "running"]
    # Ray calls the callback before it updates the status: the ended flag decides.
    assert outcome(_ray_trial("f", "RUNNING", {"final": False}), ended=True) == "pruned"
    p._note_end(done)
    c = p.tally(trials)
    assert (c["complete"], c["pruned"], c["failed"], c["running"]) == (4, 1, 2, 1)
    assert p.best == (2.0, "uniform, seed 0")
    assert "trials 7/10" in p.line(trials)


def test_format_eta():
    assert [format_eta(x) for x in (5, 75, 3700, None, math.inf)] == [
        "5s",
        "1m15s",
        "1h01m",
        "?",
        "?",
    ]


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _eval(tokens: int, wall_s: float, value: float) -> dict:
    return {"tokens": tokens, "wall_s": wall_s, "val_bpb": value, "final": False}


def _three_at_once(clock: _Clock, **kw) -> tuple[LiveProgress, list[SimpleNamespace]]:
    """Three trials of 2M tokens start together; each evals every 400k tokens (400 s apart)."""
    p = LiveProgress(
        3, "val_bpb", "minimize", 3, tty=False, trial_tokens=2_000_000, clock=clock, **kw
    )
    cands = [
        {"shape": "uniform"},
        {"shape": "cosine", "r_start": 1.5},
        {"shape": "cosine", "r_start": 0.5},
    ]
    trials = [_ray_trial(t, "RUNNING", cand=c) for t, c in zip("abc", cands, strict=True)]
    return p, trials


def test_off_a_terminal_every_eval_prints_a_line_with_tokens_metric_and_eta(capsys):
    clock = _Clock()
    p, trials = _three_at_once(clock, min_interval_s=0)
    a = trials[0]
    clock.t += 100
    p.on_trial_result(0, trials, a, _eval(400_000, 100.0, 2.5))
    clock.t += 400
    p.on_trial_result(1, trials, a, _eval(800_000, 500.0, 2.3))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        "EVAL     uniform (seed 0): 400,000/2,000,000 tokens (20%), val_bpb 2.5000"
    )
    # 1,000 tok/s over the last interval: 1.2M tokens left = 20 minutes
    assert "800,000/2,000,000 tokens (40%), val_bpb 2.3000, 1,000 tok/s, ETA 20m00s" in lines[1]
    assert "trials 0/3" in lines[1] and "3 running" in lines[1]
    # the study: the others have no eval yet and train at a's rate; 3 slots, nothing queued
    assert lines[1].endswith("ETA 33m20s]")  # b and c: 2M tokens at 1,000 tok/s
    # the final report is the end line's business
    p.on_trial_result(2, trials, a, {**_eval(2_000_000, 2100.0, 2.0), "final": True})
    assert capsys.readouterr().out == ""


def test_the_eta_after_the_first_of_three_ends_is_the_others_remaining_time(capsys):
    clock = _Clock()
    p, trials = _three_at_once(clock, min_interval_s=0)
    for k in range(1, 6):  # evals at 400k ... 2M tokens, 400 s apart, all three within a second
        clock.t += 399.0
        for t in trials:
            clock.t += 0.3
            tokens = 400_000 * k if t.trial_id == "a" or k < 5 else 1_600_000 + 399_000
            p.on_trial_result(k, trials, t, _eval(tokens, 400.0 * k, 3.0 - 0.1 * k))
    capsys.readouterr()
    first = trials[0]
    first.last_result = {"final": True, "status": "completed", "val_bpb": 2.5, "tokens": 2_000_000}
    p.on_trial_complete(6, trials, first)  # Ray calls back before it updates the status
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith("COMPLETE uniform (seed 0) val_bpb 2.5000 after 2,000,000 tokens")
    # b and c each have 1,000 tokens left at ~1,000 tok/s: one second, not another trial's length
    eta = line.rsplit("ETA ", 1)[1].rstrip("]")
    assert eta in ("0s", "1s"), line
    assert "trials 1/3" in line and "2 running" in line


def test_off_a_terminal_evals_print_at_most_once_a_minute_per_trial(capsys):
    clock = _Clock()
    p, trials = _three_at_once(clock)
    a, b = trials[:2]
    for k in range(1, 9):  # an eval every 10 s for a and for b
        clock.t += 10
        p.on_trial_result(k, trials, a, _eval(1000 * k, 10.0 * k, 3.0))
        p.on_trial_result(k, trials, b, _eval(1000 * k, 10.0 * k, 3.0))
    lines = capsys.readouterr().out.splitlines()
    shown = [(ln.split(" (seed")[0].split()[-1], ln.split(": ")[1].split("/")[0]) for ln in lines]
    # each trial's first eval, then the first one 60 s or more after it
    assert shown == [
        ("uniform", "1,000"),
        ("1.5->0.5", "1,000"),
        ("uniform", "7,000"),
        ("1.5->0.5", "7,000"),
    ]


def test_on_a_terminal_the_panel_lists_the_running_trials(capsys):
    clock = _Clock()
    p, trials = _three_at_once(clock)
    p.tty = True
    p._draw = lambda *a, **k: None  # no rich display in a test
    clock.t += 100
    p.on_trial_result(0, trials, trials[1], _eval(400_000, 100.0, 2.5))
    assert capsys.readouterr().out == ""  # no plain lines on a terminal
    panel = p.panel(trials).splitlines()
    assert panel[0].startswith("trials 0/3")
    assert panel[2] == (
        "  cosine 1.5->0.5 (seed 0): 400,000/2,000,000 tokens (20%), val_bpb 2.5000, "
        "4,000 tok/s, ETA 6m40s"
    )
    assert panel[1].startswith("  uniform (seed 0): 0/2,000,000 tokens (0%), ETA ?")


def test_without_tokens_per_trial_there_is_no_eta(capsys):
    p = LiveProgress(2, "val_bpb", "minimize", 2, tty=False, min_interval_s=0)
    trials = [_ray_trial("a", "RUNNING")]
    p.on_trial_result(0, trials, trials[0], _eval(4096, 2.0, 3.0))
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(
        "EVAL     uniform (seed 0): 4,096 tokens, val_bpb 3.0000, 2,048 tok/s, ETA ?"
    )
    assert line.endswith("ETA ?]")


def test_a_simulated_trial_shows_no_tokens_per_second_and_the_eta_counts_trials(capsys):
    # old code: a simulated eval (8,192 tokens in a millisecond) read "8,192,000 tok/s, ETA 0s"
    clock = _Clock()
    p, trials = _three_at_once(clock, min_interval_s=0, simulated=True)
    a = trials[0]
    clock.t += 10
    p.on_trial_result(0, trials, a, _eval(400_000, 0.001, 2.5))
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(
        "EVAL     uniform (seed 0): 400,000/2,000,000 tokens (20%), val_bpb 2.5000, simulated   ["
    )
    assert "tok/s" not in line and line.endswith("ETA ?]")  # nothing finished yet
    a.last_result = {"final": True, "status": "completed", "val_bpb": 2.5, "tokens": 2_000_000}
    p.on_trial_complete(1, trials, a)
    (line,) = capsys.readouterr().out.splitlines()
    # one of three trials in 10 s: two left, 20 s
    assert "trials 1/3" in line and line.endswith("ETA 20s]"), line


def _checkpointed(tmp: Path, name: str, final: bool = False) -> Path:
    """A trial folder with one intermediate checkpoint (and a final one)."""
    from tlmsearch.train import checkpoints

    trial = tmp / name
    meta = {"number": 0, "candidate": {}, "seed": 0, "widths": [64, 64], "model": {}}
    checkpoints.write_checkpoint(
        trial / "checkpoint_000000", {"model": {}}, {**meta, "tokens": 2048}
    )
    if final:
        checkpoints.write_checkpoint(
            trial / "checkpoint_000001", {"model": {}}, {**meta, "tokens": 8192, "final": True}
        )
    return trial


def test_checkpoints_are_thinned_when_a_trial_ends_not_when_the_run_is_interrupted(tmp_path):
    from tlmsearch.train.checkpoints import checkpoint_dirs

    _, searcher, sched, ctrl = _setup(tmp_path, keep_weights="final")
    # interrupted: Ray stops it with its last eval (no final report); resume needs its checkpoint
    t = _trial(searcher, sched, ctrl, "a")
    t.path, t.checkpoint = str(_checkpointed(tmp_path, "a")), None
    sched.on_trial_result(ctrl, t, _result(2048, 3.0))
    sched.on_trial_complete(ctrl, t, _result(2048, 3.0))
    assert len(checkpoint_dirs(t.path)) == 1
    # completed: the final weights stay (named in the trial), the intermediate one goes
    t = _trial(searcher, sched, ctrl, "b")
    t.path, t.checkpoint = str(_checkpointed(tmp_path, "b", final=True)), None
    final = _result(8192, 2.0, final=True, status="completed")
    sched.on_trial_result(ctrl, t, final)
    sched.on_trial_complete(ctrl, t, final)
    searcher.on_trial_complete("b", result=final)
    assert [p.name for p in checkpoint_dirs(t.path)] == ["checkpoint_000001"]
    assert _frozen(searcher, 1).user_attrs["weights"] == str(Path(t.path) / "checkpoint_000001")
    # pruned: nothing stays
    _complete(searcher, sched, ctrl, "c", [3.0, 2.5, 2.2, 2.0])
    _complete(searcher, sched, ctrl, "e", [3.0, 2.5, 2.2, 2.0])
    bad = _trial(searcher, sched, ctrl, "d")
    bad.path, bad.checkpoint = str(_checkpointed(tmp_path, "d")), None
    assert sched.on_trial_result(ctrl, bad, _result(2048, 9.0)) == TrialScheduler.STOP
    sched.on_trial_complete(ctrl, bad, _result(2048, 9.0))
    assert checkpoint_dirs(bad.path) == []


def test_a_trial_resumed_from_its_final_checkpoint_keeps_those_weights(tmp_path):
    # the driver died between the last eval's report (with the final checkpoint) and the final
    # report: the resumed trial trains 0 steps and writes nothing; the weights must survive
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.train.checkpoints import checkpoint_dirs

    _, searcher, sched, ctrl = _setup(tmp_path, keep_weights="final")
    old = _checkpointed(tmp_path, "old", final=True)
    t = _trial(searcher, sched, ctrl, "new")
    t.path, t.checkpoint = str(tmp_path / "new"), None
    t.config = {**(t.config or {}), RESUME_FROM: str(old / "checkpoint_000001")}
    final = _result(8192, 2.0, final=True, status="completed")
    sched.on_trial_result(ctrl, t, final)
    sched.on_trial_complete(ctrl, t, final)
    searcher.on_trial_complete("new", result=final)
    assert [p.name for p in checkpoint_dirs(old)] == ["checkpoint_000001"]
    assert _frozen(searcher, 0).user_attrs["weights"] == str(old / "checkpoint_000001")


def test_the_fault_hook_is_inert_and_says_when_it_is_armed(tmp_path, monkeypatch):
    from tlmsearch.search.execution import faults

    monkeypatch.delenv(faults.ENV, raising=False)
    ev = {"val_bpb": 2.0, "val_loss": 5.5}
    assert faults.warning() is None and faults.shifted({"shape": "uniform"}, ev) is ev
    (tmp_path / "faults.json").write_text('{"shift": [[{"shape": "uniform"}, 1.0]]}')
    monkeypatch.setenv(faults.ENV, str(tmp_path))
    assert "the test fault hook is armed" in faults.warning()
    assert faults.shifted({"shape": "uniform"}, ev)["val_bpb"] == 3.0
    assert faults.shifted({"shape": "cosine"}, ev) is ev


@pytest.mark.slow
def test_through_ray_a_clearly_worse_candidate_is_pruned_and_recorded(tmp_path):
    """The scheduler's STOP through a real `tlmsearch run` (Ray Tune stops the trial, the
    trials table says PRUNED and why): one candidate reports 1 bit/byte worse than it trained
    (the faults hook's ``shift``), one trial at a time, so the median pruner has finished
    trials to compare with. The real-training run in test_search_run may prune nothing."""
    import json
    import os
    import subprocess
    import sys

    import pandas as pd
    import yaml
    from search_helpers import tiny_study

    from tlmsearch.search.execution.faults import ENV

    bad = {"shape": "cosine", "r_start": 1.5}  # linear 1.5 has its widths at 2 layers
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "faults.json").write_text(json.dumps({"shift": [[bad, 1.0]]}))
    # cosine 1.25 is unpruned (search.unpruned_candidates: sampler_seed 1's draw), the bad one
    # is not
    search = {
        "pruner": "median",
        "seeds": [0, 1],
        "concurrency": 1,
        "unpruned_candidates": 1,
        "sampler_seed": 1,
    }
    data = tiny_study(tmp_path, search=search)
    from tlmsearch.config import study_from_mapping
    from tlmsearch.search.sampling.samplers import draw_unpruned

    assert draw_unpruned(study_from_mapping(data))["by_setting"]["{}"] == [
        json.dumps({"r_start": 1.25, "shape": "cosine"}, sort_keys=True)
    ]
    data["name"] = "pruned"
    (tmp_path / "pruned.yaml").write_text(yaml.safe_dump(data))
    exe = str(Path(sys.executable).with_name("tlmsearch"))
    proc = subprocess.run(
        [exe, "run", str(tmp_path / "pruned.yaml")],
        capture_output=True,
        text=True,
        env={**os.environ, ENV: str(faults)},
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # a real run would be told (the console wraps the line where the folder's path is long)
    assert "the test fault hook is armed" in " ".join(proc.stdout.split())
    df = pd.read_parquet(tmp_path / "runs" / "pruned" / "trials.parquet")
    shifted = df[df["params_json"] == json.dumps(bad, sort_keys=True)]
    assert len(shifted) == 2
    assert (shifted["state"] == "PRUNED").any()  # seed 1's at least: 3 trials finished before
    pruned = df[df["state"] == "PRUNED"]  # (a real candidate below the median may be too)
    assert pruned["reason"].str.contains("pruned by Median at").all()
    assert (pruned["tokens"] >= 2048).all() and (pruned["tokens"] < 8192).all()
    assert (df.loc[df["state"] != "PRUNED", "state"] == "COMPLETE").all()
    first = df["params_json"] == json.dumps({"r_start": 1.25, "shape": "cosine"}, sort_keys=True)
    assert df["unpruned"].tolist() == first.tolist()  # on both seeds, and nothing else
    assert (df.loc[first, "state"] == "COMPLETE").all()


def test_an_open_ended_search_waits_while_trials_run_and_ends_when_nothing_is_left(tmp_path):
    """StudySearcher.suggest: None (wait) while a running trial may still queue work, FINISHED
    once the queue is empty, nothing runs and nothing is left to sample."""
    from ray.tune.search import Searcher

    from tlmsearch.search.sampling.samplers import DefineByRunSpace
    from tlmsearch.search.sampling.searcher import StudySearcher

    cfg = tiny_config(tmp_path, search={"pruner": "none", "sampler": "grid"})
    queue, _ = search_pair(cfg)
    # open-ended as a race is (samplers.open_ended): the trials are an upper bound
    searcher = StudySearcher(
        queue.study, DefineByRunSpace(cfg), metric="val_bpb", mode="min", open_ended=cfg
    )
    queued = len(searcher.study.get_trials(states=(S.WAITING,)))
    ids = [f"t{i}" for i in range(queued)]
    assert all(isinstance(searcher.suggest(t), dict) for t in ids)
    assert searcher.suggest("extra") is None  # the queue is empty, but trials still run
    for t in ids:
        searcher.on_trial_complete(t, result=_result(8192, 2.0, final=True, status="completed"))
    assert searcher.suggest("extra") == Searcher.FINISHED
    assert searcher.live_trial(ids[0]) is None  # told: the scheduler sees no live trial


def test_an_attention_only_taper_is_a_candidate_not_the_baseline(tmp_path):
    # its MLPs are uniform, its heads are not: pruned like any candidate, retried like one
    attention = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}
    _, searcher, sched, ctrl = _setup(
        tmp_path, seeds=[0, 1], candidates=[attention], max_retries=1
    )
    _complete(searcher, sched, ctrl, "base0", [3.0, 2.5, 2.2, 2.0])  # grid: seed-major
    _complete(searcher, sched, ctrl, "att0", [3.0, 2.5, 2.2, 2.0])
    base1, att1 = _trial(searcher, sched, ctrl, "base1"), _trial(searcher, sched, ctrl, "att1")
    assert (base1.config["candidate"], att1.config["candidate"]) == (
        {"shape": "uniform"},
        attention,
    )
    assert (base1.max_failures, att1.max_failures) == (2, 1)  # the baseline gets one more
    assert sched.on_trial_result(ctrl, base1, _result(2048, 9.0)) == TrialScheduler.CONTINUE
    assert sched.on_trial_result(ctrl, att1, _result(2048, 9.0)) == TrialScheduler.STOP
