"""Experiment trackers (MLflow, Weights & Biases, TensorBoard) as Ray Tune callbacks.

The study YAML's ``tracking`` section turns each on (config.TrackingConfig). Each tracker is a
Ray Tune ``LoggerCallback`` (Ray's public callback interface: its hooks run in the driver as
trials start, report and end) that writes with its tracker's own public client:
``mlflow.MlflowClient`` (mlflow_tracker.py), ``wandb.init`` runs (wandb_tracker.py), and Ray's
own ``TBXLoggerCallback`` for TensorBoard (below). What every tracker records is in
facts.py:

- one tracker run per trial, its learning curve at **step = tokens** (Ray steps by iteration,
  which differs between trials with different eval spacing), its candidate, seed and per-layer
  widths; only the eval keys are logged (config.EVAL_KEYS, parameter and FLOP counts), each
  token count once (a retried or resumed trial reports its earlier evals again; a trial Ray
  retries after a lost worker keeps its run);
- the seeds of one candidate grouped: MLflow tags (``candidate``, ``seed``) under one parent run
  for the study; W&B ``group`` = the candidate's label, ``job_type`` trial;
- how each trial ended (``outcome``: complete, pruned, failed; interrupted for the runs still
  open when the driver stops);
- at the end (:mod:`tlmsearch.search.tracking.study`): the verdict and best.yaml, as an artifact
  of the MLflow study run, a W&B run of ``job_type`` study, and a TensorBoard text summary.

Nothing leaves the machine unless the YAML names a server: MLflow writes a SQLite file in the
run dir by default, W&B runs offline by default. ``tlmsearch resume`` runs a fresh Ray Tune
session on the trials still owed, so a finished trial never gets a second tracker run; the
MLflow runs a dead driver left RUNNING are closed as KILLED (tag ``outcome: interrupted``) when
the next session starts, and the trial queued in an interrupted one's place is a new run
(docs/tracking.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.tune.logger import TBXLoggerCallback
from ray.tune.result import TIMESTEPS_TOTAL, TRAINING_ITERATION

from tlmsearch.config import StudyConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.tracking.facts import TokenSteps


def preflight(cfg: StudyConfig) -> None:
    """Trackers that talk to a server: reachable, and with a key, before anything starts
    (Ray would find out after the data and Ray are up, and MLflow retries for minutes); a
    wandb too old for a run per trial."""
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
    if cfg.tracking.wandb is not None:
        from tlmsearch.search.tracking.wandb_tracker import wandb_problem

        problem = wandb_problem(cfg.tracking.wandb.mode)
        if problem:
            raise ConfigError(problem)


def tracker_callbacks(cfg: StudyConfig, run: Path, name: str | None = None) -> list[Any]:
    """The Ray Tune callbacks of the trackers ``cfg.tracking`` turns on (none by default).

    ``name``: the study's name in the trackers (the default MLflow experiment and W&B
    project): the Optuna study's, which for a ladder rung is ``<ladder>.rung-K``; default
    ``cfg.name``.
    """
    on = cfg.tracking.enabled()
    out: list[Any] = []
    if "mlflow" in on:
        from tlmsearch.search.tracking.mlflow_tracker import MlflowTracker

        out.append(MlflowTracker(cfg, run, name or cfg.name))
    if "wandb" in on:
        from tlmsearch.search.tracking.wandb_tracker import WandbTracker

        out.append(WandbTracker(cfg, run, name or cfg.name))
    if "tensorboard" in on:
        out.append(TensorboardTracker())
    return out


class TensorboardTracker(TBXLoggerCallback):
    """Ray's TensorBoard callback (public), given the curve only, at step = tokens (event files
    in each Ray trial folder: ``tensorboard --logdir RUN_DIR/ray``)."""

    def __init__(self) -> None:
        super().__init__()
        self._token_steps = TokenSteps()

    def log_trial_result(self, iteration: int, trial: Any, result: dict[str, Any]) -> None:
        point = self._token_steps.new_point(trial.trial_id, result)
        if point is not None:
            step = {TIMESTEPS_TOTAL: int(point["tokens"]), TRAINING_ITERATION: iteration}
            super().log_trial_result(iteration, trial, {**point, **step})
