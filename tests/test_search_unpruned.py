"""The candidates the pruner never stops (search.unpruned_candidates): drawn at random before
any data, recorded in the run dir and the study, read back on resume
(search/sampling/samplers.py)."""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
from search_helpers import tiny_config

from tlmsearch.run_dir import RunDir
from tlmsearch.search import runner
from tlmsearch.search.attrs import CANDIDATE, UNPRUNED_CHOICE
from tlmsearch.search.sampling.samplers import (
    _key,
    draw_unpruned,
    initial_queue,
    record_unpruned,
    unpruned,
    write_initial_queue,
)
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.space import is_baseline

optuna.logging.set_verbosity(optuna.logging.WARNING)
SIX = {
    "shape": {"type": "fixed", "value": "cosine"},  # six distinct proxy widths
    "r_start": {"type": "categorical", "choices": [1.75, 1.5, 1.25, 0.75, 0.5, 0.25]},
}


def _cfg(tmp: Path, seed: int = 0, n: int = 2, **search):
    return tiny_config(
        tmp,
        space={"dimensions": SIX},
        search={"pruner": "median", "unpruned_candidates": n, "sampler_seed": seed, **search},
    )


def _queued(cfg) -> list[str]:
    """The grid's non-baseline candidates in queue order (first seed)."""
    out: list[str] = []
    for cand, _ in initial_queue(cfg):
        k = _key(cand)
        if not is_baseline(cand) and k not in out:
            out.append(k)
    return out


def _study(cfg, run: Path | None = None):
    study = optuna.create_study()
    record_unpruned(study, cfg, run)
    write_initial_queue(study, cfg)
    return study


def test_the_unpruned_are_the_recorded_random_draw_not_the_first_in_queue_order(tmp_path):
    """The old rule unpruned the first n candidates of the queue (chosen by the grid's order, the
    same in every study): here, for a seed whose draw differs, the first queued is not unpruned."""
    queued = _queued(_cfg(tmp_path))
    assert len(queued) == 6
    for seed in range(20):
        cfg = _cfg(tmp_path, seed)
        chosen = draw_unpruned(cfg)["by_setting"]["{}"]
        if set(chosen) != set(queued[:2]):
            break
    else:
        pytest.fail("20 seeds all drew the first two in queue order")
    study = _study(cfg)
    got = [k for k in queued if unpruned(study, cfg, Candidate.from_identity(k))]
    assert sorted(got) == sorted(chosen) and len(got) == 2
    assert set(got) != set(queued[:2])  # the old queue-order choice


def test_the_draw_is_uniform_over_the_candidates_and_fixed_by_the_seed(tmp_path):
    queued = _queued(_cfg(tmp_path))
    counts = dict.fromkeys(queued, 0)
    reps = 300
    for seed in range(reps):
        draw = draw_unpruned(_cfg(tmp_path, seed))
        assert draw == draw_unpruned(_cfg(tmp_path, seed))  # the seed fixes it
        chosen = draw["by_setting"]["{}"]
        assert len(set(chosen)) == 2 and set(chosen) <= set(queued)
        for k in chosen:
            counts[k] += 1
    # each of 6 candidates unpruned in 1/3 of the studies: 100 of 300, sd 8.2
    assert all(60 <= c <= 140 for c in counts.values()), counts


def test_the_draw_is_per_setting_and_never_uniform(tmp_path):
    lr = {"type": "categorical", "choices": [0.001, 0.003]}
    cfg = tiny_config(
        tmp_path,
        space={"dimensions": {**SIX, "train.lr": lr}},
        search={"pruner": "median", "unpruned_candidates": 2},
    )
    by = draw_unpruned(cfg)["by_setting"]
    assert sorted(by) == ['{"train.lr": 0.001}', '{"train.lr": 0.003}']
    for setting, keys in by.items():
        assert len(keys) == 2
        for k in keys:
            c = Candidate.from_identity(k)
            assert not is_baseline(c) and json.dumps({"train.lr": c["train.lr"]}) == setting
    assert draw_unpruned(_cfg(tmp_path, n=0)) is None
    assert draw_unpruned(_cfg(tmp_path, pruner="none")) is None


def test_recorded_in_the_run_dir_before_the_first_trial_and_read_back_on_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    cfg = _cfg(tmp_path, 3)
    study = optuna.create_study()
    choice = record_unpruned(study, cfg, run)
    assert not study.get_trials()  # before any trial
    assert json.loads(RunDir(run).unpruned.read_text()) == choice == draw_unpruned(cfg)
    assert json.loads(study.user_attrs[UNPRUNED_CHOICE]) == choice
    write_initial_queue(study, cfg)
    # a resume under another seed reads the record back, never draws again
    other = _cfg(tmp_path, 4)
    assert draw_unpruned(other) != choice
    assert record_unpruned(study, other, run) == choice
    # a study whose attribute is lost still reads the run dir's record
    fresh = optuna.create_study()
    fresh.enqueue_trial({}, user_attrs={CANDIDATE: _queued(cfg)[0]})
    assert record_unpruned(fresh, other, run) == choice
    assert json.loads(fresh.user_attrs[UNPRUNED_CHOICE]) == choice


def test_a_run_an_older_version_started_keeps_the_queue_order_rule(tmp_path):
    cfg = _cfg(tmp_path, 5)
    study = optuna.create_study()
    write_initial_queue(study, cfg)  # trials, and no draw recorded
    assert record_unpruned(study, cfg, None) is None and UNPRUNED_CHOICE not in study.user_attrs
    queued = _queued(cfg)
    assert [unpruned(study, cfg, Candidate.from_identity(k)) for k in queued] == [True, True] + [
        False
    ] * 4


def test_create_run_records_the_draw_before_queueing(tmp_path):
    run = tmp_path / "run"
    cfg = _cfg(tmp_path, 7)
    study = runner._create_run(run, cfg, f"sqlite:///{run / 'optuna.db'}", "tiny")
    assert json.loads(RunDir(run).unpruned.read_text()) == draw_unpruned(cfg)
    assert json.loads(study.user_attrs[UNPRUNED_CHOICE]) == draw_unpruned(cfg)


def test_a_sampler_leaves_unpruned_the_first_n_it_draws_at_each_setting(tmp_path):
    """A sampler's first draws are random ones (its random start): the first n distinct
    candidates it draws are unpruned, n for sure (a probability n / n_trials per draw left
    none unpruned in about 12% of 20-trial studies)."""
    cfg = _cfg(tmp_path, 1, sampler="random", n_trials=8)
    assert draw_unpruned(cfg) == {"rule": "first_drawn", "seed": 1, "n": 2}
    study = optuna.create_study()
    record_unpruned(study, cfg, None)
    cands = [Candidate({"shape": "cosine", "r_start": 0.5 + i / 10}) for i in range(6)]
    for c in [cands[0], cands[0], *cands[1:]]:  # a seed repeat of the first draw
        study.enqueue_trial({}, user_attrs={CANDIDATE: c.identity})
    assert [unpruned(study, cfg, c) for c in cands] == [True, True, False, False, False, False]
    assert not unpruned(study, cfg, Candidate({"shape": "uniform"}))


def test_the_run_dirs_record_decides_and_unpruned_follows_it(tmp_path):
    """unpruned.json is the record: a study whose copy differs (an edited file) takes the
    file's, so what resume reads back and what unpruned() answers agree."""
    run = tmp_path / "run"
    run.mkdir()
    cfg = _cfg(tmp_path, 2)
    study = _study(cfg, run)
    queued = _queued(cfg)
    edited = {**draw_unpruned(cfg), "by_setting": {"{}": queued[-2:]}}
    RunDir(run).unpruned.write_text(json.dumps(edited))
    assert record_unpruned(study, cfg, run) == edited
    got = [unpruned(study, cfg, Candidate.from_identity(k)) for k in queued]
    assert got == [False] * 4 + [True, True]
    assert not list(run.glob(".unpruned.json.*"))  # written whole, through a temp file


def test_a_run_dir_before_0_8_is_read_under_the_new_names(tmp_path):
    """Its draw in spared.json and its trials table's ``spared`` column read as ``unpruned``."""
    run = tmp_path / "run"
    run.mkdir()
    cfg = _cfg(tmp_path, 3)
    choice = draw_unpruned(cfg)
    RunDir(run).unpruned_before_0_8.write_text(json.dumps(choice))
    study = optuna.create_study()
    study.enqueue_trial({}, user_attrs={CANDIDATE: _queued(cfg)[0]})  # a run already started
    assert record_unpruned(study, _cfg(tmp_path, 4), run) == choice  # read back, not redrawn
    assert json.loads(RunDir(run).unpruned.read_text()) == choice
    # a trials table written with the old column name
    from tlmsearch.run_dir.tables import TRIAL_COLUMNS, _read_table, trials_frame

    rows = trials_frame([{"number": 0, "state": "COMPLETE", "unpruned": True}])
    rows.rename(columns={"unpruned": "spared"}).to_parquet(RunDir(run).table("trials"))
    trials = _read_table(RunDir(run), "trials", TRIAL_COLUMNS)
    assert "spared" not in trials and trials["unpruned"].tolist() == [True]
