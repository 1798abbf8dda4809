"""run.json's driver (host, pid, heartbeat, phase): a run that says running is believed only while
its driver is there; the heartbeat thread; SIGTERM as a preemption. Fast (no Ray)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.run_dir import driver
from tlmsearch.run_dir.tables import write_status
from tlmsearch.search import driver as search_driver

HERE = socket.gethostname()


def _iso(age_s: float, now: float) -> str:
    return datetime.fromtimestamp(now - age_s, timezone.utc).isoformat(timespec="seconds")


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_run_whose_driver_died_on_this_host_says_so() -> None:
    now = time.time()
    info = {
        "status": "running",
        "driver_host": HERE,
        "driver_pid": _dead_pid(),
        "heartbeat": _iso(5, now),
        "phase": "best",
    }
    line = driver.driver_gone(info, "runs/x", now=now)
    assert line is not None and line.startswith("driver gone (last seen ")
    assert "while best" in line and line.endswith("run `tlmsearch resume runs/x`")
    # this very process is a live driver: running, believed
    me = {**info, "driver_pid": os.getpid(), "driver_start": driver.started(os.getpid())}
    assert driver.driver_gone(me, "runs/x", now=now) is None
    # its pid, recycled by another process (started at another time): gone
    assert driver.driver_gone({**me, "driver_start": -1}, "runs/x", now=now) is not None
    # a run that does not say running is what it says
    assert driver.driver_gone({**info, "status": "finished", "phase": "done"}, "x") is None


def test_a_driver_that_died_writing_the_report_leaves_a_finished_run_without_one() -> None:
    info = {
        "status": "finished",
        "phase": "report",
        "driver_host": HERE,
        "driver_pid": _dead_pid(),
    }
    line = driver.driver_gone(info, "runs/x")
    assert line is not None and line.startswith("report not written")
    assert line.endswith("`tlmsearch report runs/x`")


@settings(max_examples=50, deadline=None)
@given(age=st.floats(0, 10 * driver.STALE_S), pid=st.integers(1, 2**22))
def test_from_another_host_the_heartbeat_decides(age: float, pid: int) -> None:
    """Gone exactly when the heartbeat is older than STALE_S (the pid means nothing here)."""
    now = 2e9
    info = {
        "status": "running",
        "driver_host": "node-elsewhere",
        "driver_pid": pid,
        "heartbeat": _iso(age, now),
    }
    gone = driver.driver_gone(info, "r", now=now, host="login-node")
    # the heartbeat keeps whole seconds: compare with the age it records
    recorded = driver.beat_age(info, now)
    assert recorded is not None and abs(recorded - age) <= 1
    assert (gone is not None) == (recorded > driver.STALE_S)


def test_no_heartbeat_from_another_host_cannot_be_judged() -> None:
    info = {"status": "running", "driver_host": "elsewhere", "driver_pid": 1}
    assert driver.driver_gone(info, "r", host="here") is None  # a run before heartbeats


def test_the_heartbeat_thread_beats_and_stops(tmp_path: Path) -> None:
    write_status(tmp_path, "running", phase="trials")
    old = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat(timespec="seconds")
    write_status(tmp_path, None, heartbeat=old)
    with search_driver.Heartbeat(tmp_path, every=0.05):
        info = json.loads((tmp_path / "run.json").read_text())
        assert info["driver_pid"] == os.getpid() and info["driver_host"] == HERE
        time.sleep(0.3)
        beat = json.loads((tmp_path / "run.json").read_text())["heartbeat"]
        assert driver.beat_age({"heartbeat": beat}) < 5
    info = json.loads((tmp_path / "run.json").read_text())
    assert info["status"] == "running" and info["phase"] == "trials"  # kept by every beat


def test_sigterm_stops_the_driver_as_ctrl_c_does_and_says_preempted() -> None:
    import threading

    marked = threading.Event()
    # Ctrl-C's own handler: a test before this one in the same process may have left another
    # (Ray Tune installs one during a run)
    old_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    previous = search_driver.on_sigterm(mark=marked.set)
    try:
        assert not search_driver.preempted()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises before this ends
        assert search_driver.preempted()
        assert marked.wait(5)  # the running trials are marked at once, in a thread
    finally:
        search_driver.restore(previous)
        signal.signal(signal.SIGINT, old_int)
    assert signal.getsignal(signal.SIGTERM) == previous


def test_preempted_trials_are_counted_apart_from_failed_and_lost() -> None:
    import optuna

    from tlmsearch.search.status import counts

    study = optuna.create_study()
    done = study.ask()
    study.tell(done, 1.0)
    study.ask()
    study.ask()  # two running when the driver was stopped
    assert search_driver.mark_preempted(study) == 2
    c = counts(study)
    assert c["preempted"] == 2 and c["RUNNING"] == 0 and c["FAIL"] == 0
    assert c["COMPLETE"] == 1


def test_the_report_of_a_run_whose_driver_is_gone_says_so(tmp_path: Path) -> None:
    from fixtures_run import make_run

    from tlmsearch.report.html import write_report

    run = make_run(tmp_path / "gone", status="running")
    write_status(run, None, driver_host=HERE, driver_pid=_dead_pid(), phase="trials")
    html = write_report(run).read_text()
    assert "status <b>driver gone</b>" in html
    assert f"run `tlmsearch resume {run}`" in html.replace("&#x60;", "`")


def test_a_run_json_without_driver_start_needs_a_tlmsearch_process() -> None:
    """A run.json written before driver_start names only the pid: a recycled pid running
    something else (here init, pid 1) is no driver, so the run is not locked as running."""
    info = {
        "status": "running",
        "driver_host": HERE,
        "driver_pid": 1,
        "heartbeat": _iso(5, time.time()),
        "phase": "trials",
    }
    assert not driver.alive(1)
    assert driver.driver_gone(info, "runs/x") is not None


def test_sigterm_stops_a_driver_whose_sigint_is_ignored() -> None:
    """A background job of a non-interactive shell (the sbatch script's driver) starts with
    SIGINT ignored: SIGTERM must still stop it (as Ctrl-C), not set a flag nothing reads."""
    import signal

    from tlmsearch.search import driver as search_driver

    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    old_term = search_driver.on_sigterm()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1.0)  # the handler runs here, in the main thread
        assert search_driver.preempted()
    finally:
        signal.signal(signal.SIGINT, old_int)
        signal.signal(signal.SIGTERM, old_term or signal.SIG_DFL)


def test_the_heartbeat_goes_on_while_the_report_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A report that takes longer than STALE_S must not read as "driver gone" from another
    host: the driver beats while it writes it."""
    import rich.console

    from tlmsearch.report import html
    from tlmsearch.search import cli as search_cli

    old = (datetime.now(timezone.utc) - timedelta(hours=1)).isoformat(timespec="seconds")
    write_status(tmp_path, "finished", phase="best", heartbeat=old)
    monkeypatch.setattr(driver, "HEARTBEAT_S", 0.05)
    monkeypatch.setattr(driver, "STALE_S", 1.5)  # heartbeats are stamped to the second
    seen: list[str | None] = []

    def slow_report(run_dir: Path) -> Path:
        time.sleep(3.0)  # a report of thousands of candidates, shortened
        info = json.loads((tmp_path / "run.json").read_text())
        seen.append(driver.driver_gone(info, "r", host="another-host"))
        return tmp_path / "report.html"

    monkeypatch.setattr(html, "write_report", slow_report)
    search_cli._write_report(rich.console.Console(quiet=True), tmp_path)
    assert seen == [None]  # from another host, the driver was there all along
    assert json.loads((tmp_path / "run.json").read_text())["phase"] == "done"


@pytest.mark.parametrize(
    ("recorded", "now", "refused"),
    [
        ({"slurm_job": "77", "slurm_restart": 0}, {"SLURM_JOB_ID": "77"}, True),  # same allocation
        (
            {"slurm_job": "77", "slurm_restart": 0},
            {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"},
            False,
        ),  # requeued since
        (
            {"slurm_job": "77", "slurm_restart": 1},
            {"SLURM_JOB_ID": "77", "SLURM_RESTART_COUNT": "1"},
            True,
        ),  # same restart
        ({"slurm_job": "77"}, {"SLURM_JOB_ID": "77"}, False),  # recorded before the count: trusted
        ({"slurm_job": "77", "slurm_restart": 0}, {"SLURM_JOB_ID": "78"}, True),  # another job
    ],
)
def test_a_second_resume_in_the_same_slurm_allocation_is_refused(
    monkeypatch: pytest.MonkeyPatch, recorded: dict, now: dict, refused: bool
) -> None:
    from tlmsearch.errors import ConfigError
    from tlmsearch.search.runner import _refuse_if_running

    for key in ("SLURM_JOB_ID", "SLURM_RESTART_COUNT"):
        monkeypatch.delenv(key, raising=False)
    for key, value in now.items():
        monkeypatch.setenv(key, value)
    info = {"status": "running", **search_driver.driver_fields(), **recorded}  # this process
    if "slurm_restart" not in recorded:
        del info["slurm_restart"]
    if refused:
        with pytest.raises(ConfigError, match="still running"):
            _refuse_if_running(Path("r"), info)
    else:
        _refuse_if_running(Path("r"), info)
