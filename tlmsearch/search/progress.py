"""Live progress of a search: counts, best so far, running trials, ETA (not Ray's tables).

A Ray Tune callback in the driver. On a terminal it redraws one rich status panel (the counts and
a line per running trial); off a terminal (CI logs, ``nohup``, a cluster job) it prints plain
lines: one per eval of a trial (at most one a minute per trial, see :class:`LiveProgress`) and
one per finished trial, each followed by the study's counts and ETA (:mod:`.eta`).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any

from ray.tune import Callback

from tlmsearch.search.eta import (
    Running,
    format_eta,
    progress_text,
    shown_metric,
    study_eta,
    trial_eta,
    trial_rate,
)
from tlmsearch.search.execution.failures import error_reason, retry_line
from tlmsearch.search.records import finite
from tlmsearch.widths.space import describe

__all__ = ["LiveProgress", "TableWriter", "format_eta", "outcome"]


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


class LiveProgress(Callback):
    """Counts by state, best objective so far, running trials and the study's ETA.

    ``concurrency``: trials that run at once (the ETA's slots); ``trial_tokens``: tokens per
    trial (``train.tokens``; None: no ETA). On a terminal the panel is redrawn at most once a
    second. Off a terminal each eval prints a line (tokens done of the trial's, the last val
    metric, its tokens/s and ETA, then the study's counts and ETA), but at most one per trial per
    ``min_interval_s``: an eval is the only news about a trial (its val metric changes only
    there), so a line per eval is what a log reader wants while evals are minutes apart (the
    quickstart: 3 trials x 5 evals in ~11 minutes, every eval shown); when they are seconds
    apart (tiny proxies, many trials at once) the cap keeps a log to a few lines a minute per
    trial, and each trial's end prints anyway.
    """

    def __init__(
        self,
        planned: int,
        metric: str,
        sense: str,
        concurrency: int,
        prior: dict[str, int] | None = None,
        prior_best: float | None = None,
        tty: bool | None = None,
        *,
        trial_tokens: int | None = None,
        min_interval_s: float = 60.0,
        clock: Callable[[], float] = time.time,
        simulated: bool = False,
    ) -> None:
        self.planned = planned
        self.metric = metric
        self.shown = shown_metric(metric)
        self.sign = 1.0 if sense == "minimize" else -1.0
        self.concurrency = max(1, concurrency)
        self.trial_tokens = trial_tokens
        self.min_interval_s = min_interval_s
        # train.backend simulate: a trial's tokens take no time, so no tokens/s, and the
        # study's ETA from the trials this session finished per second
        self.simulated = simulated
        self.prior = prior or {}
        self.best: tuple[float, str] | None = (
            (prior_best, "earlier session") if prior_best is not None else None
        )
        self.tty = sys.stdout.isatty() if tty is None else tty
        self._clock = clock
        self.start = clock()
        self._seen: set[str] = set()
        self._ended: dict[str, str] = {}
        self._live: Any = None
        self._last_draw = 0.0
        self._evals: dict[str, list[dict[str, Any]]] = {}  # trial -> its last two evals
        self._heard: dict[str, float] = {}  # trial -> when its last eval arrived
        self._printed: dict[str, float] = {}  # trial -> when its last eval line was printed
        self._ended_rates: list[float] = []  # tokens/s of the trials that ended, in order
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
        parts.append(f"elapsed {format_eta(self._clock() - self.start)}")
        parts.append(f"ETA {format_eta(self.eta(trials, finished))}")
        self.final = c
        return " · ".join(parts)

    def _running(self, trials: list[Any]) -> list[tuple[Any, Running]]:
        now = self._clock()
        out = []
        for t in trials:
            if t.trial_id in self._ended or t.status != "RUNNING":
                continue
            evals = self._evals.get(t.trial_id, [])
            tokens = evals[-1]["tokens"] if evals else 0
            age = now - self._heard.get(t.trial_id, now)
            out.append((t, Running(tokens, self.trial_tokens or 0, trial_rate(evals), age)))
        return out

    def _typical_rate(self) -> float | None:
        """Mean tokens/s of the last trials that ended (as many as run at once)."""
        recent = self._ended_rates[-self.concurrency :]
        return sum(recent) / len(recent) if recent else None

    def eta(self, trials: list[Any], finished: int | None = None) -> float | None:
        """Seconds left in the study (:func:`.eta.study_eta`); None while unknown."""
        if not self.trial_tokens and not self.simulated:
            return None
        if finished is None:
            c = self.tally(trials)
            finished = c["complete"] + c["pruned"] + c["failed"]
        if self.simulated:
            done = finished - sum(self.prior.values())
            elapsed = self._clock() - self.start
            left = max(0, self.planned - finished)
            return elapsed / done * left if done > 0 else None
        running = [r for _, r in self._running(trials)]
        queued = max(0, self.planned - finished - len(running))
        return study_eta(
            running, queued, self.trial_tokens, self.concurrency, self._typical_rate()
        )

    def _trial_eta(self, info: Running) -> float | None:
        return trial_eta(info) if self.trial_tokens else None  # no total: no ETA

    def _trial_text(self, trial: Any, info: Running) -> str:
        label = describe(trial.config.get("candidate", {}))
        evals = self._evals.get(trial.trial_id) or [{}]
        value = evals[-1].get("value")  # Ray updates trial.last_result after the callbacks
        text = progress_text(
            info.tokens,
            self.trial_tokens,
            self.shown,
            value,
            info.rate,
            self._trial_eta(info),
            self.simulated,
        )
        return f"{label} (seed {trial.config.get('seed')}): {text}"

    def panel(self, trials: list[Any]) -> str:
        """The terminal display: the counts line, then one line per running trial."""
        rows = [f"  {self._trial_text(t, r)}" for t, r in self._running(trials)]
        return "\n".join([self.line(trials), *rows])

    def _note_eval(self, trial: Any, result: dict[str, Any]) -> None:
        tokens, wall = result.get("tokens"), result.get("wall_s")
        if not finite(tokens):
            return
        evals = self._evals.setdefault(trial.trial_id, [])
        evals.append({"tokens": float(tokens), "wall_s": wall, "value": result.get(self.shown)})
        del evals[:-2]
        self._heard[trial.trial_id] = self._clock()

    def eval_line(self, trial: Any, result: dict[str, Any]) -> str:
        """``EVAL     <label> (seed s): 400,000/2,000,000 tokens (20%), val_bpb ..., ETA ..``"""
        evals = self._evals.get(trial.trial_id, [])
        tokens = float(result.get("tokens") or 0)
        info = Running(tokens, self.trial_tokens or 0, trial_rate(evals))
        label = describe(trial.config.get("candidate", {}))
        value, eta_s = result.get(self.shown), self._trial_eta(info)
        text = progress_text(
            tokens, self.trial_tokens, self.shown, value, info.rate, eta_s, self.simulated
        )
        return f"{'EVAL':8s} {label} (seed {trial.config.get('seed')}): {text}"

    def _note_end(self, trial: Any, error: bool = False) -> str | None:
        if trial.trial_id in self._seen:
            return None
        self._seen.add(trial.trial_id)
        kind = "failed" if error else outcome(trial, ended=True)
        self._ended[trial.trial_id] = kind
        rate = trial_rate(self._evals.pop(trial.trial_id, []))
        if rate is not None:
            self._ended_rates.append(rate)
        self._heard.pop(trial.trial_id, None)
        self._printed.pop(trial.trial_id, None)
        last = trial.last_result or {}
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
        self._live.update(self.panel(trials))

    def _print(self, text: str, trials: list[Any]) -> None:
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            print(f"{text}   [{self.line(trials)}]", flush=True)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self._draw(trials)

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict, **info: Any
    ) -> None:
        if result.get("final") or trial.trial_id in self._ended:
            return  # the end line says it
        self._note_eval(trial, result)
        if self.tty:
            self._draw(trials)
            return
        now = self._clock()
        last = self._printed.get(trial.trial_id)
        if last is None or now - last >= self.min_interval_s:
            self._printed[trial.trial_id] = now
            self._print(self.eval_line(trial, result), trials)

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


# The most of the driver's time the mid-run table refresh may take: a refresh reads every trial
# and builds the Evidence, so its cost grows with the study; the wait after one grows with it.
WRITE_SHARE = 0.05


class TableWriter(Callback):
    """Refresh trials/curves tables after each finished trial, so reports work mid-run.

    At most every ``min_interval_s``, and never more than :data:`WRITE_SHARE` of the driver's
    time: after a refresh that took d seconds the next waits d / WRITE_SHARE (20 d), so at
    thousands of trials (a refresh of several seconds) the driver still launches trials
    (benchmarks/scale.py)."""

    def __init__(self, run_dir: str, min_interval_s: float = 20.0) -> None:
        self.run_dir = run_dir
        self.min_interval_s = min_interval_s
        self._last = -math.inf
        self._took = 0.0

    def _write(self) -> None:
        # Runs in the driver's event loop, between trial launches (the run writes the final
        # tables itself).
        start = time.time()
        if start - self._last < max(self.min_interval_s, self._took / WRITE_SHARE):
            return
        from tlmsearch.search import export as _export

        try:
            cfg, study = _export.open_run(self.run_dir)
            _export.write_tables(self.run_dir, study, cfg)
        except Exception as err:  # a table refresh must never stop the study
            print(f"warning: could not refresh the tables: {err}", file=sys.stderr)
        finally:
            self._last = time.time()
            self._took = self._last - start

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        from tlmsearch.search.execution import faults

        faults.crash_at("trials")  # the test hook (inert): the driver dies mid-study
        self._write()

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        self._write()
