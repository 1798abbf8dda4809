"""Samplers learn from candidates only: the uniform baseline is a control, not a sample.

The baseline ``{"shape": "uniform"}`` usually lies outside the search space, so its trial has
no parameters. Optuna's model-based samplers model the intersection of the finished trials'
parameters (``IntersectionSearchSpace``; grouped TPE: ``_GroupDecomposedSearchSpace``), so one
parameterless trial empties it: ``sample_relative`` gets ``{}`` for the whole study, GP and
NSGA-II then draw every parameter at random, and multivariate TPE models each parameter alone.
Inside the space the control would still not be a draw of the sampler, and its value would
shift TPE's good/bad split and NSGA-II's populations.

:class:`ControlBlindSampler` wraps a sampler and hands it a view of the study in which control
trials (user attribute :data:`CONTROL`, set when they are enqueued) look failed: no Optuna
sampler learns from a FAIL trial. They are shown as failed rather than left out because the
genetic samplers index the full trial list by trial number
(``BaseGASampler._sync_generation_cache``). Pruners, reports and deltas read the study itself,
so they still see the control.

The one private Optuna name tlmsearch uses is here: ``Study._get_trials(deepcopy, states,
use_cache)``, which every Optuna sampler calls to read the study (TPE, GP, NSGA-II, random) and
which the view answers. No public way: a sampler receives the study object and nothing else,
Optuna has no hook that hides trials from a sampler, and the public alternative (the controls
in a study of their own) would split every reader of a run's trials in two. :func:`check` runs
when the wrapper is built and raises a :class:`~tlmsearch.errors.ConfigError` naming the Optuna
version when the method is gone or takes other parameters; tests/test_search_control.py pins
it and the behaviour (a control trial empties Optuna's own search space, not the wrapped one).
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Container, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from tlmsearch.errors import ConfigError
from tlmsearch.search.attrs import CONTROL

CHECKED_AGAINST = "5.1.0"  # the Optuna version the view was read and tested with
_GET_TRIALS = ("self", "deepcopy", "states", "use_cache")  # Study._get_trials's parameters


def check() -> None:
    """Raise :class:`ConfigError` if Optuna's ``Study._get_trials`` is gone or changed.

    >>> check()  # with Optuna 5.1: nothing to say
    """
    method = getattr(Study, "_get_trials", None)
    found = tuple(inspect.signature(method).parameters) if callable(method) else None
    if found != _GET_TRIALS:
        import optuna

        what = "is gone" if found is None else f"takes {found}, not {_GET_TRIALS}"
        raise ConfigError(
            [
                f"optuna.study.Study._get_trials {what}: samplers would learn from the uniform "
                f"control; tlmsearch was checked against Optuna {CHECKED_AGAINST} (pip install "
                f"'optuna=={CHECKED_AGAINST}'; tlmsearch/search/control.py says why)"
            ],
            source=f"optuna {optuna.__version__}",
        )


def is_control_trial(trial: FrozenTrial) -> bool:
    """Whether an Optuna trial is the uniform control's (its ``control`` attribute): the
    trials the sampler never sees (:class:`ControlBlindSampler`). A candidate's own test is
    :attr:`tlmsearch.widths.candidate.Candidate.is_control`."""
    return trial.user_attrs.get(CONTROL) is True


def _shown(trials: list[FrozenTrial], states: Container[TrialState] | None) -> list[FrozenTrial]:
    out = []
    for trial in trials:
        if is_control_trial(trial):
            trial = copy.copy(trial)  # a shallow copy: the storage's own trial stays as it is
            trial.state, trial.values = TrialState.FAIL, None
        if states is None or trial.state in states:
            out.append(trial)
    return out


class _CandidatesView:
    """The study as a sampler sees it: control trials look FAIL; all else is the study's."""

    def __init__(self, study: Study) -> None:
        self._study = study

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    # Optuna's samplers call ``_get_trials``; ``get_trials`` and ``trials`` for completeness.
    # Both ask the study for every trial, so a state filter applies to what the sampler sees.
    def _get_trials(
        self,
        deepcopy: bool = True,
        states: Container[TrialState] | None = None,
        use_cache: bool = False,
    ) -> list[FrozenTrial]:
        return _shown(self._study._get_trials(deepcopy=deepcopy, use_cache=use_cache), states)

    def get_trials(
        self, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return _shown(self._study.get_trials(deepcopy=deepcopy), states)

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class ControlBlindSampler(BaseSampler):
    """Delegates to ``inner``, which never learns from control trials.

    A control trial gets no relative sample (its values are given, not proposed, and a GP fit
    or an NSGA-II generation for it would be wasted); a parameter it does suggest comes from
    ``inner.sample_independent``. Picklable when ``inner`` is (Ray pickles the searcher).

    >>> import optuna
    >>> sampler = ControlBlindSampler(optuna.samplers.TPESampler(seed=0))
    >>> study = optuna.create_study(sampler=sampler)
    """

    def __init__(self, inner: BaseSampler) -> None:
        if not isinstance(inner, BaseSampler):
            raise TypeError(f"inner must be an Optuna sampler, but got {inner=}")
        check()
        self.inner = inner

    def __repr__(self) -> str:
        return f"ControlBlindSampler({type(self.inner).__name__})"

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if is_control_trial(trial):
            return {}
        return self.inner.infer_relative_search_space(_CandidatesView(study), trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if is_control_trial(trial):
            return {}
        return self.inner.sample_relative(_CandidatesView(study), trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.inner.sample_independent(
            _CandidatesView(study), trial, param_name, param_distribution
        )

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(_CandidatesView(study), trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        # The trial's own bookkeeping (constraints); no Optuna sampler fits a model here.
        self.inner.after_trial(_CandidatesView(study), trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
