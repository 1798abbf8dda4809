"""Optuna's WilcoxonPruner on learning curves: only the evals after the grace period count.

What it tests: a one-sided Wilcoxon signed-rank test of a trial's values against the best
trial's, at the token counts both reported at or after ``grace`` tokens; it prunes when the
trial is worse at most of them (p < ``p_threshold``). Optuna meant it for independent instances
(folds, benchmark problems). Checkpoints of one learning curve are not independent, so here its
p-value is a ranking heuristic, not an error rate; and evals inside the LR warm-up, where the
curves of different width schedules still cross, would otherwise count as evidence.
"""

from __future__ import annotations

import copy
import warnings
from typing import Any

from optuna.exceptions import ExperimentalWarning
from optuna.pruners import WilcoxonPruner
from optuna.trial import FrozenTrial


def after_grace(trial: FrozenTrial, grace: int) -> FrozenTrial:
    """A copy of ``trial`` whose intermediate values start at ``grace`` tokens."""
    view = copy.copy(trial)
    view.intermediate_values = {s: v for s, v in trial.intermediate_values.items() if s >= grace}
    return view


class _StudyView:
    """The two things WilcoxonPruner reads of a study: its direction and its best trial."""

    def __init__(self, study: Any, grace: int) -> None:
        self.direction = study.direction
        self.best_trial = after_grace(study.best_trial, grace)  # ValueError while there is none


class AfterGraceWilcoxonPruner(WilcoxonPruner):
    """WilcoxonPruner that ignores every eval before ``grace`` tokens (see the module doc)."""

    def __init__(self, grace: int, **opts: Any) -> None:
        if grace < 0:
            raise ValueError(f"grace must be >= 0, but got {grace=}")
        with warnings.catch_warnings():  # experimental in Optuna: the user chose it knowingly
            warnings.simplefilter("ignore", ExperimentalWarning)
            super().__init__(**opts)
        self._grace = grace

    def prune(self, study: Any, trial: FrozenTrial) -> bool:
        try:
            view = _StudyView(study, self._grace)
        except ValueError:  # no finished trial to compare with yet
            return False
        return super().prune(view, after_grace(trial, self._grace))
