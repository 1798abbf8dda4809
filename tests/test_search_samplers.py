"""Queue, pairing, sampler and pruner factories, storage URLs (no Ray, no training)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from search_helpers import tiny_config

from tlmsearch.config import StorageConfig, StudyConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.samplers import (
    CANDIDATE,
    SEED,
    SpaceFn,
    grace_tokens,
    initial_queue,
    make_pruner,
    make_sampler,
    planned_trials,
    searchable,
    write_initial_queue,
)
from tlmsearch.search.storage import dashboard_command, redact, storage_url
from tlmsearch.space import UNIFORM

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
    fn = SpaceFn(cfg)
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
    fn = SpaceFn(cfg)
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
    assert isinstance(make_sampler(_cfg(tmp_mod, sampler=name, n_trials=4)), cls)


def test_gp_sampler(tmp_mod):
    cfg = _cfg(tmp_mod, sampler="gp", n_trials=4)
    assert isinstance(make_sampler(cfg), optuna.samplers.GPSampler)


def test_storage_urls(tmp_path):
    assert storage_url(StorageConfig(), tmp_path) == f"sqlite:///{tmp_path}/optuna.db"
    assert storage_url(StorageConfig(optuna="journal"), tmp_path).endswith("optuna.journal")
    pg = "postgresql://u:secret@127.0.0.1:5432/db"
    assert storage_url(StorageConfig(optuna=pg), tmp_path) == pg
    assert "secret" not in redact(pg) and "127.0.0.1:5432/db" in redact(pg)
    assert "--host 127.0.0.1" in dashboard_command(pg)
    with pytest.raises(ConfigError, match=r"storage.optuna: 'mongodb://x'"):
        storage_url(StorageConfig(optuna="mongodb://x"), tmp_path)
