"""``tracking``: the experiment trackers (MLflow, W&B, TensorBoard) a study logs to.

Each is one of Ray Tune's own logger callbacks (``tlmsearch/search/tracking/callbacks.py``); every
tracker is off unless named. Whether its package is installed is checked by ``config/checks.py``.
Pure data: no torch, no ray.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from tlmsearch.constants import TRACKER_PACKAGES
from tlmsearch.errors import Strict

# A tracking URI: a scheme (sqlite:, file:, http:, https:, postgresql:, databricks...), as MLflow
# reads it; a bare path would be MLflow's file store in the current directory, not the run dir.
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S*|databricks")


class MlflowTracking(Strict):
    # None: sqlite:///RUN_DIR/mlflow.db, a file in the run dir (MLflow's local store); nothing
    # leaves the machine unless this names a server (http://host:5000)
    uri: str | None = Field(None, min_length=1, max_length=2000)
    experiment: str | None = Field(None, min_length=1, max_length=500)  # None: the study's name

    @field_validator("uri")
    @classmethod
    def _a_uri(cls, v: str | None) -> str | None:
        if v is not None and not _URI.fullmatch(v):
            raise ValueError(
                "not a tracking URI; give sqlite:///abs/path/mlflow.db, "
                "http://host:5000, or leave it out for a SQLite file in the run dir"
            )
        return v


class WandbTracking(Strict):
    project: str | None = Field(None, min_length=1, max_length=128)  # None: the study's name
    entity: str | None = Field(None, min_length=1, max_length=128)  # None: W&B's default
    # offline: runs are written under `dir` only (`wandb sync DIR/wandb/offline-run-*` uploads
    # them later); online sends them to the W&B server as they run
    mode: Literal["offline", "online"] = "offline"
    dir: str | None = Field(None, min_length=1, max_length=4096)  # None: the run dir

    @field_validator("project", "entity")
    @classmethod
    def _slug(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.-]+", v):
            raise ValueError("W&B names take letters, digits, '_', '-' and '.' only")
        return v


class TrackingConfig(Strict):
    """Each trial a tracker run (its curve at step = tokens, its candidate, widths and seed),
    the seeds of a candidate grouped, and a study run with the verdict and best.yaml at the end.
    Every tracker is off unless named; ``mlflow: true`` turns one on with its defaults."""

    mlflow: MlflowTracking | None = None
    wandb: WandbTracking | None = None
    # event files in each Ray trial folder (RUN_DIR/ray/session-N/trial_*): tensorboard --logdir
    tensorboard: bool = False

    @field_validator("mlflow", "wandb", mode="before")
    @classmethod
    def _on_when_true(cls, v: Any) -> Any:
        """``mlflow: true`` is ``mlflow: {}`` (on, every default); ``false`` is off."""
        if isinstance(v, bool):
            return {} if v else None
        return v

    def enabled(self) -> list[str]:
        """The trackers turned on, by name: ``['mlflow', 'tensorboard']``."""
        on = {"mlflow": self.mlflow is not None, "wandb": self.wandb is not None}
        on["tensorboard"] = self.tensorboard
        return [name for name in TRACKER_PACKAGES if on[name]]
