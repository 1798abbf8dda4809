"""The study's end in the trackers: the verdict and best.yaml
(tlmsearch/search/tracking/callbacks.py).

An MLflow run for the study (the trial runs' parent, found again on resume) with best.yaml and
study.yaml as artifacts and the headline as tags and metrics; a W&B run of ``job_type`` study
(one id per run dir); a TensorBoard text summary in ``RUN_DIR/ray/study``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.run_dir import RunDir
from tlmsearch.search.records import finite
from tlmsearch.search.tracking.facts import mlflow_uri, wandb_dir
from tlmsearch.search.tracking.mlflow_tracker import (
    mlflow_client,
    mlflow_experiment,
    run_key,
    study_run,
)

# the MLflow study run's end state from the run's
STUDY_STATUS = {"finished": "FINISHED", "interrupted": "KILLED", "failed": "FAILED"}


def log_study(
    cfg: StudyConfig, run: Path, doc: dict[str, Any], status: str, name: str | None = None
) -> list[str]:
    """The verdict and best.yaml, to every tracker turned on: an MLflow study run (the trials'
    parent) with best.yaml and study.yaml as artifacts, a W&B run of job_type study, a
    TensorBoard text. ``name`` as for
    :func:`~tlmsearch.search.tracking.callbacks.tracker_callbacks`. Returns the trackers
    written."""
    name = name or cfg.name
    on = cfg.tracking.enabled()
    best = RunDir(run).best
    summary = study_summary(doc, status)
    if "mlflow" in on:
        _mlflow_study(cfg, run, name, best, summary, status)
    if "wandb" in on:
        _wandb_study(cfg, run, name, best, summary)
    if "tensorboard" in on:
        _tensorboard_study(run, best, summary)
    return on


def study_summary(doc: dict[str, Any], status: str) -> dict[str, Any]:
    """best.yaml's headline, flat: status, verdict, the best candidate, its values and the
    uniform baseline's (``best.val_bpb``, ``uniform.val_bpb``; with setting dimensions one per
    setting, ``uniform.val_bpb/lr:0.003``).

    >>> doc = {"best": [{"candidate": "c", "values": {"val_bpb": 2.0}}], "verdict": "v",
    ...        "uniform_baseline": {"val_bpb": 2.1}}
    >>> study_summary(doc, "finished")["best.val_bpb"], study_summary(doc, "finished")["best"]
    (2.0, 'c')
    """
    out: dict[str, Any] = {"status": status, "verdict": doc.get("verdict", "")}
    if doc.get("best"):
        top = doc["best"][0]
        out["best"] = top.get("candidate", "")
        for metric, value in (top.get("values") or {}).items():
            if finite(value):
                out[f"best.{metric}"] = float(value)
    for metric, value in (doc.get("uniform_baseline") or {}).items():
        # a settings study has one uniform per setting: {metric: {"lr=0.003": value}}
        per = value if isinstance(value, dict) else {"": value}
        for setting, v in per.items():
            if finite(v):
                out[f"uniform.{metric}" + (f"/{_key(setting)}" if setting else "")] = float(v)
    return out


def _key(setting: str) -> str:
    """A setting label as a metric-name part MLflow accepts (letters, digits, ``_ . - : /``
    and spaces; no ``=``, ``@`` or ``,``): ``init_std=0.01, lr=0.003`` ->
    ``init_std:0.01 lr:0.003``."""
    return re.sub(r"[^\w.\-: ]", "_", setting.replace("=", ":").replace(", ", " "))


def _mlflow_study(
    cfg: StudyConfig, run: Path, name: str, best: Path, summary: dict[str, Any], status: str
) -> None:
    opts = cfg.tracking.mlflow
    assert opts is not None
    uri = mlflow_uri(cfg, run)
    client = mlflow_client(uri)
    experiment_id = mlflow_experiment(client, uri, opts.experiment or name)
    run_id = study_run(client, experiment_id, str(run.resolve()), name)
    for key, value in summary.items():
        if isinstance(value, float):
            client.log_metric(run_id, key, value)
        else:
            client.set_tag(run_id, key, str(value)[:5000])
    for path in (best, RunDir(run).study):  # the verdict's detail, and what was run
        if path.is_file():
            client.log_artifact(run_id, str(path))
    client.set_terminated(run_id, status=STUDY_STATUS.get(status, "FINISHED"))


def _wandb_study(
    cfg: StudyConfig, run: Path, name: str, best: Path, summary: dict[str, Any]
) -> None:
    import wandb

    opts = cfg.tracking.wandb
    assert opts is not None
    where = wandb_dir(cfg, run)
    where.mkdir(parents=True, exist_ok=True)
    kwargs = {"entity": opts.entity} if opts.entity else {}
    tracker = wandb.init(
        project=opts.project or name,
        dir=str(where),
        mode=opts.mode,
        name=f"{name} study",
        # one W&B run per run dir: a resume's summary goes to the same run (W&B merges an
        # offline folder of the same id when it syncs)
        id=f"study-{run_key(str(run.resolve()))}",
        resume="allow",
        group="study",
        job_type="study",
        config=cfg.to_dict(),
        reinit="create_new",
        **kwargs,
    )
    try:
        tracker.summary.update(summary)
        if best.is_file():
            artifact = wandb.Artifact(f"{name}-best", type="best")
            artifact.add_file(str(best))
            tracker.log_artifact(artifact)
    finally:
        tracker.finish()
        wandb.teardown()  # returns once W&B's process has written (or sent) all of the run


def _tensorboard_study(run: Path, best: Path, summary: dict[str, Any]) -> None:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(RunDir(run).tensorboard_study))
    try:
        writer.add_text("verdict", str(summary.get("verdict") or summary["status"]))
        if best.is_file():  # indented four spaces: TensorBoard renders text as Markdown
            text = "\n".join("    " + line for line in best.read_text().splitlines())
            writer.add_text(RunDir(run).best.name, text)
    finally:
        writer.close()
