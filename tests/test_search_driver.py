"""A driver that crashes at any phase, or is preempted (SIGTERM): ``status`` says so, and
``tlmsearch resume`` completes the run with every trial once. Slow: real ``tlmsearch`` processes
with their own embedded Ray.

Crashes are the fault hook's (tlmsearch/search/execution/faults.py, ``"crash": [phase]``): the
driver stops dead (``os._exit``) as it enters the phase, as a kill or a lost node would stop it.
The Ray helpers a dead driver leaves behind are stopped by the test, only those it started, by PID.
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

import optuna
import pandas as pd
import pytest
import yaml
from search_helpers import eval_attempts, straight_losses, tiny_study, trial_losses
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.search.execution.faults import CRASH_EXIT, ENV, read_jsonl

pytestmark = pytest.mark.slow
EXE = str(Path(sys.executable).with_name("tlmsearch"))
C125 = {"shape": "cosine", "r_start": 1.25}


def _descendants(pid: int) -> set[int]:
    tree: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            tree.setdefault(ppid, []).append(int(stat.parent.name))
    todo, found = [pid], set()
    while todo:
        kids = tree.get(todo.pop(), [])
        found |= set(kids)
        todo += kids
    return found


def _drive(args: list[str], env: dict, log: Path, stop=None, sig: int = signal.SIGTERM) -> int:
    """Run ``tlmsearch ARGS`` to its end (or send ``sig`` once ``stop()``), then stop the Ray
    helpers it started and left behind (by PID). -> its exit status."""
    helpers: set[int] = set()
    with log.open("w") as out:
        proc = subprocess.Popen([EXE, *args], stdout=out, stderr=out, env=env)
    try:
        deadline, sent = time.time() + 400, False
        while proc.poll() is None:
            assert time.time() < deadline, log.read_text()
            helpers |= _descendants(proc.pid)
            if stop is not None and not sent and stop():
                os.kill(proc.pid, sig)
                sent = True
            time.sleep(0.2)
        return proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
        for pid in helpers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _status(run: Path) -> str:
    out = CliRunner().invoke(app, ["status", str(run)], env={"COLUMNS": "400"})
    assert out.exit_code == 0, out.output
    return " ".join(out.output.split())


def _study(tmp: Path, name: str, **train) -> tuple[Path, dict]:
    data = tiny_study(
        tmp,
        train={"checkpoint_every_tokens": 2048, **train},
        search={"pruner": "none", "concurrency": 1, "seeds": [0]},
    )
    data["name"] = name
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path, data


def _pairs(run: Path, name: str) -> list[tuple[str, int]]:
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{run / 'optuna.db'}")
    done = [t for t in study.get_trials() if t.state.name == "COMPLETE"]
    return [(t.user_attrs["candidate"], t.user_attrs["seed"]) for t in done]


def test_resume_completes_a_run_whose_driver_crashed_at_each_phase(tmp_path: Path) -> None:
    faults = tmp_path / "faults"
    faults.mkdir()
    study, _ = _study(tmp_path, "phases")
    run = tmp_path / "runs" / "phases"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", ENV: str(faults)}

    def crash(args: list[str], phase: str | None, n: int) -> None:
        (faults / "faults.json").write_text(json.dumps({"crash": [phase] if phase else []}))
        log = tmp_path / f"{n}.log"
        code = _drive(args, env, log)
        if phase is None:
            assert code == 0, log.read_text()
            return
        assert code == CRASH_EXIT, log.read_text()
        assert read_jsonl(faults / "crashed.jsonl")[-1]["phase"] == phase
        said = _status(run)
        if phase == "report":  # the run is finished; only its report is missing
            assert ": finished (updated" in said and "report not written" in said, said
            assert f"tlmsearch report {run}" in said
        else:
            assert ": driver gone (updated" in said, said  # not "running"
            assert "driver gone (last seen " in said and f"while {phase}):" in said, said
            assert f"run `tlmsearch resume {run}`" in said, said

    crash(["run", str(study)], "trials", 0)  # the first trial completed, then the driver died
    resume = ["resume", str(run)]
    for n, phase in enumerate(["preparing data", "tables", "best", "report", None], 1):
        crash(resume, phase, n)
    info = json.loads((run / "run.json").read_text())
    assert info["status"] == "finished" and info["phase"] == "done"
    assert "driver gone" not in _status(run) and (run / "report.html").exists()
    pairs = _pairs(run, "phases")
    assert len(pairs) == len(set(pairs)) == 3  # every (candidate, seed) completed once
    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 3 and (df["state"] == "COMPLETE").all()
    assert (run / "best.yaml").exists()


def test_sigterm_preempts_the_driver_and_resume_continues_from_the_checkpoints(
    tmp_path: Path,
) -> None:
    """SIGTERM (what Slurm's --signal and a preemption send) once a trial completed and the
    next waits at its first eval, checkpointed at 2,048 tokens: exit 143, the trial preempted
    (not failed, not lost), and a resume of the same run dir continues it from that checkpoint
    with the curve of a run never stopped; every (candidate, seed) completes once."""
    faults = tmp_path / "faults"
    faults.mkdir()
    (faults / "faults.json").write_text(json.dumps({"kill": [[C125, 0, 1]]}))  # waits at 2,048
    study, data = _study(tmp_path, "preempt")
    run = tmp_path / "runs" / "preempt"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", ENV: str(faults)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)

    def waiting() -> bool:
        return bool(read_jsonl(faults / "waiting.jsonl"))

    log = tmp_path / "run.log"
    code = _drive(["run", str(study)], env, log, stop=waiting, sig=signal.SIGTERM)
    text = log.read_text()
    assert code == 143, text
    assert "preempted: 1 running trial(s) continue from their checkpoints" in text, text
    assert json.loads((run / "run.json").read_text())["status"] == "preempted"
    said = _status(run)
    assert ": preempted (updated" in said and "1 preempted (resume continues them)" in said
    assert "0 failed" in said, said

    log = tmp_path / "resume.log"
    assert _drive(["resume", str(run)], env, log) == 0, log.read_text()
    text = log.read_text()
    assert "1 interrupted trial(s) queued again, 1 from a checkpoint at 2,048 tokens" in text
    pairs = _pairs(run, "preempt")
    assert len(pairs) == len(set(pairs)) == 3
    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 3 and (df["state"] == "COMPLETE").all()
    # the preempted trial trained to 2,048 tokens, its resumed run from there: no eval twice
    assert list(eval_attempts(faults, C125, 0).values()) == [[2048], [4096, 6144, 8192]]
    curve = trial_losses(run, C125, 0)
    assert curve == straight_losses(data, C125, 0)
    print(
        "preempted trial's curve (tokens, val_loss):",
        [(r["tokens"], round(r["val_loss"], 4)) for r in curve],
    )
    assert "1 preempted" in _status(run)
