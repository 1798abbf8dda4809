"""MLflow: a run per trial under one study run, written with ``mlflow.MlflowClient`` only.

Ray Tune calls :class:`MlflowTracker`'s hooks in the driver (its public ``LoggerCallback``
interface); each writes through a client of its own (no global tracking URI, no active run;
a file store sets MLflow's ``MLFLOW_ALLOW_FILE_STORE`` in the environment, which it reads).
The store's helpers below also serve the study's end (``study.py``). What each run
holds: docs/tracking.md.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Any

from ray.tune.logger import LoggerCallback

from tlmsearch.config import StudyConfig
from tlmsearch.search.tracking.facts import (
    TokenSteps,
    ended_as,
    mlflow_uri,
    trial_facts,
    widths_param,
)

# MLflow tags: trial | study; the run dir; its key (run_key) that searches find runs by
KIND, RUN_DIR, RUN_KEY = "tlmsearch.kind", "tlmsearch.run_dir", "tlmsearch.run_key"
# MLflow's system tag that nests a run under another (its UI shows the trials under the study)
PARENT = "mlflow.parentRunId"
# An MLflow trial run's end state from the trial's outcome (tracking_facts.ended_as)
MLFLOW_STATUS = {
    "complete": "FINISHED",
    "pruned": "KILLED",
    "failed": "FAILED",
    "interrupted": "KILLED",
}
# MLflow's limits per log_batch call: 1,000 metrics, 100 params, 100 tags in all
BATCH_PARAMS = 100


class MlflowTracker(LoggerCallback):
    """A run per trial under the study's parent run, tagged with its candidate and seed, its
    curve at step = tokens, closed with its outcome; runs still open when the experiment ends
    (the driver was interrupted) are closed as KILLED, tag ``outcome: interrupted``."""

    def __init__(self, cfg: StudyConfig, run: Path, name: str) -> None:
        opts = cfg.tracking.mlflow
        assert opts is not None
        self.uri = mlflow_uri(cfg, run)
        self.experiment_name = opts.experiment or name
        self.run_dir = str(run.resolve())
        self.study = name
        self.tags = {"tlmsearch.study": name, KIND: "trial", **run_tags(self.run_dir)}
        self.client: Any = None
        self.experiment_id = ""
        self.parent_id = ""
        self._runs: dict[str, str] = {}  # Ray trial id -> its MLflow run id
        self._steps = TokenSteps()

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.client = mlflow_client(self.uri)
        self.experiment_id = mlflow_experiment(self.client, self.uri, self.experiment_name)
        close_interrupted(self.client, self.experiment_id, self.run_dir)
        self.parent_id = study_run(self.client, self.experiment_id, self.run_dir, self.study)

    def log_trial_start(self, trial: Any) -> None:
        if trial.trial_id in self._runs:  # Ray starts a retried trial again: the same run
            return
        facts = trial_facts(trial.config)
        tags = {**self.tags, **facts.tags, PARENT: self.parent_id}
        created = self.client.create_run(self.experiment_id, run_name=facts.name, tags=tags)
        self._runs[trial.trial_id] = created.info.run_id
        self._steps.forget(trial.trial_id)
        log_params(self.client, created.info.run_id, facts.params)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial.trial_id not in self._runs:
            self.log_trial_start(trial)
        run_id = self._runs[trial.trial_id]
        if self._steps.first(trial.trial_id) and (widths := widths_param(result)):
            log_params(self.client, run_id, widths)
        point = self._steps.new_point(trial.trial_id, result)
        if point is not None:
            log_point(self.client, run_id, point)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        reason = (trial.last_result or {}).get("reason")
        self._close(trial.trial_id, ended_as(trial, failed), reason)

    def on_experiment_end(self, trials: list[Any], **info: Any) -> None:
        for trial_id in list(self._runs):
            self._close(trial_id, "interrupted")

    def _close(self, trial_id: str, kind: str, reason: Any = None) -> None:
        run_id = self._runs.pop(trial_id, None)
        if run_id is None:
            return
        self.client.set_tag(run_id, "outcome", kind)
        if reason:
            self.client.set_tag(run_id, "reason", str(reason)[:5000])
        self.client.set_terminated(run_id, status=MLFLOW_STATUS[kind])


def log_params(client: Any, run_id: str, params: dict[str, Any]) -> None:
    """Parameters as MLflow stores them (text), in batches of MLflow's size."""
    from mlflow.entities import Param

    items = [Param(str(k), str(v)) for k, v in params.items()]
    for at in range(0, len(items), BATCH_PARAMS):
        client.log_batch(run_id, params=items[at : at + BATCH_PARAMS])


def log_point(client: Any, run_id: str, point: dict[str, float]) -> None:
    """One curve point in one call, every metric at step = tokens."""
    from mlflow.entities import Metric

    step, now = int(point["tokens"]), int(time.time() * 1000)
    client.log_batch(run_id, metrics=[Metric(k, v, now, step) for k, v in point.items()])


def mlflow_client(uri: str) -> Any:
    """An ``MlflowClient`` of the store at ``uri``."""
    if uri.startswith("file:"):
        # MLflow 3 refuses its file store unless told: the user named one, so they chose it
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def mlflow_experiment(client: Any, uri: str, name: str) -> str:
    """The experiment's id, created if new; a SQLite store keeps its artifacts beside its file
    (MLflow's default is ./mlartifacts in the current directory)."""
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    where = None
    if uri.startswith("sqlite:///"):
        where = (Path(uri[len("sqlite:///") :]).parent / "mlflow-artifacts").as_uri()
    return client.create_experiment(name, artifact_location=where)


def run_key(run_dir: str) -> str:
    """A run dir's key for MLflow's search filter (a path may hold any quote)."""
    return hashlib.sha256(run_dir.encode()).hexdigest()[:20]


def run_tags(run_dir: str) -> dict[str, str]:
    """The tags that tie a run to its run dir (searched by :func:`run_key`)."""
    return {RUN_DIR: run_dir, RUN_KEY: run_key(run_dir)}


def _runs_of(client: Any, experiment_id: str, run_dir: str, kind: str, more: str = "") -> list:
    text = f"tags.`{RUN_KEY}` = '{run_key(run_dir)}' and tags.`{KIND}` = '{kind}'" + more
    return client.search_runs([experiment_id], filter_string=text, max_results=10_000)


def study_run(client: Any, experiment_id: str, run_dir: str, study: str) -> str:
    """The id of the run dir's study run (the trials' parent), created on first use; a resume
    finds the first session's."""
    found = _runs_of(client, experiment_id, run_dir, "study")
    if found:
        client.update_run(found[0].info.run_id, status="RUNNING")
        return found[0].info.run_id
    tags = {"tlmsearch.study": study, KIND: "study", **run_tags(run_dir)}
    return client.create_run(experiment_id, run_name=study, tags=tags).info.run_id


def close_interrupted(client: Any, experiment_id: str, run_dir: str) -> int:
    """Trial runs a dead driver left RUNNING: KILLED, tagged ``outcome: interrupted`` (the
    trial queued in their place is a run of its own). Returns how many."""
    alive = " and attributes.status = 'RUNNING'"
    running = _runs_of(client, experiment_id, run_dir, "trial", alive)
    for r in running:
        client.set_tag(r.info.run_id, "outcome", "interrupted")
        client.set_terminated(r.info.run_id, status="KILLED")
    return len(running)
