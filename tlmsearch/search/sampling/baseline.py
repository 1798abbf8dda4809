"""Samplers learn from candidates only: the uniform baseline is a reference, not a sample.

The baseline ``{"shape": "uniform"}`` usually lies outside the search space, so its trial has
no parameters. Optuna's model-based samplers model the intersection of the finished trials'
parameters (``IntersectionSearchSpace``; grouped TPE: ``_GroupDecomposedSearchSpace``), so one
parameterless trial empties it: ``sample_relative`` gets ``{}`` for the whole study, GP and
NSGA-II then draw every parameter at random, and multivariate TPE models each parameter alone.
Inside the space the baseline would still not be a draw of the sampler, and its value would
shift TPE's good/bad split and NSGA-II's populations.

:class:`BaselineBlindSampler` wraps a sampler and hands it a view of the study in which baseline
trials (user attribute :data:`BASELINE`, set when they are enqueued) look failed: no Optuna
sampler learns from a FAIL trial. They are shown as failed rather than left out because the
genetic samplers index the full trial list by trial number
(``BaseGASampler._sync_generation_cache``). Pruners, reports and deltas read the study itself,
so they still see the baseline.

The one private Optuna name tlmsearch uses is here: ``Study._get_trials(deepcopy, states,
use_cache)``, which every Optuna sampler calls to read the study (TPE, GP, NSGA-II, random) and
which the view answers. No public way: a sampler receives the study object and nothing else,
Optuna has no hook that hides trials from a sampler, and the public alternative (the baselines
in a study of their own) would split every reader of a run's trials in two. :func:`check` runs
when the wrapper is built and raises a :class:`~tlmsearch.errors.ConfigError` naming the Optuna
version when the method is gone or takes other parameters; tests/test_search_baseline.py pins
it and the behaviour (a baseline trial empties Optuna's own search space, not the wrapped one).
The view's one read an ask goes through that method's per-ask cache, which the searcher's twin
lookup reads too (:class:`~tlmsearch.search.sampling.samplers.TwinIndex`): should Optuna stop
emptying it at ``ask`` and ``tell``, the lookup would miss a twin that finished since, and that
candidate would train instead of replaying its twin's curve, never the reverse.
"""

from __future__ import annotations

import copy
import heapq
import inspect
from collections.abc import Container, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from tlmsearch.errors import ConfigError
from tlmsearch.search.attrs import BASELINE

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
                f"baseline; tlmsearch was checked against Optuna {CHECKED_AGAINST} (pip install "
                f"'optuna=={CHECKED_AGAINST}'; tlmsearch/search/sampling/baseline.py says why)"
            ],
            source=f"optuna {optuna.__version__}",
        )


def is_baseline_trial(trial: FrozenTrial) -> bool:
    """Whether an Optuna trial is the uniform baseline's (its ``baseline`` attribute): the
    trials the sampler never sees (:class:`BaselineBlindSampler`). A candidate's own test is
    :attr:`tlmsearch.widths.candidate.Candidate.is_baseline`."""
    return trial.user_attrs.get(BASELINE) is True


def _shown(trials: list[FrozenTrial], states: Container[TrialState] | None) -> list[FrozenTrial]:
    out = []
    for trial in trials:
        if is_baseline_trial(trial):
            trial = copy.copy(trial)  # a shallow copy: the storage's own trial stays as it is
            trial.state, trial.values = TrialState.FAIL, None
        if states is None or trial.state in states:
            out.append(trial)
    return out


# TPE's "good" trials are its best ceil(0.1 n), at most 25 (Optuna's default gamma): a history
# window keeps these whatever its length, so only its model of the rest is a recent sample.
BEST_KEPT = 25


def _window(trials: list[FrozenTrial], history: int, sign: float) -> list[FrozenTrial]:
    """``trials`` less the finished ones outside the window: the :data:`BEST_KEPT` best complete
    ones and the last ``history`` finished ones (by number) stay, and every unfinished one.

    One pass with a bounded heap (this runs on every ask, over every trial of the study)."""
    complete, pruned = TrialState.COMPLETE, TrialState.PRUNED
    finished = [t for t in trials if t.state is complete or t.state is pruned]
    if len(finished) <= history + BEST_KEPT:
        return trials
    heap: list[tuple[float, int]] = []  # (-sign x value, -number): the worst kept on top
    for t in finished:
        if t.state is complete and t.values:
            item = (-sign * t.values[0], -t.number)
            if len(heap) < BEST_KEPT:
                heapq.heappush(heap, item)
            elif item > heap[0]:
                heapq.heapreplace(heap, item)
    keep = {-n for _, n in heap}.union(t.number for t in finished[-history:])
    return [
        t for t in trials if not (t.state is complete or t.state is pruned) or t.number in keep
    ]


_READ = "read"  # the memo's key for this ask's one read of the study (others are tuples)


class _CandidatesView:
    """The study as a sampler sees it: baseline trials look FAIL; all else is the study's (with
    ``history``, the finished trials of :func:`_window` only)."""

    def __init__(
        self,
        study: Study,
        history: int | None = None,
        memo: dict[Any, list[FrozenTrial]] | None = None,
    ) -> None:
        self._study = study
        self._history = history
        self._memo = memo  # this ask's answers by arguments (BaselineBlindSampler._view)

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
        key = (None if states is None else tuple(sorted(s.value for s in states)), use_cache)
        if self._memo is not None and not deepcopy and key in self._memo:
            return list(self._memo[key])
        shown = self._windowed(_shown(self._read(deepcopy, use_cache), states))
        if self._memo is not None and not deepcopy:
            self._memo[key] = shown
            return list(shown)
        return shown

    def _read(self, deepcopy: bool, use_cache: bool) -> list[FrozenTrial]:
        """The study's trials. Within one ask (a memo) read from the storage once, whatever
        the arguments: nothing else changes meanwhile (:meth:`BaselineBlindSampler._view`), so
        TPE's fresh read for its constant liar equals its read through Optuna's per-ask cache,
        and each read of a database storage is a round of queries (~5 a trial before). That
        one read goes through Optuna's per-ask cache (which ``ask`` empties), so the rest of the
        ask shares it too: the searcher's twin lookup
        (:meth:`tlmsearch.search.sampling.samplers.TwinIndex.same`) reads no more."""
        if self._memo is None or deepcopy:
            return self._study._get_trials(deepcopy=deepcopy, use_cache=use_cache)
        if _READ not in self._memo:
            self._memo[_READ] = self._study._get_trials(deepcopy=False, use_cache=True)
        return self._memo[_READ]

    def _windowed(self, trials: list[FrozenTrial]) -> list[FrozenTrial]:
        if self._history is None or len(self._study.directions) > 1:
            return trials  # a front has no "best 25": every trial
        sign = 1.0 if self._study.direction.name == "MINIMIZE" else -1.0
        return _window(trials, self._history, sign)

    def get_trials(
        self, deepcopy: bool = True, states: Container[TrialState] | None = None
    ) -> list[FrozenTrial]:
        return self._windowed(_shown(self._study.get_trials(deepcopy=deepcopy), states))

    @property
    def trials(self) -> list[FrozenTrial]:
        return self.get_trials()


class BaselineBlindSampler(BaseSampler):
    """Delegates to ``inner``, which never learns from baseline trials.

    A baseline trial gets no relative sample (its values are given, not proposed, and a GP fit
    or an NSGA-II generation for it would be wasted); a parameter it does suggest comes from
    ``inner.sample_independent``. Picklable when ``inner`` is (Ray pickles the searcher).

    >>> import optuna
    >>> sampler = BaselineBlindSampler(optuna.samplers.TPESampler(seed=0))
    >>> study = optuna.create_study(sampler=sampler)
    """

    def __init__(self, inner: BaseSampler, history: int | None = None) -> None:
        if not isinstance(inner, BaseSampler):
            raise TypeError(f"inner must be an Optuna sampler, but got {inner=}")
        if history is not None and history < 1:
            raise ValueError(f"history must be a positive number of trials, but got {history=}")
        check()
        self.inner = inner
        # the finished trials ``inner`` reads: the best and the last ``history`` (None: all).
        # Only for samplers that read trials by value, never by number (not NSGA-II).
        self.history = history
        self._memo_key: tuple[int, int] | None = None
        self._memo: dict[Any, list[FrozenTrial]] = {}

    def __getstate__(self) -> dict[str, Any]:  # Ray pickles the searcher: no trials in it
        return {**self.__dict__, "_memo_key": None, "_memo": {}}

    def _view(self, study: Study, trial: FrozenTrial) -> _CandidatesView:
        """The study as ``inner`` sees it while it samples ``trial``. One ask reads the trials
        several times (the search space, each group, each parameter), and nothing but the trial
        being sampled changes meanwhile (the driver is one thread; Optuna's samplers leave that
        trial out), so each reading is filtered once per ask, not once per call: at 5,000
        trials the filtering cost more than TPE's model."""
        key = (id(study), trial.number)
        if key != self._memo_key:
            self._memo_key, self._memo = key, {}
        return _CandidatesView(study, self.history, self._memo)

    def __repr__(self) -> str:
        return f"BaselineBlindSampler({type(self.inner).__name__})"

    def infer_relative_search_space(
        self, study: Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        if is_baseline_trial(trial):
            return {}
        return self.inner.infer_relative_search_space(self._view(study, trial), trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if is_baseline_trial(trial):
            return {}
        return self.inner.sample_relative(self._view(study, trial), trial, search_space)

    def sample_independent(
        self,
        study: Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.inner.sample_independent(
            self._view(study, trial), trial, param_name, param_distribution
        )

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.inner.before_trial(_CandidatesView(study, self.history), trial)

    def after_trial(
        self,
        study: Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        # The trial's own bookkeeping (constraints); no Optuna sampler fits a model here.
        self.inner.after_trial(_CandidatesView(study, self.history), trial, state, values)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()
