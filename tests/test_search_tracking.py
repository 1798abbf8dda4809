"""Trackers through Ray Tune's callbacks (tlmsearch/search/tracking.py) and their YAML section.

Fast: the facts a trial's tracker run carries, the curve points (step = tokens, each once),
the config section and its errors, the MLflow study run and the closing of interrupted runs on
a local store. Slow (one end-to-end study): all three trackers on a tiny grid, then a resume.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from search_helpers import tiny_config, tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import study_from_mapping
from tlmsearch.errors import ConfigError
from tlmsearch.search import tracking, tracking_study
from tlmsearch.search.tracking import curve_point, trial_facts
from tlmsearch.search.tracking_study import study_summary

runner = CliRunner()


# -------------------------------------------------------------------------------------------------
# Pure helpers


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
    steps = tracking._Steps()
    a, b = SimpleNamespace(trial_id="a"), SimpleNamespace(trial_id="b")
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
    assert tracking.widths_param({"widths": [96, 32]}) == {"widths": "[96, 32]", "n_layer": 2}
    assert tracking.widths_param({}) == {}


def test_study_summary_is_flat_and_skips_what_is_not_a_number():
    doc = {
        "best": [{"candidate": "c", "values": {"val_bpb": 2.0, "val_loss": float("nan")}}],
        "uniform_baseline": {"val_bpb": 2.1},
    }
    assert study_summary(doc, "interrupted") == {
        "status": "interrupted",
        "verdict": "",
        "best": "c",
        "best.val_bpb": 2.0,
        "uniform.val_bpb": 2.1,
    }
    assert study_summary({"best": []}, "failed") == {"status": "failed", "verdict": ""}


def test_study_summary_flattens_a_per_setting_uniform_baseline():
    from mlflow.utils.validation import validate_param_and_metric_name

    doc = {"best": [], "uniform_baseline": {"val_bpb": {"lr=0.001": 2.05, "lr=0.003": 1.95},
                                            "val_loss": {"init_std=0.01, lr=0.003": 3.0}}}
    out = study_summary(doc, "finished")
    assert out == {"status": "finished", "verdict": "", "uniform.val_bpb/lr:0.001": 2.05,
                   "uniform.val_bpb/lr:0.003": 1.95,
                   "uniform.val_loss/init_std:0.01 lr:0.003": 3.0}  # fmt: skip
    assert all(validate_param_and_metric_name(k) for k in out)


def test_defaults_keep_everything_in_the_run_dir(tmp_path):
    cfg = tiny_config(tmp_path, tracking={"mlflow": True, "wandb": {"project": "p"}})
    run = tmp_path / "runs" / "tiny"
    assert tracking.mlflow_uri(cfg, run) == f"sqlite:///{(run / 'mlflow.db').resolve()}"
    assert tracking.wandb_dir(cfg, run) == run.resolve()
    assert cfg.tracking.wandb.mode == "offline"
    other = tiny_config(
        tmp_path, tracking={"mlflow": {"uri": "http://mlflow:5000"}, "wandb": {"dir": "/w"}}
    )
    assert tracking.mlflow_uri(other, run) == "http://mlflow:5000"
    assert tracking.wandb_dir(other, run) == Path("/w")


def test_only_the_trackers_turned_on_become_callbacks(tmp_path):
    run = tmp_path / "runs" / "tiny"
    assert tracking.tracker_callbacks(tiny_config(tmp_path), run) == []
    cfg = tiny_config(tmp_path, tracking={"mlflow": {}, "wandb": True, "tensorboard": True})
    kinds = [type(c).__name__ for c in tracking.tracker_callbacks(cfg, run)]
    assert kinds == ["MlflowTracker", "WandbTracker", "TensorboardTracker"]
    wandb_cb = tracking.tracker_callbacks(cfg, run)[1]
    assert wandb_cb.project == "tiny" and wandb_cb.kwargs["mode"] == "offline"


# -------------------------------------------------------------------------------------------------
# The YAML section


@pytest.mark.parametrize(
    ("section", "path", "words"),
    [
        ({"mlflow": {"uri": "mlruns"}}, "tracking.mlflow.uri", "sqlite:///"),
        ({"mlflow": {"url": "http://x"}}, "tracking.mlflow.url", "uri"),
        ({"wandb": {"mode": "cloud"}}, "tracking.wandb.mode", "offline"),
        ({"wandb": {"project": "my project"}}, "tracking.wandb.project", "letters"),
        ({"mlflow": 3}, "tracking.mlflow", "3"),
        ({"neptune": {}}, "tracking.neptune", "mlflow"),
        ({"tensorboard": [1]}, "tracking.tensorboard", "bool"),
    ],
)
def test_bad_tracking_input_names_the_field(tmp_path, section, path, words):
    with pytest.raises(ConfigError) as err:
        study_from_mapping(tiny_study(tmp_path, tracking=section))
    text = str(err.value)
    assert path in text and words in text, text


def test_off_by_default_and_true_is_every_default(tmp_path):
    assert tiny_config(tmp_path).tracking.enabled() == []
    cfg = tiny_config(tmp_path, tracking={"mlflow": True, "wandb": False})
    assert cfg.tracking.enabled() == ["mlflow"]
    assert cfg.tracking.mlflow.uri is None and cfg.tracking.mlflow.experiment is None


@pytest.mark.parametrize(
    ("name", "module", "extra"),
    [("mlflow", "mlflow", "mlflow"), ("wandb", "wandb", "wandb"),
     ("tensorboard", "tensorboardX", "tensorboard")],
)  # fmt: skip
def test_a_missing_tracker_package_is_exit_2_naming_the_extra(
    tmp_path, monkeypatch, name, module, extra
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda m, *a: None if m == module else real(m, *a)
    )
    study = tiny_study(tmp_path, tracking={name: True})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    res = runner.invoke(app, ["validate", str(path), "--no-config"])
    assert res.exit_code == 2, res.output
    text = " ".join(res.output.split())
    assert f"tracking.{name}" in text and f"tlmsearch[{extra}]" in text, text


# -------------------------------------------------------------------------------------------------
# A local MLflow store (no Ray)


def _client(tmp_path):
    return tracking._mlflow_client((tmp_path / "mlruns").as_uri())


def test_the_study_run_is_found_again_and_interrupted_trials_are_closed(tmp_path):
    client = _client(tmp_path)
    uri = (tmp_path / "mlruns").as_uri()
    exp = tracking._mlflow_experiment(client, uri, "tiny")
    assert tracking._mlflow_experiment(client, uri, "tiny") == exp
    run_dir = str(tmp_path / "runs" / "it's")  # a quote in the path
    parent = tracking.study_run(client, exp, run_dir, "tiny")
    assert tracking.study_run(client, exp, run_dir, "tiny") == parent
    assert tracking.study_run(client, exp, str(tmp_path / "other"), "tiny") != parent
    tags = {tracking.RUN_KEY: tracking.run_key(run_dir), tracking.KIND: "trial"}
    left = client.create_run(exp, tags=tags).info.run_id  # a dead driver's trial
    done = client.create_run(exp, tags=tags).info.run_id
    client.set_terminated(done, status="FINISHED")
    elsewhere = client.create_run(exp, tags={**tags, tracking.RUN_KEY: "x"}).info.run_id
    assert tracking.close_interrupted(client, exp, run_dir) == 1
    assert client.get_run(left).info.status == "KILLED"
    assert client.get_run(left).data.tags["outcome"] == "interrupted"
    assert client.get_run(done).info.status == "FINISHED"
    assert client.get_run(elsewhere).info.status == "RUNNING"
    assert tracking.close_interrupted(client, exp, run_dir) == 0


def test_the_study_run_gets_the_verdict_and_best_yaml(tmp_path):
    uri = (tmp_path / "mlruns").as_uri()
    cfg = tiny_config(tmp_path, tracking={"mlflow": {"uri": uri, "experiment": "exp"}})
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    (run / "best.yaml").write_text("best: []\n")
    doc = {"best": [{"candidate": "c", "values": {"val_bpb": 2.0}}], "verdict": "c is best"}
    assert tracking_study.log_study(cfg, run, doc, "finished") == ["mlflow"]
    client = _client(tmp_path)
    exp = client.get_experiment_by_name("exp").experiment_id
    (study,) = client.search_runs([exp])
    assert study.info.status == "FINISHED"
    assert study.data.tags["verdict"] == "c is best" and study.data.tags["best"] == "c"
    assert study.data.metrics["best.val_bpb"] == 2.0
    assert [a.path for a in client.list_artifacts(study.info.run_id)] == ["best.yaml"]


# -------------------------------------------------------------------------------------------------
# End to end: a tiny study with all three trackers, then a resume


@pytest.fixture(scope="module")
def tracked(local_ray, tmp_path_factory):
    """uniform and one candidate x 2 seeds (4 trials), every tracker on, then `resume`."""
    tmp = tmp_path_factory.mktemp("tracked")
    study = tiny_study(
        tmp,
        search={"candidates": [{"shape": "linear", "r_start": 1.5}], "seeds": [0, 1]},
        train={"tokens": 4096, "eval_every_tokens": 2048},
        tracking={"mlflow": True, "wandb": {"project": "tiny-tracked"}, "tensorboard": True},
    )
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    first = runner.invoke(app, ["run", str(path)])
    again = runner.invoke(app, ["resume", str(tmp / "runs" / "tiny")])
    return first, again, tmp / "runs" / "tiny"


@pytest.mark.slow
def test_every_tracker_gets_each_trial_and_the_study(tracked):
    from mlflow import MlflowClient

    first, _, run = tracked
    assert first.exit_code == 0, first.output
    assert "tracking: the verdict and best.yaml logged to mlflow, wandb, tensorboard" in " ".join(
        first.output.split()
    )
    # MLflow: a run per trial under the study's run, grouped by candidate, curve at tokens
    client = MlflowClient(tracking_uri=f"sqlite:///{run.resolve() / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny").experiment_id
    runs = client.search_runs([exp])
    (study,) = [r for r in runs if r.data.tags[tracking.KIND] == "study"]
    trials = [r for r in runs if r.data.tags[tracking.KIND] == "trial"]
    assert len(trials) == 4
    groups = sorted((r.data.tags["candidate"], r.data.tags["seed"]) for r in trials)
    cand = "linear 1.5->0.5"
    assert groups == [(cand, "0"), (cand, "1"), ("uniform", "0"), ("uniform", "1")]
    for r in trials:
        assert r.data.tags["mlflow.parentRunId"] == study.info.run_id
        assert r.info.status == "FINISHED" and r.data.tags["outcome"] == "complete"
        assert r.data.params["seed"] == r.data.tags["seed"]
        assert len(json.loads(r.data.params["widths"])) == 2
        curve = client.get_metric_history(r.info.run_id, "val_bpb")
        assert [m.step for m in curve] == [2048, 4096]
    assert study.info.status == "FINISHED"
    verdict = yaml.safe_load((run / "best.yaml").read_text()).get("verdict", "")
    assert study.data.tags["verdict"] == verdict
    artifacts = sorted(a.path for a in client.list_artifacts(study.info.run_id))
    assert artifacts == ["best.yaml", "study.yaml"]
    assert (run / "mlflow-artifacts").is_dir()
    # W&B offline: a run folder per trial and the study's, each with its group
    folders = sorted((run / "wandb").glob("offline-run-*"))
    trial_records = [_record(f) for f in folders if not f.name.endswith(_study_id(run))]
    assert len(trial_records) == 4
    assert sum(b"linear 1.5->0.5" in r for r in trial_records) == 2
    assert sum(b"uniform" in r and b"linear 1.5" not in r for r in trial_records) == 2
    assert all(b"val_bpb" in r and b"tokens" in r for r in trial_records)
    study_records = [_record(f) for f in folders if f.name.endswith(_study_id(run))]
    assert study_records and all(b"verdict" in r for r in study_records)
    # TensorBoard: event files in each trial's folder, and the study's text
    events = list((run / "ray").glob("session-0/trial_*/events.out.tfevents.*"))
    assert len(events) == 4  # ours, in place of Ray's own (step = iteration)
    for path in events:
        assert _scalars(path)["ray/tune/val_bpb"] == [2048, 4096]
    assert list((run / "ray" / "study").glob("events.out.tfevents.*"))


@pytest.mark.slow
def test_a_resume_adds_no_tracker_run_for_finished_trials(tracked):
    from mlflow import MlflowClient

    _, again, run = tracked
    assert again.exit_code == 0, again.output
    assert "nothing left to run" in again.output
    client = MlflowClient(tracking_uri=f"sqlite:///{run.resolve() / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny").experiment_id
    kinds = [r.data.tags[tracking.KIND] for r in client.search_runs([exp])]
    assert sorted(kinds) == ["study", "trial", "trial", "trial", "trial"]
    # W&B: the resume's summary is a second offline folder of the same study run (one id)
    folders = list((run / "wandb").glob("offline-run-*"))
    assert len(folders) == 6
    assert sum(f.name.endswith(_study_id(run)) for f in folders) == 2


def _scalars(path: Path) -> dict[str, list[int]]:
    """A TensorBoard event file's scalars: tag -> steps (TFRecord framing: length, crc, data,
    crc)."""
    import struct

    from tensorboardX.proto import event_pb2

    data, out, at = path.read_bytes(), {}, 0
    while at < len(data):
        (n,) = struct.unpack("<Q", data[at : at + 8])
        event = event_pb2.Event.FromString(data[at + 12 : at + 12 + n])
        at += 12 + n + 4
        for value in event.summary.value:
            if value.HasField("simple_value"):
                out.setdefault(value.tag, []).append(event.step)
    return out


def _record(folder: Path) -> bytes:
    """An offline W&B run's records (protobuf): the group, config and metrics are in it."""
    return next(folder.glob("run-*.wandb")).read_bytes()


def _study_id(run: Path) -> str:
    return "study-" + tracking.run_key(str(run.resolve()))


# -------------------------------------------------------------------------------------------------
# Before anything starts: a named server must answer, W&B online needs a key


def test_an_mlflow_server_that_does_not_answer_is_refused_naming_the_uri(tmp_path):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    cfg = tiny_config(tmp_path, tracking={"mlflow": {"uri": uri}})
    with pytest.raises(ConfigError, match=rf"tracking\.mlflow\.uri: cannot reach {uri}"):
        tracking.preflight(cfg)


def test_an_mlflow_server_that_answers_passes(tmp_path):
    import http.server
    import threading

    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    threading.Thread(target=server.handle_request, daemon=True).start()
    try:  # the handler answers 501 to GET: an answer is enough
        uri = f"http://127.0.0.1:{server.server_address[1]}"
        tracking.preflight(tiny_config(tmp_path, tracking={"mlflow": {"uri": uri}}))
    finally:
        server.server_close()
    tracking.preflight(tiny_config(tmp_path, tracking={"mlflow": True, "wandb": True}))


def test_wandb_online_without_a_key_is_refused(tmp_path, monkeypatch):
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_SETUP_API_KEY_HOOK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no W&B settings
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    cfg = tiny_config(tmp_path, tracking={"wandb": {"mode": "online"}})
    with pytest.raises(ConfigError, match=r"tracking\.wandb\.mode: online needs a W&B API key"):
        tracking.preflight(cfg)
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    tracking.preflight(cfg)


def test_a_tracker_that_fails_at_the_end_is_a_warning_not_a_failed_run(tmp_path, monkeypatch):
    from tlmsearch.search import runner

    def broken(*args, **kwargs):
        raise ConnectionError("server gone")

    monkeypatch.setattr(tracking_study, "log_study", broken)
    lines: list[str] = []
    cfg = tiny_config(tmp_path, tracking={"tensorboard": True})
    runner._track_study(tmp_path, cfg, "tiny", {"best": []}, "finished", lines.append)
    assert lines == [
        "warning: the trackers did not take the verdict (ConnectionError: server gone)"
    ]
    runner._track_study(tmp_path, tiny_config(tmp_path), "tiny", {}, "finished", lines.append)
    assert len(lines) == 1  # no tracker: nothing said
