"""What every tracker records of a trial (tlmsearch/search/tracking/facts.py): pure.

The facts a trial's tracker run carries, its curve points (step = tokens, each once), its
widths, and where each tracker writes by default.
"""

from __future__ import annotations

import json
from pathlib import Path

from search_helpers import tiny_config

from tlmsearch.search.tracking.facts import (
    TokenSteps,
    curve_point,
    mlflow_uri,
    trial_facts,
    wandb_dir,
    widths_param,
)


def test_seeds_of_one_candidate_share_its_label_and_differ_in_seed():
    cand = {"shape": "linear", "r_start": 1.5, "r_end": 0.5}
    a = trial_facts({"candidate": cand, "seed": 0, "number": 3})
    b = trial_facts({"candidate": dict(cand), "seed": 1, "number": 9})
    assert a.label == b.label == a.tags["candidate"] == "linear 1.5->0.5"
    assert (a.tags["seed"], b.tags["seed"]) == ("0", "1")
    assert a.name != b.name and a.tags["trial"] == "3"
    assert a.params == {**cand, "seed": 0}
    assert json.loads(a.tags["candidate_json"]) == cand
    assert a.tags["baseline"] == "false"
    base = trial_facts({"candidate": {"shape": "uniform"}, "seed": 0})
    assert base.label == "uniform" and base.tags["baseline"] == "true" and base.number is None


def test_a_resumed_or_replayed_trial_says_so():
    cand = {"shape": "cosine", "r_start": 1.5}
    resumed = trial_facts({"candidate": cand, "seed": 0, "resume_from": "/r/ckpt"})
    assert resumed.tags["resume_from"] == "/r/ckpt"
    replay = trial_facts({"candidate": cand, "seed": 0, "replay": {"number": 2, "curve": []}})
    assert replay.tags["same_as"] == "2"
    assert "replay" not in replay.params  # the twin's curve is no parameter


def test_a_curve_point_is_the_finite_eval_keys_and_counts():
    result = {
        "tokens": 4096,
        "val_bpb": 2.5,
        "val_ppl": float("nan"),
        "params": 1000,
        "widths": [96, 32],
        "final": False,
        "training_iteration": 2,
        "node": "127.0.0.1",
    }
    assert curve_point(result) == {"tokens": 4096.0, "val_bpb": 2.5, "params": 1000.0}
    assert curve_point({"val_bpb": 2.5}) is None  # no step
    assert curve_point({"tokens": float("nan")}) is None


def test_each_token_count_is_logged_once_per_trial():
    steps = TokenSteps()
    a, b = "a", "b"  # Ray's trial ids
    assert steps.first(a)
    assert steps.new_point(a, {"tokens": 2048, "val_bpb": 3.0}) is not None
    assert not steps.first(a)
    assert steps.new_point(a, {"tokens": 2048, "val_bpb": 3.0, "final": True}) is None
    assert steps.new_point(a, {"tokens": 1024, "val_bpb": 3.5}) is None  # a retry's replay
    assert steps.new_point(b, {"tokens": 1024, "val_bpb": 3.5}) is not None
    assert steps.new_point(a, {"tokens": 4096, "val_bpb": 2.9})["tokens"] == 4096.0
    steps.forget(a)  # a new tracker run of the trial: its whole curve again
    assert steps.first(a) and steps.new_point(a, {"tokens": 2048, "val_bpb": 3.0}) is not None


def test_widths_become_params():
    assert widths_param({"widths": [96, 32]}) == {"widths": "[96, 32]", "n_layer": 2}
    assert widths_param({}) == {}
    assert widths_param({"widths": [64, 64], "heads": [3, 1]})["heads"] == "[3, 1]"


def test_an_attention_only_taper_is_no_baseline_run():
    attention = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}
    facts = trial_facts({"candidate": attention, "seed": 0})
    assert facts.tags["baseline"] == "false"
    assert facts.label == "uniform | heads cosine 1.5->0.5"


def test_defaults_keep_everything_in_the_run_dir(tmp_path):
    cfg = tiny_config(tmp_path, tracking={"mlflow": True, "wandb": {"project": "p"}})
    run = tmp_path / "runs" / "tiny"
    assert mlflow_uri(cfg, run) == f"sqlite:///{(run / 'mlflow.db').resolve()}"
    assert wandb_dir(cfg, run) == run.resolve()
    assert cfg.tracking.wandb.mode == "offline"
    other = tiny_config(
        tmp_path, tracking={"mlflow": {"uri": "http://mlflow:5000"}, "wandb": {"dir": "/w"}}
    )
    assert mlflow_uri(other, run) == "http://mlflow:5000"
    assert wandb_dir(other, run) == Path("/w")
