"""A trial killed from outside is retried or recorded FAIL, and the study goes on. Slow.

Each test runs a real ``tlmsearch run`` with its own embedded Ray. Faults are injected through
the trainable's test hook (tlmsearch/search/execution/faults.py, inert without
``TLMSEARCH_TEST_FAULTS``):

- SIGKILL: a targeted trial's worker writes its pid at its first eval and waits; the test kills
  it with SIGKILL, from outside, mid-trial (no race against the trial's end).
- memory: a targeted trial's worker allocates memory until Ray's memory monitor kills it. The
  monitor watches the node's memory, so the test sets its threshold
  (``RAY_memory_usage_threshold``) to what the machine uses now plus 4 GiB: room for the run's own
  processes (Ray, the driver, one trial at a time: ~1.5 GiB) and for other load; the hog grows
  past it in 64 MiB steps (at most 6 GiB; 10 GiB free is required, else skipped). One trial runs
  at a time, so the only worker the monitor can pick is the hog. An RLIMIT_AS would be
  deterministic too, but it tests an allocation failure (a MemoryError in the trial), not a
  worker killed for memory, which is what a user meets.

A killed driver (not a worker) and its trial's checkpoint: test_search_resume.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from search_helpers import eval_attempts, straight_losses, tiny_study, trial_losses, trial_row

from tlmsearch.search.execution.faults import ENV, read_jsonl

pytestmark = pytest.mark.slow
EXE = str(Path(sys.executable).with_name("tlmsearch"))
UNIFORM = {"shape": "uniform"}
COSINE = {"shape": "cosine", "r_start": 1.5}  # its label: cosine 1.5->0.5
GiB = 1 << 30


def _study(tmp: Path, name: str, **search) -> Path:
    data = tiny_study(tmp, search={"pruner": "none", **search})
    data["name"] = name
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _ckpt_study(tmp: Path, name: str, **search) -> tuple[Path, dict]:
    """A study with a checkpoint at every eval (2,048 tokens); one trial at a time unless
    ``search`` says otherwise."""
    data = tiny_study(
        tmp,
        train={"checkpoint_every_tokens": 2048},
        search={"pruner": "none", "concurrency": 1, **search},
    )
    data["name"] = name
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def _env(faults: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONUNBUFFERED": "1", ENV: str(faults), **extra}


def _descendants(pid: int) -> list[int]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            tree.setdefault(int(stat.read_text().rsplit(")", 1)[1].split()[1]), []).append(
                int(stat.parent.name)
            )
    todo, found = [pid], []
    while todo:
        kids = tree.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _run(args: list[str], env: dict[str, str], log: Path, kill_waiting: Path | None = None):
    """Run the CLI; SIGKILL every worker that waits in ``kill_waiting`` (once). -> (code, log)."""
    with log.open("w") as out:
        proc = subprocess.Popen([EXE, *args], stdout=out, stderr=out, env=env)
    killed: set[int] = set()
    try:
        deadline = time.time() + 400
        while proc.poll() is None and time.time() < deadline:
            for e in read_jsonl(kill_waiting) if kill_waiting else []:
                if e["pid"] not in killed:
                    killed.add(e["pid"])
                    os.kill(e["pid"], signal.SIGKILL)
            time.sleep(0.1)
        code = proc.poll()
        assert code is not None, f"{args[0]} did not end in time:\n{log.read_text()}"
    finally:
        if proc.poll() is None:  # only what this test started, by PID
            helpers = _descendants(proc.pid)
            proc.kill()
            for pid in helpers:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    return code, log.read_text()


def _in_process(args: list[str]) -> tuple[int, str]:
    """The CLI in this process, for a command that starts no Ray (torch is imported already):
    (exit code, output)."""
    from typer.testing import CliRunner

    from tlmsearch.cli import app

    res = CliRunner().invoke(app, args)
    return res.exit_code, res.output


def _quiet(log: str) -> None:
    """Nothing of Ray's: no traceback, no raylet paragraph about a dead worker."""
    for noise in ("Traceback", "ActorDiedError", "worker died or was killed", "low on memory"):
        assert noise not in log, log


def test_a_killed_worker_is_retried_from_its_checkpoint_or_fail_and_resume_runs_it_when_asked(
    tmp_path,
):
    """One run, every fate of a worker killed mid-trial (SIGKILL at its first eval, 2,048 tokens,
    checkpointed): with ``max_retries: 0`` the baseline (the baseline) is still retried once, from
    its checkpoint, with the straight run's curve (Ray's retry: ``tune.get_checkpoint()``); the
    candidate is recorded FAIL and keeps its checkpoint; ``resume`` leaves it alone;
    ``resume --retry-failed`` goes on from that checkpoint (it started from zero before: hours
    at 440M), again with the straight curve; ``keep_weights: final`` keeps one model per trial
    and ``tlmsearch analyze`` reads them. (This was three tests, each with its own Ray.)"""
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "faults.json").write_text(json.dumps({"kill": [[UNIFORM, 1, 1], [COSINE, 0, 1]]}))
    study, data = _ckpt_study(
        tmp_path, "killed", seeds=[0, 1], max_retries=0, concurrency=2, keep_weights="final"
    )
    run, env = tmp_path / "runs" / "killed", _env(faults)
    code, log = _run(["run", str(study)], env, tmp_path / "run.log", faults / "waiting.jsonl")
    assert code == 0, log
    pids = {
        (e["seed"], e["candidate"]["shape"]): e["pid"]
        for e in read_jsonl(faults / "waiting.jsonl")
    }
    assert len(pids) == 2, log
    # max_retries 0: the candidate is not retried; the baseline (the baseline) is, once.
    lines = log.splitlines()
    retry = [ln for ln in lines if ln.startswith("RETRY")]
    died = f"worker died (pid {pids[1, 'uniform']})"
    assert len(retry) == 1 and retry[0].startswith(
        f"RETRY    uniform (seed 1) lost after 2,048 tokens: {died}; attempt 2 of 2"
    ), log
    failed = [ln for ln in lines if ln.startswith("FAILED")]
    assert len(failed) == 1 and f": worker died (pid {pids[0, 'cosine']})" in failed[0], log
    assert failed[0].startswith("FAILED   cosine 1.5->0.5 (seed 0)") and "retried" not in failed[0]
    assert "5 complete, 0 pruned, 1 failed" in log
    _quiet(log)
    # the retried baseline went on from its checkpoint, with the very same curve
    assert list(eval_attempts(faults, UNIFORM, 1).values()) == [[2048], [4096, 6144, 8192]]
    assert trial_losses(run, UNIFORM, 1) == straight_losses(data, UNIFORM, 1)

    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 6 and (df["state"] == "COMPLETE").sum() == 5
    base, lost = trial_row(df, UNIFORM, 1), trial_row(df, COSINE, 0)
    assert base["state"] == "COMPLETE" and base["retries"] == 1
    assert lost["state"] == "FAIL" and lost["reason"].startswith("worker died (pid")
    assert lost["retries"] == 0
    # seed 1 kept its baseline: every seed-1 candidate has its paired delta
    seed1 = df[(df["seed"] == 1) & ~df["is_baseline"]]
    assert len(seed1) == 2 and seed1["delta_val_bpb"].notna().all()
    assert json.loads((run / "run.json").read_text())["status"] == "finished"

    code, log = _in_process(["resume", str(run)])  # nothing to train: no Ray, no worker
    assert code == 0, log
    assert "1 failed trial(s) kept; --retry-failed runs them again" in log
    assert "nothing left to run" in log
    assert pd.read_parquet(run / "trials.parquet")["state"].tolist() == df["state"].tolist()

    code, log = _run(["resume", str(run), "--retry-failed"], env, tmp_path / "retry.log")
    assert code == 0, log
    assert "1 failed trial(s) queued again, 1 from a checkpoint at 2,048 tokens" in log, log
    assert "6 complete" in log and "1 failed and re-run" in log
    again = pd.read_parquet(run / "trials.parquet")
    assert len(again) == 6 and (again["state"] == "COMPLETE").all()
    assert trial_row(again, COSINE, 0)["number"] == 6  # a new trial stands in for the failed one
    # it went on from the lost attempt's checkpoint at 2,048 tokens, not from zero
    assert list(eval_attempts(faults, COSINE, 0).values()) == [[2048], [4096, 6144, 8192]]
    assert trial_losses(run, COSINE, 0) == straight_losses(data, COSINE, 0)  # exactly

    # keep_weights final: one folder per trial, its final weights, named in the trials table
    from tlmsearch.train.checkpoints import kept_weights, load_model

    kept = kept_weights(run)
    assert sorted(w["path"] for w in kept) == sorted(again["weights"])
    # the lost attempt's checkpoint went with its replacement's end: one folder per trial
    assert len(list(run.glob("ray/*/*/checkpoint_*"))) == len(again) == 6
    model, meta = load_model(trial_row(again, COSINE, 0)["weights"])
    assert sum(p.numel() for p in model.parameters()) == trial_row(again, COSINE, 0)["n_params"]
    assert meta["tokens"] == 8192 and meta["candidate"] == COSINE and meta["seed"] == 0
    assert meta["number"] == 6
    # and `tlmsearch analyze` reads them: one row per (kept model, layer)
    code, log = _in_process(["analyze", str(run), "--max-windows", "2"])
    assert code == 0, log
    layers = pd.read_parquet(run / "analysis.parquet")
    assert sorted(layers["number"].unique()) == sorted(again["number"].astype(int))
    assert layers.groupby("number").size().eq(len(meta["widths"])).all()


def _memory() -> tuple[int, int]:
    """(used, total) bytes as Ray's memory monitor counts them (cgroup-aware)."""
    from ray._private.utils import get_system_memory, get_used_memory

    return get_used_memory(), get_system_memory()


@pytest.mark.skipif(sys.platform != "linux", reason="Ray's memory monitor runs on Linux")
def test_a_trial_over_the_memory_limit_is_killed_retried_then_fail(tmp_path):
    used, total = _memory()
    margin, cap = 4 * GiB, 6 * GiB
    if total - used < cap + 4 * GiB:
        pytest.skip(f"needs {(cap + 4 * GiB) / GiB:.0f} GiB free, {(total - used) / GiB:.1f} free")
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "faults.json").write_text(json.dumps({"hog": [[COSINE, 0, 9]], "cap_bytes": cap}))
    study = _study(tmp_path, "oom", seeds=[0], concurrency=1)  # max_retries: 1 (the default)
    env = _env(
        faults,
        RAY_memory_usage_threshold=f"{(used + margin) / total:.4f}",
        RAY_memory_monitor_refresh_ms="100",
    )
    code, log = _run(["run", str(study)], env, tmp_path / "run.log")
    assert code == 0, log  # Ray 2.60's Tune alone ends the run: RuntimeError out of Tuner.fit
    lines = log.splitlines()
    head = "cosine 1.5->0.5 (seed 0)"
    retry = [ln for ln in lines if ln.startswith(f"RETRY    {head}")]
    assert len(retry) == 1 and ": killed: out of memory (node memory " in retry[0], log
    assert "; attempt 2 of 2" in retry[0]
    failed = [ln for ln in lines if ln.startswith("FAILED")]
    assert len(failed) == 1 and failed[0].startswith(f"FAILED   {head}"), log
    assert ": killed: out of memory (node memory " in failed[0]
    assert "; retried 1 time" in failed[0]
    _quiet(log)
    assert "Caught unexpected exception" not in log

    df = pd.read_parquet(tmp_path / "runs" / "oom" / "trials.parquet")
    hog = trial_row(df, COSINE, 0)
    assert hog["state"] == "FAIL" and hog["reason"].startswith("killed: out of memory")
    assert hog["retries"] == 1
    assert (df[df["params_json"] != hog["params_json"]]["state"] == "COMPLETE").all()
    attempts = {e["pid"] for e in read_jsonl(faults / "evals.jsonl") if e["candidate"] == COSINE}
    # Each attempt is a new worker; the retry usually reaches its first eval and hogs again, but
    # the threshold above is a snapshot of the machine's memory: when another process (the other
    # test worker) grows past it, Ray's monitor kills the retry before that eval (seen in a
    # clean-clone CI run). Either way the retry ran and was lost (the lines above say so).
    assert 1 <= len(attempts) <= 2
