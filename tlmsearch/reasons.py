"""Why a trial failed, as far as the statistics care: the system's loss, or the candidate's own.

A leaf (docs/contributing.md, rule 19): the failure handling (search/execution/failures.py), the
statistics (stats/) and the race (racing.py) must agree on which failed seeds say something about a
candidate, so the one predicate lives here, importing nothing.

- *lost* (:func:`is_lost`): a dead worker or node, memory. The seed says nothing about the
  candidate's numbers: it is *missing* in the ranking and in the race, and a retry may
  continue it from its checkpoint.
- anything else (diverged, a non-finite objective, an exception): the candidate's own; it
  would fail the same way again. The seed *censors* the candidate in the ranking and stops
  its race.
"""

OOM_KILLED = "killed: out of memory"  # Ray's memory monitor killed the worker
OUT_OF_MEMORY = "out of memory"  # an allocation failed inside the trial (MemoryError)
WORKER_DIED = "worker died"  # SIGKILL, the kernel's OOM killer, a crash (SIGSEGV)
NODE_LOST = "node lost"
LOST = (OOM_KILLED, OUT_OF_MEMORY, WORKER_DIED, NODE_LOST)


def is_lost(reason: str | None) -> bool:
    """Whether a trial's recorded reason is the system's (a lost worker or node, memory), not
    its own.

    >>> is_lost("worker died (pid 41213)"), is_lost("diverged: loss nan"), is_lost(None)
    (True, False, False)
    """
    return bool(reason) and str(reason).startswith(LOST)
