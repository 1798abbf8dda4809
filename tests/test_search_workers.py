"""Multi-worker trials end to end: Ray Train workers inside Tune trials on the embedded Ray. Slow.

Two gloo workers of one trial train what one worker trains (the same curve to fp32 summation
order) and keep rank 0's weights, through ``tlmsearch run`` on an embedded Ray that listens on
loopback only; a STOP of the scheduler (how pruning ends a trial) stops every worker at that eval,
and two workers resume from its checkpoint.

Ray Train's controller looks at its workers every 2 s (RAY_TRAIN_HEALTH_CHECK_INTERVAL_S): a
trial's ``fit()`` returned up to 2 s after its workers were done. Here it looks every 0.25 s (a
look that goes unanswered is only repeated: Ray gives up on a worker after 10 minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from proc_sockets import cmdline, environ, is_loopback, listeners, process_tree
from search_helpers import straight_curve, tiny_study

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
CURVE = ("train_loss", "val_loss", "val_bpb", "lr")
POLLS = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25"}  # Ray's processes inherit it


@pytest.fixture(scope="module")
def train_polls_often():
    with pytest.MonkeyPatch.context() as mp:
        for key, value in POLLS.items():
            mp.setenv(key, value)
        yield


@pytest.fixture(scope="module")
def local_ray(train_polls_often, local_ray):
    """conftest's embedded Ray, its Ray Train controllers looking at their workers often."""
    yield


def study(tmp: Path, name: str, workers: int) -> dict:
    """One candidate (cosine 1.5 -> 0.5) on seed 0, on ``workers`` workers of a CPU each."""
    data = tiny_study(
        tmp,
        train={"checkpoint_every_tokens": 4096},
        search={
            "pruner": "none",
            "concurrency": 1,
            "keep_weights": "final",
            "baseline": False,
            "seeds": [0],
        },
        ray={"num_cpus": 2, "cpus_per_trial": workers, "workers_per_trial": workers},
    )
    data["name"] = name
    data["space"]["dimensions"] = {
        "shape": {"type": "categorical", "choices": ["cosine"]},
        "r_start": {"type": "float", "low": 1.5, "high": 1.5, "step": 0.25},
    }
    return data


def _same_curves(got_rows: pd.DataFrame, want_rows: pd.DataFrame) -> None:
    for key in CURVE:
        got = torch.tensor(got_rows[key].to_numpy(), dtype=torch.float64)
        want = torch.tensor(want_rows[key].to_numpy(), dtype=torch.float64)
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-6), (key, got, want)


def test_a_two_worker_run_trains_the_one_worker_curve_and_listens_on_loopback_only(
    tmp_path: Path,
) -> None:
    """``tlmsearch run`` of one trial on two workers, with its own embedded Ray, sampled while
    it runs: every socket its process tree listens on is on loopback, and its Ray needs a token
    of its own; then its curve is the one ``train_proxy`` draws on one worker, in this process,
    as a one-worker trial does (a one-worker trial's curve is exactly that: test_search_killed),
    and the trial keeps rank 0's final weights.

    Ray executes code for whoever reaches its GCS. The sockets are those of the run's own
    process tree (driver, GCS, raylet, agents, the trial, its two Ray Train workers, their
    process group's rendezvous and gloo pairs). Two workers per trial cover one: the trial's own
    process (where a one-worker trial trains) is there as well, as the driver of its two
    workers. (These were three tests: a Ray per worker count for the sockets, and the curves of
    a two-trial study on the file's Ray.)
    """
    data = study(tmp_path, "two", 2)
    path = tmp_path / "two.yaml"
    path.write_text(yaml.safe_dump(data))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    log = tmp_path / "run.log"
    proc = subprocess.Popen(
        [str(BIN / "tlmsearch"), "run", str(path)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env={**env, **POLLS},
    )
    seen: dict[tuple[int, int], tuple[str, str]] = {}  # (pid, port) -> (name, host)
    ray_env: dict[str, str] = {}
    session_dir = ""
    deadline = time.time() + 300
    try:
        while proc.poll() is None and time.time() < deadline:
            tables: dict[str, list[str]] = {}  # one read of the socket tables a sample
            for pid in process_tree(proc.pid):
                for s in listeners(pid, tables):
                    seen[(s.pid, s.port)] = (s.name, s.host)
                    if s.name == "gcs_server" and not ray_env:
                        ray_env = environ(pid)  # what the driver gave Ray's processes
                for arg in cmdline(pid):
                    if arg.startswith("--session-dir="):
                        session_dir = arg.split("=", 1)[1]
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    out = log.read_text()
    assert proc.returncode == 0, out[-3000:]
    names = {name for name, _ in seen.values()}
    assert {"gcs_server", "raylet"} <= names, seen  # the sampling saw Ray itself
    assert any(name.startswith("ray::") for name in names), seen  # and a trial worker
    # and its two Ray Train workers (a process's comm holds 15 characters)
    assert "ray::RayTrainWo" in names, seen
    open_ = {
        f"{name} (pid {pid}) on {host}:{port}"
        for (pid, port), (name, host) in seen.items()
        if not is_loopback(host)
    }
    assert not open_, f"listening beyond loopback: {sorted(open_)}"

    # Token authentication with a secret of this run's alone: not the user's ~/.ray/auth_token,
    # and nowhere in the log, the run dir (checkpoints and weights included) or Ray's session dir.
    assert ray_env.get("RAY_AUTH_MODE") == "token", sorted(ray_env)
    token = ray_env.get("RAY_AUTH_TOKEN", "")
    assert len(token) >= 32
    home_token = Path.home() / ".ray" / "auth_token"
    assert not home_token.exists() or home_token.read_text().strip() != token
    assert token not in out
    leaks = [
        p
        for p in (tmp_path / "runs").rglob("*")
        if p.is_file() and token.encode() in p.read_bytes()
    ]
    assert session_dir and Path(session_dir).is_dir()
    leaks += [
        p
        for p in Path(session_dir).rglob("*")
        if p.is_file() and p.stat().st_size < 50_000_000 and token.encode() in p.read_bytes()
    ]
    assert not leaks, leaks

    # The one-worker curve, rank by rank on this node, and rank 0's final weights
    run = tmp_path / "runs" / "two"
    trials = pd.read_parquet(run / "trials.parquet")
    assert len(trials) == 1 and trials["state"].iloc[0] == "COMPLETE", out[-3000:]
    (row,) = trials.itertuples()
    assert row.node == "127.0.0.1,127.0.0.1"  # rank by rank
    curve = pd.read_parquet(run / "curves.parquet").sort_values("tokens")
    want = pd.DataFrame(straight_curve(data, json.loads(row.params_json), 0))
    assert list(curve["tokens"]) == list(want["tokens"]) == [2048, 4096, 6144, 8192]
    _same_curves(curve, want)
    from tlmsearch.train.checkpoints import load_model

    model, meta = load_model(row.weights)
    assert meta["tokens"] == 8192 and meta["seed"] == 0
    assert sum(p.numel() for p in model.parameters()) == row.n_params


def test_a_stop_of_the_scheduler_stops_every_worker(local_ray, tmp_path: Path) -> None:
    """Pruning is the scheduler's STOP on a reported eval: the trial ends there, and its
    workers give their CPUs back."""
    import ray
    from ray import tune
    from ray.tune.schedulers import FIFOScheduler, TrialScheduler

    from tlmsearch.config import study_from_mapping
    from tlmsearch.data import prepare_data
    from tlmsearch.search.attrs import RESUME_FROM
    from tlmsearch.search.execution.trainable import run_trial
    from tlmsearch.search.execution.workers import trial_resources
    from tlmsearch.train.loop import train_proxy
    from tlmsearch.widths.space import UNIFORM

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
        time.sleep(0.1)
    assert ray.available_resources().get("CPU", 0) == 2  # no worker trains on

    # Its checkpoint at 4,096 tokens (rank 0's, through the trial): two workers go on from it
    # and end where one worker trained straight through ends.
    resumed = tuner("resumed", FIFOScheduler(), **{RESUME_FROM: stopped.checkpoint.path})[0]
    curve = resumed.metrics_dataframe
    assert list(curve["tokens"]) == [2048, 4096, 6144, 8192, 8192]  # the earlier evals again
    one = train_proxy(
        cfg.model.model_copy(update={"vocab_size": data.vocab_size}),
        (64, 64),
        data,
        cfg.train,
        seed=0,
        threads=1,
        device="cpu",
    )
    _same_curves(curve[~curve["final"]], pd.DataFrame(one.curve))


def test_each_worker_is_handed_the_runs_compile_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Ray Train worker is a process of its own (the trial's environment does not reach it):
    the trial's compile cache travels in the workers' loop config, and a worker applies it
    before anything else. (Ray's queues, trainer and context faked: nothing starts.)"""
    import ray
    import ray.util.queue
    from ray.train.v2.api import data_parallel_trainer

    from tlmsearch.config import study_from_mapping
    from tlmsearch.search.execution import workers

    made: list[dict] = []

    class Trainer:
        def __init__(self, loop, train_loop_config, **kw) -> None:
            assert loop is workers._worker
            made.append(train_loop_config)

    monkeypatch.setattr(data_parallel_trainer, "DataParallelTrainer", Trainer)
    monkeypatch.setattr(ray.util.queue, "Queue", lambda **kw: object())
    monkeypatch.setattr(ray, "put", lambda value: value)
    cfg = study_from_mapping(study(tmp_path, "two", 2))
    cache = str(tmp_path / "runs" / "two" / "compile-cache")
    workers._ray_trainer(
        cfg,
        cfg.model,
        [64, 64],
        None,
        seed=0,
        threads=1,
        resume=None,
        checkpoints=False,
        final_checkpoint=False,
        compile_cache=cache,
    )
    assert made[0]["compile_cache"] == cache

    class Started(Exception):  # the worker got as far as asking Ray Train for its rank
        pass

    def context():
        assert os.environ.get("TORCHINDUCTOR_CACHE_DIR") == cache
        raise Started

    # set, then removed: monkeypatch then restores the variable the worker sets (it records
    # nothing for a variable that was never there)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "before")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    monkeypatch.setattr(ray.train, "get_context", context)
    with pytest.raises(Started):
        workers._worker(made[0])
