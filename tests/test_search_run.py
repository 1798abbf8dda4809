"""End to end: real tiny trainings in a real local Ray (one Ray for the module), through the CLI.

Slow (still run in CI). The study: 2 layers, d_model 32, bytes on a made-up text, 8k tokens per
trial, a 5-candidate grid (uniform first) x 2 seeds, median pruning.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml
from search_helpers import tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.search.sampling.storage import open_storage

pytestmark = pytest.mark.slow
runner = CliRunner()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("search_run")


def _study_file(workdir: Path, name: str, **sections) -> Path:
    data = tiny_study(workdir, **sections)
    data["name"] = name
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def finished(local_ray, workdir: Path):
    path = _study_file(workdir, "grid", search={"pruner": "median", "seeds": [0, 1]})
    t = time.time()
    res = runner.invoke(app, ["run", str(path)])
    return res, workdir / "runs" / "grid", time.time() - t


def test_run_finishes_and_tells_how_to_look(finished):
    res, run, wall = finished
    assert res.exit_code == 0, res.output
    assert str(run) in res.output
    assert f"tlmsearch report {run}" in res.output and "optuna-dashboard" in res.output
    assert "finished" in res.output and "best:" in res.output
    assert f"report: {run / 'report.html'}" in " ".join(res.output.split())
    print(f"tiny grid study (6 trials): {wall:.1f} s")


def test_off_a_terminal_each_trial_prints_its_evals_with_tokens_and_eta(finished):
    """CliRunner's stdout is no terminal: plain lines, each trial's first eval at least."""
    res, _, _ = finished
    evals = [ln for ln in res.output.splitlines() if ln.startswith("EVAL ")]
    assert all("/8,192 tokens (" in ln and "val_bpb " in ln and "ETA " in ln for ln in evals)
    assert all("[trials " in ln and ln.endswith("]") for ln in evals)  # the study's ETA too
    firsts = {ln.split(":")[0] for ln in evals if ": 2,048/8,192 tokens (25%)" in ln}
    assert len(firsts) == 6, evals  # one per (candidate, seed)


def test_run_dir_is_complete(finished):
    _, run, _ = finished
    for name in ("study.yaml", "optuna.db", "run.json", "best.yaml", "report.html"):
        assert (run / name).is_file(), name
    for name in ("trials", "curves"):
        assert (run / f"{name}.parquet").is_file() and (run / f"{name}.csv").is_file()
    info = json.loads((run / "run.json").read_text())
    # 3 distinct widths x 2 seeds
    assert info["status"] == "finished" and info["n_trials_planned"] == 6
    assert info["versions"]["ray"] and info["versions"]["optuna"]
    assert (run / "ray" / "session-0").is_dir()


def test_trials_table(finished):
    _, run, _ = finished
    df = pd.read_parquet(run / "trials.parquet")
    # At 2 layers linear and cosine of one ratio pair are the same widths: trained once.
    assert len(df) == 6
    assert set(df["state"]) <= {"COMPLETE", "PRUNED"}
    assert not df.duplicated(["params_json", "seed"]).any()  # every pair exactly once
    assert sorted(df["seed"].value_counts().tolist()) == [3, 3]  # paired
    base = df[df["is_baseline"]]
    assert len(base) == 2 and (base["state"] == "COMPLETE").all()
    assert (base["delta_val_bpb"] == 0).all()
    done = df[df["state"] == "COMPLETE"]
    assert (done["tokens"] >= 8192).all() and done["val_bpb"].notna().all()
    # whatever the median pruner stopped in real training, maybe nothing; a prune through Ray
    # is certain in test_search_pruning's test_through_ray_a_clearly_worse_candidate_...
    pruned = df[df["state"] == "PRUNED"]
    assert (pruned["tokens"] < 8192).all()
    assert pruned["reason"].str.contains("pruned by Median").all()
    assert (pruned["tokens"] >= 2048).all()  # never before the grace: 1/4 of the run here
    assert (df["node"] == "127.0.0.1").all()
    assert df["widths_json"].map(lambda w: sum(json.loads(w)) == 2 * 64).all()
    assert (df["n_params"] == df["n_params"].iloc[0]).all()  # an exact budget
    assert df["wall_s"].gt(0).all()


def test_curves_and_optuna_steps_are_tokens(finished):
    _, run, _ = finished
    curves = pd.read_parquet(run / "curves.parquet")
    trials = pd.read_parquet(run / "trials.parquet")
    assert set(curves["trial_id"]) == set(trials["trial_id"])
    assert (curves["tokens"] % 2048 == 0).all()
    study = optuna.load_study(study_name="grid", storage=f"sqlite:///{run / 'optuna.db'}")
    for ft in study.get_trials():
        assert all(step % 2048 == 0 for step in ft.intermediate_values)
        n = len(curves[curves["trial_id"] == ft.user_attrs["ray_trial_id"]])
        assert len(ft.intermediate_values) == n


def test_status_and_export(finished, tmp_path):
    _, run, _ = finished
    res = runner.invoke(app, ["status", str(run)])
    assert res.exit_code == 0, res.output
    assert "finished" in res.output and "6/6 finished" in res.output
    for fmt, names in (("csv", ["trials.csv", "curves.csv"]), ("yaml", ["best.yaml"])):
        res = runner.invoke(app, ["export", str(run), "--format", fmt, "--out", str(tmp_path)])
        assert res.exit_code == 0, res.output
        assert all((tmp_path / n).is_file() for n in names)
    best = yaml.safe_load((tmp_path / "best.yaml").read_text())
    assert best["best"][0]["proxy"]["widths"]
    assert runner.invoke(app, ["export", str(run), "--format", "xml"]).exit_code == 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_optuna_dashboard_shows_the_run(finished):
    _, run, _ = finished
    port = _free_port()
    exe = Path(sys.executable).with_name("optuna-dashboard")
    proc = subprocess.Popen(
        [str(exe), f"sqlite:///{run / 'optuna.db'}", "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        body = None
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/studies") as r:
                    body = json.load(r)
                break
            except OSError:
                time.sleep(0.25)
        assert body is not None, "optuna-dashboard did not answer"
        (summary,) = body["study_summaries"]
        assert summary["study_name"] == "grid"
        url = f"http://127.0.0.1:{port}/api/studies/{summary['study_id']}"
        with urllib.request.urlopen(url) as r:
            detail = json.load(r)
        assert len(detail["trials"]) == 6
        assert all(t["intermediate_values"] for t in detail["trials"])
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_bad_study_exits_2_before_anything_starts(workdir):
    path = _study_file(workdir, "bad_input")
    res = runner.invoke(app, ["run", str(path), "--set", "search.pruner=mediam"])
    assert res.exit_code == 2
    assert "search.pruner" in res.output
    assert not (workdir / "runs" / "bad_input").exists()


def test_existing_run_dir_is_refused(finished):
    _, run, _ = finished
    res = runner.invoke(
        app, ["run", str(run / "study.yaml"), "--set", f"storage.runs_dir={run.parent}"]
    )
    assert res.exit_code == 2 and "tlmsearch resume" in res.output


@pytest.mark.parametrize(
    ("override", "reason"),
    [("model.vocab_size=100", "below the data's vocabulary"), ("train.lr=50", "diverged: ")],
)
def test_every_trial_failing_exits_1_with_the_reason(local_ray, workdir, override, reason):
    name = "fail_" + override.split("=")[0].replace(".", "_")
    path = _study_file(
        workdir, name, space={"dimensions": {"shape": {"type": "fixed", "value": "cosine"}}}
    )
    res = runner.invoke(app, ["run", str(path), "--set", override])
    assert res.exit_code == 1, res.output
    assert "no trial completed" in res.output and reason in res.output
    df = pd.read_parquet(workdir / "runs" / name / "trials.parquet")
    assert (df["state"] == "FAIL").all() and df["reason"].str.contains(reason).all()
    assert (df["retries"] == 0).all()  # the trial's own failure: never retried


def test_nsga2_multi_objective_keeps_a_front(local_ray, workdir):
    path = _study_file(
        workdir,
        "multi",
        search={"sampler": "nsga2", "pruner": "none", "n_trials": 2, "sampler_seed": 3},
        objectives=[{"metric": "val_bpb"}, {"metric": "tokens_per_s"}],
    )
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    run = workdir / "runs" / "multi"
    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 3 and df["is_baseline"].sum() == 1
    assert {"delta_val_bpb", "delta_tokens_per_s"} <= set(df.columns)
    study = optuna.load_study(study_name="multi", storage=f"sqlite:///{run / 'optuna.db'}")
    assert len(study.directions) == 2
    assert all(len(t.values) == 2 for t in study.get_trials())
    best = yaml.safe_load((run / "best.yaml").read_text())["best"]
    assert 1 <= len(best) <= 3 and all("tokens_per_s" in b["values"] for b in best)


PG_URL = os.environ.get("TLMSEARCH_TEST_PG_URL")


@pytest.mark.skipif(not PG_URL, reason="TLMSEARCH_TEST_PG_URL unset (.ci/services.sh start)")
def test_postgresql_storage(local_ray, workdir):
    name = f"pg-{uuid.uuid4().hex[:8]}"
    path = _study_file(
        workdir, "pg", storage={"runs_dir": str(workdir / "runs"), "optuna": PG_URL}
    )
    res = runner.invoke(app, ["run", str(path), "--name", name])
    try:
        assert res.exit_code == 0, res.output
        study = optuna.load_study(study_name=name, storage=open_storage(PG_URL))
        states = {t.state.name for t in study.get_trials()}
        assert states <= {"COMPLETE", "PRUNED"} and len(study.get_trials()) == 3
        assert not (workdir / "runs" / name / "optuna.db").exists()
        res = runner.invoke(app, ["status", str(workdir / "runs" / name)])
        assert res.exit_code == 0 and "3/3 finished" in res.output
        password = PG_URL.split("://", 1)[1].split("@")[0].partition(":")[2]
        assert f":{password}@" not in res.output and ":***@" in res.output
    finally:
        optuna.delete_study(study_name=name, storage=open_storage(PG_URL))


@pytest.mark.parametrize(
    ("name", "search", "expect"),
    [
        # a vanishing noise prior would separate every candidate on its first seed; a prior
        # only steers: each is held, then gets the seed that measures the noise
        ("race_grid", {"seeds": [0, 1], "racing": {"prior_sd": 1e-9}}, {0: 3, 1: 3}),
        # a huge one separates nothing: both sampled candidates (and uniform) race to 2 seeds
        (
            "race_random",
            {"sampler": "random", "n_trials": 2, "seeds": [0, 1], "racing": {"prior_sd": 100}},
            {0: 3, 1: 3},
        ),
    ],
)
def test_a_race_ends_by_itself_with_the_seeds_it_decided(local_ray, workdir, name, search, expect):
    path = _study_file(workdir, name, search=search)
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    run = workdir / "runs" / name
    df = pd.read_parquet(run / "trials.parquet")
    assert df["seed"].value_counts().to_dict() == expect
    assert (df["state"] == "COMPLETE").all()
    res = runner.invoke(app, ["status", str(run)])
    out = " ".join(res.output.split())
    assert res.exit_code == 0 and "race: " in out, out
    assert "on the prior" not in out, out  # nothing ends on an assumption
    if name == "race_random":
        assert ": tied on 2 seed(s)" in out, out


def test_an_hf_family_study_runs_analyzes_and_exports_a_folder_transformers_loads(
    local_ray, workdir, tmp_path
):
    """Bring your own model, data and tracker, end to end: a tiny Qwen2 proxy study with a
    Llama target, tracked to a local MLflow store, its kept weights analyzed, and its best
    exported to a folder whose target widths transformers builds."""
    from test_hf_export import load_in_fresh_process

    from tlmsearch.config import load_study
    from tlmsearch.widths.budget import count_params

    target = {
        "arch": "hf",
        "hf": {"model_type": "llama"},
        "n_layer": 4,
        "d_model": 64,
        "n_head": 2,
        "d_ff": 256,
        "multiple_of": 16,
    }
    path = _study_file(
        workdir,
        "hf",
        model={"arch": "hf", "hf": {"model_type": "qwen2"}},
        target=target,
        search={"seeds": [0], "keep_weights": "best"},
        tracking={"mlflow": True},
    )
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    run = workdir / "runs" / "hf"
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{run.resolve() / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("hf").experiment_id])
    trials = [r for r in runs if r.data.tags["tlmsearch.kind"] == "trial"]
    assert len(trials) == len(pd.read_parquet(run / "trials.parquet"))
    assert all(client.get_metric_history(r.info.run_id, "val_bpb") for r in trials)
    res = runner.invoke(app, ["analyze", str(run)])
    assert res.exit_code == 0, res.output
    analysis = pd.read_parquet(run / "analysis.parquet")
    assert set(analysis["layer"]) == {0, 1} and (analysis["width"] > 0).all()
    res = runner.invoke(app, ["export", str(run), "--format", "hf", "--out", str(tmp_path / "hf")])
    assert res.exit_code == 0, res.output
    best = yaml.safe_load((run / "best.yaml").read_text())
    widths = best["best"][0]["target"]["widths"]
    got = load_in_fresh_process(tmp_path / "hf", tmp_path)
    cfg = load_study(run / "study.yaml")
    assert got["widths"] == widths and got["model_type"] == "tapered_llama"
    assert got["numel"] == count_params(cfg.target, widths, cfg.vocab_size).total
