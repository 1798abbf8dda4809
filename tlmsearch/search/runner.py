"""Run and resume a study: data once, Ray (embedded or a cluster), Tuner + our Optuna searcher.

Optuna owns the search state, Ray owns execution. The Optuna storage is written by the driver
as things happen (every eval, every end state), so it is the record a resume trusts: after
Ctrl-C, a crash or ``kill -9`` of the driver, ``resume_run`` marks the trials that were running
as interrupted, queues their (candidate, seed) again, and starts a fresh Ray Tune session on the
same Optuna study for what is left. Finished trials are never run again (failed ones only with
``retry_failed``); the queue written at the start (baseline, grid, seed repeats) is consumed
where it stopped.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import platform
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig, name_problem
from tlmsearch.constants import COMPILE_CACHE_ENV
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir import driver as run_driver
from tlmsearch.search import best as best_yaml
from tlmsearch.search import confirm, export, records
from tlmsearch.search import status as run_status
from tlmsearch.search.attrs import (
    CANDIDATE,
    INTERRUPTED_TRIAL,
    RACE_DECISION,
    RESUME_FROM,
    SEED,
    STANDS_FOR,
)
from tlmsearch.search.driver import (
    Heartbeat,
    driver_fields,
    mark_preempted,
    on_sigterm,
    preempted,
    restore,
    set_phase,
    slurm_restart,
)
from tlmsearch.search.sampling.samplers import (
    DefineByRunSpace,
    enqueue,
    grace_tokens,
    make_pruner,
    make_sampler,
    may_sample,
    open_ended,
    planned_trials,
    record_unpruned,
    write_initial_queue,
)
from tlmsearch.search.sampling.storage import (
    check_names_free,
    dashboard_command,
    name_taken,
    open_storage,
    redact,
    storage_url,
)
from tlmsearch.widths.candidate import Candidate


class RunFailed(RuntimeError):
    """The study ran but produced nothing usable (every trial failed): exit status 1."""


@dataclass
class RunResult:
    run_dir: Path
    status: str  # finished | interrupted | preempted | failed
    counts: dict[str, int] = field(default_factory=dict)
    best: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    storage: str = ""

    @property
    def dashboard(self) -> str:
        return dashboard_command(self.storage)


# -------------------------------------------------------------------------------------------------
# Entry points


def run_dir_for(cfg: StudyConfig, name: str | None = None) -> Path:
    return Path(cfg.storage.runs_dir) / (name or cfg.name)


def run_study(
    cfg: StudyConfig,
    *,
    address: str | None = None,
    name: str | None = None,
    study_name: str | None = None,
    echo: Any = print,
) -> RunResult:
    """Start a new run of ``cfg`` in ``runs_dir/<name>``; returns when the study is done.

    ``study_name``: the Optuna study's name when it is not the run's (a ladder's rungs share a
    server storage under names of their own); run.json records it.
    """

    if name is not None and name_problem(name):
        raise ConfigError(f"--name: {name!r} is invalid: {name_problem(name)}")
    run = run_dir_for(cfg, name)
    if RunDir(run).study.exists():
        raise ConfigError(
            f"run dir {str(run)!r} exists; continue it with `tlmsearch resume {run}`, or start "
            "another with --name NEW"
        )
    if name is not None:
        cfg = cfg.model_copy(update={"name": name})  # the run's own name for its study
    url = storage_url(cfg.storage, run.resolve())
    make_pruner(cfg)  # bad pruner options are input errors: before anything starts
    make_sampler(cfg)
    _check_trackers(cfg)
    optuna_name = study_name or cfg.name
    check_names_free(cfg.storage, url, [optuna_name])  # before Ray starts and data is prepared
    data, facts = _prepare(cfg, echo), _ray(cfg, address, echo)
    try:
        study = _create_run(run, cfg, url, optuna_name)
        with Heartbeat(run):
            return _execute(run, cfg, study, url, data, facts, echo)
    finally:
        _release(facts)


def _create_run(run: Path, cfg: StudyConfig, url: str, study_name: str) -> Any:
    """The run dir (study.yaml, run.json) and its Optuna study with the initial queue."""
    import optuna

    run.mkdir(parents=True, exist_ok=True)
    RunDir(run).study.write_text(cfg.to_yaml())
    # run.json names the Optuna study before it exists: a driver that dies in between leaves
    # a run dir that says which study it is (a ladder rung's is not its study.yaml's name)
    _write_status(
        run,
        "running",
        n_trials_planned=planned_trials(cfg),
        optuna_study=study_name,
        storage=redact(url),
        versions=_versions(),
        git_sha=_git_sha(),
        phase="trials",
        **driver_fields(),
    )
    try:
        study = optuna.create_study(
            storage=open_storage(url), study_name=study_name, **_directions(cfg)
        )
    except optuna.exceptions.DuplicatedStudyError:  # taken since run_study looked
        _unmake(run)
        raise name_taken(url, study_name) from None
    except BaseException:  # an unreachable server, Ctrl-C: no run dir that says "running"
        _unmake(run)
        raise
    study.set_user_attr("tlmsearch_run_dir", str(run.resolve()))
    record_unpruned(study, cfg, run)  # before the first trial: drawn once, read back on resume
    write_initial_queue(study, cfg)
    return study


def _unmake(run: Path) -> None:
    """Undo :func:`_create_run`'s files when its study could not be created."""
    RunDir(run).study.unlink(missing_ok=True)
    RunDir(run).status.unlink(missing_ok=True)


def resume_run(
    run_dir: str | Path,
    *,
    address: str | None = None,
    retry_failed: bool = False,
    trust_checkpoints: bool = False,
    echo: Any = print,
) -> RunResult:
    """Finish a stopped run: interrupted trials are queued again, finished ones are kept.

    ``retry_failed``: failed trials are queued again too (e.g. after more memory was freed).
    ``trust_checkpoints``: checkpoints an older tlmsearch pickled are loaded and rewritten in
    the safe format (else such a checkpoint is refused: :class:`checkpoints.UnsafeCheckpoint`).
    """
    run = Path(run_dir).resolve()  # checkpoint paths stored for requeued trials are absolute
    cfg, study = export.open_run(run, strict=True)  # it trains again: every check
    info = export.run_info(run)
    _refuse_if_running(run, info)
    make_pruner(cfg)  # as run_study: input errors before the storage is touched
    make_sampler(cfg)  # and the Optuna method its wrapper needs (search/sampling/baseline.py)
    _check_trackers(cfg)
    from tlmsearch.run_dir.tables import TABLES

    # the storage moves on from here (trials queued again, the race): until this run's end
    # writes its tables again, status reads the storage, not the tables of the last end
    _write_status(run, None, **{TABLES: None})
    record_unpruned(study, cfg, run)  # the draw made before the first trial, read back
    mark_if_requeued(study, info)
    requeued = requeue_interrupted(study, cfg, run)
    if requeued:
        echo(f"resume: {len(requeued)} interrupted trial(s) queued again{_mid_way(requeued)}")
    if retry_failed:
        again = requeue_failed(study, cfg, run)
        echo(f"resume: {len(again)} failed trial(s) queued again{_mid_way(again)}")
    elif failed := run_status.counts(study)["FAIL"]:
        echo(f"resume: {failed} failed trial(s) kept; --retry-failed runs them again")
    if upgraded := safe_resume_points(study, trust_checkpoints):
        echo(f"resume: {upgraded} pickled checkpoint(s) rewritten in the safe format")
    if cfg.search.racing:
        from tlmsearch.search.sampling.race import advance

        due = advance(study, cfg)  # seeds a dead driver decided on but never queued
        if due:
            echo(f"resume: the race queued {len(due)} more seed(s)")
    url = storage_url(cfg.storage, run.resolve())
    with Heartbeat(run):  # from here this process is the run's driver (run.json says so)
        if _remaining(cfg, study) <= 0 and not confirm.owed(run, study, cfg):
            echo("nothing left to run")
            return _finish(run, cfg, study, url, "finished", time.time(), echo)
        data, facts = _prepare(cfg, echo, run), _ray(cfg, address, echo)
        try:
            return _execute(run, cfg, study, url, data, facts, echo)
        finally:
            _release(facts)


def _refuse_if_running(run: Path, info: dict[str, Any]) -> None:
    """A resume while the run's driver is still there would run every trial twice: on its host,
    while its pid lives; from another host, while its heartbeat is fresh
    (run_dir/driver.py)."""
    if info.get("status") != "running":
        return
    if _requeued_since(info):
        return  # this Slurm job, requeued: its earlier run (the driver included) is over
    pid, host = info.get("driver_pid"), info.get("driver_host")
    if host == socket.gethostname():
        if run_driver.alive(pid, info.get("driver_start")):
            raise ConfigError(
                f"{run} is still running (driver pid {pid}); stop it first (Ctrl-C) or wait"
            )
        return
    age = run_driver.beat_age(info)
    if age is not None and age <= run_driver.STALE_S:
        raise ConfigError(
            f"{run} is still running on {host} (driver pid {pid}, heartbeat {age:.0f} s ago); "
            f"stop it there, or wait: it counts as gone {run_driver.STALE_S:.0f} s after its "
            "last heartbeat"
        )


def mark_if_requeued(study: Any, info: dict[str, Any]) -> int:
    """In a Slurm job requeued since the recorded driver ran (:func:`_requeued_since`), mark
    the trials it left RUNNING preempted: the scheduler stopped them, whether or not their
    driver got to say so. Its SIGTERM mark can lose the race with Slurm's SIGKILL (KillWait)
    on a loaded node, and the trial then read "interrupted". Returns how many were marked."""
    return mark_preempted(study) if _requeued_since(info) else 0


def _requeued_since(info: dict[str, Any]) -> bool:
    """Whether this process runs in the Slurm job that ran the recorded driver, restarted since
    (a requeue raises ``SLURM_RESTART_COUNT``). The same job at the same count is the same
    allocation: a second ``resume`` there while the driver lives is refused like any other.
    A run.json from before the count was recorded trusts the job id alone."""
    job = info.get("slurm_job")
    if not job or job != os.environ.get("SLURM_JOB_ID"):
        return False
    recorded = info.get("slurm_restart")
    return not isinstance(recorded, int) or slurm_restart() > recorded


def _remaining(cfg: StudyConfig, study: Any) -> int:
    """The main stage's trials left to run (the confirmation stage's are not planned ones)."""
    # each trial classified once: a stage trial resume queued again is no main-stage one
    c = run_status.counts(
        study, skip=frozenset(t.number for t in confirm.stage_trials(study, cfg))
    )
    left = planned_trials(cfg) - (c["COMPLETE"] + c["PRUNED"] + c["FAIL"])
    if open_ended(cfg) and not c["WAITING"] and not may_sample(cfg, study):
        return 0  # the race decided every candidate, or all is sampled: no more is owed
    return left


def _ray(cfg: StudyConfig, address: str | None, echo: Any) -> dict[str, Any]:
    from tlmsearch.search.execution.cluster import start_ray
    from tlmsearch.search.execution.workers import check_fits

    facts = start_ray(cfg.ray, address, env=cfg.train.process_env())
    try:
        check_fits(cfg.ray, facts)
    except ConfigError:
        _release(facts)
        raise
    where = "joined" if facts["joined"] else "started"
    gpus = f", {facts['gpus']:g} GPUs" if facts.get("gpus") else ""
    echo(
        f"ray: {where} {facts['address']} ({len(facts['nodes'])} node(s), "
        f"{facts['cpus']:g} CPUs{gpus})"
    )
    if cfg.ray.gpus_per_trial and not facts.get("gpus") and not facts["joined"]:
        _release(facts)  # trials would wait for a GPU forever
        raise ConfigError(
            f"ray.gpus_per_trial: {cfg.ray.gpus_per_trial:g} but Ray found no GPU on this "
            "machine; set ray.gpus_per_trial: 0 to train on CPUs, or check that torch sees "
            "the GPU (nvidia-smi, torch.cuda.is_available())"
        )
    return facts


def _release(facts: dict[str, Any]) -> None:
    from tlmsearch.search.execution.cluster import stop_ray

    if facts.get("owned"):
        stop_ray()


def requeue_interrupted(study: Any, cfg: StudyConfig, run: Path | None = None) -> list[int | None]:
    """Trials left RUNNING by a dead driver: queue each again, then mark it FAIL (interrupted).

    The trial queued in its place names it (``restart_of``, :func:`records.interrupted`): a
    finished Optuna trial takes no attributes, and queueing first means a driver that dies in
    between leaves a RUNNING trial that is already queued again, which the next resume only
    marks. A trial that left a valid checkpoint in ``run`` is queued to continue from it (its
    folder is the new trial's ``resume_from``). Returns, per trial queued, the tokens of that
    checkpoint (None: from zero).
    """
    import optuna

    out: list[int | None] = []
    run = run.resolve() if run is not None else None
    restarted = records.interrupted(study)
    for ft in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        if ft.number not in restarted:
            found = _resume_point(run, ft.user_attrs) if run is not None else None
            again = str(found[0]) if found else None
            if _enqueue_again(study, cfg, ft.user_attrs, restart_of=ft.number, resume_from=again):
                out.append(found[1] if found else None)
                _drop_superseded_safely(run, cfg, ft.user_attrs, found)
            else:  # asked for but never given a candidate: nothing to run again, yet not failed
                study.set_user_attr(f"{INTERRUPTED_TRIAL}{ft.number}", True)
        study.tell(ft.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    return out


def safe_resume_points(study: Any, trust: bool = False) -> int:
    """Check that every checkpoint a queued trial continues from loads without pickle, in the
    driver, before any trial starts: a pickled one (an older tlmsearch's) is refused
    (:class:`~tlmsearch.train.checkpoints.UnsafeCheckpoint`, exit status 2), or with ``trust``
    rewritten in the safe format, so that the trials never unpickle. Returns how many were."""
    import optuna

    from tlmsearch.train import checkpoints

    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    paths = {ft.user_attrs[RESUME_FROM] for ft in waiting if ft.user_attrs.get(RESUME_FROM)}
    return sum(checkpoints.upgrade(p, trust=trust) for p in sorted(paths))


def _drop_superseded_safely(
    run: Path | None, cfg: StudyConfig, attrs: dict[str, Any], found: tuple[Path, int] | None
) -> None:
    """:func:`checkpoints.drop_superseded` once the trial is queued again, unless
    ``keep_weights: all``; a storage error here loses nothing (the checkpoints stay)."""
    from tlmsearch.train import checkpoints

    if run is None or found is None or cfg.search.keep_weights == "all":
        return
    with contextlib.suppress(OSError):
        checkpoints.drop_superseded(
            run, attrs.get("ray_trial_id"), attrs.get(RESUME_FROM), keep=found[0]
        )


def _resume_point(run: Path, attrs: dict[str, Any]) -> tuple[Path, int] | None:
    """:func:`checkpoints.resume_point` of a trial from its Optuna attributes."""
    from tlmsearch.train import checkpoints

    return checkpoints.resume_point(run, attrs.get("ray_trial_id"), attrs.get(RESUME_FROM))


def _mid_way(tokens: list[int | None]) -> str:
    """', 1 from a checkpoint at 40,960 tokens' for the resume line ('' when none)."""
    found = sorted(t for t in tokens if t is not None)
    if not found:
        return ""
    at = ", ".join(f"{t:,}" for t in found)
    return f", {len(found)} from a checkpoint at {at} tokens"


def requeue_failed(study: Any, cfg: StudyConfig, run: Path | None = None) -> list[int | None]:
    """Failed trials (not interrupted ones): queue each again, once (the new one names it).

    One the system lost (:func:`~tlmsearch.reasons.is_lost`: a dead worker or node,
    memory) continues from the last checkpoint it left in ``run``; one that failed on its own
    (diverged, raised) starts from zero, as continuing would fail the same way. Returns, per
    trial queued, the tokens of the checkpoint it continues from (None: from zero).
    """
    import optuna

    from tlmsearch.reasons import is_lost

    done = records.requeued(study) | records.interrupted(study)
    out: list[int | None] = []
    run = run.resolve() if run is not None else None
    for ft in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.FAIL,)):
        if ft.number in done:
            continue
        found = None
        if run is not None and is_lost(ft.user_attrs.get("reason")):
            found = _resume_point(run, ft.user_attrs)
        resume_from = str(found[0]) if found else None
        if _enqueue_again(study, cfg, ft.user_attrs, retry_of=ft.number, resume_from=resume_from):
            out.append(found[1] if found else None)
            # the seed runs again: a race decision taken without it (stopped by this failure,
            # or tied with it missing) no longer stands; a stop spent no error, a tie is retaken
            decided = RACE_DECISION + ft.user_attrs.get(CANDIDATE, "")
            if study.user_attrs.get(decided):
                study.set_user_attr(decided, None)
            _drop_superseded_safely(run, cfg, ft.user_attrs, found)
    return out


def _enqueue_again(
    study: Any,
    cfg: StudyConfig,
    attrs: dict[str, Any],
    retry_of: int | None = None,
    resume_from: str | None = None,
    restart_of: int | None = None,
) -> bool:
    if CANDIDATE not in attrs or SEED not in attrs:
        return False
    aliases = json.loads(attrs.get(STANDS_FOR) or "[]")
    cand, seed = Candidate.from_identity(attrs[CANDIDATE]), int(attrs[SEED])
    enqueue(study, cfg, cand, seed, aliases, retry_of, resume_from, restart_of)
    return True


# -------------------------------------------------------------------------------------------------
# One Ray Tune session


def _execute(
    run: Path,
    cfg: StudyConfig,
    study: Any,
    url: str,
    data: Any,
    facts: dict[str, Any],
    echo: Any,
) -> RunResult:
    """The main stage's trials left, then the confirmation stage (``search.confirm``), which
    starts only once every main-stage trial has ended; then the tables and best.yaml."""
    load_the_end(cfg)
    _calibrate_peak(cfg, facts)
    t0 = time.time()
    status = "finished"
    remaining = _remaining(cfg, study)
    if remaining > 0:
        status = _session(run, cfg, study, url, data, facts, echo, remaining)
    if status == "finished" and cfg.search.confirm is not None:
        left = confirm.prepare(run, study, cfg, echo)
        planned = planned_trials(cfg) + confirm.size(run, study, cfg)
        _write_status(run, "running", n_trials_planned=planned)  # the stage's trials too
        if left > 0:
            status = _session(run, cfg, study, url, data, facts, echo, left, "confirm: ", planned)
    return _finish(run, cfg, study, url, status, t0, echo)


# What the end of a run reads (the tables, best.yaml, the trackers' verdict), imported before
# its first trial: a package upgraded or edited while a study runs would otherwise meet the
# run's end half old (what the driver loaded) and half new (what it imports lazily there), and
# fail after the last trial. Whole packages, so a new module of theirs is covered too. (The
# report is the CLI's: it loads its own, search/cli.py.)
END_PACKAGES = ("tlmsearch.evidence", "tlmsearch.stats")
END_MODULES = (
    "tlmsearch.search.export",
    "tlmsearch.search.best",
    "tlmsearch.search.ladder",
    "tlmsearch.train.parametrization",
    "tlmsearch.train.checkpoints",
)


def load_the_end(cfg: StudyConfig | None = None) -> None:
    """Import :data:`END_PACKAGES` (every module of each) and :data:`END_MODULES` now, and the
    trackers' study logger when ``cfg`` tracks: about 0.1 s, spent at the end of a run
    anyway."""
    import importlib
    import pkgutil

    names = list(END_MODULES)
    for package in END_PACKAGES:
        path = importlib.import_module(package).__path__
        names += [f"{package}.{m.name}" for m in pkgutil.iter_modules(path)]
    if cfg is not None and cfg.tracking.enabled():
        names.append("tlmsearch.search.tracking.study")
    for name in names:
        importlib.import_module(name)


def _session(
    run: Path,
    cfg: StudyConfig,
    study: Any,
    url: str,
    data: Any,
    facts: dict[str, Any],
    echo: Any,
    remaining: int,
    stage: str = "",
    planned: int | None = None,
) -> str:
    """One Ray Tune session of ``remaining`` trials at most; returns the run's status after it
    (finished, interrupted or preempted). ``planned``: the trials the progress line counts to
    (default: the main stage's; the confirmation stage adds its own)."""
    from tlmsearch.search.execution.failures import handle_lost_workers

    before = run_status.counts(study)
    slots = trial_slots(cfg, facts)
    set_phase(run, "trials", "running", trial_slots=slots, **driver_fields())
    echo(f"{stage}{remaining} trial(s) to run, {slots} at once; run dir {run}")
    from tlmsearch.config.planning import array_line

    if line := array_line(cfg):
        echo(line)
    status = "failed"
    # a preemption: stopped as a Ctrl-C is, its running trials marked at once
    previous = on_sigterm(lambda: mark_preempted(_study_again(url, study.study_name)))
    try:
        from tlmsearch.search.arrays.packing import training_slots
        from tlmsearch.search.execution.cluster import lean_tune

        trainings = training_slots(cfg, slots, remaining)  # an array's members run at once
        progress = _progress(run, cfg, study, before, trainings, planned)
        handle_lost_workers()  # retried or failed, in one line of ours (not a crash, a traceback)
        tuner = _tuner(run, cfg, study, url, data, remaining, [progress], slots=slots)
        try:
            with lean_tune():  # Ray's per-result files and frequent state writes: unread
                tuner.fit()
            status = "finished"
        except KeyboardInterrupt:
            status = "interrupted"
        finally:
            progress.close()
        if status == "finished" and _interrupted_now(study):
            status = "interrupted"  # Ray caught the Ctrl-C itself and returned early
    except KeyboardInterrupt:
        status = "interrupted"
    finally:
        restore(previous)
    if status == "interrupted" and preempted():
        status = "preempted"
        if n := mark_preempted(study):
            echo(f"preempted: {n} running trial(s) continue from their checkpoints on resume")
    return status


def _study_again(url: str, name: str) -> Any:
    """The run's Optuna study over connections of its own (for another thread)."""
    import optuna

    return optuna.load_study(study_name=name, storage=open_storage(url))


def _calibrate_peak(cfg: StudyConfig, facts: dict[str, Any]) -> None:
    """The MFU peak of this machine's CPUs, measured before trials share the cores: a trial
    calibrating beside another one reads it low and caches that (MFU too high from then on)."""
    if facts.get("joined") or cfg.ray.gpus_per_trial or cfg.train.backend == "simulate":
        return
    import torch

    from tlmsearch.search.execution.trainable import trial_threads
    from tlmsearch.train.mfu import cpu_peak
    from tlmsearch.train.runtime import resolve_dtype

    cpu_peak(trial_threads(cfg), dtype=resolve_dtype(cfg.train, torch.device("cpu")))


def _progress(
    run: Path,
    cfg: StudyConfig,
    study: Any,
    before: dict[str, int],
    slots: int,
    planned: int | None = None,
) -> Any:
    """The live progress line, starting from what earlier sessions finished, counting to
    ``planned`` trials (default: the study's planned ones)."""
    from tlmsearch.search.progress import LiveProgress

    finished = before["COMPLETE"] + before["PRUNED"] + before["FAIL"]
    prior = {"complete": before["COMPLETE"], "pruned": before["PRUNED"], "failed": before["FAIL"]}
    return LiveProgress(
        planned_trials(cfg) if planned is None else planned,
        cfg.objectives[0].metric,
        cfg.objectives[0].sense,
        slots,
        prior=prior,
        prior_best=_best_value(run, cfg, study) if finished else None,
        trial_tokens=cfg.train.tokens,
        simulated=cfg.train.backend == "simulate",
    )


def searcher_and_scheduler(
    cfg: StudyConfig,
    study_name: str,
    storage: Any,
    *,
    budget: int | None = None,
    slots: int = 1,
    trial_root: str | None = None,
) -> tuple[Any, Any]:
    """Ray Tune's searcher over the run's Optuna study, loaded from ``storage`` (an object or
    a URL) with the study's sampler and pruner, and the scheduler that consults the pruner on
    every eval.

    With trial arrays (:func:`tlmsearch.config.planning.arrays_on`) the array searcher and
    scheduler: ``budget`` Optuna trials at most this session (default: the study's planned
    trials), ``slots`` trials at once, members' trial folders under ``trial_root``."""
    import optuna

    from tlmsearch.config.planning import arrays_on
    from tlmsearch.search.arrays.packing import ArrayScheduler, ArraySearcher
    from tlmsearch.search.sampling.pruning import OptunaPruningScheduler
    from tlmsearch.search.sampling.searcher import StudySearcher

    single = len(cfg.objectives) == 1
    metrics = [o.metric for o in cfg.objectives]
    modes = ["min" if o.sense == "minimize" else "max" for o in cfg.objectives]
    study = optuna.load_study(study_name=study_name, storage=storage, pruner=make_pruner(cfg))
    # a resumed session's sampler draws on from where the study is, not from the first draw
    # (the queue's waiting trials are not draws: a new study keeps search.sampler_seed)
    asked = [
        t for t in study.get_trials(deepcopy=False) if t.state != optuna.trial.TrialState.WAITING
    ]
    study.sampler = make_sampler(cfg, after=len(asked))
    kw: dict[str, Any] = {
        "metric": metrics[0] if single else metrics,
        "mode": modes[0] if single else modes,
        "race": cfg if cfg.search.racing else None,
        "open_ended": cfg if open_ended(cfg) else None,
    }
    arrays = arrays_on(cfg)
    if arrays:
        assert cfg.search.array is not None
        kw.update(
            cfg=cfg,
            size=cfg.search.array.size,
            budget=planned_trials(cfg) if budget is None else budget,
            slots=slots,
            gpu=cfg.ray.gpus_per_trial > 0,
            trial_root=trial_root,
        )
    searcher = (ArraySearcher if arrays else StudySearcher)(study, DefineByRunSpace(cfg), **kw)
    scheduler = (ArrayScheduler if arrays else OptunaPruningScheduler)(
        grace_tokens(cfg),
        metrics[0] if single else None,
        cfg.train.tokens,
        max_retries=cfg.search.max_retries,
        keep_weights=cfg.search.keep_weights,
    )
    return searcher, scheduler


def _tuner(
    run: Path,
    cfg: StudyConfig,
    study: Any,
    url: str,
    data: Any,
    remaining: int,
    callbacks: list[Any],
    slots: int = 1,
) -> Any:
    """One Ray Tune session over the study: ``remaining`` trials at most."""
    from ray import tune

    from tlmsearch.config.planning import arrays_on
    from tlmsearch.search.arrays.packing import MemberCallbacks
    from tlmsearch.search.execution.trainable import run_trial
    from tlmsearch.search.execution.workers import trial_resources
    from tlmsearch.search.progress import TableWriter

    arrays = arrays_on(cfg)
    if arrays:
        from tlmsearch.search.arrays.trainable import run_array
    simulated = cfg.train.backend == "simulate"  # data is the blackbox: no tokens, no torch
    # Data through the object store unless every node reads a shared path.
    payload = data if cfg.ray.shared_path or simulated else data.in_memory()
    trainable = tune.with_resources(
        tune.with_parameters(
            run_array if arrays else run_trial,
            study=cfg.to_dict(),
            data=payload,
            compile_cache=None if simulated else compile_cache(run),
        ),
        trial_resources(cfg.ray),  # with several workers, Ray Train reserves theirs
    )
    session = RunDir(run).sessions()
    searcher, scheduler = searcher_and_scheduler(
        cfg,
        study.study_name,
        open_storage(url),
        budget=remaining,
        slots=slots,
        trial_root=str(RunDir(run).ray.resolve() / RunDir(run).session(session)),
    )
    if arrays:  # the live progress sees each member as a trial
        callbacks = [MemberCallbacks(callbacks, searcher)]
    return tune.Tuner(
        trainable,
        tune_config=tune.TuneConfig(
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=remaining,
            max_concurrent_trials=cfg.search.concurrency,
            # a multi-worker trial is stopped (pruned) in its actor's stop: never cached
            reuse_actors=cfg.ray.reuse_actors and cfg.ray.workers_per_trial == 1,
            trial_dirname_creator=trial_dirname,
        ),
        run_config=tune.RunConfig(
            name=RunDir(run).session(session),
            storage_path=str(RunDir(run).ray.resolve()),
            verbose=0,
            callbacks=[
                *callbacks,
                TableWriter(str(run)),
                *_trackers(cfg, run, study.study_name),
            ],
            # A lost worker is retried (the scheduler sets each trial's own limit: the
            # baseline gets one more); an exception is a final report, never retried.
            failure_config=tune.FailureConfig(max_failures=cfg.search.max_retries),
            # Ray removes a trial's older checkpoint when it registers a newer one; the
            # scheduler thins the rest when the trial ends (search.keep_weights)
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None if cfg.search.keep_weights == "all" else 1
            ),
        ),
    )


def _interrupted_now(study: Any) -> bool:
    import optuna

    states = (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)
    return bool(study.get_trials(deepcopy=False, states=states))


def _finish(
    run: Path, cfg: StudyConfig, study: Any, url: str, status: str, t0: float, echo: Any
) -> RunResult:
    set_phase(run, "tables")
    written = export.write_run_tables(run, study, cfg)  # each objective's Evidence, built once
    trials = written.trials
    set_phase(run, "best")  # best.yaml
    doc = best_yaml.write_best(run, trials, cfg, written.evidences)
    if status == "finished" and cfg.search.keep_weights == "best":
        from tlmsearch.train import checkpoints

        removed = checkpoints.keep_best(run, trials, [b["params"] for b in doc["best"]])
        if removed:
            echo(f"weights: kept the baseline's and the best candidate's, {removed} removed")
            # the same trials, fewer weight folders: the evidence is the one built above
            written = export.write_run_tables(run, study, cfg, written.evidences)
            trials = written.trials
    counts = run_status.counts(study)
    if status == "finished" and counts["COMPLETE"] == 0:
        status = "failed"
    # the report is the CLI's, for a run with trials to show; a failed run gets none. The
    # tables' stamp: status reads them, not the storage, while the run stays ended
    from tlmsearch.run_dir.tables import TABLES, tables_stamp

    phase = "done" if status == "failed" else "report"
    _write_status(run, status, counts=counts, phase=phase, **{TABLES: tables_stamp(written)})
    _track_study(run, cfg, study.study_name, doc, status, echo)
    result = RunResult(run, status, counts, doc["best"], time.time() - t0, url)
    if status == "failed":
        reasons = sorted({r for r in trials["reason"] if r})[:3]
        raise RunFailed(
            f"no trial completed ({counts['FAIL']} failed, {counts['PRUNED']} pruned) in {run}"
            + (f"; reasons: {' | '.join(reasons)}" if reasons else "")
        )
    return result


def _trackers(cfg: StudyConfig, run: Path, name: str) -> list[Any]:
    """Ray Tune callbacks of the trackers the YAML turns on (tracking/callbacks.py)."""
    if not cfg.tracking.enabled():
        return []
    from tlmsearch.search.tracking.callbacks import tracker_callbacks

    return tracker_callbacks(cfg, run, name)


def _check_trackers(cfg: StudyConfig) -> None:
    """A tracker's server reachable and its key found, before data and Ray."""
    if cfg.tracking.enabled():
        from tlmsearch.search.tracking.callbacks import preflight

        preflight(cfg)


def _track_study(
    run: Path, cfg: StudyConfig, name: str, doc: dict[str, Any], status: str, echo: Any
) -> None:
    """The verdict and best.yaml to the trackers; a tracker that fails to take them is a
    warning (the run dir has them), never a failed run."""
    if not cfg.tracking.enabled():
        return
    from tlmsearch.search.tracking.study import log_study

    try:
        names = log_study(cfg, run, doc, status, name)
    except Exception as err:
        echo(f"warning: the trackers did not take the verdict ({type(err).__name__}: {err})")
        return
    echo(f"tracking: the verdict and best.yaml logged to {', '.join(names)}")


def compile_cache(run: Path) -> str:
    """Where every trial process of the run compiles into (torch.compile's caches): the run's
    ``compile-cache`` (:attr:`RunDir.compile_cache`), so the run's trials, on every node that
    mounts the run dir, and its resumes share one cache; or ``TORCHINDUCTOR_CACHE_DIR`` when the
    user set it (one cache across runs), made absolute (each trial runs in its own folder).

    Torch sets that variable itself, to its per-user default, once ``torch._dynamo`` is imported
    (the driver imports it with the models, e.g. to check an ``hf`` study): that value is
    torch's, not the user's, and does not count.
    """
    user = os.environ.get(COMPILE_CACHE_ENV)
    if user and not _torch_default_cache(user):
        return os.path.abspath(user)
    return str(RunDir(run).compile_cache.resolve())


def _torch_default_cache(path: str) -> bool:
    """Whether ``path`` is torch's own default cache dir (the temp dir's torchinductor_<user>)."""
    try:  # torch has no public name for it; without this one, take the path as the user's
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
    except ImportError:
        return False
    return os.path.abspath(path) == os.path.abspath(default_cache_dir())


def trial_slots(cfg: StudyConfig, facts: dict[str, Any]) -> int:
    """Trials that run at once: ``search.concurrency``, or fewer where Ray's CPUs (GPUs) fit fewer.

    A trial's resources are those of all its workers (``cpus_per_trial`` is their sum).

    >>> from types import SimpleNamespace as N
    >>> cfg = N(search=N(concurrency=3), ray=N(cpus_per_trial=1.0, gpus_per_trial=0.0))
    >>> trial_slots(cfg, {"cpus": 2.0, "gpus": 0.0})
    2

    Fractions count as Ray counts them (to 1e-4): 0.1 GPU a trial fits 10 on one GPU, though
    ``1.0 // 0.1`` is 9.0 in floating point.
    """
    fits = [cfg.search.concurrency]
    if facts.get("cpus"):
        fits.append(_fits(facts["cpus"], cfg.ray.cpus_per_trial))
    if cfg.ray.gpus_per_trial:
        fits.append(_fits(facts.get("gpus") or 0, cfg.ray.gpus_per_trial))
    return max(1, min(fits))


def _fits(total: float, each: float) -> int:
    """How many requests of ``each`` fit in ``total``, up to Ray's resource precision."""
    return math.floor(total / each + 1e-6)


def trial_dirname(trial: Any) -> str:
    """Short trial folders (Ray's default embeds the whole config in the name)."""
    return f"trial_{trial.trial_id}"


# -------------------------------------------------------------------------------------------------
# Helpers


def _directions(cfg: StudyConfig) -> dict[str, Any]:
    senses = [o.sense for o in cfg.objectives]
    return {"direction": senses[0]} if len(senses) == 1 else {"directions": senses}


def _prepare(cfg: StudyConfig, echo: Any, run: Path | None = None) -> Any:
    """The run's data (``run``: a resume's run dir, whose run.json then says so); a simulated
    study's blackbox instead (nothing to train on)."""
    if cfg.train.backend == "simulate":
        from tlmsearch.search.execution.blackbox import load_blackbox

        box = load_blackbox(cfg)
        echo(f"simulate: {type(box).__name__}, no training (train.simulate)")
        return box
    from tlmsearch.data import prepare_data
    from tlmsearch.search.execution import faults

    if line := faults.warning():
        echo(line)
    if run is not None:
        set_phase(run, "preparing data", "running")
    t = time.time()
    data = prepare_data(cfg.data_for_run(), progress=sys.stderr.isatty())
    echo(
        f"data: {data.n_train_tokens:,} train / {data.n_val_tokens:,} val tokens, "
        f"vocab {data.vocab_size} ({time.time() - t:.1f} s)"
    )
    return data


def _best_value(run: Path, cfg: StudyConfig, study: Any) -> float | None:
    from tlmsearch.run_dir.tables import add_deltas, trials_frame

    rows, _ = records.trial_records(study)
    best = best_yaml.best_candidates(
        add_deltas(trials_frame(rows), [o.metric for o in cfg.objectives]), cfg
    )
    return best[0]["values"][cfg.objectives[0].metric] if best else None


def _write_status(run: Path, status: str, **fields: Any) -> None:
    from tlmsearch.run_dir.tables import write_status

    write_status(run, status, **fields)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": platform.python_version()}
    for pkg in ("tlmsearch", "torch", "ray", "optuna", "numpy"):
        with contextlib.suppress(PackageNotFoundError):
            out[pkg] = version(pkg)
    return out


def _git_sha() -> str | None:
    try:
        res = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() or None if res.returncode == 0 else None
