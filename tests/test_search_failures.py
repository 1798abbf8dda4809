"""Lost trials without a Ray cluster: reasons, retry limits and records, requeueing, log lines.

The end-to-end checks (a SIGKILLed worker, Ray's memory monitor) are tests/test_search_killed.py.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
import ray.tune
from ray import exceptions as rex
from search_helpers import search_pair, tiny_config

from tlmsearch.errors import ConfigError
from tlmsearch.search import records, status
from tlmsearch.search.attrs import INTERRUPTED
from tlmsearch.search.execution import trainable
from tlmsearch.search.execution.failures import (
    NODE_LOST,
    OOM_KILLED,
    RETRIED_AFTER,
    RETRIES,
    error_reason,
    handle_lost_workers,
    lost_reason,
    retry_line,
)
from tlmsearch.search.progress import LiveProgress
from tlmsearch.search.runner import requeue_failed
from tlmsearch.search.sampling.samplers import write_initial_queue

optuna.logging.set_verbosity(optuna.logging.WARNING)
S = optuna.trial.TrialState

# What Ray 2.60 says (measured): a SIGKILLed trial worker, and one its memory monitor killed.
SIGKILLED = (
    "The actor died unexpectedly before finishing this task.\n\tclass_name: ImplicitFunc\n"
    "\tactor_id: f944ccef7999e56f2fb55d8401000000\n\tpid: 21682\n\tip: 127.0.0.2\n"
    "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR "
    "Worker exit detail: Worker unexpectedly exits with a connection error code 2. End of file. "
    "Some common causes include: (1) the process was killed by the OOM killer due to high memory "
    "usage, (2) ray stop --force was called, ..."
)
MONITOR_KILLED = (
    "1 worker(s) were killed due to the node running low on memory. Memory on the node (IP: "
    "127.0.0.2, ID: 48bc) was 6.51GB used / 23.54GB limit (0.276368)\nOOM kill reason: Memory "
    "usage 6923927552B exceeded threshold of 6910478336B (27.3% of 25276071936B limit)\n"
    "Selected to kill: (Actor(d897): task name=ImplicitFunc.__init__, pid=31452, ...)"
)


def _task_error(cause: BaseException) -> rex.RayTaskError:
    return rex.RayTaskError("train", "Traceback ...", cause, proctitle="x", pid=1, ip="127.0.0.2")


def test_lost_reason_names_what_the_system_did():
    assert lost_reason(rex.RayActorError(error_msg=SIGKILLED)) == "worker died (pid 21682)"
    oom = f"{OOM_KILLED} (node memory 6.51GB / 23.54GB)"
    assert lost_reason(rex.OutOfMemoryError(MONITOR_KILLED)) == oom
    assert lost_reason(rex.RayActorError(error_msg=MONITOR_KILLED)) == oom  # as Tune gets it
    assert lost_reason(rex.NodeDiedError("node 12ab died")) == NODE_LOST
    assert lost_reason(
        rex.RayActorError(error_msg="The actor died because its node has died.")
    ) == (NODE_LOST)
    assert lost_reason(_task_error(MemoryError())) == "out of memory: MemoryError"
    cpu = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"
    )
    assert lost_reason(cpu).startswith("out of memory: RuntimeError: [enforce fail")
    import torch

    gpu = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    assert lost_reason(gpu) == f"out of memory: OutOfMemoryError: {gpu}"
    assert lost_reason(SIGKILLED) == "worker died (pid 21682)"  # an error.txt's text


def test_the_trials_own_errors_are_not_lost():
    assert lost_reason(None) is None
    assert lost_reason(ValueError("bad width")) is None
    assert lost_reason(_task_error(ValueError("bad width"))) is None
    init_failed = rex.RayActorError(
        error_msg="raised in its creation task", actor_init_failed=True
    )
    assert lost_reason(init_failed) is None
    assert lost_reason("Traceback ...\nValueError: bad width") is None


def test_error_reason_reads_the_latest_failure(tmp_path):
    lost = SimpleNamespace(get_pickled_error=lambda: rex.RayActorError(error_msg=SIGKILLED))
    assert error_reason(lost) == "worker died (pid 21682)"
    # Ray's storage copy can lag a failure behind the driver's own (measured): that one wins
    (tmp_path / "error.pkl").write_bytes(
        pickle.dumps(rex.RayActorError(error_msg=SIGKILLED.replace("21682", "4242")))
    )
    lost.pickled_error_file = str(tmp_path / "error.pkl")
    assert error_reason(lost) == "worker died (pid 4242)"
    err = tmp_path / "error.txt"
    err.write_text(f"Failure # 1 (occurred at x)\n{SIGKILLED}\nFailure # 2 (occurred at y)\n")
    err.write_text(err.read_text() + "Traceback (most recent call last):\nKeyError: 'w'\n")
    trial = SimpleNamespace(get_pickled_error=lambda: None, error_file=str(err))
    assert error_reason(trial) == "KeyError: 'w'"


# -- the scheduler sets the retry limits and records each retry ---------------------------------


def _setup(tmp: Path, max_retries: int, keep_weights: str = "none"):
    search = {"pruner": "none", "max_retries": max_retries, "keep_weights": keep_weights}
    cfg = tiny_config(tmp, search=search)
    searcher, sched = search_pair(cfg)  # the uniform baseline first, then the grid
    ctrl = SimpleNamespace(search_alg=SimpleNamespace(searcher=searcher))
    return cfg, searcher, sched, ctrl


def _trial(searcher, sched, ctrl, tid: str) -> SimpleNamespace:
    trial = SimpleNamespace(
        trial_id=tid,
        error_file=None,
        get_error=lambda: None,
        get_pickled_error=lambda: rex.RayActorError(error_msg=SIGKILLED),
        max_failures=0,
        num_failures=0,
    )
    trial.should_recover = lambda: trial.num_failures <= trial.max_failures  # as Ray's
    trial.config = searcher.suggest(tid)
    sched.on_trial_add(ctrl, trial)
    return trial


def _lose(sched, ctrl, trial) -> None:
    """What Ray does when a trial's worker dies: count the failure, tell the scheduler."""
    trial.num_failures += 1  # Trial.handle_error
    sched.on_trial_error(ctrl, trial)


def _eval(tokens: int, final: bool = False) -> dict:
    return {"tokens": tokens, "val_bpb": 3.0 - tokens / 1e4, "final": final, "status": "completed"}


def test_a_lost_baseline_gets_one_retry_more_and_its_curve_starts_again(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path, max_retries=1)
    base = _trial(searcher, sched, ctrl, "a")
    cand = _trial(searcher, sched, ctrl, "b")
    assert base.config["candidate"] == {"shape": "uniform"}
    assert (base.max_failures, cand.max_failures) == (2, 1)  # read by Ray's should_recover
    for tokens in (2048, 4096):
        sched.on_trial_result(ctrl, base, _eval(tokens))
    _lose(sched, ctrl, base)  # Ray retries it: on_trial_error, then on_trial_add
    sched.on_trial_add(ctrl, base)
    for tokens in (2048, 4096, 6144, 8192):
        sched.on_trial_result(ctrl, base, _eval(tokens))
    sched.on_trial_result(ctrl, base, _eval(8192, final=True))
    searcher.on_trial_complete("a", result=_eval(8192, final=True))
    ft = searcher.study.get_trials()[0]
    assert ft.state == S.COMPLETE and ft.user_attrs[RETRIES] == 1
    assert ft.user_attrs[RETRIED_AFTER] == ["worker died (pid 21682)"]
    assert [ev["tokens"] for ev in ft.user_attrs["curve"]] == [2048, 4096, 6144, 8192]


def test_a_lost_candidate_out_of_retries_is_fail_with_the_reason(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path, max_retries=0)
    _trial(searcher, sched, ctrl, "a")
    cand = _trial(searcher, sched, ctrl, "b")
    assert cand.max_failures == 0
    sched.on_trial_result(ctrl, cand, _eval(2048))
    _lose(sched, ctrl, cand)  # no retry: Ray tells the searcher next
    searcher.on_trial_complete("b", error=True)
    ft = searcher.study.get_trials()[1]
    assert ft.state == S.FAIL and ft.user_attrs["reason"] == "worker died (pid 21682)"
    assert RETRIES not in ft.user_attrs


def _with_checkpoint(tmp: Path, trial: SimpleNamespace, tokens: int = 2048) -> Path:
    from tlmsearch.train import checkpoints

    trial.path = str(tmp / f"trial_{trial.trial_id}")  # the folder requeue finds it by
    meta = {"number": 0, "candidate": {}, "seed": 0, "widths": [64, 64], "model": {}}
    folder = Path(trial.path) / "checkpoint_000000"
    return checkpoints.write_checkpoint(folder, {"model": {}}, {**meta, "tokens": tokens})


@pytest.mark.parametrize("keep", ["none", "final", "all"])
def test_a_lost_trial_keeps_its_checkpoint_and_retry_failed_continues_from_it(tmp_path, keep):
    """Ray resumes a retried trial from its checkpoint; after the last retry the checkpoint
    stays for `resume --retry-failed`, which continues the trial from it (it restarted a
    440M trial from zero before); one that failed on its own starts again from zero."""
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.train.checkpoints import checkpoint_dirs

    _, searcher, sched, ctrl = _setup(tmp_path, max_retries=1, keep_weights=keep)
    _trial(searcher, sched, ctrl, "a")
    cand = _trial(searcher, sched, ctrl, "b")
    saved = _with_checkpoint(tmp_path / "run" / "ray" / "session-0", cand)
    sched.on_trial_result(ctrl, cand, _eval(2048))
    _lose(sched, ctrl, cand)  # retried (1 of 1)
    sched.on_trial_add(ctrl, cand)
    _lose(sched, ctrl, cand)  # out of retries
    searcher.on_trial_complete("b", error=True)
    study = searcher.study
    assert study.get_trials()[1].state == S.FAIL and checkpoint_dirs(cand.path) == [saved]
    cfg = tiny_config(tmp_path, search={"keep_weights": keep})
    assert requeue_failed(study, cfg, tmp_path / "run") == [2048]
    assert study.trials[-1].user_attrs[RESUME_FROM] == str(saved)


@pytest.mark.parametrize("keep", ["none", "all"])
def test_a_final_error_that_is_no_lost_worker_removes_its_checkpoints(tmp_path, keep):
    """A Ray-level error that is not the system's (unreadable, or an unknown kind) is retried
    from zero by --retry-failed: nothing would ever remove its checkpoints."""
    from tlmsearch.train.checkpoints import checkpoint_dirs

    _, searcher, sched, ctrl = _setup(tmp_path, max_retries=1, keep_weights=keep)
    _trial(searcher, sched, ctrl, "a")
    cand = _trial(searcher, sched, ctrl, "b")
    cand.get_pickled_error = lambda: None  # Ray's error unreadable
    saved = _with_checkpoint(tmp_path / "run" / "ray" / "session-0", cand)
    _lose(sched, ctrl, cand)  # Ray retries it: from this checkpoint, which must stay
    assert checkpoint_dirs(cand.path) == [saved]
    sched.on_trial_add(ctrl, cand)
    _lose(sched, ctrl, cand)  # out of retries
    searcher.on_trial_complete("b", error=True)
    assert searcher.study.get_trials()[1].user_attrs["reason"] == ("the trial raised an exception")
    assert checkpoint_dirs(cand.path) == ([saved] if keep == "all" else [])


def test_a_trial_that_failed_on_its_own_is_retried_from_zero(tmp_path):
    from tlmsearch.search.attrs import RESUME_FROM

    # its checkpoints stay: they must not be continued from
    _, searcher, sched, ctrl = _setup(tmp_path, max_retries=1, keep_weights="all")
    cand = _trial(searcher, sched, ctrl, "a")
    _with_checkpoint(tmp_path / "run" / "ray" / "session-0", cand)
    final = {**_eval(2048, final=True), "status": "diverged", "reason": "diverged: loss nan"}
    sched.on_trial_result(ctrl, cand, final)
    searcher.on_trial_complete("a", result=final)
    study = searcher.study
    assert requeue_failed(study, tiny_config(tmp_path), tmp_path / "run") == [None]
    assert RESUME_FROM not in study.trials[-1].user_attrs


def test_a_raising_trial_keeps_its_traceback_in_the_storage(tmp_path):
    _, searcher, sched, ctrl = _setup(tmp_path, max_retries=1)
    t = _trial(searcher, sched, ctrl, "a")
    final = {**_eval(2048, final=True), "status": "failed", "reason": "KeyError: 'w'"}
    final["traceback"] = "Traceback (most recent call last):\n  ...\nKeyError: 'w'\n"
    sched.on_trial_result(ctrl, t, final)
    searcher.on_trial_complete("a", result=final)
    ft = searcher.study.get_trials()[0]
    assert ft.state == S.FAIL and ft.user_attrs["reason"] == "KeyError: 'w'"
    assert ft.user_attrs["traceback"] == final["traceback"]


def test_max_retries_is_bounded(tmp_path):
    assert tiny_config(tmp_path).search.max_retries == 1
    for bad in (-1, 11):
        with pytest.raises(ConfigError, match="max_retries"):
            tiny_config(tmp_path, search={"max_retries": bad})


# -- the trainable: an exception is a final report, an allocation failure is Ray's to retry ------


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (ValueError("model.plan: bad widths"), False),
        (MemoryError(), True),
        (RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried 9 GB"), True),
    ],
)
def test_the_trainable_reports_its_own_errors(monkeypatch, error, retried):
    reports: list[dict] = []

    def train(config, study, data, last, compile_cache):
        last.update(tokens=2048, val_bpb=3.5)  # one eval went through
        raise error

    monkeypatch.setattr(trainable, "_train", train)
    monkeypatch.setattr(ray.tune, "report", reports.append)
    if retried:
        with pytest.raises(type(error)):
            trainable.run_trial({}, {}, None)
        assert not reports
        return
    trainable.run_trial({}, {}, None)
    (final,) = reports
    assert final["final"] and final["status"] == "failed"
    assert final["reason"] == "ValueError: model.plan: bad widths"
    assert final["tokens"] == 2048 and final["val_bpb"] == 3.5 and "val_loss" in final
    assert final["traceback"].startswith("Traceback") and "in train" in final["traceback"]


# -- resume --retry-failed ----------------------------------------------------------------------


def test_requeue_failed_queues_each_failed_trial_once(tmp_path):
    cfg = tiny_config(tmp_path, search={"seeds": [0, 1]})
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    states = [S.COMPLETE, S.FAIL, S.COMPLETE, S.COMPLETE, S.FAIL, S.COMPLETE]
    for i, state in enumerate(states):
        trial = study.ask()
        trial.set_user_attr("reason", "worker died")
        if i == 4:
            trial.set_user_attr(INTERRUPTED, True)  # already queued again by resume
        study.tell(trial, 1.0 if state == S.COMPLETE else None, state=state)
    assert requeue_failed(study, cfg) == [None] and requeue_failed(study, cfg) == []
    c = status.counts(study)
    assert (c["FAIL"], c["requeued"], c["interrupted"], c["WAITING"]) == (0, 1, 1, 1)
    failed, queued = study.trials[1], study.trials[-1]
    assert queued.state == S.WAITING and queued.user_attrs["seed"] == failed.user_attrs["seed"]
    assert queued.user_attrs["candidate"] == failed.user_attrs["candidate"]
    rows, _ = records.trial_records(study)
    assert [r["number"] for r in rows] == [0, 2, 3, 5]  # the requeued and interrupted are gone


def test_a_retried_seed_clears_the_race_decision_taken_without_it(tmp_path):
    # a candidate stopped by a diverged seed (or tied with a seed missing) is raced again when
    # --retry-failed runs that seed: the recorded decision no longer stands (a reviewer's find)
    from tlmsearch.search.attrs import CANDIDATE, RACE_DECISION

    cfg = tiny_config(tmp_path, search={"seeds": [0, 1]})
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    trial = study.ask()
    trial.set_user_attr("reason", "diverged: loss nan")
    study.tell(trial, None, state=S.FAIL)
    name = RACE_DECISION + study.trials[0].user_attrs[CANDIDATE]
    study.set_user_attr(
        name,
        {
            "status": "stopped",
            "reason": "diverged on a seed",
            "seeds": [],
            "mean_delta": None,
            "half_width": None,
        },
    )
    other = RACE_DECISION + '{"shape": "cosine"}'
    study.set_user_attr(
        other,
        {"status": "tied", "reason": "x", "seeds": [0, 1], "mean_delta": 0.0, "half_width": 0.1},
    )
    assert requeue_failed(study, cfg) == [None]
    assert study.user_attrs[name] is None and study.user_attrs[other]["status"] == "tied"
    rows, _ = records.trial_records(study)
    assert all("race_decision" not in r for r in rows)


# -- resume after a dead driver: the checkpoint a requeued trial continues from ------------------


def _interrupted_twice(tmp: Path, keep: str, b_saved: bool):
    """Trial A was interrupted at 2,048 tokens and requeued as B (resuming from A's checkpoint);
    the driver dies again with B running, after (``b_saved``) or before B's first checkpoint."""
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.train import checkpoints

    cfg = tiny_config(tmp, search={"keep_weights": keep})
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    run = tmp / "run"
    meta = {"number": 0, "candidate": {}, "seed": 0, "widths": [64, 64], "model": {}}
    a = checkpoints.write_checkpoint(
        run / "ray/session-0/trial_A/checkpoint_000000", {"model": {}}, {**meta, "tokens": 2048}
    )
    (run / "ray/session-1/trial_B").mkdir(parents=True)
    b = run / "ray/session-1/trial_B/checkpoint_000000"
    if b_saved:
        checkpoints.write_checkpoint(b, {"model": {}}, {**meta, "tokens": 4096})
    trial = study.ask()  # B, RUNNING when the driver died
    trial.set_user_attr("ray_trial_id", "B")
    trial.set_user_attr(RESUME_FROM, str(a))
    return study, cfg, run, a, b


@pytest.mark.parametrize("keep", ["none", "final", "all"])
def test_a_trial_interrupted_twice_keeps_only_the_checkpoint_it_continues_from(tmp_path, keep):
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.search.runner import requeue_interrupted

    study, cfg, run, a, b = _interrupted_twice(tmp_path, keep, b_saved=True)
    assert requeue_interrupted(study, cfg, run) == [4096]
    assert study.trials[-1].state == S.WAITING
    assert study.trials[-1].user_attrs[RESUME_FROM] == str(b)
    assert b.is_dir()
    assert a.is_dir() == (keep == "all")  # A's was left behind for good before


def test_a_storage_error_while_thinning_loses_no_trial(tmp_path, monkeypatch):
    from tlmsearch.search.runner import requeue_interrupted
    from tlmsearch.train import checkpoints

    study, cfg, run, a, _ = _interrupted_twice(tmp_path, "none", b_saved=True)

    def stale(paths):
        raise OSError(116, "Stale file handle")  # NFS

    monkeypatch.setattr(checkpoints, "remove", stale)
    assert requeue_interrupted(study, cfg, run) == [4096]
    assert study.trials[-1].state == S.WAITING and a.is_dir()


def test_resume_stores_absolute_checkpoint_paths_from_a_relative_run_dir(tmp_path, monkeypatch):
    """`tlmsearch resume runs/x` stored runs/x/ray/...: relative to the cwd, which a Ray trial
    changes to its own folder, so the trial silently started from zero."""
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.search.runner import requeue_interrupted

    study, cfg, _, _, b = _interrupted_twice(tmp_path, "none", b_saved=True)
    monkeypatch.chdir(tmp_path)
    assert requeue_interrupted(study, cfg, Path("run")) == [4096]
    assert study.trials[-1].user_attrs[RESUME_FROM] == str(b.resolve())


def test_a_requeued_trial_that_saved_nothing_yet_keeps_the_one_it_resumed_from(tmp_path):
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.search.runner import requeue_interrupted

    study, cfg, run, a, _ = _interrupted_twice(tmp_path, "none", b_saved=False)
    assert requeue_interrupted(study, cfg, run) == [2048]
    assert study.trials[-1].user_attrs[RESUME_FROM] == str(a) and a.is_dir()


# -- the log: one line per lost trial, nothing of Ray's ----------------------------------------


def _lost(num_failures: int, max_failures: int) -> SimpleNamespace:
    return SimpleNamespace(
        trial_id="t",
        status="ERROR",
        config={"candidate": {"shape": "uniform"}, "seed": 1},
        last_result={"tokens": 2048, "val_bpb": 5.5, "final": False},
        num_failures=num_failures,
        max_failures=max_failures,
        get_pickled_error=lambda: rex.RayActorError(error_msg=SIGKILLED),
    )


def test_the_log_says_in_one_line_what_happened():
    trial = _lost(1, 2)
    assert retry_line(trial, error_reason(trial)) == (
        "RETRY    uniform (seed 1) lost after 2,048 tokens: worker died (pid 21682); "
        "attempt 2 of 3"
    )
    progress = LiveProgress(6, "val_bpb", "minimize", 2, tty=False)
    assert progress._note_end(_lost(3, 2), error=True) == (
        "FAILED   uniform (seed 1) val_bpb 5.5000 after 2,048 tokens: worker died (pid 21682); "
        "retried 2 times"
    )


def test_ray_is_kept_from_printing_a_lost_worker(monkeypatch, capsys):
    import ray._private.worker as ray_worker
    from ray.air.execution._internal.actor_manager import RayActorManager

    monkeypatch.delenv("TUNE_PRINT_ALL_TRIAL_ERRORS", raising=False)
    handle_lost_workers()
    handle_lost_workers()  # idempotent
    assert os.environ["TUNE_PRINT_ALL_TRIAL_ERRORS"] == "0"  # no traceback per failed trial
    died = "A worker died or was killed while executing a task by an unexpected system error."
    ray_worker.print_to_stdstream({"pid": "raylet", "lines": [died], "is_err": False}, False)
    ray_worker.print_to_stdstream(
        {"pid": "raylet", "lines": ["other news"], "is_err": False}, False
    )
    out = capsys.readouterr().out
    assert "other news" in out and "worker died" not in out.lower()
    # Tune's actor manager gets the memory monitor's OutOfMemoryError as an actor error
    # (Ray 2.60 raises RuntimeError out of Tuner.fit otherwise: the whole run ends).
    seen: list[Exception] = []
    actor = SimpleNamespace(actor_id="a1", _on_error=None)
    task = SimpleNamespace(_tracked_actor=actor, _on_error=lambda _, exc: seen.append(exc))
    manager = SimpleNamespace(_failed_actor_ids=set(), _cleanup_actor=lambda tracked_actor: None)
    RayActorManager._actor_task_failed(manager, task, rex.OutOfMemoryError(MONITOR_KILLED))
    (exc,) = seen
    assert isinstance(exc, rex.RayActorError) and manager._failed_actor_ids == {"a1"}
    assert lost_reason(exc).startswith(OOM_KILLED)


def test_a_study_that_cannot_be_created_leaves_no_run_dir_saying_running(tmp_path, monkeypatch):
    """run.json is written before the Optuna study (it names it); a failure to create the study
    (an unreachable server, Ctrl-C) removed study.yaml but left run.json saying "running"."""
    from tlmsearch.search import runner

    cfg = tiny_config(tmp_path)
    run = tmp_path / "runs" / "tiny"

    def interrupted(**kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(optuna, "create_study", interrupted)
    with pytest.raises(KeyboardInterrupt):
        runner._create_run(run, cfg, f"sqlite:///{run / 'optuna.db'}", "tiny")
    assert not (run / "study.yaml").exists() and not (run / "run.json").exists()


def test_an_interrupted_trial_is_queued_once_even_if_resume_dies_half_way(tmp_path, monkeypatch):
    """The queued trial names the interrupted one (restart_of): a resume that dies after
    queueing it, before marking the old one FAIL, must not queue it twice next time."""
    from tlmsearch.search.attrs import RESTART_OF
    from tlmsearch.search.runner import requeue_interrupted

    study, cfg, run, _, _ = _interrupted_twice(tmp_path, "none", b_saved=True)
    (running,) = [t.number for t in study.trials if t.state == S.RUNNING]

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(optuna.Study, "tell", dies)
        with pytest.raises(KeyboardInterrupt):
            requeue_interrupted(study, cfg, run)
    assert study.trials[running].state == S.RUNNING
    assert requeue_interrupted(study, cfg, run) == []  # already queued: only marked now
    assert study.trials[running].state == S.FAIL
    again = [t for t in study.trials if t.user_attrs.get(RESTART_OF) == running]
    assert len(again) == 1 and again[0].state == S.WAITING
    c = status.counts(study)
    assert (c["interrupted"], c["FAIL"]) == (1, 0)
    assert running not in [r["number"] for r in records.trial_records(study)[0]]


def test_a_worker_the_memory_monitor_killed_reaches_tune_as_an_actor_error():
    """What handle_lost_workers hands Tune (through ray_internals) instead of Ray's error."""
    from tlmsearch.search.execution.failures import as_actor_error

    for lost in (rex.OutOfMemoryError(MONITOR_KILLED), rex.NodeDiedError("node 12ab died")):
        exc = as_actor_error(lost)
        assert type(exc) is rex.RayActorError and str(lost) in str(exc)
        assert lost_reason(exc) == lost_reason(lost)  # the reason is the same either way
    for kept in (rex.RayActorError(error_msg=SIGKILLED), _task_error(ValueError("w")), KeyError()):
        assert as_actor_error(kept) is kept


def test_a_trial_interrupted_before_it_had_a_candidate_counts_as_interrupted(tmp_path):
    """The driver died between Optuna's ask and the space filling the trial in: nothing to run
    again, and not a failure (it was counted FAIL for good, one trial short of the plan)."""
    from tlmsearch.search.runner import requeue_interrupted

    cfg = tiny_config(tmp_path)
    study = optuna.create_study()
    study.ask()  # RUNNING, no candidate: the space never ran
    assert requeue_interrupted(study, cfg, tmp_path / "run") == []
    c = status.counts(study)
    assert (c["interrupted"], c["FAIL"], c["WAITING"]) == (1, 0, 0)
    assert requeue_failed(study, cfg) == []
