"""Optuna pruners inside Ray Tune: a scheduler that asks them, and a searcher that tells states.

Ray's ``OptunaSearch`` creates its study with a ``NopPruner`` and never calls ``should_prune``.
Ray calls the *scheduler* before the searcher on every result, so :class:`OptunaPruningScheduler`
reports each eval to the Optuna trial at step = tokens seen, asks the study's pruner, and on a
prune tells Optuna PRUNED itself and returns STOP (otherwise the searcher would tell COMPLETE with
the last value). It also records what each trial is (widths, node, learning curve) as Optuna
user attributes, so the storage alone describes the run (``tlmsearch status`` reads it live).

:class:`StudySearch` tells Optuna the end state from the trainable's final report: COMPLETE with
the objective values, or FAIL with the reason (divergence, an exception, a lost worker). A trial
stopped with no final report (the driver was interrupted) stays RUNNING in Optuna; ``tlmsearch
resume`` runs it again. A trial Ray starts again after a system error (:mod:`.failures`) keeps
its Optuna trial; the scheduler sets how often (Ray's per-trial ``max_failures``) and records
each retry.
"""

from __future__ import annotations

import math
import time
from typing import Any

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search.optuna import OptunaSearch

from tlmsearch.config import EVAL_KEYS
from tlmsearch.reasons import is_lost
from tlmsearch.search import records
from tlmsearch.search.attrs import REPLAY, WEIGHTS
from tlmsearch.search.failures import (
    RETRIED_AFTER,
    RETRIES,
    error_reason,
    max_failures,
)

STATIC_KEYS = ("widths", *records.STATIC_KEYS)


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _clean(x: Any) -> Any:
    """JSON-safe scalars for Optuna user attributes (NaN -> None)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):  # numpy scalar
        return _clean(x.item())
    return x


def _is_baseline(trial: Any) -> bool:
    cand = (getattr(trial, "config", None) or {}).get("candidate") or {}
    return cand.get("shape", "uniform") == "uniform"


def find_study_search(search_alg: Any) -> StudySearch | None:
    """Unwrap Ray's SearchGenerator / ConcurrencyLimiter down to our searcher.

    Looked up on every call, not cached: a restored experiment holds new objects.
    """
    node, seen = search_alg, 0
    while node is not None and seen < 8:
        if isinstance(node, StudySearch):
            return node
        node, seen = getattr(node, "searcher", None), seen + 1
    return None


class StudySearch(OptunaSearch):
    """OptunaSearch that tells COMPLETE / FAIL from the trainable's final report.

    With ``race`` (a study config whose ``search.racing`` is set) the number of trials is not
    known in advance: after each trial ends the race may queue more seeds (search/race.py), so
    :meth:`suggest` waits (None) while trials that could add seeds are running, and ends the
    search (``FINISHED``) when the queue is empty, nothing runs and no candidate is left to
    sample.
    """

    def __init__(
        self, *args: Any, race: Any = None, open_ended: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._race = race
        # a study whose trials are an upper bound (samplers.open_ended): a race, or a sampled
        # space with settings (uniform queued at each new setting value)
        self._open = open_ended if open_ended is not None else race

    def suggest(self, trial_id: str) -> dict | str | None:
        if self._open is not None and trial_id not in self._ot_trials:
            import optuna
            from ray.tune.search import Searcher

            from tlmsearch.search.samplers import may_sample

            waiting = self._ot_study.get_trials(
                deepcopy=False, states=(optuna.trial.TrialState.WAITING,)
            )
            if not waiting and not may_sample(self._open, self._ot_study):
                live = set(self._ot_trials) - self._completed_trials
                return None if live else Searcher.FINISHED
        return super().suggest(trial_id)

    def trial_ended(self) -> None:
        """After any trial's end state is told: queue the seeds the race says are due."""
        if self._race is not None:
            from tlmsearch.search.race import advance

            advance(self._ot_study, self._race)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # The scheduler already reported this eval at step = tokens (Ray's would use the
        # iteration count, which differs between trials with different eval spacing).
        return

    def on_trial_complete(
        self, trial_id: str, result: dict | None = None, error: bool = False
    ) -> None:
        import optuna

        if trial_id in self._completed_trials or trial_id not in self._ot_trials:
            return
        ot = self._ot_trials[trial_id]
        state, values, reason = optuna.trial.TrialState.FAIL, None, ""
        if error:
            reason = ot.user_attrs.get("reason") or "the trial raised an exception"
        elif result and result.get("final"):
            status = result.get("status", "completed")
            metrics = self.metric if isinstance(self.metric, list) else [self.metric]
            vals = [result.get(m) for m in metrics]
            if status != "completed":
                reason = result.get("reason") or status
            elif not all(_finite(v) for v in vals):
                shown = dict(zip(metrics, vals, strict=True))
                reason = f"objective is not a finite number: {shown}"
            else:
                state, values = optuna.trial.TrialState.COMPLETE, [float(v) for v in vals]
        else:
            return  # interrupted, not finished: left RUNNING for `tlmsearch resume`
        if reason:
            ot.set_user_attr("reason", reason[:500])
        if values is not None and not isinstance(self.metric, list):
            values = values[0]
        self._ot_study.tell(ot, values, state=state)
        self._completed_trials.add(trial_id)
        self.trial_ended()


class OptunaPruningScheduler(FIFOScheduler):
    """FIFO scheduling plus an Optuna pruner consulted on every eval (step = tokens seen).

    ``grace_tokens``: never prune before this many tokens (at least the LR warm-up);
    ``total_tokens``: nor at the run's last eval, when stopping saves nothing.
    ``metric``: the single objective the pruner watches; None (several objectives) disables
    pruning and intermediate values (Optuna keeps none for multi-objective studies).
    ``max_retries``: how often Ray starts a trial again after a system error (the uniform
    baseline: once more, :func:`~tlmsearch.search.failures.max_failures`).
    ``keep_weights``: ``search.keep_weights``, applied to a trial's checkpoints when it ends
    (completed, pruned or failed in its final report); not when Ray retries it, nor when the
    system lost it for good (its last checkpoint is for ``resume --retry-failed``).
    """

    def __init__(
        self,
        pruner: Any,
        grace_tokens: int,
        metric: str | None,
        total_tokens: int | None = None,
        max_retries: int = 0,
        keep_weights: str = "none",
    ) -> None:
        super().__init__()
        if grace_tokens < 0:
            raise ValueError(f"grace_tokens must be >= 0, but got {grace_tokens=}")
        self._pruner = pruner
        self._grace = grace_tokens
        self._total = total_tokens  # an eval at the end saves nothing: never prune there
        self._objective = metric
        self._max_retries = max_retries
        self._keep_weights = keep_weights
        self._curves: dict[str, list[dict[str, Any]]] = {}
        self._reported: dict[str, set[int]] = {}
        self._errors: dict[str, list[str]] = {}  # trial id -> reason of each error so far
        self._pruned: set[str] = set()  # trial ids this scheduler stopped

    # -- helpers ------------------------------------------------------------------------------

    def _ot_trial(self, controller: Any, trial_id: str) -> tuple[Any, Any]:
        search = find_study_search(controller.search_alg)
        if search is None or trial_id in search._completed_trials:
            return search, None
        return search, search._ot_trials.get(trial_id)

    def _record(self, ot: Any, trial_id: str, result: dict) -> None:
        curve = self._curves.setdefault(trial_id, [])
        if not result.get("final"):
            tokens = result.get("tokens")
            if curve and _finite(tokens) and _finite(curve[-1].get("tokens")):
                # a retried trial starts again: its evals replace the lost attempt's
                curve[:] = [ev for ev in curve if ev["tokens"] < tokens]
            curve.append({k: _clean(result.get(k)) for k in EVAL_KEYS})
            ot.set_user_attr("curve", curve)
        if len(curve) <= 1 or result.get("final"):
            for k in STATIC_KEYS:
                if k in result:
                    ot.set_user_attr(k, _clean(result[k]) if k != "widths" else result[k])
        if result.get("final") and result.get("traceback"):  # the trial raised
            ot.set_user_attr("traceback", str(result["traceback"]))
        ot.set_user_attr("metrics", {k: _clean(result.get(k)) for k in EVAL_KEYS})
        ot.set_user_attr("reported_at", time.time())  # `tlmsearch status`: age of the last eval

    # -- Ray hooks ----------------------------------------------------------------------------

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        # Ray reads this when the trial errors (Trial.should_recover): per trial, so the
        # baseline can have more than FailureConfig's.
        trial.max_failures = max_failures(self._max_retries, _is_baseline(trial))
        _, ot = self._ot_trial(tune_controller, trial.trial_id)
        if ot is None:
            return
        errors = self._errors.get(trial.trial_id)
        if errors:  # added again after an error: Ray retries it (Tune's _requeue_trial)
            ot.set_user_attr(RETRIES, len(errors))
            ot.set_user_attr(RETRIED_AFTER, errors)
        else:
            ot.set_user_attr("ray_trial_id", trial.trial_id)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        search, ot = self._ot_trial(tune_controller, trial.trial_id)
        if ot is None:
            return TrialScheduler.CONTINUE
        self._record(ot, trial.trial_id, result)
        ckpt = getattr(trial, "checkpoint", None)  # Ray registers a report's checkpoint after it
        if ckpt is not None and ot.user_attrs.get("checkpoint") != ckpt.path:
            ot.set_user_attr("checkpoint", ckpt.path)
        if result.get("final") or self._objective is None:
            return TrialScheduler.CONTINUE
        value, step = result.get(self._objective), result.get("tokens")
        if not (_finite(value) and _finite(step)):
            return TrialScheduler.CONTINUE  # divergence is the trainer's call
        step = int(step)
        reported = self._reported.setdefault(trial.trial_id, set())
        if step not in reported:  # Optuna warns on a second report at one step
            ot.report(float(value), step)
            reported.add(step)
        done = self._total is not None and step >= self._total
        replay = bool((getattr(trial, "config", None) or {}).get(REPLAY))
        if step < self._grace or done or _is_baseline(trial) or replay:
            # (a replay repeats a finished trial's curve: judging it again decides nothing)
            # The uniform baseline is every candidate's reference (delta vs uniform, per seed):
            # it always runs to the end.
            return TrialScheduler.CONTINUE
        search._ot_study.pruner = self._pruner
        if not ot.should_prune():
            return TrialScheduler.CONTINUE
        import optuna

        name = type(self._pruner).__name__.removesuffix("Pruner")
        ot.set_user_attr(
            "reason", f"pruned by {name} at {step:,} tokens ({self._objective} {value:.4f})"
        )
        search._ot_study.tell(ot, state=optuna.trial.TrialState.PRUNED)
        search._completed_trials.add(trial.trial_id)
        self._pruned.add(trial.trial_id)
        search.trial_ended()
        return TrialScheduler.STOP

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        # Ray calls this for a final error and before it retries one (then on_trial_add).
        _, ot = self._ot_trial(tune_controller, trial.trial_id)
        reason = error_reason(trial)
        if ot is not None:
            self._errors.setdefault(trial.trial_id, []).append(reason)
            ot.set_user_attr("reason", reason)
        # A trial lost for good keeps its last checkpoint (Ray keeps one): `tlmsearch resume
        # --retry-failed` continues it from there (runner.requeue_failed), and that trial's end
        # removes it. Any other final error (a Ray-level one that is not a lost worker or node,
        # or memory) is retried from zero: its checkpoints go now, or nothing ever removes them.
        if not trial.should_recover() and not is_lost(reason):
            self._retain(trial, ot, completed=False)

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict) -> None:
        # Pruned trials come here too, after STOP, and so do trials stopped unfinished when the
        # run is interrupted (Ctrl-C): those keep their checkpoints for `tlmsearch resume`.
        ended = bool(result and result.get("final")) or trial.trial_id in self._pruned
        if ended:
            _, ot = self._ot_trial(tune_controller, trial.trial_id)
            self._retain(trial, ot, completed=result.get("status") == "completed")
        self._pruned.discard(trial.trial_id)
        self._curves.pop(trial.trial_id, None)
        self._reported.pop(trial.trial_id, None)
        self._errors.pop(trial.trial_id, None)

    def _retain(self, trial: Any, ot: Any, completed: bool) -> None:
        """``search.keep_weights`` for an ended trial: its own checkpoints and those of the
        interrupted trial it continued from; the kept final weights' folder as ``weights``."""
        from pathlib import Path

        from tlmsearch import checkpoints
        from tlmsearch.search.attrs import RESUME_FROM

        if not getattr(trial, "path", None):
            return  # never started: no folder
        try:
            kept = checkpoints.retain(Path(trial.path), self._keep_weights, completed)
            before = (getattr(trial, "config", None) or {}).get(RESUME_FROM)
            if before:
                # resumed from a final checkpoint (the driver died after it): it holds the
                # final weights; this trial trained nothing after it and wrote none
                prior = checkpoints.retain(
                    Path(before).parent, self._keep_weights, completed=completed and kept is None
                )
                kept = kept if kept is not None else prior
        except OSError:
            return  # storage another node owns, or gone: nothing to thin here
        if kept is not None and ot is not None:
            ot.set_user_attr(WEIGHTS, str(kept))

    def debug_string(self) -> str:
        return f"OptunaPruningScheduler({type(self._pruner).__name__}, grace {self._grace})"
