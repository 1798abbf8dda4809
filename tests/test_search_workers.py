"""Multi-worker trials end to end: Ray Train workers inside Tune trials on the embedded Ray. Slow.

Two gloo workers of one trial train what one worker trains (the same curve to fp32 summation
order) and keep rank 0's weights; a STOP of the scheduler (how pruning ends a trial) stops every
worker at that eval, and two workers resume from its checkpoint.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from search_helpers import straight_curve, tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app

pytestmark = pytest.mark.slow
runner = CliRunner()
CURVE = ("train_loss", "val_loss", "val_bpb", "lr")


def study(tmp: Path, name: str, workers: int) -> dict:
    data = tiny_study(
        tmp,
        train={"checkpoint_every_tokens": 4096},
        search={"pruner": "none", "concurrency": 1, "keep_weights": "final"},
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
    """Each trial's curve is the one ``train_proxy`` draws on one worker, in this process, as a
    one-worker trial does (a one-worker trial's curve is exactly that: test_search_killed).
    (This ran a one-worker study on Ray too; this process gives its curves for a Ray less.)"""
    two_trials, two, wall = _run(tmp_path, "two", 2)
    print(f"2 trials of 2 workers: {wall:.1f} s")
    assert (two_trials["state"] == "COMPLETE").all() and len(two_trials) == 2
    assert (two_trials["node"] == "127.0.0.1,127.0.0.1").all()  # rank by rank
    assert len(two) == 8  # 4 evals x 2 trials
    for params, rows in two.groupby("params_json"):
        want = pd.DataFrame(straight_curve(study(tmp_path, "two", 2), json.loads(params), 0))
        assert list(rows["tokens"]) == list(want["tokens"]) == [2048, 4096, 6144, 8192]
        _same_curves(rows, want)
    # rank 0's final weights, through the trial: the model each trial names
    from tlmsearch.checkpoints import load_model

    for _, row in two_trials.iterrows():
        model, meta = load_model(row["weights"])
        assert meta["tokens"] == 8192 and meta["seed"] == 0
        assert sum(p.numel() for p in model.parameters()) == row["n_params"]


def _same_curves(got_rows: pd.DataFrame, want_rows: pd.DataFrame) -> None:
    for key in CURVE:
        got = torch.tensor(got_rows[key].to_numpy(), dtype=torch.float64)
        want = torch.tensor(want_rows[key].to_numpy(), dtype=torch.float64)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (key, got, want)


def test_a_stop_of_the_scheduler_stops_every_worker(local_ray, tmp_path: Path) -> None:
    """Pruning is the scheduler's STOP on a reported eval: the trial ends there, and its
    workers give their CPUs back."""
    import ray
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    from tlmsearch.config import study_from_mapping
    from tlmsearch.data import prepare_data
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.search.trainable import run_trial
    from tlmsearch.search.workers import trial_resources
    from tlmsearch.space import UNIFORM
    from tlmsearch.train import train_proxy

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

    def tuner(name: str, scheduler: FIFOScheduler, **config: object) -> tune.ResultGrid:
        return tune.Tuner(
            trainable,
            param_space={"candidate": dict(UNIFORM), "seed": 0, **config},
            tune_config=tune.TuneConfig(scheduler=scheduler, num_samples=1),
            run_config=tune.RunConfig(name=name, storage_path=str(tmp_path / "ray"), verbose=0),
        ).fit()

    stopped = tuner("stopped", StopAt4096())[0]
    assert list(stopped.metrics_dataframe["tokens"]) == [2048, 4096]
    assert not stopped.metrics_dataframe["final"].any()
    deadline = time.time() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) == 2  # no worker trains on

    # Its checkpoint at 4,096 tokens (rank 0's, through the trial): two workers go on from it
    # and end where one worker trained straight through ends.
    resumed = tuner("resumed", FIFOScheduler(), **{RESUME_FROM: stopped.checkpoint.path})[0]
    curve = resumed.metrics_dataframe
    assert list(curve["tokens"]) == [2048, 4096, 6144, 8192, 8192]  # the earlier evals again
    one = train_proxy(cfg.model.model_copy(update={"vocab_size": data.vocab_size}),
                      (64, 64), data, cfg.train, seed=0, threads=1, device="cpu")  # fmt: skip
    _same_curves(curve[~curve["final"]], pd.DataFrame(one.curve))
