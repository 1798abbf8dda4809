"""Resume after Ctrl-C or SIGKILL of the driver: no completed trial lost, none run twice. Slow.

The driver is a real ``tlmsearch run`` process with its own embedded Ray; the test stops it with
SIGKILL (or SIGINT) once a trial has completed and others are running, then stops the Ray helpers a
dead driver leaves behind (only those it started, by PID), and runs ``tlmsearch resume``.
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
from search_helpers import tiny_study

pytestmark = pytest.mark.slow
EXE = str(Path(sys.executable).with_name("tlmsearch"))


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


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["kill-9", "ctrl-c"])
def test_resume_after_the_driver_stops(tmp_path: Path, sig: int):
    # ~2-4 s a trial; 3 distinct widths x 2 seeds, so trials are still running after the first
    data = tiny_study(tmp_path, train={"tokens": 32768}, search={"seeds": [0, 1]})
    data["name"] = "killed"
    study = tmp_path / "killed.yaml"
    study.write_text(yaml.safe_dump(data))
    run = tmp_path / "runs" / "killed"
    db = run / "optuna.db"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    log = (tmp_path / "run.log").open("w")
    driver = subprocess.Popen([EXE, "run", str(study)], stdout=log, stderr=log, env=env)
    helpers: list[int] = []
    try:
        deadline = time.time() + 180
        while time.time() < deadline:
            states = _states(db)
            if "COMPLETE" in states and "RUNNING" in states:
                break
            assert driver.poll() is None, (tmp_path / "run.log").read_text()
            time.sleep(0.2)
        else:
            pytest.fail("no trial completed in time")
        live = subprocess.run([EXE, "status", str(run)], capture_output=True, text=True)
        assert live.returncode == 0 and "running" in live.stdout, live.stdout + live.stderr
        helpers = _descendants(driver.pid)
        os.kill(driver.pid, sig)
        code = driver.wait(timeout=90)
        if sig == signal.SIGINT:  # a clean stop: says so, and how to continue
            assert code == 130, (tmp_path / "run.log").read_text()
            assert "tlmsearch resume" in (tmp_path / "run.log").read_text()
            info = json.loads((run / "run.json").read_text())
            assert info["status"] == "interrupted"
    finally:
        if driver.poll() is None:
            driver.kill()
        _kill(helpers)  # Ray's agents outlive a SIGKILLed driver; only ours, by PID
        log.close()

    storage = f"sqlite:///{db}"
    before = {
        t.number: (t.user_attrs["candidate"], t.user_attrs["seed"], t.value)
        for t in optuna.load_study(study_name="killed", storage=storage).get_trials()
        if t.state.name == "COMPLETE"
    }
    n_running = _states(db).count("RUNNING")
    assert before and n_running >= 1

    status = subprocess.run([EXE, "status", str(run)], capture_output=True, text=True, env=env)
    assert status.returncode == 0 and f"{len(before)} complete" in status.stdout

    res = subprocess.run(
        [EXE, "resume", str(run)], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"{n_running} interrupted trial(s) queued again" in res.stdout

    trials = optuna.load_study(study_name="killed", storage=storage).get_trials()
    complete = [t for t in trials if t.state.name == "COMPLETE"]
    # Nothing completed was lost or changed...
    for number, (cand, seed, value) in before.items():
        t = trials[number]
        assert t.state.name == "COMPLETE" and t.value == value
        assert (t.user_attrs["candidate"], t.user_attrs["seed"]) == (cand, seed)
    # ...and every (candidate, seed) completed exactly once.
    pairs = [(t.user_attrs["candidate"], t.user_attrs["seed"]) for t in complete]
    assert len(pairs) == len(set(pairs)) == 6
    interrupted = [t for t in trials if t.user_attrs.get("interrupted")]
    assert len(interrupted) == n_running
    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 6 and (df["state"] == "COMPLETE").all()
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    assert len(list((run / "ray").glob("session-*"))) == 2
