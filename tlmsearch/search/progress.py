"""Live progress of a search in the terminal: counts, best so far, ETA (not Ray's tables).

A Ray Tune callback in the driver. On a terminal it redraws one rich status panel; off a
terminal (CI, logs) it prints one line per finished trial.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from ray.tune import Callback

from tlmsearch.search.failures import error_reason, retry_line
from tlmsearch.space import describe


def outcome(trial: Any, ended: bool = False) -> str:
    """A Ray trial's tlmsearch state: running, pending, complete, pruned or failed.

    ``ended``: the trial is known to have ended (Ray calls the callback before it updates the
    status).
    """
    status = trial.status
    if status == "ERROR":
        return "failed"
    if status in ("RUNNING", "PENDING", "PAUSED") and not ended:
        return status.lower()
    last = trial.last_result or {}
    if not last.get("final"):
        return "pruned"
    return "complete" if last.get("status", "completed") == "completed" else "failed"


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


class LiveProgress(Callback):
    """Counts by state, best objective so far and an ETA, redrawn at most once a second."""

    def __init__(
        self,
        planned: int,
        metric: str,
        sense: str,
        concurrency: int,
        prior: dict[str, int] | None = None,
        prior_best: float | None = None,
        tty: bool | None = None,
    ) -> None:
        self.planned = planned
        self.metric = metric
        self.sign = 1.0 if sense == "minimize" else -1.0
        self.concurrency = max(1, concurrency)
        self.prior = prior or {}
        self.best: tuple[float, str] | None = (
            (prior_best, "earlier session") if prior_best is not None else None
        )
        self.tty = sys.stdout.isatty() if tty is None else tty
        self.start = time.time()
        self._seen: set[str] = set()
        self._ended: dict[str, str] = {}
        self._live: Any = None
        self._last_draw = 0.0
        self._durations: list[float] = []
        self.final: dict[str, int] = {}

    def __getstate__(self) -> dict[str, Any]:  # Ray pickles callbacks; a live display can't be
        state = dict(self.__dict__)
        state["_live"] = None
        return state

    # -- state --------------------------------------------------------------------------------

    def tally(self, trials: list[Any]) -> dict[str, int]:
        out = {k: int(self.prior.get(k, 0)) for k in ("complete", "pruned", "failed")}
        out.update(running=0, pending=0)
        for t in trials:
            kind = self._ended.get(t.trial_id) or outcome(t)
            if kind == "paused":
                kind = "pending"
            out[kind] = out.get(kind, 0) + 1
        return out

    def line(self, trials: list[Any]) -> str:
        c = self.tally(trials)
        finished = c["complete"] + c["pruned"] + c["failed"]
        parts = [
            f"trials {finished}/{self.planned}",
            f"{c['complete']} done",
            f"{c['running']} running",
            f"{c['pruned']} pruned",
            f"{c['failed']} failed",
        ]
        if self.best is not None:
            parts.append(f"best {self.metric} {self.best[0]:.4f} ({self.best[1]})")
        parts.append(f"elapsed {format_eta(time.time() - self.start)}")
        parts.append(f"ETA {format_eta(self.eta(finished, c['running']))}")
        self.final = c
        return " · ".join(parts)

    def eta(self, finished: int, running: int) -> float | None:
        """Remaining trials x mean trial time / concurrency (pruned trials count as short)."""
        if not self._durations:
            return None
        remaining = max(0, self.planned - finished)
        mean = sum(self._durations) / len(self._durations)
        return remaining * mean / min(self.concurrency, max(1, remaining, running))

    def _note_end(self, trial: Any, error: bool = False) -> str | None:
        if trial.trial_id in self._seen:
            return None
        self._seen.add(trial.trial_id)
        kind = "failed" if error else outcome(trial, ended=True)
        self._ended[trial.trial_id] = kind
        last = trial.last_result or {}
        wall = last.get("wall_s")
        if isinstance(wall, (int, float)) and math.isfinite(wall):
            self._durations.append(float(wall))
        label = describe(trial.config.get("candidate", {}))
        seed = trial.config.get("seed")
        value = last.get(self.metric)
        usable = isinstance(value, (int, float)) and math.isfinite(value)
        if (
            kind == "complete"
            and usable
            and (self.best is None or self.sign * value < self.sign * self.best[0])
        ):
            self.best = (float(value), f"{label}, seed {seed}")
        shown = f" {self.metric} {value:.4f}" if isinstance(value, float) else ""
        tokens = int(last.get("tokens") or 0)
        text = f"{kind.upper():8s} {label} (seed {seed}){shown} after {tokens:,} tokens"
        if kind == "failed":  # why, in the same line (Ray's own report is kept out)
            text += f": {error_reason(trial) if error else last.get('reason') or 'failed'}"
            retries = getattr(trial, "num_failures", 1) - 1 if error else 0
            text += f"; retried {retries} time{'s' * (retries > 1)}" if retries > 0 else ""
        return text

    # -- Ray hooks ----------------------------------------------------------------------------

    def _draw(self, trials: list[Any], force: bool = False) -> None:
        now = time.time()
        if not self.tty or (not force and now - self._last_draw < 1.0):
            return
        self._last_draw = now
        if self._live is None:
            from rich.live import Live

            self._live = Live("", refresh_per_second=2, transient=False)
            self._live.start()
        self._live.update(self.line(trials))

    def _print(self, text: str, trials: list[Any]) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(f"{text}   [{self.line(trials)}]", flush=True)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self._draw(trials)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any):
        self._end(trials, trial, error=False)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any):
        self._end(trials, trial, error=True)

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any):
        self._print(retry_line(trial, error_reason(trial)), trials)

    def _end(self, trials: list[Any], trial: Any, error: bool) -> None:
        text = self._note_end(trial, error)
        if text:
            self._print(text, trials)
        self._draw(trials, force=True)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        self.line(trials)
        self.close()

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class TableWriter(Callback):
    """Refresh trials/curves tables after each finished trial, so reports work mid-run."""

    def __init__(self, run_dir: str, min_interval_s: float = 20.0) -> None:
        self.run_dir = run_dir
        self.min_interval_s = min_interval_s
        self._last = 0.0

    def _write(self) -> None:
        # Runs in the driver's event loop, between trial launches: at most every few seconds
        # (the run writes the final tables itself).
        if time.time() - self._last < self.min_interval_s:
            return
        self._last = time.time()
        from tlmsearch.search import export as _export

        try:
            cfg, study = _export.open_run(self.run_dir)
            _export.write_tables(self.run_dir, study, cfg)
        except Exception as err:  # a table refresh must never stop the study
            print(f"warning: could not refresh the tables: {err}", file=sys.stderr)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._write()

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._write()
