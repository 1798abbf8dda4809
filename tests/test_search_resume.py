"""Resume after Ctrl-C or SIGKILL of the driver: no completed trial lost, none run twice, and a
stopped trial goes on from its checkpoint with the very curve of a run never stopped. Slow.

The driver is a real ``tlmsearch run`` (then ``resume``) process with its own embedded Ray; the
test stops it with SIGKILL once a trial has completed and the next waits at its first eval
(checkpointed), then SIGINT, then stops the Ray helpers a dead driver leaves behind (only those
it started, by PID), and resumes. The wait is the trainable's test hook
(tlmsearch/search/execution/faults.py, inert without ``TLMSEARCH_TEST_FAULTS``): the worker waits
there until it is killed, so the SIGKILL lands mid-trial, after a checkpoint, on any machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest
import yaml
from search_helpers import eval_attempts, straight_losses, tiny_study, trial_losses

from tlmsearch.run_dir import RunDir
from tlmsearch.search import records
from tlmsearch.search.execution.faults import ENV, read_jsonl

pytestmark = pytest.mark.slow
EXE = str(Path(sys.executable).with_name("tlmsearch"))
C125 = {"shape": "cosine", "r_start": 1.25}  # the candidate that waits to be stopped


def _states(db: Path) -> list[str]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as con:
            return [r[0] for r in con.execute("select state from trials order by number")]
    except sqlite3.Error:
        return []


def _children() -> dict[int, list[int]]:
    """ppid -> pids, from /proc (Linux)."""
    out: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    return out


def _descendants(pid: int) -> list[int]:
    tree, todo, found = _children(), [pid], []
    while todo:
        kids = tree.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _stop_mid_run(args: list[str], db: Path, env: dict, log: Path, sig: int, ready) -> int:
    """Run ``tlmsearch ARGS``; once ``ready(states of the trials not left running before it)``,
    send ``sig`` to the driver, then stop the Ray helpers it leaves behind. -> its exit code."""
    # a resume marks the trials a dead driver left RUNNING as interrupted: not this driver's
    stale = {n for n, state in enumerate(_states(db)) if state == "RUNNING"}
    with log.open("w") as out:
        driver = subprocess.Popen([EXE, *args], stdout=out, stderr=out, env=env)
    helpers: list[int] = []
    try:
        deadline = time.time() + 180
        while not ready([s for n, s in enumerate(_states(db)) if n not in stale]):
            assert driver.poll() is None, log.read_text()
            assert time.time() < deadline, f"no trial got that far in time:\n{log.read_text()}"
            time.sleep(0.1)
        helpers = _descendants(driver.pid)
        os.kill(driver.pid, sig)
        return driver.wait(timeout=90)
    finally:
        if driver.poll() is None:
            driver.kill()
        _kill(helpers)  # Ray's agents outlive a SIGKILLed driver; only ours, by PID


def _complete(storage: str) -> dict[int, tuple]:
    return {
        t.number: (t.user_attrs["candidate"], t.user_attrs["seed"], t.value)
        for t in optuna.load_study(study_name="killed", storage=storage).get_trials()
        if t.state.name == "COMPLETE"
    }


def test_resume_after_kill_9_and_after_ctrl_c_of_the_driver(tmp_path: Path):
    """One study, one trial at a time, stopped twice: SIGKILL of ``run`` once a trial has
    completed and the next waits at its first eval (2,048 tokens, checkpointed), then Ctrl-C of
    the ``resume`` that follows once a trial of its own runs, then a ``resume`` that finishes
    it. The killed trial goes on from its checkpoint with the straight run's curve, and
    ``keep_weights: none`` leaves no checkpoint behind, the interrupted trials' included. (This
    was a test per signal and one of a killed driver's checkpoint, each with two Rays.)"""
    faults = tmp_path / "faults"
    faults.mkdir()
    # C125's first attempt waits at its first eval (2,048 tokens) till SIGKILL stops it
    (faults / "faults.json").write_text(json.dumps({"kill": [[C125, 0, 1]]}))
    # 3 distinct widths x 2 seeds, queued seed-major: uniform, C125, C150, uniform, ...
    data = tiny_study(
        tmp_path,
        train={"checkpoint_every_tokens": 2048},
        search={"seeds": [0, 1], "concurrency": 1},
    )
    data["name"] = "killed"
    study = tmp_path / "killed.yaml"
    study.write_text(yaml.safe_dump(data))
    run = tmp_path / "runs" / "killed"
    db = run / "optuna.db"
    storage = f"sqlite:///{db}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", ENV: str(faults)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # the run's own compile cache, not a user's

    def live(states: list[str]) -> bool:  # a trial done, one running: `status` says running
        if not ("COMPLETE" in states and "RUNNING" in states):
            return False
        if not read_jsonl(faults / "waiting.jsonl"):  # C125 waits at 2,048 tokens
            return False
        out = subprocess.run(
            [EXE, "status", str(run)], capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stdout + out.stderr
        assert ": running (updated" in " ".join(out.stdout.split()), out.stdout  # not "0 running"
        return True

    # SIGKILL of the run: no clean-up at all
    _stop_mid_run(["run", str(study)], db, env, tmp_path / "run.log", signal.SIGKILL, live)
    before = _complete(storage)
    interrupted = _states(db).count("RUNNING")
    assert before and interrupted == 1  # C125 (seed 0), waiting at 2,048 tokens
    assert list(run.glob("ray/session-0/trial_*/checkpoint_*/meta.json"))
    status = subprocess.run([EXE, "status", str(run)], capture_output=True, text=True, env=env)
    assert status.returncode == 0 and f"{len(before)} complete" in status.stdout

    # Ctrl-C of the resume once a trial of its own runs: a clean stop that says so, and how to
    # continue (a trial waiting in the hook would hold Tune's clean-up 10 s: C150 trains)
    resume = ["resume", str(run)]
    log = tmp_path / "resume.log"
    code = _stop_mid_run(resume, db, env, log, signal.SIGINT, lambda new: "RUNNING" in new)
    assert code == 130 and "tlmsearch resume" in log.read_text(), log.read_text()
    from_ckpt = "1 interrupted trial(s) queued again, 1 from a checkpoint at 2,048 tokens"
    assert from_ckpt in log.read_text(), log.read_text()  # C125, to go on from 2,048 tokens
    assert json.loads((run / "run.json").read_text())["status"] == "interrupted"
    n_running = _states(db).count("RUNNING")
    assert n_running >= 1
    interrupted += n_running
    done = _complete(storage)
    assert all(done[n] == before[n] for n in before)
    before = done

    res = subprocess.run([EXE, *resume], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{n_running} interrupted trial(s) queued again" in res.stdout

    study = optuna.load_study(study_name="killed", storage=storage)
    trials = study.get_trials()
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    # Nothing completed was lost or changed...
    for number, (cand, seed, value) in before.items():
        t = trials[number]
        assert t.state.name == "COMPLETE" and t.value == value
        assert (t.user_attrs["candidate"], t.user_attrs["seed"]) == (cand, seed)
    # ...and every (candidate, seed) completed exactly once.
    pairs = [(t.user_attrs["candidate"], t.user_attrs["seed"]) for t in complete]
    assert len(pairs) == len(set(pairs)) == 6
    assert len(records.interrupted(study)) == interrupted  # each queued again once
    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 6 and (df["state"] == "COMPLETE").all()
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert len(list((run / "ray").glob("session-*"))) == 3
    # C125 went on from its checkpoint at 2,048 tokens, not from zero, with the curve of a run
    # never stopped, exactly
    assert list(eval_attempts(faults, C125, 0).values()) == [[2048], [4096, 6144, 8192]]
    assert trial_losses(run, C125, 0) == straight_losses(data, C125, 0)
    # every trial of the run and of both resumes compiled into one cache: the run dir's
    caches = {e["compile_cache"] for e in read_jsonl(faults / "evals.jsonl")}
    assert caches == {str(RunDir(run).compile_cache.resolve())}
    # keep_weights none: no checkpoint is left, the interrupted trials' included
    assert not list(run.glob("ray/*/*/checkpoint_*"))
