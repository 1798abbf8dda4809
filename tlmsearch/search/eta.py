"""How long a search has left: the tokens left over the throughput measured while trials share.

Pure (no Ray, no Optuna): the live progress and ``tlmsearch status`` both call it.

A study is a queue of trials on ``slots`` trial slots (``search.concurrency``, or fewer where
the cluster fits fewer trials at once). A running trial has its tokens left and a rate: tokens/s
over its last eval interval, measured while it shared the machine with the trials beside it. A
queued trial has a whole trial's tokens left at the running trials' mean rate. The study ends
when its last slot empties, each queued trial taking the slot that frees first (list
scheduling). With every slot busy this is the tokens left over the aggregate rate (the per-trial
rate times the trials at once); at the tail it is the slowest running trial, never an average of
finished trials' durations: three trials at once, the first one ends, and the other two, started
with it and training as fast, are seconds from the end, so the ETA is seconds, not another
trial's length. Finished-trial counts do not enter. Pruned trials end early, so with a pruner the
ETA is an upper bound.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tlmsearch.search.records import finite


@dataclass(frozen=True)
class Running:
    """A running trial: ``tokens`` done of ``total``; ``rate`` tokens/s (None: no eval yet),
    measured ``age_s`` seconds ago."""

    tokens: float
    total: float
    rate: float | None = None
    age_s: float = 0.0


def _rate_ok(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def trial_rate(evals: Sequence[Mapping[str, Any]]) -> float | None:
    """Tokens/s over the last interval between two evals (``tokens``, ``wall_s``); with one eval,
    over the trial so far (setup included: slower, on the safe side); None without one.

    >>> trial_rate([{"tokens": 400, "wall_s": 10}, {"tokens": 800, "wall_s": 12}])
    200.0
    """
    points = [
        (float(e["tokens"]), float(e["wall_s"]))
        for e in evals
        if finite(e.get("tokens")) and finite(e.get("wall_s"))
    ]
    if len(points) >= 2:
        (t0, w0), (t1, w1) = points[-2], points[-1]
        if t1 > t0 and w1 > w0:
            return (t1 - t0) / (w1 - w0)
    if points and points[-1][0] > 0 and points[-1][1] > 0:
        return points[-1][0] / points[-1][1]
    return None


def trial_eta(trial: Running, rate: float | None = None) -> float | None:
    """Seconds until ``trial`` has trained ``total`` tokens: left / rate - age, at least 0.

    ``rate`` stands in where the trial has none measured yet.

    >>> trial_eta(Running(tokens=800, total=2000, rate=100.0, age_s=2.0))
    10.0
    """
    r = trial.rate if _rate_ok(trial.rate) else rate
    if not _rate_ok(r):
        return None
    age = trial.age_s if _rate_ok(trial.rate) else 0.0  # no measurement: no time since it
    return max(0.0, max(0.0, trial.total - trial.tokens) / r - age)


def study_eta(
    running: Sequence[Running],
    queued: int,
    tokens_per_trial: float,
    slots: int,
    typical_rate: float | None = None,
) -> float | None:
    """Seconds until the last trial of the study ends; None while no rate is known.

    ``running``: the trials running now; ``queued``: trials not started, ``tokens_per_trial``
    each; ``slots``: trials that run at once. A queued trial and a running one without a rate
    yet train at the mean rate of the running trials (``typical_rate``, e.g. that of the
    trials that just ended, where none is measured). Running trials beyond ``slots`` (started
    by the searcher, waiting for resources) wait in the queue with what they have left.

    >>> study_eta([Running(1_998_000, 2_000_000, 1000.0)] * 2, 0, 2_000_000, slots=3)
    2.0
    """
    if slots < 1:
        raise ValueError(f"slots must be >= 1, but got {slots=}")
    if queued < 0:
        raise ValueError(f"queued must be >= 0, but got {queued=}")
    if not running and queued == 0:
        return 0.0
    rates = [t.rate for t in running if _rate_ok(t.rate)]
    typical = sum(rates) / len(rates) if rates else typical_rate
    if not _rate_ok(typical):
        return None
    # Measured trials hold the slots first (they are surely training), furthest along first.
    order = sorted(running, key=lambda t: (not _rate_ok(t.rate), -(t.tokens / max(t.total, 1))))
    busy = [trial_eta(t, typical) or 0.0 for t in order[:slots]]
    free_at = busy + [0.0] * (slots - len(busy))
    waiting = [max(0.0, t.total - t.tokens) / typical for t in order[slots:]]
    waiting += [tokens_per_trial / typical] * queued
    heapq.heapify(free_at)
    end = max(free_at)
    for seconds in waiting:
        done = heapq.heappop(free_at) + seconds
        end = max(end, done)
        heapq.heappush(free_at, done)
    return end


def shown_metric(metric: str) -> str:
    """The metric a progress line shows: the first objective where an eval measures it, else
    ``val_loss`` (e.g. for ``params``)."""
    measured = ("train_loss", "val_loss", "val_ppl", "val_bpb", "tokens_per_s", "mfu")
    return metric if metric in measured else "val_loss"


def format_eta(seconds: float | None) -> str:
    """``None`` -> ``?``; 75 -> ``1m15s``; 3700 -> ``1h01m``.

    >>> format_eta(75), format_eta(3700), format_eta(None)
    ('1m15s', '1h01m', '?')
    """
    if seconds is None or not math.isfinite(seconds):
        return "?"
    s = round(seconds)
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def progress_text(
    tokens: float,
    total: float | None,
    metric: str,
    value: Any,
    rate: float | None,
    eta_s: float | None,
    simulated: bool = False,
) -> str:
    """One running trial: ``800,000/2,000,000 tokens (40%), val_bpb 2.3456, 4,000 tok/s, ETA
    5m00s`` (parts not known yet are left out; the ETA says ``?``). A ``simulated`` trial
    (``train.backend: simulate``) trains nothing: no speed or ETA, it says so instead.

    >>> progress_text(800_000, 2_000_000, "val_bpb", 2.34562, 4000.0, 300.0)
    '800,000/2,000,000 tokens (40%), val_bpb 2.3456, 4,000 tok/s, ETA 5m00s'
    >>> progress_text(800_000, 2_000_000, "val_bpb", 2.34562, 4e9, 0.0, simulated=True)
    '800,000/2,000,000 tokens (40%), val_bpb 2.3456, simulated'
    """
    parts = [f"{int(tokens):,} tokens"]
    if total:
        parts = [f"{int(tokens):,}/{int(total):,} tokens ({100 * tokens / total:.0f}%)"]
    if finite(value):
        parts.append(f"{metric} {value:.4f}")
    if simulated:
        return ", ".join([*parts, "simulated"])
    if _rate_ok(rate):
        parts.append(f"{rate:,.0f} tok/s")
    parts.append(f"ETA {format_eta(eta_s)}")
    return ", ".join(parts)
