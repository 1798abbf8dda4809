"""BaselineBlindSampler on in-memory Optuna studies: samplers never learn from baseline trials."""

from __future__ import annotations

from typing import Any

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.errors import ConfigError
from tlmsearch.search.attrs import BASELINE
from tlmsearch.search.sampling.baseline import BaselineBlindSampler, check, is_baseline_trial
from tlmsearch.search.sampling.nsga2 import PicklableNSGAIISampler

optuna.logging.set_verbosity(optuna.logging.WARNING)
S = optuna.trial.TrialState
X = optuna.distributions.FloatDistribution(0.0, 1.0)
Y = optuna.distributions.FloatDistribution(0.0, 1.0)


def _study(sampler: Any, n_candidates: int) -> optuna.Study:
    """A baseline with no parameters, finished first, then candidates over (x, y)."""
    study = optuna.create_study(sampler=sampler)
    study.enqueue_trial({}, user_attrs={BASELINE: True})
    baseline = study.ask()
    study.tell(baseline, 0.0)  # the best value in the study: it must not attract the sampler
    for _ in range(n_candidates):
        trial = study.ask()
        x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
        study.tell(trial, (x - 0.3) ** 2 + (y - 0.7) ** 2)
    return study


def test_a_baseline_trial_empties_optunas_search_space_but_not_the_wrapped_one():
    inner = optuna.samplers.TPESampler(seed=0, multivariate=True)
    study = _study(inner, 3)
    nxt = study.ask()
    frozen = study._storage.get_trial(nxt._trial_id)
    assert inner.infer_relative_search_space(study, frozen) == {}  # the bug, as Optuna has it
    fresh = BaselineBlindSampler(optuna.samplers.TPESampler(seed=0, multivariate=True))
    assert fresh.infer_relative_search_space(study, frozen) == {"x": X, "y": Y}


class _Recorder(optuna.samplers.RandomSampler):
    """Records which trials it hears of, and what the study it is handed holds."""

    def __init__(self) -> None:
        super().__init__(seed=0)
        self.calls: list[tuple[str, int]] = []
        self.seen_states: list[list[S]] = []
        self.study: Any = None  # the last study it was handed
        self.reseeded = 0

    def _note(self, what: str, study: Any, trial: Any) -> None:
        self.calls.append((what, trial.number))
        self.seen_states.append([t.state for t in study._get_trials(deepcopy=False)])
        self.study = study

    def infer_relative_search_space(self, study, trial):
        self._note("infer", study, trial)
        return {"x": X}

    def sample_relative(self, study, trial, search_space):
        self._note("relative", study, trial)
        return {}

    def sample_independent(self, study, trial, name, dist):
        self._note("independent", study, trial)
        return super().sample_independent(study, trial, name, dist)

    def before_trial(self, study, trial):
        self._note("before", study, trial)

    def after_trial(self, study, trial, state, values):
        self._note("after", study, trial)

    def reseed_rng(self) -> None:
        self.reseeded += 1


def test_delegates_everything_but_relative_sampling_of_a_baseline():
    rec = _Recorder()
    sampler = BaselineBlindSampler(rec)
    study = _study(sampler, 1)
    # Trial 0 is the baseline: bookkeeping only, no relative search space or sample.
    assert [c for c in rec.calls if c[1] == 0] == [("before", 0), ("after", 0)]
    assert [w for w, n in rec.calls if n == 1] == [
        "before",
        "infer",
        "relative",
        "independent",
        "independent",
        "after",
    ]
    # Every view the inner sampler got showed the finished baseline as FAIL, in its place.
    finished = [states for states in rec.seen_states if len(states) == 2]
    assert finished and all(states[0] == S.FAIL for states in finished)
    sampler.reseed_rng()
    assert rec.reseeded == 1
    # The study itself still holds the baseline as it was told.
    baseline = study.get_trials()[0]
    assert is_baseline_trial(baseline) and baseline.state == S.COMPLETE and baseline.value == 0.0


def test_the_view_keeps_trial_numbers_and_filters_states_after_hiding():
    rec = _Recorder()
    study = _study(BaselineBlindSampler(rec), 2)
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0)
    view = rec.study  # what the inner sampler was handed for this suggestion
    # Genetic samplers index this list by trial number: the baseline keeps its place.
    assert [(t.number, t.state) for t in view._get_trials(deepcopy=False)] == [
        (0, S.FAIL),
        (1, S.COMPLETE),
        (2, S.COMPLETE),
        (3, S.RUNNING),
    ]
    assert view._get_trials(deepcopy=False)[0].values is None
    complete = (S.COMPLETE,)
    assert [t.number for t in view._get_trials(states=complete, use_cache=True)] == [1, 2]
    assert [t.number for t in view.get_trials(states=complete)] == [1, 2]
    assert [t.number for t in view.trials] == [0, 1, 2, 3]
    assert view.directions == study.directions and view._study_id == study._study_id


def test_nsga2_populations_hold_candidates_only():
    inner = PicklableNSGAIISampler(seed=0, population_size=4)
    study = _study(BaselineBlindSampler(inner), 8)
    key = inner._get_generation_key()
    trials = study.get_trials()
    assert key not in trials[0].system_attrs  # the baseline belongs to no generation
    # Generation 0 is the first 4 candidates (not the baseline and 3 candidates).
    assert [t.system_attrs[key] for t in trials[1:]] == [0, 0, 0, 0, 1, 1, 1, 1]
    parents = inner.get_parent_population(study, 1)  # cached when generation 1 began
    assert parents and all(not is_baseline_trial(t) for t in parents)


def test_inner_must_be_a_sampler():
    with pytest.raises(TypeError, match=r"inner must be an Optuna sampler, but got inner='tpe'"):
        BaselineBlindSampler("tpe")  # type: ignore[arg-type]


def test_the_private_optuna_method_is_checked_when_the_wrapper_is_built(monkeypatch) -> None:
    check()  # the installed Optuna has Study._get_trials as the view answers it

    def changed(self, deepcopy=True, states=None):  # an Optuna that dropped use_cache
        return []

    monkeypatch.setattr(optuna.study.Study, "_get_trials", changed)
    with pytest.raises(ConfigError) as err:
        BaselineBlindSampler(optuna.samplers.RandomSampler(seed=0))
    text = str(err.value)
    assert text.startswith(f"optuna {optuna.__version__}: optuna.study.Study._get_trials takes")
    assert "pip install 'optuna==" in text and "tlmsearch/search/sampling/baseline.py" in text
    monkeypatch.delattr(optuna.study.Study, "_get_trials")
    with pytest.raises(ConfigError, match="_get_trials is gone"):
        check()


def test_every_sampler_reads_the_study_through_the_checked_method(monkeypatch) -> None:
    """What the view leans on: each sampler tlmsearch builds reads trials via _get_trials."""
    calls = []
    original = optuna.study.Study._get_trials

    def counting(self, deepcopy=True, states=None, use_cache=False):  # the checked parameters
        calls.append(1)
        return original(self, deepcopy=deepcopy, states=states, use_cache=use_cache)

    monkeypatch.setattr(optuna.study.Study, "_get_trials", counting)
    for inner in (
        optuna.samplers.TPESampler(seed=0, multivariate=True, n_startup_trials=2),
        optuna.samplers.GPSampler(seed=0, n_startup_trials=2),
        PicklableNSGAIISampler(seed=0, population_size=2),
    ):
        calls.clear()
        _study(BaselineBlindSampler(inner), 4)
        assert calls, f"{type(inner).__name__} no longer reads trials through _get_trials"


# -------------------------------------------------------------------------------------------------
# TPE's history window (search.tpe_history)


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(st.floats(-10, 10), min_size=1, max_size=80),
    pruned=st.sets(st.integers(0, 79)),
    running=st.sets(st.integers(0, 79)),
    history=st.integers(1, 30),
    sense=st.sampled_from([1.0, -1.0]),
)
def test_the_window_keeps_the_best_the_recent_and_every_unfinished_trial(
    values, pruned, running, history, sense
):
    from tlmsearch.search.sampling.baseline import BEST_KEPT, _window

    trials = []
    for i, v in enumerate(values):
        state = S.RUNNING if i in running else S.PRUNED if i in pruned else S.COMPLETE
        value = v if state == S.COMPLETE else None
        trials.append(
            optuna.trial.create_trial(
                state=state, value=value, params={"x": 0.5}, distributions={"x": X}
            )
        )
        trials[-1].number = i
    kept = {t.number for t in _window(trials, history, sense)}
    done = [t for t in trials if t.state != S.RUNNING]
    complete = sorted(
        (t for t in done if t.state == S.COMPLETE), key=lambda t: (sense * t.value, t.number)
    )
    assert {t.number for t in trials if t.state == S.RUNNING} <= kept
    assert {t.number for t in done[-history:]} <= kept
    assert {t.number for t in complete[:BEST_KEPT]} <= kept  # TPE's good trials, all of them
    if len(done) > history + BEST_KEPT:
        assert len([n for n in kept if trials[n].state != S.RUNNING]) <= history + BEST_KEPT
    else:
        assert kept == set(range(len(trials)))


def test_a_tpe_with_a_window_reads_it_once_per_ask_and_pickles_without_it():
    import pickle

    sampler = BaselineBlindSampler(
        optuna.samplers.TPESampler(seed=0, multivariate=True), history=20
    )
    study = _study(sampler, 80)
    calls = []
    real = study._get_trials

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    study._get_trials = counted  # the view asks the study; count how often per ask
    trial = study.ask()
    trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
    assert 1 <= len(calls) <= 3  # one reading per set of arguments, not one per parameter
    n = len(calls)
    view = sampler._view(study, study._storage.get_trial(trial._trial_id))
    seen = view._get_trials(deepcopy=False, states=(S.COMPLETE, S.PRUNED), use_cache=True)
    assert len(calls) == n  # this ask's reading, remembered
    # of 81 finished: the last 20 and the best 25 (the two overlap where TPE has converged)
    assert 25 <= len(seen) <= 45
    assert pickle.loads(pickle.dumps(sampler))._memo == {}


def _liar_draws(monkeypatch, memo: bool, n: int = 40) -> tuple[list[dict], list[int]]:
    """Draws of TPE as tlmsearch builds it (multivariate, grouped, constant liar) with a
    trial always left running, and the storage reads of each ask; ``memo`` False: the view
    reads the study on every call, as before it read once per ask."""
    from tlmsearch.search.sampling import baseline

    if not memo:
        monkeypatch.setattr(
            baseline.BaselineBlindSampler,
            "_view",
            lambda self, study, trial: baseline._CandidatesView(study, self.history, None),
        )
    sampler = BaselineBlindSampler(
        optuna.samplers.TPESampler(
            seed=0, multivariate=True, group=True, constant_liar=True, n_startup_trials=5
        ),
        history=20,
    )
    study = optuna.create_study(sampler=sampler)
    reads: list[int] = []
    real = study._storage.get_all_trials
    study._storage.get_all_trials = lambda *a, **k: reads.append(1) or real(*a, **k)
    draws, per_ask, running = [], [], None
    for _ in range(n):
        before = len(reads)
        trial = study.ask()
        x, y = trial.suggest_float("x", 0.0, 1.0), trial.suggest_float("y", 0.0, 1.0)
        per_ask.append(len(reads) - before)
        draws.append(trial.params)
        if running is not None:  # the one before stays running over this ask: a liar's case
            study.tell(running[0], running[1])
        running = (trial, (x - 0.3) ** 2 + (y - 0.7) ** 2)
    return draws, per_ask


def test_a_constant_liar_tpe_reads_the_study_once_an_ask_and_draws_the_same(monkeypatch):
    """TPE with a constant liar reads the study afresh where its other reads share Optuna's
    per-ask cache: two reads of a database an ask where one gives the same trials."""
    once, reads_once = _liar_draws(monkeypatch, memo=True)
    with monkeypatch.context() as m:
        every, reads_every = _liar_draws(m, memo=False)
    assert once == every
    # Optuna's ask reads the queue once; the view once more (old code: twice past the start)
    assert max(reads_once[10:]) < max(reads_every[10:])
    assert max(reads_once[10:]) == 2
