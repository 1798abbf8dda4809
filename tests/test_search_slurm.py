"""``tlmsearch slurm``: the sbatch script it renders (fast), and a tiny study on a real Slurm,
requeued mid-trial, that completes with every trial once and the requeued trial's curve going on
from its checkpoint (slow; needs the single-node Slurm of .ci/slurm.sh, which
.ci/with-services.sh starts and names in ``TLMSEARCH_TEST_SLURM``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from search_helpers import eval_attempts, straight_losses, tiny_study, trial_losses
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import study_from_mapping
from tlmsearch.errors import ConfigError
from tlmsearch.search.execution.faults import ENV, read_jsonl
from tlmsearch.search.execution.slurm import SlurmJob, node_resources, render, storage_advice

C125 = {"shape": "cosine", "r_start": 1.25}
EXE = str(Path(sys.executable).with_name("tlmsearch"))


def _study(tmp: Path, **search) -> tuple[Path, dict]:
    data = tiny_study(
        tmp,
        train={"checkpoint_every_tokens": 2048},
        search={"pruner": "none", "concurrency": 1, "seeds": [0], **search},
    )
    data["name"] = "onslurm"
    path = tmp / "onslurm.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def test_the_dry_run_prints_head_workers_driver_and_requeue(tmp_path: Path) -> None:
    study, _ = _study(tmp_path, concurrency=4)
    out = CliRunner().invoke(
        app,
        [
            "slurm",
            str(study),
            "--dry-run",
            "--nodes",
            "2",
            "--time",
            "02:00:00",
            "--signal-lead",
            "240",
            "--sbatch=--qos=low",
            "--setup",
            "module load cuda",
        ],
    )
    assert out.exit_code == 0, out.output
    text = out.output
    lines = text.splitlines()
    # 4 trials of 1 CPU on 2 nodes: 2 a node, + 1 CPU (the driver, the Ray worker)
    for opt in (
        "--nodes=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=3",
        "--requeue",
        "--signal=B:TERM@240",
        "--time=02:00:00",
        "--qos=low",
    ):
        assert f"#SBATCH {opt}" in lines, opt
    assert not any(line.startswith("#SBATCH --gpus") for line in lines)  # no GPU asked
    assert lines.index("module load cuda") < next(
        i for i, line in enumerate(lines) if "ray start --head" in line
    )
    head = next(line for line in lines if "ray start --head" in line)
    assert head.startswith('srun --nodes=1 --ntasks=1 --overlap -w "$head"') and "--block" in head
    assert '"${nodes[@]:1}"' in text and 'ray start --address "$address"' in text  # workers
    assert "export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=" in text  # token auth
    run = (tmp_path / "runs" / "onslurm").resolve()
    assert f"RUN={run}" in lines
    # a requeued job (or a run dir that exists) resumes; else the run starts
    assert 'if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] || [ -f "$RUN/study.yaml" ]; then' in text
    assert text.index('tlmsearch resume "$RUN"') < text.index('tlmsearch run "$STUDY"')
    # SIGTERM to the driver, and a requeue when it says preempted
    assert "kill -TERM $driver' TERM" in text and 'scontrol requeue "$SLURM_JOB_ID"' in text
    assert "if [ $rc = 143 ]; then" in lines
    assert "SQLite in the run dir" in text  # the storage advice
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_resources_and_storage_advice_follow_the_study(tmp_path: Path) -> None:
    ray = {"num_cpus": 2, "cpus_per_trial": 4, "gpus_per_trial": 0.5}
    cfg = study_from_mapping(tiny_study(tmp_path, ray=ray, search={"concurrency": 5}))
    assert node_resources(cfg, 2) == (13, 2)  # 3 trials a node: 12 CPUs + 1, 1.5 -> 2 GPUs
    script = render(cfg, tmp_path / "s.yaml", SlurmJob(nodes=2, port=7000))
    assert "#SBATCH --gpus-per-node=2" in script and "port=7000" in script
    pg = cfg.model_copy(
        update={"storage": cfg.storage.model_copy(update={"optuna": "postgresql://u:p@db/x"})}
    )
    assert storage_advice(pg).startswith("storage: PostgreSQL")
    journal = cfg.model_copy(
        update={"storage": cfg.storage.model_copy(update={"optuna": "journal"})}
    )
    assert "NFS" in storage_advice(journal)


def test_bad_slurm_options_are_input_errors(tmp_path: Path) -> None:
    study, _ = _study(tmp_path)
    out = CliRunner().invoke(app, ["slurm", str(study), "--dry-run", "--nodes", "0"])
    assert out.exit_code == 2
    out = CliRunner().invoke(app, ["slurm", str(study), "--dry-run", "--name", "a b/c"])
    assert out.exit_code == 2 and "--name" in out.output
    for flag, value in (("--partition", "gpu\nrm -rf ~"), ("--sbatch", "qos=low")):
        out = CliRunner().invoke(app, ["slurm", str(study), "--dry-run", flag, value])
        assert out.exit_code == 2 and flag in out.output, out.output


@pytest.fixture(scope="module")
def fuzz_study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    tmp_path = tmp_path_factory.mktemp("fuzz")
    return tmp_path, study_from_mapping(_study(tmp_path)[1])


@settings(max_examples=150, deadline=None)
@given(
    field=st.sampled_from(["time", "partition", "account", "sbatch"]),
    value=st.text(min_size=0, max_size=30),
)
def test_a_fuzzed_sbatch_value_is_refused_or_stays_on_its_own_line(
    fuzz_study: tuple[Path, Any], field: str, value: str
) -> None:
    tmp_path, cfg = fuzz_study
    job = SlurmJob(**{field: [value] if field == "sbatch" else value})
    try:
        script = render(cfg, tmp_path / "s.yaml", job)
    except ConfigError as err:
        assert f"--{field}" in str(err)
        return
    plain = render(cfg, tmp_path / "s.yaml", SlurmJob())
    extra = [line for line in script.splitlines() if line not in plain.splitlines()]
    assert len(extra) == 1 and extra[0].startswith("#SBATCH ") and value in extra[0], extra


def _slurm_env() -> dict[str, str]:
    conf = os.environ.get("TLMSEARCH_TEST_SLURM")
    if not conf or not Path(conf).is_file() or not shutil.which("sbatch"):
        pytest.skip(
            "no Slurm: run under .ci/with-services.sh (it starts one on 127.0.0.1 with "
            ".ci/slurm.sh and sets TLMSEARCH_TEST_SLURM)"
        )
    return {**os.environ, "SLURM_CONF": conf, "PYTHONUNBUFFERED": "1"}


def _job_state(job: str, env: dict) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True, env=env
    )
    return out.stdout.strip()


@pytest.mark.slow
def test_a_study_on_slurm_requeued_mid_trial_completes_with_nothing_lost(tmp_path: Path) -> None:
    """Submitted with ``tlmsearch slurm``; once the second trial (cosine 1.25) waits at its
    first eval, checkpointed at 2,048 tokens, ``scontrol requeue`` stops the whole job (driver,
    Ray, the trial) mid-trial. The requeued job resumes the run dir: every (candidate, seed)
    completes once, and the requeued trial goes on from its checkpoint with the curve of a run
    never stopped."""
    env = _slurm_env()
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "faults.json").write_text(json.dumps({"kill": [[C125, 0, 1]]}))
    env[ENV] = str(faults)
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    study, data = _study(tmp_path)
    run = tmp_path / "runs" / "onslurm"
    t0 = time.time()
    out = subprocess.run(
        [EXE, "slurm", str(study), "--token", str(tmp_path / "ray.token"), "--signal-lead", "60"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    job = out.stdout.split("Submitted batch job ", 1)[1].split(":")[0].strip()
    log = tmp_path / "runs" / f"onslurm.slurm-{job}.out"
    try:
        deadline = time.time() + 400
        while not read_jsonl(faults / "waiting.jsonl"):  # cosine 1.25 waits at 2,048 tokens
            assert time.time() < deadline, log.read_text() if log.exists() else "no log"
            assert _job_state(job, env) in ("PENDING", "RUNNING", "CONFIGURING"), log.read_text()
            time.sleep(1)
        requeued_at = time.time()
        subprocess.run(["scontrol", "requeue", job], check=True, env=env)
        # Slurm holds a requeued job (begin time: 120 s after it is back in the queue, once
        # its processes are gone, KillWait at most); CI need not wait for it
        deadline = time.time() + 120
        while _job_state(job, env) != "PENDING":
            assert time.time() < deadline, log.read_text()
            time.sleep(0.5)
        subprocess.run(
            ["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env, check=True
        )
        deadline = time.time() + 600
        while _job_state(job, env):
            assert time.time() < deadline, log.read_text()
            time.sleep(2)
    finally:
        subprocess.run(["scancel", job], env=env, capture_output=True)
    text = log.read_text()
    print(f"slurm job {job}: {time.time() - t0:.0f} s, requeued after {requeued_at - t0:.0f} s")
    assert "(restart 0)" in text and "(restart 1)" in text, text  # started twice
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and info["slurm_job"] == job, text
    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 3 and (df["state"] == "COMPLETE").all(), df
    pairs = [(r.params_json, r.seed) for r in df.itertuples()]
    assert len(set(pairs)) == 3  # every (candidate, seed) once
    # the requeued trial trained to its checkpoint at 2,048 tokens, then from there on
    assert list(eval_attempts(faults, C125, 0).values()) == [[2048], [4096, 6144, 8192]]
    curve = trial_losses(run, C125, 0)
    assert curve == straight_losses(data, C125, 0)
    # the requeue sent the driver SIGTERM: its running trial was preempted, not failed
    said = CliRunner().invoke(app, ["status", str(run)], env={"COLUMNS": "400"}).output
    assert "1 preempted" in " ".join(said.split()) and "0 failed" in said, said
    print(
        f"trials {len(df)}, tokens {int(df['tokens'].sum()):,}; requeued trial's curve:",
        [(r["tokens"], round(r["val_loss"], 4)) for r in curve],
    )


@settings(max_examples=80, deadline=None)
@given(
    concurrency=st.integers(1, 64),
    nodes=st.integers(1, 16),
    cpus=st.sampled_from([0.5, 1.0, 2.0, 3.0, 8.0]),
    gpus=st.sampled_from([0.0, 0.25, 0.5, 1.0, 2.0]),
)
def test_each_node_fits_its_share_of_the_trials_and_no_more(concurrency, nodes, cpus, gpus):
    """CPUs a node = ceil(its trials x cpus_per_trial) + 1, GPUs = ceil(its trials x gpus):
    all ``concurrency`` trials fit on the job's nodes, with nothing a whole trial to spare."""
    from types import SimpleNamespace as N

    cfg = N(search=N(concurrency=concurrency), ray=N(cpus_per_trial=cpus, gpus_per_trial=gpus))
    n_cpus, n_gpus = node_resources(cfg, nodes)
    per_node = -(-concurrency // nodes)
    assert per_node * nodes >= concurrency
    assert per_node * cpus <= n_cpus - 1 < per_node * cpus + 1
    assert per_node * gpus <= n_gpus < per_node * gpus + 1


def test_the_script_survives_an_early_signal_a_strict_setup_and_refuses_spaces(
    tmp_path: Path,
) -> None:
    from tlmsearch.errors import ConfigError

    cfg = study_from_mapping(tiny_study(tmp_path))
    script = render(cfg, tmp_path / "s.yaml", SlurmJob(setup="source /opt/env/bin/activate"))
    lines = script.splitlines()
    early = next(i for i, ln in enumerate(lines) if ln.startswith("trap ") and "requeue" in ln)
    setup = lines.index("source /opt/env/bin/activate")
    strict = next(i for i, ln in enumerate(lines) if ln.startswith("set -u"))
    driver = next(i for i, ln in enumerate(lines) if ln.startswith("driver=$!"))
    assert early < setup < strict < driver  # a TERM while Ray starts requeues the job
    spaced = cfg.model_copy(
        update={"storage": cfg.storage.model_copy(update={"runs_dir": str(tmp_path / "my runs")})}
    )
    with pytest.raises(ConfigError, match=r"storage\.runs_dir.*space"):
        render(spaced, tmp_path / "s.yaml", SlurmJob())
