"""What each trial is and did, written as Optuna user attributes while it runs.

The storage alone then describes the run (``tlmsearch status`` reads it live, the export
writes the tables from it): the learning curve (one row per eval, :data:`EVAL_KEYS`), what the
trial is (widths, heads, parameters, node), its last metrics and when they arrived, its newest
checkpoint, and each time Ray started it again after a system error (execution/failures.py). The
pruning scheduler calls it on every result, before it may tell Optuna the trial's end (a
finished Optuna trial takes no more attributes).

Why the scheduler and not a Ray Tune ``Callback``: Ray calls its callbacks' ``on_trial_result``
and ``on_trial_complete`` after the scheduler's and the searcher's (``TuneController``), that is
after the trial's end is told to Optuna, when its attributes can no longer be written. Weight
retention (``search.keep_weights``) is decided at the same point for the same reason.
"""

from __future__ import annotations

import time
from typing import Any

from tlmsearch.config import EVAL_KEYS
from tlmsearch.search import records
from tlmsearch.search.execution.failures import RETRIED_AFTER, RETRIES
from tlmsearch.search.records import clean, finite
from tlmsearch.search.sampling.storage import set_user_attrs
from tlmsearch.widths.profiles import LAYERED

# per-layer lists: widths, heads and the depth profiles (lr_profile, init_profile)
LAYER_KEYS = tuple(e.record for e in LAYERED.values())
STATIC_KEYS = (*LAYER_KEYS, *records.STATIC_KEYS)


class TrialLedger:
    """Per Ray trial: its curve so far and the errors it was retried after."""

    def __init__(self) -> None:
        self._curves: dict[str, list[dict[str, Any]]] = {}
        self._errors: dict[str, list[str]] = {}  # trial id -> reason of each error so far

    def started(self, trial: Any, ot: Any) -> None:
        """Ray added the trial: the first time, or again after an error (Tune's requeue)."""
        errors = self._errors.get(trial.trial_id)
        if errors:
            ot.set_user_attr(RETRIES, len(errors))
            ot.set_user_attr(RETRIED_AFTER, errors)
        else:
            ot.set_user_attr("ray_trial_id", trial.trial_id)

    def errored(self, trial_id: str, ot: Any, reason: str) -> None:
        """Ray reports an error: final, or before it retries the trial."""
        self._errors.setdefault(trial_id, []).append(reason)
        if ot is not None:
            ot.set_user_attr("reason", reason)

    def record(self, ot: Any, trial: Any, result: dict) -> None:
        """One result: an eval (curve row) or the final report, in one storage transaction."""
        curve = self._curves.setdefault(trial.trial_id, [])
        attrs: dict[str, Any] = {}
        if not result.get("final"):
            tokens = result.get("tokens")
            if curve and finite(tokens) and finite(curve[-1].get("tokens")):
                # a retried trial starts again: its evals replace the lost attempt's
                curve[:] = [ev for ev in curve if ev["tokens"] < tokens]
            curve.append({k: clean(result.get(k)) for k in EVAL_KEYS})
            attrs["curve"] = curve
        if len(curve) <= 1 or result.get("final"):
            # the final report writes only the facts that changed since the first eval (a
            # multi-worker trial's nodes), not all of them again
            have = ot.user_attrs if result.get("final") else {}
            for k in STATIC_KEYS:
                if k in result:
                    value = result[k] if k in LAYER_KEYS else clean(result[k])
                    if k not in have or have[k] != value:
                        attrs[k] = value
        if result.get("final") and result.get("traceback"):  # the trial raised
            attrs["traceback"] = str(result["traceback"])
        attrs["metrics"] = {k: clean(result.get(k)) for k in EVAL_KEYS}
        attrs["reported_at"] = time.time()  # `tlmsearch status`: age of the last eval
        ckpt = getattr(trial, "checkpoint", None)  # Ray registers a report's checkpoint after it
        if ckpt is not None and ot.user_attrs.get("checkpoint") != ckpt.path:
            attrs["checkpoint"] = ckpt.path
        set_user_attrs(ot, attrs)

    def forget(self, trial_id: str) -> None:
        """The trial is over for this session."""
        self._curves.pop(trial_id, None)
        self._errors.pop(trial_id, None)
