"""``tlmsearch slurm STUDY``: one sbatch job that runs a study on a Slurm allocation.

The job follows Ray's own Slurm pattern (Ray docs, "Deploying on Slurm"): one task per node; a
Ray head on the first node and a Ray worker on each other node, each a blocking ``ray start``
under ``srun``; then the tlmsearch driver on the first node, joined to that cluster
(``--address``). Ray's token authentication is on, with the token file the user names (as
docs/cluster.md sets up a cluster). Nothing here schedules: Slurm places the job, Ray the trials.

Preemption is not failure. The job asks for ``--requeue`` and ``--signal=B:TERM@LEAD``: LEAD
seconds before the time limit, Slurm sends the batch shell SIGTERM; the script passes it to the
driver, which stops as a Ctrl-C does and marks its running trials preempted (exit status 143,
tlmsearch/search/driver.py); the script then requeues the job (``scontrol requeue``). A job
that Slurm itself preempts or requeues is requeued by Slurm. Either way the requeued job finds
the run dir (or ``SLURM_RESTART_COUNT > 0``) and runs ``tlmsearch resume``: finished trials are
kept, stopped ones continue from their last checkpoints.

Sizes from the study: each node runs ``ceil(search.concurrency / nodes)`` trials, each with
``ray.cpus_per_trial`` CPUs and ``ray.gpus_per_trial`` GPUs (per-trial totals, all workers of a
multi-worker trial together), plus one CPU on the first node for the driver.
"""

from __future__ import annotations

import math
import os
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tlmsearch.config import StudyConfig
from tlmsearch.errors import ConfigError

PREEMPTED_EXIT = 143  # the driver's exit status when SIGTERM stopped it (tlmsearch/search/cli.py)


@dataclass(frozen=True)
class SlurmJob:
    """What the sbatch script asks Slurm for, besides what the study says."""

    nodes: int = 1
    time: str | None = None  # --time, e.g. 04:00:00
    partition: str | None = None
    account: str | None = None
    signal_lead_s: int = 300  # --signal=B:TERM@LEAD: notice before the time limit
    setup: str = ""  # shell lines run first on every node (module load, source .venv/bin/activate)
    token: str | None = None  # Ray's token file (RAY_AUTH_TOKEN_PATH); default RUN.ray-token
    port: int | None = None  # the Ray head's port; default 20000 + job id % 20000 (jobs apart)
    sbatch: list[str] = field(default_factory=list)  # more #SBATCH options, e.g. --qos=low


def node_resources(cfg: StudyConfig, nodes: int) -> tuple[int, int]:
    """(CPUs, GPUs) per node: ``ceil(concurrency / nodes)`` trials and, on every node, one CPU
    more for the driver (the first node's) or the Ray worker's own processes.

    >>> from types import SimpleNamespace as N
    >>> cfg = N(search=N(concurrency=4), ray=N(cpus_per_trial=2.0, gpus_per_trial=0.5))
    >>> node_resources(cfg, 2)
    (5, 1)
    """
    per_node = math.ceil(cfg.search.concurrency / nodes)
    cpus = math.ceil(per_node * cfg.ray.cpus_per_trial - 1e-9) + 1
    gpus = math.ceil(per_node * cfg.ray.gpus_per_trial - 1e-9)
    return cpus, gpus


def storage_advice(cfg: StudyConfig) -> str:
    """One paragraph on the study's Optuna storage on a shared file system."""
    spec = cfg.storage.optuna
    if spec and spec.split(":", 1)[0].startswith("postgresql"):
        return (
            "storage: PostgreSQL: safe from any node; the driver, `tlmsearch status` on a login "
            "node and a requeued job all reach the same server."
        )
    if spec == "journal":
        return (
            "storage: an Optuna journal file in the run dir. Optuna's users have reported a "
            "journal corrupted on an NFS mount under Slurm; only the driver writes it here (one "
            "process), but its file locks are only as good as the file system's: prefer "
            "PostgreSQL (storage.optuna: postgresql://user:pw@host/db) on a shared file system."
        )
    return (
        "storage: SQLite in the run dir (optuna.db). Only the driver writes it (trials report "
        "through Ray, never to the storage), so one writer at a time, and a requeued job's "
        "driver starts after the old one is gone. SQLite needs the file system's POSIX locks "
        "(NFSv3 without lockd, some FUSE mounts: none); `tlmsearch status` from a login node "
        "reads it while the job writes. Where locks are in doubt, or several jobs share one "
        "study, use PostgreSQL (storage.optuna: postgresql://user:pw@host/db)."
    )


def _q(text: str | Path) -> str:
    return shlex.quote(str(text))


def _header(cfg: StudyConfig, job: SlurmJob, name: str, run: Path) -> list[str]:
    cpus, gpus = node_resources(cfg, job.nodes)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name=tlm-{name}",
        f"#SBATCH --nodes={job.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={cpus}",
        *([f"#SBATCH --gpus-per-node={gpus}"] if gpus else []),
        *([f"#SBATCH --time={job.time}"] if job.time else []),
        *([f"#SBATCH --partition={job.partition}"] if job.partition else []),
        *([f"#SBATCH --account={job.account}"] if job.account else []),
        "#SBATCH --requeue",
        f"#SBATCH --signal=B:TERM@{job.signal_lead_s}",
        "#SBATCH --open-mode=append",
        f"#SBATCH --output={run.parent / f'{name}.slurm-%j.out'}",
        f"#SBATCH --chdir={Path.cwd()}",
        *[f"#SBATCH {opt}" for opt in job.sbatch],
    ]
    return lines


def _check_sbatch_values(job: SlurmJob) -> None:
    """Each value goes on an ``#SBATCH`` line of its own, which takes no quoting: one word,
    no space or line break (a newline would start a line of the script)."""
    words = [("--time", job.time), ("--partition", job.partition), ("--account", job.account)]
    words += [("--sbatch", opt) for opt in job.sbatch]
    for what, value in words:
        if value is None:
            continue
        if not value or any(ch.isspace() or not ch.isprintable() for ch in value):
            raise ConfigError(
                f"{what}: {value!r} must be one word without spaces or line breaks (it becomes "
                "an #SBATCH line); pass one option per --sbatch, e.g. --sbatch=--qos=low"
            )
    for opt in job.sbatch:
        if not opt.startswith("-"):
            raise ConfigError(
                f"--sbatch: {opt!r} is not an sbatch option; e.g. --sbatch=--qos=low"
            )


def render(cfg: StudyConfig, study: Path, job: SlurmJob, name: str | None = None) -> str:
    """The sbatch script for ``study`` (its run dir under ``storage.runs_dir``, made absolute:
    it must be on a file system every node mounts)."""
    if job.nodes < 1:
        raise ConfigError(f"--nodes: {job.nodes} must be at least 1")
    if job.signal_lead_s < 1:
        raise ConfigError(f"--signal-lead: {job.signal_lead_s} must be at least 1 second")
    _check_sbatch_values(job)
    name = name or cfg.name
    run = (Path(cfg.storage.runs_dir) / name).resolve()
    for what, path in (("storage.runs_dir", run), ("the working directory", Path.cwd())):
        if any(ch.isspace() for ch in str(path)):  # #SBATCH lines take no quoting
            raise ConfigError(
                f"{what}: {str(path)!r} has a space, which #SBATCH --output / "
                "--chdir cannot take; use a path without one"
            )
    cpus, gpus = node_resources(cfg, job.nodes)
    token = Path(job.token).resolve() if job.token else run.parent / f"{name}.ray-token"
    start = f"--num-cpus={cpus} --num-gpus={gpus} --port=$port"
    bin_ = Path(sys.executable).parent  # this env's: on a shared file system, every node's
    body = [
        f"# tlmsearch slurm {study}: Ray head + workers, then the driver (docs/cluster.md)",
        "# Slurm's --signal before the driver runs: nothing to stop yet, so requeue at once",
        'trap \'echo "tlmsearch slurm: SIGTERM before the driver started: requeueing"; '
        'scontrol requeue "$SLURM_JOB_ID"; exit 143\' TERM',
        *([job.setup] if job.setup else []),
        "set -u  # after the setup: some activate scripts read unset variables",
        f"RUN={_q(run)}",
        f"STUDY={_q(Path(study).resolve())}",
        f"TOKEN={_q(token)}",
        f"PATH={_q(bin_)}:$PATH  # the env tlmsearch slurm ran from: its tlmsearch, ray, python",
        'mkdir -p "$(dirname "$RUN")"',
        "# Ray's token authentication: one secret for the job's Ray, readable by the user only",
        'if [ ! -s "$TOKEN" ]; then',
        "  (umask 077; python -c 'import secrets; print(secrets.token_hex(32))' > \"$TOKEN\")",
        "fi",
        'export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH="$TOKEN"',
        'nodes=($(scontrol show hostnames "$SLURM_JOB_NODELIST"))',
        "head=${nodes[0]}",
        'head_ip=$(srun --nodes=1 --ntasks=1 -w "$head" hostname --ip-address '
        "| awk '{print $1}')",
        f"port={job.port}" if job.port else "port=$((20000 + SLURM_JOB_ID % 20000))",
        "address=$head_ip:$port",
        'echo "tlmsearch slurm: job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}), '
        'Ray head $address, nodes ${nodes[*]}"',
        'srun --nodes=1 --ntasks=1 --overlap -w "$head" '
        f'ray start --head --node-ip-address="$head_ip" {start} --block &',
        'for _ in $(seq 1 120); do ray status --address "$address" >/dev/null 2>&1 && break; '
        "sleep 1; done",
        'for node in "${nodes[@]:1}"; do',
        '  srun --nodes=1 --ntasks=1 --overlap -w "$node" ray start --address "$address" '
        f"--num-cpus={cpus} --num-gpus={gpus} --block &",
        "done",
        "# a requeued job (or a run dir that exists) continues the run: nothing is run twice",
        'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || [ -f "$RUN/study.yaml" ]; then',
        '  tlmsearch resume "$RUN" --address "$address" &',
        "else",
        f'  tlmsearch run "$STUDY" --name {_q(name)} --address "$address" &',
        "fi",
        "driver=$!",
        "# Slurm's --signal (B: this shell only): the driver stops and marks its trials preempted",
        "trap 'echo \"tlmsearch slurm: SIGTERM: stopping the driver\"; kill -TERM $driver' TERM",
        "wait $driver; rc=$?",
        "while kill -0 $driver 2>/dev/null; do wait $driver; rc=$?; done  # wait ends at a trap",
        f"if [ $rc = {PREEMPTED_EXIT} ]; then",
        '  echo "tlmsearch slurm: preempted: requeueing job $SLURM_JOB_ID"',
        '  scontrol requeue "$SLURM_JOB_ID"',
        "fi",
        "exit $rc",
    ]
    return "\n".join([*_header(cfg, job, name, run), "", *body]) + "\n"


def submit(script: str, path: Path) -> str:
    """Write the script to ``path`` and ``sbatch`` it; returns sbatch's line (the job id)."""
    import subprocess

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    os.chmod(path, 0o755)
    try:
        out = subprocess.run(["sbatch", str(path)], capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ConfigError(
            f"sbatch not found: run this on a Slurm login node, or print the script with "
            f"--dry-run ({path} is written)"
        ) from None
    if out.returncode != 0:
        raise ConfigError(f"sbatch {path} failed: {out.stderr.strip() or out.stdout.strip()}")
    return out.stdout.strip()
