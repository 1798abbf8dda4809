"""Trials lost to the system (a killed worker, a lost node, out of memory): named, retried, quiet.

A trial ends in one of two kinds of failure:

- its own: the trainable raised or the loss diverged. The trainable reports that as its final
  result (status ``failed`` / ``diverged``), so Ray sees no error and never retries it: it would
  fail the same way again.
- the system's: the worker process was killed (SIGKILL, the kernel's OOM killer, Ray's memory
  monitor), its node was lost, or an allocation failed (``MemoryError``). Ray hears of it as an
  error (``RayActorError``, ...) and its own failure handling (``FailureConfig.max_failures``,
  per trial) starts the trial again, from its last checkpoint if it wrote one (else from the
  start): ``search.max_retries`` times, the uniform baseline :data:`BASELINE_EXTRA_RETRIES`
  more, because without it no candidate of its seed has a baseline. Then the trial is FAIL with
  one of the reasons below (:func:`tlmsearch.reasons.is_lost`), and its last checkpoint stays:
  ``tlmsearch resume --retry-failed`` continues it from there.

Two things in Ray 2.60 stand in the way, and :func:`handle_lost_workers` mends both, through
the private parts of Ray that :mod:`tlmsearch.search.execution.ray_internals` holds and checks
(Ray has no public way to do either; that module says why, and tests/test_search_ray_internals.py
fails on a Ray that lacks them):

- a worker killed by Ray's memory monitor makes the trial's actor task raise
  ``ray.exceptions.OutOfMemoryError`` (a lost node: ``NodeDiedError``), which Tune's actor
  manager does not expect: it raises ``RuntimeError("Caught unexpected exception ...")`` out of
  ``Tuner.fit`` and the whole run ends (measured). It is handed to Tune as the actor error it is
  (``RayActorError``, its text kept) instead.
- Ray prints a death twice in the driver's output (a ``(raylet)`` paragraph and a 20-line
  traceback); both are kept out, so the log says in one line what happened: the traceback by
  Tune's public ``TUNE_PRINT_ALL_TRIAL_ERRORS=0``, the paragraph by a filter on the raylet's
  messages.
"""

from __future__ import annotations

import os
import pickle
import re
from pathlib import Path
from typing import Any

from tlmsearch.reasons import NODE_LOST, OOM_KILLED, OUT_OF_MEMORY, WORKER_DIED
from tlmsearch.search.execution import ray_internals

BASELINE_EXTRA_RETRIES = 1  # the uniform baseline is retried this many times more

RETRIES = "retries"  # Optuna user attr: times the trial was started again after a system error
RETRIED_AFTER = "retried_after"  # Optuna user attr: the reason of each of those

# Ray's texts (2.60): the memory monitor's "Task was killed due to the node running low on
# memory"; a dead node's "The actor died because its node has died"; a torch allocator failure.
_OOM_KILL_TEXT = re.compile(r"running low on memory|exceeds the memory usage threshold")
_NODE_TEXT = re.compile(r"node has died|NodeDiedError", re.IGNORECASE)
_ALLOC_TEXT = re.compile(r"can't allocate memory|CUDA out of memory|\bMemoryError\b")
_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit)\b.*")
_PID = re.compile(r"\bpid[:=]\s*(\d+)")
_MEMORY = re.compile(r"was ([\d.]+GB)(?: used)? / ([\d.]+GB)")


def is_out_of_memory(err: BaseException) -> bool:
    """An allocation failed in this process (CPU or GPU): the system's doing, not the trial's."""
    if isinstance(err, MemoryError):
        return True
    name = type(err).__name__
    return name == "OutOfMemoryError" or (
        isinstance(err, RuntimeError) and bool(_ALLOC_TEXT.search(str(err)))
    )


def lost_reason(error: BaseException | str | None) -> str | None:
    """Why a trial was lost to the system, or None for an error of the trial's own.

    ``error`` is what Ray raised for the trial (or its text): a killed worker is
    ``"worker died (pid N)"``, one the memory monitor killed ``"killed: out of memory (...)"``,
    a lost node ``"node lost"``, a failed allocation ``"out of memory: ..."``.

    >>> lost_reason(MemoryError("5 GB"))
    'out of memory: MemoryError: 5 GB'
    >>> lost_reason(ValueError("bad width")) is None
    True
    """
    if error is None:
        return None
    if isinstance(error, str):
        return _from_text(error)
    from ray import exceptions as rex

    if isinstance(error, rex.RayTaskError):  # raised in the trial; a Ray Train worker's death
        cause = error.as_instanceof_cause() if hasattr(error, "as_instanceof_cause") else None
        inner = getattr(error, "cause", None)
        if isinstance(cause, rex.RayActorError):
            return lost_reason(cause)
        return lost_reason(inner) if isinstance(inner, BaseException) else None
    if isinstance(error, rex.OutOfMemoryError):
        return _with_detail(OOM_KILLED, str(error))
    if isinstance(error, rex.NodeDiedError):
        return NODE_LOST
    if isinstance(error, rex.RayActorError):
        if error.actor_init_failed:  # its constructor raised: the trial's own error
            return None
        return _from_text(str(error)) or _with_detail(WORKER_DIED, str(error))
    if isinstance(error, rex.WorkerCrashedError):
        return WORKER_DIED
    if is_out_of_memory(error):
        return f"{OUT_OF_MEMORY}: {exception_line(error)}"
    return None


def _from_text(text: str) -> str | None:
    """The reason in an error's text (an ``error.txt``), or None when it names no system error."""
    if _OOM_KILL_TEXT.search(text):
        return _with_detail(OOM_KILLED, text)
    if _NODE_TEXT.search(text):
        return NODE_LOST
    if "ActorDiedError" in text or "The actor died unexpectedly" in text:
        return _with_detail(WORKER_DIED, text)
    if "WorkerCrashedError" in text:
        return WORKER_DIED
    return None


def _with_detail(reason: str, text: str) -> str:
    """``reason`` and what Ray's text says about it: the node's memory, or the worker's pid."""
    if reason == OOM_KILLED and (m := _MEMORY.search(text)):
        return f"{reason} (node memory {m.group(1)} / {m.group(2)})"
    if reason == WORKER_DIED and (m := _PID.search(text)):
        return f"{reason} (pid {m.group(1)})"
    return reason


def exception_line(err: BaseException) -> str:
    """``ValueError: boom``: the last line of a traceback, at most 500 characters."""
    text = str(err).strip().splitlines()
    return (f"{type(err).__name__}: {text[0]}" if text else type(err).__name__)[:500]


def error_reason(trial: Any) -> str:
    """Why a Ray trial errored, in one line: a system reason, else its exception line."""
    text = ""
    try:
        lost = lost_reason(_latest_error(trial))
        if lost:
            return lost
        path = trial.error_file  # written on the driver before the scheduler hears of it
        if path and Path(path).is_file():
            text = Path(path).read_text()
            text = text[text.rfind("Failure # ") :]  # the latest failure (Ray appends each)
        else:
            text = str(trial.get_error() or "")
    except Exception:  # the reason is a courtesy; never fail the study over it
        text = ""
    lost = _from_text(text)
    if lost:
        return lost
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if _EXC_LINE.match(line):
            return line[:500]
    return (lines[-1] if lines else "the trial raised an exception")[:500]


def _latest_error(trial: Any) -> BaseException | None:
    """The trial's latest error: the driver's own copy (storage's may lag a failure behind)."""
    path = getattr(trial, "pickled_error_file", None)
    if path and Path(path).is_file():
        with open(path, "rb") as f:
            return pickle.load(f)  # written by Ray in this process (Trial.handle_error)
    getter = getattr(trial, "get_pickled_error", None)
    return getter() if getter else None


def max_failures(max_retries: int, baseline: bool) -> int:
    """Ray's ``max_failures`` for one trial: the study's retries, the baseline's one more."""
    return max_retries + (BASELINE_EXTRA_RETRIES if baseline else 0)


def retry_line(trial: Any, reason: str) -> str:
    """The log line of a trial Ray starts again: what happened, and which attempt comes next."""
    from tlmsearch.widths.space import describe

    label = describe(trial.config.get("candidate", {}))
    tokens = int((trial.last_result or {}).get("tokens") or 0)
    attempt, limit = trial.num_failures + 1, trial.max_failures + 1
    return (
        f"{'RETRY':8s} {label} (seed {trial.config.get('seed')}) lost after {tokens:,} tokens: "
        f"{reason}; attempt {attempt} of {limit}"
    )


def handle_lost_workers() -> None:
    """Let Tune retry or fail a trial whose worker Ray's memory monitor killed, quietly.

    Idempotent; call it in the driver before ``Tuner.fit``.
    """
    ray_internals.convert_actor_task_errors(as_actor_error)
    quiet_trial_errors()


def as_actor_error(exception: Exception) -> Exception:
    """A Ray error that is neither an actor's nor a task's (``OutOfMemoryError``,
    ``NodeDiedError``, ...) as the ``RayActorError`` it amounts to: the worker is gone. Its text
    keeps the error's name, so :func:`lost_reason` still tells a lost node. Every other
    exception as it is."""
    from ray.exceptions import RayActorError, RayError, RayTaskError

    if isinstance(exception, RayError) and not isinstance(
        exception, (RayActorError, RayTaskError)
    ):
        return RayActorError(error_msg=f"{type(exception).__name__}: {exception}")
    return exception


def quiet_trial_errors() -> None:
    """Keep Ray's reports of a dead trial worker out of the driver's output.

    The scheduler records the reason and the progress prints one line; the trial's
    ``error.txt`` (in the run dir, under ray/) keeps Ray's full text. Tune logs a traceback per
    failed trial unless ``TUNE_PRINT_ALL_TRIAL_ERRORS=0`` (a documented Tune setting); the
    raylet's "A worker died or was killed..." paragraphs reach the driver through Ray's error
    listener, which has no switch and logs nothing, so its printer drops those (other raylet
    messages still print; ``ray_internals``, private use 2).
    """
    os.environ.setdefault("TUNE_PRINT_ALL_TRIAL_ERRORS", "0")
    ray_internals.drop_raylet_lines(lambda line: bool(_WORKER_DEATH.search(line)))


_WORKER_DEATH = re.compile(
    r"worker died or was killed|killed due to (the node running low on memory|memory pressure)"
    r"|Worker unexpectedly exits"
)
