"""Fault injection for the tests of lost trials; inert unless ``TLMSEARCH_TEST_FAULTS`` is set.

The variable names a folder; Ray's workers inherit it from the driver that starts Ray. At each
eval the trainable appends ``{"pid", "seed", "candidate", "tokens", "compile_cache"}`` (the
process's torch.compile cache) to ``FOLDER/evals.jsonl``.
``FOLDER/faults.json`` may ask for faults at the first eval of a trial's first ``n`` attempts
(an attempt is a worker process: a retry runs in a new one)::

    {"kill": [[candidate, seed, n], ...], "hog": [[candidate, seed, n], ...], "cap_bytes": N}

- ``kill``: the worker appends its pid to ``FOLDER/waiting.jsonl`` and waits (at most 120 s)
  for the test to SIGKILL it: killed mid-trial, from outside, with no race against the trial's
  end.
- ``hog``: the worker allocates memory, touching every page, until something kills it (Ray's
  memory monitor, in the test), or raises after ``cap_bytes``.

``"crash": [phase, ...]`` stops the driver dead (``os._exit``: no clean-up, no final status,
as a kill or a lost node would) when it enters that phase (:func:`crash_at`, one of
:data:`tlmsearch.run_dir.driver.PHASES`: "preparing data", "trials" (when a trial completes),
"tables", "best", "report"); the phase is appended to ``FOLDER/crashed.jsonl`` first.

``"shift": [[candidate, delta], ...]`` adds ``delta`` to that candidate's reported val_bpb and
val_loss at every eval (:func:`shifted`): a candidate clearly worse than the others, so a test
can count on a pruner stopping it.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tlmsearch.constants import COMPILE_CACHE_ENV
from tlmsearch.widths.candidate import Candidate

ENV = "TLMSEARCH_TEST_FAULTS"
CRASH_EXIT = 86  # the exit status of a driver the hook crashed


def warning() -> str | None:
    """A line for the run's log while the hook is armed (a variable leaked from a test shell
    would otherwise change a real run's numbers unseen); None when inert."""
    folder = os.environ.get(ENV)
    if not folder:
        return None
    return (
        f"warning: {ENV}={folder} is set: the test fault hook is armed (kill, hog, shift in "
        f"{folder}/faults.json); unset it for a real run"
    )


def at_eval(candidate: Candidate, seed: int, tokens: Any) -> None:
    folder = os.environ.get(ENV)
    if not folder:
        return
    root = Path(folder)
    me = {
        "pid": os.getpid(),
        "seed": seed,
        "candidate": dict(candidate),
        "tokens": tokens,
        "compile_cache": os.environ.get(COMPILE_CACHE_ENV),
    }
    pids = {e["pid"] for e in read_jsonl(root / "evals.jsonl") if _same(e, me)}
    with (root / "evals.jsonl").open("a") as f:
        f.write(json.dumps(me, sort_keys=True) + "\n")
    spec = root / "faults.json"
    if me["pid"] in pids or not spec.is_file():
        return  # not the attempt's first eval
    faults = json.loads(spec.read_text())
    attempt = len(pids) + 1

    def asked(kind: str) -> bool:
        return any(
            c == me["candidate"] and s == seed and attempt <= n for c, s, n in faults.get(kind, [])
        )

    if asked("kill"):
        with (root / "waiting.jsonl").open("a") as f:
            f.write(json.dumps(me, sort_keys=True) + "\n")
        time.sleep(120)
        raise RuntimeError("test fault: waited 120 s to be killed")
    if asked("hog"):
        _allocate(int(faults["cap_bytes"]))


def crash_at(phase: str) -> None:
    """Stop this process at once when ``faults.json`` asks for a crash in ``phase``."""
    folder = os.environ.get(ENV)
    spec = Path(folder) / "faults.json" if folder else None
    if spec is None or not spec.is_file():
        return
    if phase in json.loads(spec.read_text()).get("crash", []):
        with (Path(folder) / "crashed.jsonl").open("a") as f:
            f.write(json.dumps({"pid": os.getpid(), "phase": phase}) + "\n")
        os._exit(CRASH_EXIT)


def shifted(candidate: Candidate, values: dict[str, Any]) -> dict[str, Any]:
    """``values`` with the ``shift`` of ``faults.json`` for ``candidate`` added (val_bpb,
    val_loss; val_ppl follows); ``values`` itself when inert or not asked."""
    folder = os.environ.get(ENV)
    spec = Path(folder) / "faults.json" if folder else None
    if spec is None or not spec.is_file():
        return values
    delta = sum(d for c, d in json.loads(spec.read_text()).get("shift", []) if c == candidate)
    if not delta or "val_loss" not in values:
        return values
    out = {**values, "val_loss": values["val_loss"] + delta}
    out["val_bpb"] = values.get("val_bpb", 0.0) + delta
    out["val_ppl"] = math.exp(min(out["val_loss"], 700.0))
    return out


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a JSON-lines file another process may be appending to."""
    if not path.is_file():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written
            continue
    return out


def _same(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    return a["seed"] == b["seed"] and a["candidate"] == b["candidate"]


def _allocate(cap: int, chunk: int = 64 << 20) -> None:
    """Grow by ``chunk`` bytes (pages touched) every 50 ms until killed, or raise at ``cap``."""
    held = []
    while len(held) * chunk < cap:
        held.append(bytearray(b"\1") * chunk)
        time.sleep(0.05)
    raise RuntimeError(f"test fault: still alive after allocating {cap / 2**30:.1f} GiB")
