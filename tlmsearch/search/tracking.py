"""Experiment trackers (MLflow, Weights & Biases, TensorBoard) through Ray Tune's own callbacks.

The study YAML's ``tracking`` section turns each on (config.TrackingConfig). Each tracker is
Ray's logger callback, subclassed only where tlmsearch needs something Ray's does not do:

- one tracker run per trial, its learning curve at **step = tokens** (Ray steps by iteration,
  which differs between trials with different eval spacing), its candidate, seed and per-layer
  widths; only the eval keys are logged (config.EVAL_KEYS, parameter and FLOP counts), each
  token count once (a retried or resumed trial reports its earlier evals again);
- the seeds of one candidate grouped: MLflow tags (``candidate``, ``seed``) under one parent run
  for the study; W&B ``group`` = the candidate's label, ``job_type`` trial;
- at the end (:mod:`tlmsearch.search.tracking_study`): the verdict and best.yaml, as an artifact
  of the MLflow study run, a W&B run of ``job_type`` study, and a TensorBoard text summary.

Nothing leaves the machine unless the YAML names a server: MLflow writes a SQLite file in the
run dir by default, W&B runs offline by default. ``tlmsearch resume`` runs a fresh Ray Tune
session on the trials still owed, so a finished trial never gets a second tracker run; the
MLflow runs a dead driver left RUNNING are closed as KILLED (tag ``outcome: interrupted``) when
the next session starts, and the trial queued in an interrupted one's place is a new run
(docs/tracking.md).
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.air.integrations.mlflow import MLflowLoggerCallback
from ray.air.integrations.wandb import WandbLoggerCallback, _WandbLoggingActor
from ray.tune.logger import TBXLoggerCallback
from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

from tlmsearch.config import EVAL_KEYS, StudyConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.attrs import NUMBER, REPLAY, RESUME_FROM
from tlmsearch.space import describe

# What a curve point carries besides the eval keys: the trial's size (the same at every eval).
COUNT_KEYS = ("params", "non_embedding_params", "flops_per_token")
# MLflow tags: trial | study; the run dir; its key (run_key) that searches find runs by
KIND, RUN_DIR, RUN_KEY = "tlmsearch.kind", "tlmsearch.run_dir", "tlmsearch.run_key"
# An MLflow trial run's end state from the trial's outcome (progress.outcome)
MLFLOW_STATUS = {"complete": "FINISHED", "pruned": "KILLED", "failed": "FAILED"}


# -------------------------------------------------------------------------------------------------
# Pure helpers


@dataclass(frozen=True)
class TrialFacts:
    """What a tracker records about a trial before it reports: from its Ray config."""

    label: str  # the candidate's label (space.describe): the group of its seeds
    seed: int
    number: int | None  # the Optuna trial's number
    params: dict[str, Any]  # the candidate's parameters and the seed (flat, logged as params)
    tags: dict[str, str]

    @property
    def name(self) -> str:
        return f"{self.label} seed {self.seed}" + (
            f" #{self.number}" if self.number is not None else ""
        )


def trial_facts(config: dict[str, Any]) -> TrialFacts:
    """A Ray trial's config (candidate, seed, number; see samplers.py) -> :class:`TrialFacts`.

    >>> f = trial_facts({"candidate": {"shape": "cosine", "r_start": 1.5}, "seed": 1,
    ...                  "number": 4})
    >>> f.name, f.tags["candidate"]
    ('cosine 1.5->0.5 seed 1 #4', 'cosine 1.5->0.5')
    >>> f.params
    {'shape': 'cosine', 'r_start': 1.5, 'seed': 1}
    """
    candidate = dict(config.get("candidate") or {})
    seed, number = int(config.get("seed", 0)), config.get(NUMBER)
    label = describe(candidate)
    tags = {
        "candidate": label,
        "candidate_json": json.dumps(candidate, sort_keys=True),
        "seed": str(seed),
        "baseline": str(candidate.get("shape", "uniform") == "uniform").lower(),
    }
    if number is not None:
        tags["trial"] = str(number)
    if config.get(RESUME_FROM):  # continues an interrupted trial from its checkpoint
        tags[RESUME_FROM] = str(config[RESUME_FROM])
    if config.get(REPLAY):  # the same model as a finished trial: its curve, not trained again
        tags["same_as"] = str(config[REPLAY].get("number"))
    params = {**candidate, "seed": seed}
    return TrialFacts(label, seed, None if number is None else int(number), params, tags)


def curve_point(result: dict[str, Any]) -> dict[str, float] | None:
    """The finite eval keys and counts of a Ray result; None when it has no token count.

    >>> curve_point({"tokens": 2048, "val_bpb": 2.5, "val_ppl": float("nan"), "widths": [1]})
    {'tokens': 2048.0, 'val_bpb': 2.5}
    """
    tokens = result.get("tokens")
    if not _finite(tokens):
        return None
    keys = (*EVAL_KEYS, *COUNT_KEYS)
    return {k: float(result[k]) for k in keys if _finite(result.get(k))}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class _Steps:
    """Each trial's curve once per token count: a trial retried from a checkpoint, or continuing
    an interrupted one, reports the evals before that checkpoint again (trainable.py), and the
    final report repeats the last eval's token count."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def new_point(self, trial: Any, result: dict[str, Any]) -> dict[str, float] | None:
        point = curve_point(result)
        if point is None or point["tokens"] <= self._last.get(trial.trial_id, -1.0):
            return None
        self._last[trial.trial_id] = point["tokens"]
        return point

    def forget(self, trial: Any) -> None:
        """Take this trial's points from the start again (a new tracker run of it)."""
        self._last.pop(trial.trial_id, None)

    def first(self, trial: Any) -> bool:
        """Whether no point of this trial was taken yet."""
        return trial.trial_id not in self._last


def widths_param(result: dict[str, Any]) -> dict[str, Any]:
    """The per-layer widths a trial reports, as params: ``widths`` (JSON list) and ``n_layer``."""
    widths = result.get("widths")
    if not isinstance(widths, (list, tuple)) or not widths:
        return {}
    return {"widths": json.dumps([int(w) for w in widths]), "n_layer": len(widths)}


def mlflow_uri(cfg: StudyConfig, run: Path) -> str:
    """The YAML's ``tracking.mlflow.uri``, else a SQLite file in the run dir."""
    opts = cfg.tracking.mlflow
    if opts is not None and opts.uri:
        return opts.uri
    return f"sqlite:///{(run / 'mlflow.db').resolve()}"


def wandb_dir(cfg: StudyConfig, run: Path) -> Path:
    """Where W&B writes (``DIR/wandb/...``): ``tracking.wandb.dir``, else the run dir."""
    opts = cfg.tracking.wandb
    return Path(opts.dir).expanduser().resolve() if opts and opts.dir else run.resolve()


def _outcome(trial: Any) -> str:
    from tlmsearch.search.progress import outcome

    return outcome(trial, ended=True)


def preflight(cfg: StudyConfig) -> None:
    """Trackers that talk to a server: reachable, and with a key, before anything starts
    (Ray would find out after the data and Ray are up, and MLflow retries for minutes)."""
    opts = cfg.tracking.mlflow
    if opts is not None and opts.uri and opts.uri.startswith(("http://", "https://")):
        import urllib.error
        import urllib.request

        try:
            urllib.request.urlopen(opts.uri.rstrip("/") + "/health", timeout=10).close()
        except urllib.error.HTTPError:
            pass  # it answered (a proxy's 401, a server without /health): reachable
        except (OSError, ValueError) as err:
            raise ConfigError(
                f"tracking.mlflow.uri: cannot reach {opts.uri} ({err}); start the server "
                "(mlflow server --host 127.0.0.1 --port 5000), or leave uri out for a SQLite "
                "file in the run dir"
            ) from None
    wandb_opts = cfg.tracking.wandb
    if wandb_opts is not None and wandb_opts.mode == "online":
        from ray.air.integrations.wandb import _set_api_key

        try:
            _set_api_key()  # Ray's own check: WANDB_API_KEY, `wandb login`, or its hook
        except ValueError:
            raise ConfigError(
                "tracking.wandb.mode: online needs a W&B API key: run `wandb login` or set "
                "WANDB_API_KEY, or use mode: offline (`wandb sync` uploads later)"
            ) from None


# -------------------------------------------------------------------------------------------------
# The callbacks


def tracker_callbacks(cfg: StudyConfig, run: Path, name: str | None = None) -> list[Any]:
    """The Ray Tune callbacks of the trackers ``cfg.tracking`` turns on (none by default).

    ``name``: the study's name in the trackers (the default MLflow experiment and W&B
    project): the Optuna study's, which for a ladder rung is ``<ladder>.rung-K``; default
    ``cfg.name``.
    """
    on = cfg.tracking.enabled()
    out: list[Any] = []
    if "mlflow" in on:
        out.append(MlflowTracker(cfg, run, name or cfg.name))
    if "wandb" in on:
        out.append(WandbTracker(cfg, run, name or cfg.name))
    if "tensorboard" in on:
        out.append(TensorboardTracker())
    return out


class MlflowTracker(MLflowLoggerCallback):
    """Ray's MLflow callback: a run per trial under the study's parent run, tagged with its
    candidate and seed, its curve at step = tokens."""

    def __init__(self, cfg: StudyConfig, run: Path, name: str) -> None:
        opts = cfg.tracking.mlflow
        assert opts is not None
        self.run_dir = str(run.resolve())
        self.study = name
        super().__init__(
            tracking_uri=mlflow_uri(cfg, run),
            experiment_name=opts.experiment or name,
            tags={"tlmsearch.study": name, KIND: "trial", **_run_tags(self.run_dir)},
        )
        self._steps = _Steps()
        self.parent_id = ""

    def setup(self, *args: Any, **kwargs: Any) -> None:
        client = _mlflow_client(self.tracking_uri)
        experiment_id = _mlflow_experiment(client, self.tracking_uri, self.experiment_name)
        super().setup(*args, **kwargs)  # finds the experiment by name
        close_interrupted(client, experiment_id, self.run_dir)
        self.parent_id = study_run(client, experiment_id, self.run_dir, self.study)

    def log_trial_start(self, trial: Any) -> None:
        client = self.mlflow_util._get_client()
        if trial in self._trial_runs:  # a trial Ray starts again (a lost worker)
            client.update_run(self._trial_runs[trial], status="RUNNING")
            return
        facts = trial_facts(trial.config)
        tags = {**self.tags, **facts.tags, "mlflow.parentRunId": self.parent_id}
        run = self.mlflow_util.start_run(run_name=facts.name, tags=tags)
        self._trial_runs[trial] = run.info.run_id
        self.mlflow_util.log_params(run_id=run.info.run_id, params_to_log=facts.params)

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        if trial not in self._trial_runs:
            self.log_trial_start(trial)
        run_id = self._trial_runs[trial]
        if self._steps.first(trial) and (widths := widths_param(result)):
            self.mlflow_util.log_params(run_id=run_id, params_to_log=widths)
        point = self._steps.new_point(trial, result)
        if point is not None:
            step = int(point["tokens"])
            self.mlflow_util.log_metrics(run_id=run_id, metrics_to_log=point, step=step)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        run_id = self._trial_runs[trial]
        kind = "failed" if failed else _outcome(trial)
        client = self.mlflow_util._get_client()
        client.set_tag(run_id, "outcome", kind)
        reason = (trial.last_result or {}).get("reason")
        if reason:
            client.set_tag(run_id, "reason", str(reason)[:5000])
        self.mlflow_util.end_run(run_id=run_id, status=MLFLOW_STATUS[kind])


def _mlflow_client(uri: str) -> Any:
    if uri.startswith("file:"):
        # MLflow 3 refuses its file store unless told: the user named one, so they chose it
        import os

        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def _mlflow_experiment(client: Any, uri: str, name: str) -> str:
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


def _runs_of(client: Any, experiment_id: str, run_dir: str, kind: str, more: str = "") -> list:
    text = f"tags.`{RUN_KEY}` = '{run_key(run_dir)}' and tags.`{KIND}` = '{kind}'" + more
    return client.search_runs([experiment_id], filter_string=text, max_results=10_000)


def _run_tags(run_dir: str) -> dict[str, str]:
    return {RUN_DIR: run_dir, RUN_KEY: run_key(run_dir)}


def study_run(client: Any, experiment_id: str, run_dir: str, study: str) -> str:
    """The id of the run dir's study run (the trials' parent), created on first use; a resume
    finds the first session's."""
    found = _runs_of(client, experiment_id, run_dir, "study")
    if found:
        client.update_run(found[0].info.run_id, status="RUNNING")
        return found[0].info.run_id
    tags = {"tlmsearch.study": study, KIND: "study", **_run_tags(run_dir)}
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


class _TokensActor(_WandbLoggingActor):
    """Ray's W&B logging actor, with tokens as the x-axis of every metric, that waits for W&B's
    own process to write everything before it returns (Ray kills the actor as soon as it has;
    without the wait, W&B's atexit hook never ran and a run's folder was sometimes left empty:
    1 of 4 trials in 1 of 3 test runs)."""

    def run(self) -> None:
        try:
            super().run()
        finally:
            self._wandb.teardown()

    def _handle_result(self, result: dict) -> tuple[dict, dict]:
        if not getattr(self, "_tokens_axis", False):
            self._wandb.define_metric("tokens")
            self._wandb.define_metric("*", step_metric="tokens")
            self._tokens_axis = True
        return super()._handle_result(result)


class WandbTracker(WandbLoggerCallback):
    """Ray's W&B callback: a run per trial, ``group`` its candidate's label, ``job_type``
    trial, config its candidate, seed and widths; its curve against tokens."""

    _logger_actor_cls = _TokensActor

    def __init__(self, cfg: StudyConfig, run: Path, name: str) -> None:
        opts = cfg.tracking.wandb
        assert opts is not None
        self.where = wandb_dir(cfg, run)
        kwargs: dict[str, Any] = {"mode": opts.mode, "dir": str(self.where)}
        if opts.entity:
            kwargs["entity"] = opts.entity
        super().__init__(project=opts.project or name, **kwargs)
        self.study = name
        self._steps = _Steps()

    def setup(self, *args: Any, **kwargs: Any) -> None:
        self.where.mkdir(parents=True, exist_ok=True)
        if self.kwargs["mode"] == "offline":
            # Ray's setup demands an API key unless the WANDB_MODE variable says offline;
            # offline needs none (the project is the YAML's, the group the candidate's)
            self.api_key_file = None
            return
        super().setup(*args, **kwargs)

    def log_trial_start(self, trial: Any) -> None:
        if trial in self._trial_logging_futures:
            return
        # Ray ends a trial's W&B run when the trial errs: one it starts again (a lost worker)
        # is a new W&B run, which gets the whole curve (the retry reports its earlier evals)
        self._steps.forget(trial)
        facts = trial_facts(trial.config)
        config = {**facts.params, "candidate": facts.label, "study": self.study}
        if facts.number is not None:
            config["trial"] = facts.number
        self._start_logging_actor(
            trial,
            ["config", "done", "should_checkpoint"],
            name=facts.name,
            group=facts.label,
            job_type="trial",
            project=self.project,
            config=config,
            **self.kwargs,
        )

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        first = self._steps.first(trial)
        point: dict[str, Any] | None = self._steps.new_point(trial, result)
        if point is None:
            return
        if first:  # the actor sends "config" to wandb.config, not to the curve
            point["config"] = widths_param(result)
        super().log_trial_result(iteration, trial, point)

    def log_trial_end(self, trial: Any, failed: bool = False) -> None:
        if trial in self._trial_queues:
            kind = "failed" if failed else _outcome(trial)
            super().log_trial_result(0, trial, {"config": {"outcome": kind}})
        super().log_trial_end(trial, failed)


class TensorboardTracker(TBXLoggerCallback):
    """Ray's TensorBoard callback, the curve only, at step = tokens (event files in each Ray
    trial folder: ``tensorboard --logdir RUN_DIR/ray``)."""

    def __init__(self) -> None:
        super().__init__()
        self._steps = _Steps()

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        point = self._steps.new_point(trial, result)
        if point is not None:
            step = {TIMESTEPS_TOTAL: int(point["tokens"]), TRAINING_ITERATION: iteration}
            super().log_trial_result(iteration, trial, {**point, **step})
