"""Multi-worker trials end to end: Ray Train workers inside Tune trials on the embedded Ray. Slow.

Two gloo workers of one trial train what one worker trains (the same curve to fp32 summation
order), and a STOP of the scheduler (how pruning ends a trial) stops every worker at that eval.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import pytest
import test_search_run
import torch
import yaml
from search_helpers import tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app

pytestmark = pytest.mark.slow
runner = CliRunner()
local_ray = test_search_run.local_ray  # the fixture: one embedded Ray (2 CPUs) for the module
CURVE = ("train_loss", "val_loss", "val_bpb", "lr")


def study(tmp: Path, name: str, workers: int) -> dict:
    data = tiny_study(
        tmp,
        search={"pruner": "none", "concurrency": 1},
        ray={"num_cpus": 2, "cpus_per_trial": workers, "workers_per_trial": workers},
    )
    data["name"] = name
    data["space"]["dimensions"] = {  # the uniform baseline and one candidate
        "shape": {"type": "categorical", "choices": ["cosine"]},
        "r_start": {"type": "float", "low": 1.5, "high": 1.5, "step": 0.25},
    }
    return data


def _run(tmp: Path, name: str, workers: int) -> tuple[pd.DataFrame, pd.DataFrame, float]:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(study(tmp, name, workers)))
    t = time.time()
    res = runner.invoke(app, ["run", str(path)])
    wall = time.time() - t
    assert res.exit_code == 0, res.output
    run = tmp / "runs" / name
    trials = pd.read_parquet(run / "trials.parquet")
    curves = pd.read_parquet(run / "curves.parquet").merge(
        trials[["trial_id", "params_json"]], on="trial_id"
    )
    return trials, curves.sort_values(["params_json", "tokens"]), wall


def test_two_workers_give_the_one_worker_curves(local_ray, tmp_path: Path) -> None:
    one_trials, one, wall_1 = _run(tmp_path, "one", 1)
    two_trials, two, wall_2 = _run(tmp_path, "two", 2)
    print(f"2 trials: 1 worker {wall_1:.1f} s, 2 workers {wall_2:.1f} s")
    assert (two_trials["state"] == "COMPLETE").all() and len(two_trials) == 2
    assert (two_trials["node"] == "127.0.0.1,127.0.0.1").all()  # rank by rank
    assert (one_trials["node"] == "127.0.0.1").all()
    assert list(two["params_json"]) == list(one["params_json"])
    assert list(two["tokens"]) == list(one["tokens"]) and len(one) == 8  # 4 evals x 2 trials
    for key in CURVE:
        got = torch.tensor(two[key].to_numpy(), dtype=torch.float64)
        want = torch.tensor(one[key].to_numpy(), dtype=torch.float64)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (key, got, want)


def test_a_stop_of_the_scheduler_stops_every_worker(local_ray, tmp_path: Path) -> None:
    """Pruning is the scheduler's STOP on a reported eval: the trial ends there, and its
    workers give their CPUs back."""
    import ray
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    from tlmsearch.config import study_from_mapping
    from tlmsearch.data import prepare_data
    from tlmsearch.search.trainable import run_trial
    from tlmsearch.search.workers import trial_resources
    from tlmsearch.space import UNIFORM

    class StopAt4096(FIFOScheduler):
        def on_trial_result(self, tune_controller, trial, result):
            if result.get("tokens", 0) >= 4096:
                return TrialScheduler.STOP
            return TrialScheduler.CONTINUE

    cfg = study_from_mapping(study(tmp_path, "stop", 2))
    data = prepare_data(cfg.data, progress=False).in_memory()
    trainable = tune.with_resources(
        tune.with_parameters(run_trial, study=cfg.to_dict(), data=data),
        trial_resources(cfg.ray),
    )
    grid = tune.Tuner(
        trainable,
        param_space={"candidate": dict(UNIFORM), "seed": 0},
        tune_config=tune.TuneConfig(scheduler=StopAt4096(), num_samples=1),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), verbose=0),
    ).fit()
    reports = grid[0].metrics_dataframe
    assert list(reports["tokens"]) == [2048, 4096] and not reports["final"].any()
    deadline = time.time() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) == 2  # no worker trains on
