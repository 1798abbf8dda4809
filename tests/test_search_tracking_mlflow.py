"""MLflow through Ray Tune's public hooks and ``MlflowClient`` (search/tracking/mlflow_tracker.py).

On a local file store, no Ray: the study run found again and interrupted runs closed; then the
tracker driven through Ray's hooks by the trials of tests/tracking_trials.py (a retried trial,
an error, a diverged run, a pruned one, one the driver left running).
"""

from __future__ import annotations

import json

import pytest
from search_helpers import tiny_config
from tracking_trials import play

from tlmsearch.search.tracking import mlflow_tracker as tracking_mlflow
from tlmsearch.search.tracking.callbacks import tracker_callbacks

pytest.importorskip("mlflow")


def _client(tmp_path):
    return tracking_mlflow.mlflow_client((tmp_path / "mlruns").as_uri())


def test_the_study_run_is_found_again_and_interrupted_trials_are_closed(tmp_path):
    client = _client(tmp_path)
    uri = (tmp_path / "mlruns").as_uri()
    exp = tracking_mlflow.mlflow_experiment(client, uri, "tiny")
    assert tracking_mlflow.mlflow_experiment(client, uri, "tiny") == exp
    run_dir = str(tmp_path / "runs" / "it's")  # a quote in the path
    parent = tracking_mlflow.study_run(client, exp, run_dir, "tiny")
    assert tracking_mlflow.study_run(client, exp, run_dir, "tiny") == parent
    assert tracking_mlflow.study_run(client, exp, str(tmp_path / "other"), "tiny") != parent
    tags = {
        tracking_mlflow.RUN_KEY: tracking_mlflow.run_key(run_dir),
        tracking_mlflow.KIND: "trial",
    }
    left = client.create_run(exp, tags=tags).info.run_id  # a dead driver's trial
    done = client.create_run(exp, tags=tags).info.run_id
    client.set_terminated(done, status="FINISHED")
    elsewhere = client.create_run(exp, tags={**tags, tracking_mlflow.RUN_KEY: "x"}).info.run_id
    assert tracking_mlflow.close_interrupted(client, exp, run_dir) == 1
    assert client.get_run(left).info.status == "KILLED"
    assert client.get_run(left).data.tags["outcome"] == "interrupted"
    assert client.get_run(done).info.status == "FINISHED"
    assert client.get_run(elsewhere).info.status == "RUNNING"
    assert tracking_mlflow.close_interrupted(client, exp, run_dir) == 0


@pytest.fixture
def played(tmp_path):
    """The five trials through an MLflow tracker on a file store: (client, runs by trial)."""
    uri = (tmp_path / "mlruns").as_uri()
    cfg = tiny_config(tmp_path, tracking={"mlflow": {"uri": uri}})
    (tracker,) = tracker_callbacks(cfg, tmp_path / "runs" / "tiny")
    play(tracker)
    client = _client(tmp_path)
    exp = client.get_experiment_by_name("tiny").experiment_id
    runs = client.search_runs([exp])
    by_trial = {r.data.tags["trial"]: r for r in runs if "trial" in r.data.tags}
    by_trial["study"] = next(r for r in runs if r.data.tags[tracking_mlflow.KIND] == "study")
    return client, by_trial, cfg


def test_a_retried_trial_keeps_one_run_and_each_token_count_once(played):
    client, runs, _ = played
    assert len(runs) == 6  # five trials and the study
    a = runs["0"]  # trial a is Optuna's number 0
    assert a.info.run_name == "uniform seed 0 #0"
    curve = client.get_metric_history(a.info.run_id, "val_bpb")
    assert [m.step for m in curve] == [2048, 4096, 6144]
    assert [m.step for m in client.get_metric_history(a.info.run_id, "tokens")] == [
        2048,
        4096,
        6144,
    ]
    assert a.info.status == "FINISHED" and a.data.tags["outcome"] == "complete"
    assert a.data.params["seed"] == "0" and a.data.params["shape"] == "uniform"
    assert json.loads(a.data.params["widths"]) == [96, 32] and a.data.params["n_layer"] == "2"
    assert "training_iteration" not in a.data.metrics and "node_ip" not in a.data.metrics
    for r in runs.values():
        if r is not runs["study"]:
            assert r.data.tags["mlflow.parentRunId"] == runs["study"].info.run_id
            assert r.data.tags[tracking_mlflow.KIND] == "trial"


def test_each_way_a_trial_ends_is_its_status_and_outcome(played):
    _, runs, _ = played
    ends = {k: (r.info.status, r.data.tags.get("outcome")) for k, r in runs.items()}
    assert ends == {
        "0": ("FINISHED", "complete"),
        "1": ("FAILED", "failed"),  # an error Ray did not retry
        "2": ("FAILED", "failed"),  # diverged: a final report of a failed run
        "3": ("KILLED", "pruned"),
        "4": ("KILLED", "interrupted"),  # still running when the experiment ended
        "study": ("RUNNING", None),  # closed by the study's end (tracking_study.py)
    }
    assert runs["2"].data.tags["reason"] == "diverged: loss 9.1 > 2x"
    assert "reason" not in runs["0"].data.tags


def test_a_second_session_finds_the_study_run_and_closes_nothing_twice(played, tmp_path):
    client, runs, cfg = played
    (again,) = tracker_callbacks(cfg, tmp_path / "runs" / "tiny")
    again.setup()
    assert again.parent_id == runs["study"].info.run_id
    assert client.get_run(runs["4"].info.run_id).data.tags["outcome"] == "interrupted"
    assert client.get_run(runs["0"].info.run_id).info.status == "FINISHED"
