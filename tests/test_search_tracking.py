"""Trackers as Ray Tune callbacks (tlmsearch/search/tracking/callbacks.py) and their YAML section.

Fast: which callbacks the YAML makes (Ray Tune's public callback types), the config section and
its errors, the study's summary and its MLflow study run on a local store, the checks before
anything starts, and that the tracker modules lean on no private name of Ray, MLflow or W&B.
Slow (one end-to-end study): all three trackers on a tiny grid, then a resume. Each tracker's
callback through Ray's hooks: test_search_tracking_mlflow.py, test_search_tracking_wandb.py;
what every tracker records: test_search_tracking_facts.py.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import yaml
from search_helpers import tiny_config, tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import study_from_mapping
from tlmsearch.errors import ConfigError
from tlmsearch.search.tracking import callbacks as tracking
from tlmsearch.search.tracking import mlflow_tracker as tracking_mlflow
from tlmsearch.search.tracking import study as tracking_study
from tlmsearch.search.tracking.study import study_summary

runner = CliRunner()


# -------------------------------------------------------------------------------------------------
# The study's summary, and the callbacks


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

    doc = {
        "best": [],
        "uniform_baseline": {
            "val_bpb": {"lr=0.001": 2.05, "lr=0.003": 1.95},
            "val_loss": {"init_std=0.01, lr=0.003": 3.0},
        },
    }
    out = study_summary(doc, "finished")
    assert out == {
        "status": "finished",
        "verdict": "",
        "uniform.val_bpb/lr:0.001": 2.05,
        "uniform.val_bpb/lr:0.003": 1.95,
        "uniform.val_loss/init_std:0.01 lr:0.003": 3.0,
    }
    assert all(validate_param_and_metric_name(k) for k in out)


def test_only_the_trackers_turned_on_become_callbacks(tmp_path):
    run = tmp_path / "runs" / "tiny"
    assert tracking.tracker_callbacks(tiny_config(tmp_path), run) == []
    cfg = tiny_config(tmp_path, tracking={"mlflow": {}, "wandb": True, "tensorboard": True})
    kinds = [type(c).__name__ for c in tracking.tracker_callbacks(cfg, run)]
    assert kinds == ["MlflowTracker", "WandbTracker", "TensorboardTracker"]
    wandb_cb = tracking.tracker_callbacks(cfg, run)[1]
    assert wandb_cb.project == "tiny" and wandb_cb.kwargs["mode"] == "offline"
    from ray.tune.logger import LoggerCallback  # Ray Tune's public base of logger callbacks

    assert all(isinstance(c, LoggerCallback) for c in tracking.tracker_callbacks(cfg, run))


TRACKER_MODULES = sorted(Path(tracking.__file__).parent.glob("*.py"))
LIBRARIES = ("ray", "mlflow", "wandb", "tensorboardX")


def _private(name: str) -> bool:
    """A leading underscore, but no dunder (``__init__`` is Python's protocol, not private)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(source: str, name: str = "<source>") -> list[str]:
    """A module's uses of a library's private names: an import of one (a name or a module on the
    way with a leading underscore), or an attribute ``x._y`` of anything but ``self``/``cls``
    (our own fields)."""
    out = []
    for node in ast.walk(ast.parse(source, name)):
        at = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in LIBRARIES:
            names = [*node.module.split("."), *(a.name for a in node.names)]
            out += [f"{at} from {node.module} import {n}" for n in names if _private(n)]
        elif isinstance(node, ast.Import):
            out += [
                f"{at} import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in LIBRARIES and "._" in a.name
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in ("self", "cls")):
                out.append(f"{at} {ast.unparse(node)}")
    return out


def test_the_trackers_use_only_public_names_of_ray_mlflow_and_wandb():
    names = {p.stem for p in TRACKER_MODULES}
    assert {"callbacks", "facts", "mlflow_tracker", "wandb_tracker", "study"} <= names
    uses = [u for p in TRACKER_MODULES for u in _private_uses(p.read_text(), p.name)]
    assert uses == []
    bad = (
        "from ray.air.integrations.wandb import _WandbLoggingActor\n"
        "import ray.air._internal.mlflow\n"
        "client = self.mlflow_util._get_client()\n"
        "self._steps = {}\n"
        "super().__init__()\n"
    )
    assert [u.split(" ", 1)[1] for u in _private_uses(bad)] == [
        "from ray.air.integrations.wandb import _WandbLoggingActor",
        "import ray.air._internal.mlflow",
        "self.mlflow_util._get_client",
    ]


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
    [
        ("mlflow", "mlflow", "mlflow"),
        ("wandb", "wandb", "wandb"),
        ("tensorboard", "tensorboardX", "tensorboard"),
    ],
)
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
    return tracking_mlflow.mlflow_client((tmp_path / "mlruns").as_uri())


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
    (study,) = [r for r in runs if r.data.tags[tracking_mlflow.KIND] == "study"]
    trials = [r for r in runs if r.data.tags[tracking_mlflow.KIND] == "trial"]
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
    trial_records = [_record(f) for f in folders if not _is_study_folder(f, run)]
    assert len(trial_records) == 4
    assert sum(b"linear 1.5->0.5" in r for r in trial_records) == 2
    assert sum(b"uniform" in r and b"linear 1.5" not in r for r in trial_records) == 2
    assert all(b"val_bpb" in r and b"tokens" in r for r in trial_records)
    study_records = [_record(f) for f in folders if _is_study_folder(f, run)]
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
    kinds = [r.data.tags[tracking_mlflow.KIND] for r in client.search_runs([exp])]
    assert sorted(kinds) == ["study", "trial", "trial", "trial", "trial"]
    # W&B: the resume's summary is a second offline folder of the same study run (one id)
    folders = list((run / "wandb").glob("offline-run-*"))
    assert len(folders) == 6
    assert sum(_is_study_folder(f, run) for f in folders) == 2


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
    return "study-" + tracking_mlflow.run_key(str(run.resolve()))


def _is_study_folder(folder: Path, run: Path) -> bool:
    """An offline folder of the study's W&B run: offline-run-<time>-<id>, and W&B appends -1,
    -2, ... when a resume's summary starts in the same second as the first one's."""
    return re.search(rf"-{re.escape(_study_id(run))}(-\d+)?$", folder.name) is not None


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
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_BASE_URL"):
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
