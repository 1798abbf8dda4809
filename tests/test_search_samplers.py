"""Queue, pairing, sampler and pruner factories, storage URLs (no Ray, no training)."""

from __future__ import annotations

import json
import pickle
from collections import Counter
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_helpers import tiny_config

from tlmsearch.config import StorageConfig, StudyConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.attrs import CANDIDATE, REPLAY, SEED
from tlmsearch.search.sampling.baseline import BaselineBlindSampler, is_baseline_trial
from tlmsearch.search.sampling.samplers import (
    DefineByRunSpace,
    grace_tokens,
    initial_queue,
    make_pruner,
    make_sampler,
    planned_trials,
    searchable,
    write_initial_queue,
)
from tlmsearch.search.sampling.storage import dashboard_command, redact, storage_url
from tlmsearch.widths.space import UNIFORM

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture(scope="module")
def tmp_mod(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("samplers")


def _cfg(tmp: Path, **search: object) -> StudyConfig:
    return tiny_config(tmp, search=search)


@settings(max_examples=20, deadline=None)
@given(seeds=st.lists(st.integers(0, 99), min_size=1, max_size=4, unique=True))
def test_grid_queue_is_baseline_first_and_every_candidate_once_per_seed(tmp_mod, seeds):
    cfg = _cfg(tmp_mod, sampler="grid", seeds=seeds)
    queue = initial_queue(cfg)
    assert len(queue) == planned_trials(cfg) == len(cfg.trainings()) * len(seeds)
    keys = Counter((json.dumps(c, sort_keys=True), s) for c, s in queue)
    assert set(keys.values()) == {1}
    for seed in seeds:
        per_seed = [c for c, s in queue if s == seed]
        assert per_seed[0] == UNIFORM
        assert len(per_seed) == len(cfg.trainings())


def _run_asks(cfg: StudyConfig, n: int) -> list[tuple[dict, int]]:
    study = optuna.create_study(sampler=make_sampler(cfg))
    write_initial_queue(study, cfg)
    fn = DefineByRunSpace(cfg)
    out = []
    for _ in range(n):
        trial = study.ask()
        conf = fn(trial)
        assert trial.user_attrs[SEED] == conf["seed"]
        assert json.loads(trial.user_attrs[CANDIDATE]) == conf["candidate"]
        study.tell(trial, 1.0)
        out.append((conf["candidate"], conf["seed"]))
    assert not study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    return out


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_sampled_candidates_are_paired_across_seeds(tmp_mod, sampler):
    seeds = [3, 7, 11]
    cfg = _cfg(tmp_mod, sampler=sampler, seeds=seeds, n_trials=4)
    got = _run_asks(cfg, planned_trials(cfg))
    assert len(got) == (4 + 1) * 3
    by_cand: dict[str, list[int]] = {}
    for cand, seed in got:
        by_cand.setdefault(json.dumps(cand, sort_keys=True), []).append(seed)
    # Every distinct candidate ran under every seed, the same number of times.
    for seeds_seen in by_cand.values():
        counts = Counter(seeds_seen)
        assert set(counts) == set(seeds) and len(set(counts.values())) == 1
    assert [c for c, _ in got[:3]] == [UNIFORM] * 3  # the baseline goes first, once per seed


def test_grid_asks_cover_the_grid_exactly(tmp_mod):
    cfg = _cfg(tmp_mod, sampler="grid", seeds=[0, 1])
    got = _run_asks(cfg, planned_trials(cfg))
    assert sorted(json.dumps(c, sort_keys=True) + str(s) for c, s in got) == sorted(
        json.dumps(c, sort_keys=True) + str(s) for c, s in initial_queue(cfg)
    )


def test_enqueued_grid_points_record_their_params(tmp_mod):
    cfg = _cfg(tmp_mod, sampler="grid")
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    assert not write_initial_queue(study, cfg)  # once per study: a resume keeps its queue
    fn = DefineByRunSpace(cfg)
    params = []
    for _ in range(planned_trials(cfg)):
        t = study.ask()
        fn(t)
        params.append(t.params)
    assert params[0] == {}  # uniform lies outside the space's shape choices
    assert {"shape": "cosine", "r_start": 1.25} in params


def test_searchable_drops_fixed_and_foreign_values(tmp_mod):
    cfg = _cfg(tmp_mod)
    assert searchable(cfg.space, UNIFORM) == {}
    assert searchable(cfg.space, {"shape": "linear", "r_start": 1.5}) == {
        "shape": "linear",
        "r_start": 1.5,
    }


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("median", optuna.pruners.MedianPruner),
        ("percentile", optuna.pruners.PercentilePruner),
        ("successive_halving", optuna.pruners.SuccessiveHalvingPruner),
        ("hyperband", optuna.pruners.HyperbandPruner),
        ("wilcoxon", optuna.pruners.WilcoxonPruner),
        ("none", optuna.pruners.NopPruner),
    ],
)
def test_make_pruner(tmp_mod, name, cls):
    assert isinstance(make_pruner(_cfg(tmp_mod, pruner=name)), cls)


def test_every_pruner_spec_has_a_builder_and_its_defaults_are_options():
    """A pruner is one spec entry (config.search.PRUNER_SPECS) and one builder: same names."""
    from tlmsearch.config import PRUNERS
    from tlmsearch.config.search import PRUNER_SPECS
    from tlmsearch.search.sampling.samplers import PRUNER_BUILDERS

    assert set(PRUNER_BUILDERS) == set(PRUNER_SPECS) == set(PRUNERS)
    for spec in PRUNER_SPECS.values():
        assert set(spec.defaults) <= spec.options, spec.name


def test_a_pruner_takes_its_spec_defaults_unless_given(tmp_mod):
    pruner = make_pruner(_cfg(tmp_mod, pruner="percentile"))
    assert pruner._percentile == 25.0 and pruner._n_startup_trials == 2
    given = make_pruner(_cfg(tmp_mod, pruner="percentile", pruner_options={"percentile": 10}))
    assert given._percentile == 10


def test_grace_is_at_least_the_warmup(tmp_mod):
    # tiny study: 8192 tokens, warm-up 1024
    assert grace_tokens(_cfg(tmp_mod, grace_tokens=10)) == 1024
    assert grace_tokens(_cfg(tmp_mod, grace_tokens=4096)) == 4096
    assert grace_tokens(_cfg(tmp_mod)) == 2048  # unset: a quarter of the run
    pruner = make_pruner(_cfg(tmp_mod, pruner="median", grace_tokens=0))
    assert pruner._n_warmup_steps == 1024


def test_bad_pruner_option_names_the_field(tmp_mod):
    with pytest.raises(ConfigError, match=r"search.pruner_options: 'percentil'.*percentile"):
        make_pruner(_cfg(tmp_mod, pruner="percentile", pruner_options={"percentil": 10}))


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("random", optuna.samplers.RandomSampler),
        ("tpe", optuna.samplers.TPESampler),
        ("nsga2", optuna.samplers.NSGAIISampler),
    ],
)
def test_make_sampler(tmp_mod, name, cls):
    sampler = make_sampler(_cfg(tmp_mod, sampler=name, n_trials=4))
    assert isinstance(sampler, BaselineBlindSampler) and isinstance(sampler.inner, cls)


def test_gp_sampler(tmp_mod):
    cfg = _cfg(tmp_mod, sampler="gp", n_trials=4)
    sampler = make_sampler(cfg)
    assert isinstance(sampler, BaselineBlindSampler)
    assert isinstance(sampler.inner, optuna.samplers.GPSampler)


def test_storage_urls(tmp_path):
    assert storage_url(StorageConfig(), tmp_path) == f"sqlite:///{tmp_path}/optuna.db"
    assert storage_url(StorageConfig(optuna="journal"), tmp_path).endswith("optuna.journal")
    pg = "postgresql://u:secret@127.0.0.1:5432/db"
    assert storage_url(StorageConfig(optuna=pg), tmp_path) == pg
    assert "secret" not in redact(pg) and "127.0.0.1:5432/db" in redact(pg)
    assert "--host 127.0.0.1" in dashboard_command(pg)
    with pytest.raises(ConfigError, match=r"storage.optuna: 'mongodb://x'"):
        storage_url(StorageConfig(optuna="mongodb://x"), tmp_path)


# -------------------------------------------------------------------------------------------------
# The baseline is no sample: model-based samplers learn from the candidates alone

UNCONDITIONAL = {"shape", "r_start", "r_end"}  # search_spaces/continuous.yaml
CONDITIONAL = {"k", "midpoint"}  # only when shape is sigmoid
_SHAPE_COST = {"linear": 0.2, "cosine": 0.0, "sigmoid": 0.1}


def _toy_loss(cand: dict) -> float:
    """A smooth stand-in for val_bpb: best at cosine 1.5 -> 0.5."""
    return _SHAPE_COST[cand["shape"]] + (cand["r_start"] - 1.5) ** 2 + (cand["r_end"] - 0.5) ** 2


class _Spy:
    """What the model-based sampler (the Optuna class itself) is asked and answers, per trial."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, cls: type) -> None:
        self.space: dict[int, set[str]] = {}
        self.relative: dict[int, set[str]] = {}
        self.independent: dict[int, set[str]] = {}
        infer, relative, independent = (
            cls.infer_relative_search_space,
            cls.sample_relative,
            cls.sample_independent,
        )

        def spy_infer(sampler, study, trial):
            out = infer(sampler, study, trial)
            self.space[trial.number] = set(out)
            return out

        def spy_relative(sampler, study, trial, search_space):
            out = relative(sampler, study, trial, search_space)
            self.relative[trial.number] = set(out)
            return out

        def spy_independent(sampler, study, trial, name, dist):
            self.independent.setdefault(trial.number, set()).add(name)
            return independent(sampler, study, trial, name, dist)

        monkeypatch.setattr(cls, "infer_relative_search_space", spy_infer)
        monkeypatch.setattr(cls, "sample_relative", spy_relative)
        monkeypatch.setattr(cls, "sample_independent", spy_independent)


# Candidates each sampler draws before it models the study: Optuna's n_startup_trials (10) for
# GP and TPE; NSGA-II's first generation, population_size = n_trials // 2 = 8 (make_sampler).
_STARTUP = {"gp": 10, "tpe": 10, "nsga2": 8}
# GP and NSGA-II model the intersection of the candidates' parameters (the conditional k and
# midpoint fall back to random by design); grouped TPE models every parameter.
_MODELLED = {"gp": UNCONDITIONAL, "tpe": UNCONDITIONAL | CONDITIONAL, "nsga2": UNCONDITIONAL}
_OPTUNA_CLASS = {
    "gp": optuna.samplers.GPSampler,
    "tpe": optuna.samplers.TPESampler,
    "nsga2": optuna.samplers.NSGAIISampler,
}


def _run_toy_study(cfg: StudyConfig) -> optuna.Study:
    """The product's queue (baseline first) and asks, told the toy loss."""
    study = optuna.create_study(sampler=make_sampler(cfg))
    write_initial_queue(study, cfg)
    fn = DefineByRunSpace(cfg)
    for _ in range(planned_trials(cfg)):
        trial = study.ask()
        cand = fn(trial)["candidate"]
        study.tell(trial, 1.0 if cand == UNIFORM else _toy_loss(cand))
    return study


@pytest.mark.parametrize("name", ["gp", "tpe", "nsga2"])
def test_model_based_samplers_learn_from_the_candidates_not_the_baseline(
    tmp_mod, monkeypatch, name
):
    spy = _Spy(monkeypatch, _OPTUNA_CLASS[name])
    cfg = tiny_config(tmp_mod, space="continuous", search={"sampler": name, "n_trials": 16})
    trials = _run_toy_study(cfg).get_trials()
    assert len(trials) == 17 and trials[0].params == {}  # the baseline ran first, unparametrised
    startup = trials[1 : 1 + _STARTUP[name]]
    if name == "tpe":  # the conditional group exists once a sigmoid candidate has finished
        assert any(t.params["shape"] == "sigmoid" for t in startup)
    late = trials[1 + _STARTUP[name] :]
    assert late
    for t in late:
        assert spy.space[t.number] == _MODELLED[name], t.number
        assert spy.relative[t.number], f"trial {t.number} was not proposed by the model"
        if name != "nsga2":  # NSGA-II mutates by re-drawing a parameter at random, by design
            assert not spy.independent.get(t.number, set()) & _MODELLED[name], t.number


def test_the_baseline_is_a_marked_baseline_that_stays_in_the_study(tmp_mod):
    cfg = tiny_config(
        tmp_mod, space="continuous", search={"sampler": "tpe", "n_trials": 3, "seeds": [0, 1]}
    )
    trials = _run_toy_study(cfg).get_trials()
    baselines = [t for t in trials if is_baseline_trial(t)]
    # One baseline per seed, finished with its value: run_dir.tables.add_deltas pairs against it.
    assert [t.user_attrs[SEED] for t in baselines] == [0, 1]
    assert all(t.state == optuna.trial.TrialState.COMPLETE and t.value == 1.0 for t in baselines)
    assert all(json.loads(t.user_attrs[CANDIDATE]) == UNIFORM for t in baselines)
    assert len(trials) - len(baselines) == 3 * 2  # candidates and their seed repeats


def test_pruners_still_compare_against_the_baseline(tmp_mod):
    cfg = tiny_config(tmp_mod, space="continuous", search={"sampler": "gp", "n_trials": 2})
    pruner = optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0)
    study = optuna.create_study(sampler=make_sampler(cfg), pruner=pruner)
    write_initial_queue(study, cfg)
    fn = DefineByRunSpace(cfg)
    base = study.ask()
    assert fn(base)["candidate"] == UNIFORM
    base.report(1.0, 2048)
    study.tell(base, 1.0)
    cand = study.ask()
    fn(cand)
    cand.report(2.0, 2048)
    # The baseline is the only finished trial: the pruner can only have compared against it.
    assert cand.should_prune()


@pytest.mark.parametrize("name", ["random", "tpe", "gp", "nsga2"])
def test_samplers_survive_pickling_mid_study(tmp_mod, name):
    # Ray pickles the searcher, and with it the sampler, into its experiment state.
    cfg = tiny_config(tmp_mod, space="continuous", search={"sampler": name, "n_trials": 12})
    study = _run_toy_study(cfg)  # past every sampler's start-up: its model state is pickled too
    study.sampler = pickle.loads(pickle.dumps(study.sampler))
    trial = study.ask()
    cand = DefineByRunSpace(cfg)(trial)["candidate"]
    study.tell(trial, _toy_loss(cand))
    assert study.get_trials()[-1].state == optuna.trial.TrialState.COMPLETE


ATTENTION_ONLY = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}


def test_an_attention_only_taper_is_queued_as_a_candidate_not_a_baseline(tmp_path):
    cfg = tiny_config(tmp_path, search={"candidates": [ATTENTION_ONLY], "seeds": [0]})
    study = optuna.create_study()
    write_initial_queue(study, cfg)
    queued = {t.user_attrs[CANDIDATE]: is_baseline_trial(t) for t in study.get_trials()}
    assert queued == {json.dumps(UNIFORM): True, json.dumps(ATTENTION_ONLY, sort_keys=True): False}


@pytest.mark.parametrize("indexed", [False, True])
def test_a_twin_has_the_same_widths_and_the_same_heads(tmp_path, indexed):
    # uniform MLPs in both: equal widths, but other heads per layer are another model; with
    # the searcher's index (each complete trial read once) trials that finish later are found
    import pickle

    from tlmsearch.search.sampling.samplers import TwinIndex, find_twin

    index = TwinIndex() if indexed else None

    cfg = tiny_config(tmp_path, search={"sampler": "random", "n_trials": 3, "baseline": False})
    study = optuna.create_study()
    curve = [{"tokens": 8192, "val_bpb": 2.0}]

    def finished(cand: dict, heads: list[int] | None) -> optuna.trial.FrozenTrial:
        attrs = {SEED: 0, CANDIDATE: json.dumps(cand), "curve": curve, "widths": [64, 64]}
        attrs |= {} if heads is None else {"heads": heads}
        study.add_trial(optuna.trial.create_trial(value=2.0, user_attrs=attrs))
        return study.get_trials()[-1]

    grow = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 0.5}
    assert cfg.model.plan(ATTENTION_ONLY).heads == (3, 1)
    assert cfg.model.plan(grow).heads == (1, 3)

    def twin(cand: dict) -> int | None:
        found = find_twin(study, cfg, cand, 0, index)
        return None if found is None else found.number

    assert twin(ATTENTION_ONLY) is None
    old = finished(UNIFORM, None)  # recorded before trials reported heads: n_head in each
    assert twin(ATTENTION_ONLY) is None  # the same widths, other heads
    assert twin({"shape": "uniform", "heads.shape": "uniform"}) == old.number  # the same model
    taper = finished(ATTENTION_ONLY, [3, 1])
    assert twin(ATTENTION_ONLY) == taper.number
    assert twin(grow) is None
    if index is not None:  # Ray pickles the searcher: the index is rebuilt, not stored
        assert index._seen and not pickle.loads(pickle.dumps(index))._seen


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_resumed_session_draws_new_candidates_not_the_first_sessions_again(tmp_mod, sampler):
    """A resume builds the sampler again: seeded as the first session was, it drew that
    session's candidates again (a random sampler exactly)."""
    from tlmsearch.search.sampling.samplers import make_sampler

    cfg = tiny_config(
        tmp_mod,
        space="continuous",
        search={"sampler": sampler, "n_trials": 40, "pruner": "none"},
    )
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(sampler=make_sampler(cfg))

    def session(n: int) -> list[tuple]:
        drawn = []
        for _ in range(n):
            trial = study.ask()
            r = trial.suggest_float("r_start", 0.5, 1.5)
            drawn.append((round(r, 12),))
            study.tell(trial, r)
        return drawn

    first = session(12)
    study.sampler = make_sampler(cfg, after=len(study.trials))  # as a resume does
    second = session(12)
    assert not set(first) & set(second), (first, second)
    fresh = optuna.create_study(sampler=make_sampler(cfg, after=0))  # a new study: the seed
    assert fresh.ask().suggest_float("r_start", 0.5, 1.5) == pytest.approx(first[0][0])


def test_the_searchers_twin_lookup_shares_the_samplers_read_of_the_study(tmp_path):
    """Inside an ask the twin lookup reads the study as the sampler read it (Optuna's per-ask
    cache): one storage read an ask fewer, and the same twins as a fresh read finds."""
    from tlmsearch.search.sampling.samplers import TwinIndex, find_twin

    cfg = tiny_config(
        tmp_path, space="continuous", search={"sampler": "tpe", "n_trials": 40, "baseline": False}
    )
    study = optuna.create_study(sampler=make_sampler(cfg))
    space = DefineByRunSpace(cfg)
    reads: list[int] = []
    real = study._storage.get_all_trials
    study._storage.get_all_trials = lambda *a, **k: reads.append(1) or real(*a, **k)
    per_ask, replays = [], 0
    for i in range(40):
        before = len(reads)
        trial = study.ask()
        conf = space(trial)
        per_ask.append(len(reads) - before)
        cand = conf["candidate"]
        fresh = find_twin(study, cfg, cand, conf["seed"], TwinIndex())  # asking=False: a read
        assert (None if fresh is None else fresh.number) == conf.get(REPLAY, {}).get("number")
        replays += REPLAY in conf
        trial.set_user_attr("widths", list(cfg.model.plan(cand).widths))
        trial.set_user_attr("curve", [{"tokens": 8192, "val_bpb": 2.0 + 0.01 * (i % 7)}])
        study.tell(trial, 2.0 + 0.01 * (i % 7))
    # past TPE's start: the queue's read and the sampler's, none for the twin lookup
    assert max(per_ask[15:]) == 2
    assert replays > 0  # 2 layers round many draws to one width vector: twins were found
