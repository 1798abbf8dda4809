"""``storage`` and ``ray``: where a study's run dirs and Optuna storage live, and the Ray it runs
on (an embedded one or a cluster), with what each trial and worker reserves.

``search/execution/cluster.py`` and ``search/sampling/storage.py`` act on these. Pure data: no
torch, no ray.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from tlmsearch.config.limits import MAX_WORKERS
from tlmsearch.errors import Strict


class StorageConfig(Strict):
    runs_dir: str = "runs"  # where run dirs go (shared storage on a cluster)
    # None: SQLite in the run dir; 'journal': a journal file there; or a URL (postgresql://...)
    optuna: str | None = None


class RayConfig(Strict):
    address: str | None = None  # None: an embedded local Ray on loopback
    # What one trial reserves in all: with several workers, workers_per_trial x the per-worker
    # resources (one is derived from the other; both given, they must agree).
    cpus_per_trial: float = Field(1.0, gt=0, le=MAX_WORKERS)
    # A trial trains on CUDA when this is > 0 (the GPU Ray assigned it), else on CPUs, GPU node
    # or not. At most 1 (a trial uses one GPU); a fraction shares one: 0.25 runs 4 trials on it.
    gpus_per_trial: float = Field(0.0, ge=0, le=MAX_WORKERS)
    # Data-parallel workers of one trial (Ray Train; gloo on CPU, NCCL on GPU). The global batch
    # (train.batch_tokens) does not depend on it, so neither does a trial's result.
    workers_per_trial: int = Field(1, ge=1, le=MAX_WORKERS)
    cpus_per_worker: float | None = Field(None, gt=0, le=MAX_WORKERS)  # None: per trial / N
    gpus_per_worker: float | None = Field(None, ge=0, le=MAX_WORKERS)  # None: per trial / N
    # How a trial's workers are placed on nodes (a Ray placement group strategy)
    worker_placement: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] = "PACK"
    # size of the embedded Ray (default: all cores)
    num_cpus: int | None = Field(None, ge=1, le=MAX_WORKERS)
    # This driver's address when joining a cluster (None: Ray picks it). The embedded Ray is
    # always on 127.0.0.1, the one address Ray listens on alone (search/execution/cluster.py);
    # a loopback value is accepted there (run dirs before this change froze 127.0.0.2), any
    # other is an error.
    node_ip: str | None = None
    shared_path: str | None = None  # prepared data on storage every node can read
    reuse_actors: bool = True  # ~3x faster trial start on small trials (measured)

    @model_validator(mode="after")
    def _workers(self) -> RayConfig:
        n, given = self.workers_per_trial, self.model_fields_set
        for kind in ("cpus", "gpus"):
            trial, worker = f"{kind}_per_trial", f"{kind}_per_worker"
            # derived once, while validating (the object is frozen from then on)
            if getattr(self, worker) is None:
                object.__setattr__(self, worker, getattr(self, trial) / n)
            elif trial not in given:
                object.__setattr__(self, trial, getattr(self, worker) * n)
            elif not math.isclose(getattr(self, trial), getattr(self, worker) * n):
                raise ValueError(
                    f"ray.{trial} ({getattr(self, trial):g}) is not ray.workers_per_trial "
                    f"({n}) x ray.{worker} ({getattr(self, worker):g}); give one of them"
                )
        if n == 1 and self.gpus_per_trial > 1:
            raise ValueError(
                f"ray.gpus_per_trial ({self.gpus_per_trial:g}): a one-worker trial trains on one "
                "GPU: use 1, a fraction such as 0.25 to run 4 trials on each GPU, or "
                "workers_per_trial: N with gpus_per_worker: 1 to train one trial on N GPUs"
            )
        gpus = self.gpus_per_worker or 0.0
        if n > 1 and gpus not in (0.0, 1.0):
            raise ValueError(
                f"ray.gpus_per_worker ({gpus:g}) must be 0 or 1 with workers_per_trial {n} "
                "(a worker trains on one GPU of its own, NCCL between them); set "
                "gpus_per_worker: 1, or workers_per_trial: 1 to share GPUs between trials"
            )
        return self
