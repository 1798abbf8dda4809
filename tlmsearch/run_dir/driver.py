"""Whether a run's driver is still there: run.json's ``driver_host``, ``driver_pid``,
``heartbeat`` and ``phase``, read by ``tlmsearch status``, the report and ``resume``.

The driver (``tlmsearch run`` or ``resume``) writes its host and pid when it starts, its
``heartbeat`` (UTC, ISO 8601) every :data:`HEARTBEAT_S` seconds from a thread of its own, and the
``phase`` it is in (:data:`PHASES`). A run.json that says ``running`` is believed only while its
driver is there: on the driver's own host, while its pid is the live process that started at
``driver_start``; from another host (a login node, another node of the allocation), while the
heartbeat is younger than :data:`STALE_S` seconds. Otherwise the driver is gone (killed,
crashed, its node preempted) and ``tlmsearch resume`` completes the run from where it stopped.

Pure reading (no writing: run_dir.tables.write_status writes run.json), so status, the report
and the runner can all ask.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

HEARTBEAT_S = 30.0  # the driver writes its heartbeat this often
# From another host, a heartbeat older than this means the driver is gone: ten beats missed
# (a shared file system may show a file's new contents a minute late; a driver stalled that long
# is as good as gone: its trials' results wait for it).
STALE_S = 300.0
# What the driver is doing, in order (run.json's ``phase``).
PHASES = ("preparing data", "trials", "tables", "best", "report", "done")  # best: best.yaml


def started(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (``/proc/PID/stat``'s field 22),
    or None where there is no /proc (or no such process): with the pid, it names one process
    for good, as a recycled pid starts later."""
    fields = _stat(pid)
    try:
        return int(fields[19])  # fields after the name start at the third: 22 - 3
    except (TypeError, IndexError, ValueError):
        return None


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the process name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: Any, start: Any = None) -> bool:
    """Whether ``pid`` is a live process on this host, and the one that started at ``start``
    (``driver_start`` in run.json: a recycled pid is another process) when that is known.

    A run.json written before ``driver_start`` names only the pid: then the process must be a
    tlmsearch one (pid 1, init, is not a driver):

    >>> alive(os.getpid(), started(os.getpid())), alive(os.getpid(), -1), alive(1)
    (True, False, False)
    """
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: /proc still says whether it is ours
    fields = _stat(pid)
    if not fields:
        return True  # no /proc: the pid is all there is to go by
    if fields[0] == "Z":  # exited, not yet reaped by its parent
        return False
    if not isinstance(start, int):  # a run.json without driver_start: a tlmsearch process
        try:
            return b"tlmsearch" in Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            return True
    return len(fields) > 19 and fields[19] == str(start)


def beat_age(info: Mapping[str, Any], now: float | None = None) -> float | None:
    """Seconds since the driver's last heartbeat (None: none recorded)."""
    beat = info.get("heartbeat")
    if not isinstance(beat, str):
        return None
    try:
        at = datetime.fromisoformat(beat).timestamp()
    except ValueError:
        return None
    return max(0.0, (time.time() if now is None else now) - at)


def driver_gone(
    info: Mapping[str, Any], run: str | Path, now: float | None = None, host: str | None = None
) -> str | None:
    """The line that replaces ``running`` when the driver of a run that says so is gone, e.g.
    ``driver gone (last seen 2026-05-01T10:00:00+00:00 on node7, pid 4242, while trials):
    run `tlmsearch resume runs/x``` ; None while it is there (or the run does not say running).

    A driver that died while writing the report (after the run's final status) leaves
    ``phase: report``: the line then says the report is missing.

    >>> driver_gone({"status": "running", "driver_host": "elsewhere", "driver_pid": 1,
    ...              "heartbeat": "2026-01-01T00:00:00+00:00", "phase": "trials"}, "runs/x",
    ...             now=1e10, host="here")[:34]
    'driver gone (last seen 2026-01-01T'
    """
    status, phase = info.get("status"), info.get("phase")
    if status != "running" and phase != "report":
        return None
    here = socket.gethostname() if host is None else host
    pid, where = info.get("driver_pid"), info.get("driver_host")
    if where == here:
        if alive(pid, info.get("driver_start")):
            return None
    else:
        age = beat_age(info, now)
        if age is None or age <= STALE_S:  # no heartbeat recorded: cannot tell, believe it
            return None
    seen = info.get("heartbeat") or info.get("updated") or "never"
    during = f", while {phase}" if phase else ""
    last = f"last seen {seen} on {where}, pid {pid}{during}"
    if status != "running":  # finished, but the report was never written
        return f"report not written: the driver stopped ({last}): run `tlmsearch report {run}`"
    return f"driver gone ({last}): run `tlmsearch resume {run}`"
