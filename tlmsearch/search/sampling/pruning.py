"""Optuna pruners inside Ray Tune: a scheduler that asks the study's pruner on every eval.

Ray calls the *scheduler* before the searcher on every result, so :class:`OptunaPruningScheduler`
writes the result to the trial's ledger (search/ledger.py), reports each eval to the Optuna trial
at step = tokens seen, asks the study's pruner (``Trial.should_prune``), and on a prune has the
searcher (:mod:`.searcher`) tell Optuna PRUNED and returns STOP. When a trial ends it applies
``search.keep_weights`` to its checkpoints (:func:`tlmsearch.train.checkpoints.retain_trial`). A
trial Ray starts again after a system error (execution/failures.py) keeps its Optuna trial; the
scheduler sets how often (Ray's per-trial ``max_failures``) and the ledger records each retry.
"""

from __future__ import annotations

from typing import Any

import optuna
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from tlmsearch.constants import CONFIRM_STAGE
from tlmsearch.reasons import is_lost
from tlmsearch.search.attrs import REPLAY, RESUME_FROM, STAGE, UNPRUNED, WEIGHTS
from tlmsearch.search.execution.failures import error_reason, max_failures
from tlmsearch.search.ledger import TrialLedger
from tlmsearch.search.records import finite
from tlmsearch.search.sampling.searcher import searcher_of
from tlmsearch.widths.space import is_baseline


def _is_baseline(trial: Any) -> bool:
    """The uniform baseline (an attention-only taper keeps uniform MLPs but is a candidate)."""
    return is_baseline((getattr(trial, "config", None) or {}).get("candidate") or {})


class OptunaPruningScheduler(FIFOScheduler):
    """FIFO scheduling plus the study's Optuna pruner consulted on every eval (step = tokens).

    ``grace_tokens``: never prune before this many tokens (at least the LR warm-up);
    ``total_tokens``: nor at the run's last eval, when stopping saves nothing.
    ``metric``: the single objective the pruner watches; None (several objectives) disables
    pruning and intermediate values (Optuna keeps none for multi-objective studies).
    ``max_retries``: how often Ray starts a trial again after a system error (the uniform
    baseline: once more, :func:`~tlmsearch.search.execution.failures.max_failures`).
    ``keep_weights``: ``search.keep_weights``, applied to a trial's checkpoints when it ends
    (completed, pruned or failed in its final report); not when Ray retries it, nor when the
    system lost it for good (its last checkpoint is for ``resume --retry-failed``).
    """

    def __init__(
        self,
        grace_tokens: int,
        metric: str | None,
        total_tokens: int | None = None,
        max_retries: int = 0,
        keep_weights: str = "none",
    ) -> None:
        super().__init__()
        if grace_tokens < 0:
            raise ValueError(f"grace_tokens must be >= 0, but got {grace_tokens=}")
        self._grace = grace_tokens
        self._total = total_tokens  # an eval at the end saves nothing: never prune there
        self._objective = metric
        self._max_retries = max_retries
        self._keep_weights = keep_weights
        self._ledger = TrialLedger()
        self._reported: dict[str, set[int]] = {}
        self._pruned: set[str] = set()  # trial ids this scheduler stopped

    def _live(self, controller: Any, trial_id: str) -> tuple[Any, optuna.Trial | None]:
        searcher = searcher_of(controller)
        return searcher, searcher.live_trial(trial_id) if searcher is not None else None

    # -- Ray hooks ----------------------------------------------------------------------------

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        # Ray reads this when the trial errors (Trial.should_recover): per trial, so the
        # baseline can have more than FailureConfig's.
        trial.max_failures = max_failures(self._max_retries, _is_baseline(trial))
        _, ot = self._live(tune_controller, trial.trial_id)
        if ot is not None:
            self._ledger.started(trial, ot)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        searcher, ot = self._live(tune_controller, trial.trial_id)
        if ot is None:
            return TrialScheduler.CONTINUE
        self._ledger.record(ot, trial, result)
        if result.get("final") or self._objective is None:
            return TrialScheduler.CONTINUE
        value, step = result.get(self._objective), result.get("tokens")
        if not (finite(value) and finite(step)):
            return TrialScheduler.CONTINUE  # divergence is the trainer's call
        step = int(step)
        reported = self._reported.setdefault(trial.trial_id, set())
        if step not in reported:  # Optuna warns on a second report at one step
            ot.report(float(value), step)
            reported.add(step)
        if not self._may_prune(trial, step) or not ot.should_prune():
            return TrialScheduler.CONTINUE
        name = type(searcher.study.pruner).__name__.removesuffix("Pruner")
        reason = f"pruned by {name} at {step:,} tokens ({self._objective} {value:.4f})"
        searcher.tell(trial.trial_id, optuna.trial.TrialState.PRUNED, reason=reason)
        self._pruned.add(trial.trial_id)
        return TrialScheduler.STOP

    def _may_prune(self, trial: Any, step: int) -> bool:
        """Not in the grace period, nor at the last eval; never the uniform baseline (every
        candidate's reference, per seed: it always runs to the end), nor an unpruned candidate
        (``search.unpruned_candidates``: its seeds measure the noise the pruner did not select
        on), nor a trial of the confirmation stage (``search.confirm``: its fresh seeds are
        what no pruner selected), nor a replay (it repeats a finished trial's curve: judging
        it again decides nothing)."""
        done = self._total is not None and step >= self._total
        config = getattr(trial, "config", None) or {}
        exempt = (
            _is_baseline(trial)
            or bool(config.get(UNPRUNED))
            or bool(config.get(REPLAY))
            or config.get(STAGE) == CONFIRM_STAGE  # search.confirm: fresh seeds, never selected
        )
        return not (step < self._grace or done or exempt)

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        # Ray calls this for a final error and before it retries one (then on_trial_add).
        _, ot = self._live(tune_controller, trial.trial_id)
        reason = error_reason(trial)
        self._ledger.errored(trial.trial_id, ot, reason)
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
            _, ot = self._live(tune_controller, trial.trial_id)
            self._retain(trial, ot, completed=result.get("status") == "completed")
        self._pruned.discard(trial.trial_id)
        self._reported.pop(trial.trial_id, None)
        self._ledger.forget(trial.trial_id)

    def _retain(self, trial: Any, ot: Any, completed: bool) -> None:
        """``search.keep_weights`` for an ended trial; the kept final weights as ``weights``."""
        from pathlib import Path

        from tlmsearch.train import checkpoints

        if not getattr(trial, "path", None):
            return  # never started: no folder
        before = (getattr(trial, "config", None) or {}).get(RESUME_FROM)
        try:
            kept = checkpoints.retain_trial(
                Path(trial.path), self._keep_weights, completed, resumed_from=before
            )
        except OSError:
            return  # storage another node owns, or gone: nothing to thin here
        if kept is not None and ot is not None:
            ot.set_user_attr(WEIGHTS, str(kept))

    def debug_string(self) -> str:
        return f"OptunaPruningScheduler(grace {self._grace})"
