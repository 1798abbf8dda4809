"""The driver's presence in run.json (host, pid, heartbeat, phase), so that ``status`` and the
report can tell a running study from one whose driver is gone (tlmsearch/run_dir/driver.py
reads it), and the driver's stop on SIGTERM: a preemption, not a failure.

Preemption: a batch scheduler (Slurm's ``--signal``, its preemption, ``scancel --signal``) or
a user sends the driver SIGTERM. :func:`on_sigterm` stops the driver as a Ctrl-C does (Ray Tune
stops its trials and returns); the runner then marks the trials that were running
``preempted`` (:func:`mark_preempted`; run.json says ``preempted``, the exit status is 143),
and ``tlmsearch resume`` continues each of them from its last checkpoint: nothing is lost (a
preempted trial is neither failed nor lost and spends no retry), and no eval is recorded twice
(what a trial trained after its last checkpoint is trained again, to the same numbers).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tlmsearch.run_dir import driver as run_driver
from tlmsearch.run_dir.tables import write_status
from tlmsearch.search.attrs import PREEMPTED
from tlmsearch.search.execution import faults


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def driver_fields() -> dict[str, Any]:
    """This process as run.json names a run's driver (``slurm_job``: the Slurm job it runs in,
    else None, and ``slurm_restart``: how often Slurm restarted that job; a requeued job's
    resume knows its previous driver is gone by a higher restart count)."""
    return {
        "driver_pid": os.getpid(),
        "driver_start": run_driver.started(os.getpid()),  # with the pid: this process for good
        "driver_host": socket.gethostname(),
        "heartbeat": _now(),
        "slurm_job": os.environ.get("SLURM_JOB_ID"),
        "slurm_restart": slurm_restart(),
    }


def slurm_restart() -> int:
    """How often Slurm restarted (requeued) the job this process runs in: its
    ``SLURM_RESTART_COUNT``, 0 outside Slurm or before the first requeue."""
    try:
        return int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    except ValueError:
        return 0


def set_phase(run: Path, phase: str, status: str | None = None, **fields: Any) -> None:
    """Record the phase the driver enters (run_dir.driver.PHASES), with a heartbeat; the test
    fault hook may crash the driver here (:func:`faults.crash_at`)."""
    write_status(run, status, **{"heartbeat": _now(), **fields, "phase": phase})
    faults.crash_at(phase)


class Heartbeat:
    """Writes the driver's heartbeat into run.json every ``every`` seconds from a daemon thread,
    while the ``with`` block runs (the driver's main thread may sit in Ray Tune's loop or in a
    long table write)."""

    def __init__(self, run: Path, every: float | None = None) -> None:
        self.run, self.every = run, run_driver.HEARTBEAT_S if every is None else every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="tlmsearch-heartbeat", daemon=True)

    def _beat(self) -> None:
        while not self._stop.wait(self.every):
            with contextlib.suppress(OSError, ValueError):  # a full disk: the next beat may land
                write_status(self.run, None, heartbeat=_now())

    def __enter__(self) -> Heartbeat:
        write_status(self.run, None, **driver_fields())
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


_TERM = threading.Event()  # SIGTERM reached this driver


def on_sigterm(mark: Any = None) -> Any:
    """From now on, SIGTERM stops the driver as Ctrl-C does (SIGINT to itself: Ray Tune stops
    its trials and returns, outside Tune a KeyboardInterrupt) and :func:`preempted` says so.
    ``mark``: called at once in a thread of its own (e.g. to mark the running trials preempted
    over a connection of its own), as a scheduler that signals every process of a job, Ray's
    included, may kill the driver before its stop is over. Returns the handler it replaced,
    for :func:`restore`; only the main thread can take signals: elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return None
    _TERM.clear()

    def handler(signum: int, frame: Any) -> None:
        if not _TERM.is_set():  # one stop: a second TERM while stopping changes nothing
            _TERM.set()
            if mark is not None:
                threading.Thread(target=_quietly, args=(mark,), daemon=True).start()
            if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
                # a background job of a non-interactive shell (the sbatch script's driver)
                # starts with SIGINT ignored: stop as Ctrl-C would
                raise KeyboardInterrupt
            signal.raise_signal(signal.SIGINT)

    return signal.signal(signal.SIGTERM, handler)


def _quietly(fn: Any) -> None:
    with contextlib.suppress(Exception):  # the stop goes on; the runner marks them again
        fn()


def preempted() -> bool:
    """Whether SIGTERM stopped this driver (since :func:`on_sigterm`)."""
    return _TERM.is_set()


def restore(previous: Any) -> None:
    if previous is not None:
        signal.signal(signal.SIGTERM, previous)


def mark_preempted(study: Any) -> int:
    """Mark the trials the stop left RUNNING as preempted (before ``resume`` queues each again
    from its checkpoint: :func:`tlmsearch.search.runner.requeue_interrupted`); returns how
    many. ``status`` counts them as preempted, not failed and not lost."""
    import optuna

    running = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
    for ft in running:  # the storage's own write: a Trial object would call the sampler
        study._storage.set_trial_user_attr(ft._trial_id, PREEMPTED, True)
    return len(running)
