"""The Wilcoxon pruner sees only the evals after the grace period (in-memory Optuna, no Ray)."""

from __future__ import annotations

import warnings

import optuna
import pytest

from tlmsearch.search.sampling.wilcoxon import AfterGraceWilcoxonPruner

optuna.logging.set_verbosity(optuna.logging.WARNING)
STEPS = [1000 * i for i in range(1, 9)]


def _study_with_best(value: float = 1.0) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    best = study.ask()
    for step in STEPS:
        best.report(value, step)
    study.tell(best, value)
    return study


def _prunes(pruner: optuna.pruners.BasePruner, curve: dict[int, float]) -> bool:
    study = _study_with_best()
    trial = study.ask()
    for step, v in curve.items():
        trial.report(v, step)
    frozen = study.get_trials(deepcopy=False)[-1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return pruner.prune(study, frozen)


def test_evals_inside_the_grace_period_are_not_evidence() -> None:
    # Slow during the warm-up, better than the best once past it: Optuna's own pruner counts
    # the warm-up and prunes; after the grace there are two evals, both better.
    curve = {s: (2.0 if s <= 6000 else 0.9) for s in STEPS}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        assert _prunes(optuna.pruners.WilcoxonPruner(), curve)
    assert not _prunes(AfterGraceWilcoxonPruner(6500), curve)


def test_a_trial_worse_at_every_eval_after_the_grace_is_pruned() -> None:
    curve = {s: (0.5 if s <= 3000 else 1.5) for s in STEPS}  # good early, worse after
    assert _prunes(AfterGraceWilcoxonPruner(3500), curve)


def test_no_best_trial_yet_never_prunes() -> None:
    study = optuna.create_study()
    trial = study.ask()
    trial.report(1.0, 1000)
    assert not AfterGraceWilcoxonPruner(0).prune(study, study.get_trials()[-1])


def test_negative_grace_is_refused() -> None:
    with pytest.raises(ValueError, match="grace=-1"):
        AfterGraceWilcoxonPruner(-1)


def test_it_survives_pickling() -> None:  # Ray pickles the scheduler that holds it
    import pickle

    pruner = pickle.loads(pickle.dumps(AfterGraceWilcoxonPruner(3500, p_threshold=0.05)))
    assert pruner._grace == 3500 and pruner._p_threshold == 0.05
