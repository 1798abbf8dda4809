"""benchmarks/scale.py's driver profile: the profiled CLI writes its profile, and the
breakdown reads milliseconds per trial by component from it; the goals' lines; the Ray Tune
floor (~15 s, most of it an embedded Ray)."""

from __future__ import annotations

import cProfile
import subprocess
import sys
import time
from pathlib import Path

from bench_module import load


def test_the_profiled_driver_writes_its_profile_even_when_the_cli_exits(tmp_path: Path) -> None:
    bench = load("scale")
    out = tmp_path / "cli.prof"
    done = subprocess.run(
        [sys.executable, "-c", bench.PROFILED, str(out), "--help"],
        cwd=bench.ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0
    rows = {r["component"]: r for r in bench.components(out, 1)}
    assert rows["Ray Tune's loop, all"] == {
        "component": "Ray Tune's loop, all",
        "ms_per_trial": 0,
        "calls": 0,
    }


def test_the_breakdown_is_cumulative_cpu_per_trial_by_file_and_function(tmp_path: Path) -> None:
    bench = load("scale")
    code = tmp_path / "ledger.py"  # named as a component's file: `record` in ledger.py
    code.write_text(
        "import time\n"
        "def record():\n"
        "    t = time.thread_time()\n"
        "    while time.thread_time() - t < 0.05:\n"
        "        pass\n"
    )
    namespace: dict = {}
    exec(compile(code.read_text(), str(code), "exec"), namespace)
    prof = cProfile.Profile(time.thread_time)
    for _ in range(4):
        prof.runcall(namespace["record"])
    prof.dump_stats(str(tmp_path / "p.prof"))
    rows = {r["component"].strip(): r for r in bench.components(tmp_path / "p.prof", 2)}
    assert rows["the ledger"]["calls"] == 4
    assert 90 <= rows["the ledger"]["ms_per_trial"] <= 150  # 4 x 50 ms over 2 trials
    assert rows["tell"]["ms_per_trial"] == 0


def test_the_goals_are_read_at_each_storages_largest_size() -> None:
    bench = load("scale")
    row = {"ms_median": 60.0, "ms_p99": 250.0, "status_s": 5.04, "report_s": 10.0}
    row |= {"html_mb": 7.0, "fcp_ms": 150, "driver_mb": 800, "s_per_trial": 0.2}
    rows = [  # the largest first: read by size, not by order
        {"storage": "sqlite", "trials": 5000, **row, "growth": 1.6, "resume_ok": False},
        {"storage": "sqlite", "trials": 100, **row, "ms_median": 30.0},
        {"storage": "journal", "trials": 5000, **row, "ms_median": 50.0, "s_per_trial": 0.1},
    ]
    rows[2].pop("fcp_ms")  # no Chromium
    lines = bench.goals(rows)
    assert "sqlite, 5,000 trials: median 60 ms (goal <= 50 ms): not met" in lines
    assert "sqlite, 5,000 trials: p99 250 ms (goal <= 250 ms): met" in lines  # at the bound
    # 5.04 printed so that it reads as over 5, not "5.0 s ... not met"
    assert "sqlite, 5,000 trials: status 5.04 s (goal <= 5 s): not met" in lines
    assert (
        "sqlite, 5,000 trials: median at 5,000 over 100 trials 2.00 (goal <= 1.5): not met"
        in lines
    )
    assert (
        "sqlite, 5,000 trials: median, last tenth over first 1.60 (goal <= 1.5): not met" in lines
    )
    assert "sqlite, 5,000 trials: the study 16.7 min (goal <= 15 min): not met" in lines
    assert (
        "sqlite, 5,000 trials: killed and resumed, NOT every trial once (goal: nothing lost): "
        "not met"
    ) in lines
    # one size of a storage: no ratio across sizes; the bound itself is met; what was not
    # measured is said, not left out
    journal = [ln for ln in lines if ln.startswith("journal")]
    assert len(journal) == len(bench.GOALS) + 2
    assert "journal, 5,000 trials: median 50 ms (goal <= 50 ms): met" in journal
    assert (
        "journal, 5,000 trials: first paint: not measured (no Chromium, or no paint reported)"
        in journal
    )
    assert "journal, 5,000 trials: the study 8.3 min (goal <= 15 min): met" in journal
    assert "journal, 5,000 trials: killed and resumed: not run (--kill-at 0.5)" in journal


def test_ray_tunes_floor_times_a_trainable_that_only_reports() -> None:
    """(~10 s: an embedded Ray) The floor row: Tune alone, every trial timed."""
    bench = load("scale")
    (row,) = bench.ray_floor([4], evals=2)
    assert row["ray_tune_alone"] == 4 and row["timed"] == 4
    assert 0 < row["ms_median"] <= row["ms_p99"] < 60_000
    assert row["s_per_trial"] > 0 and row["cpu_ms_per_trial"] > 0


def test_status_times_reads_the_storage_without_the_stamp_and_puts_it_back(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    import json

    bench = load("scale")
    run = tmp_path / "run"
    run.mkdir()
    info = {"status": "finished", "tables": {"version": "x", "trials": 3, "curves": 6}}
    (run / "run.json").write_text(json.dumps(info))
    seen = []

    def timed(args, env):  # what run.json says while each status runs
        seen.append("tables" in json.loads((run / "run.json").read_text()))
        return 1.0

    monkeypatch.setattr(bench, "_timed", timed)
    bench.status_times([run], rounds=2)
    assert seen == [True, False, True, False]  # alternating: its tables, then its storage
    assert json.loads((run / "run.json").read_text()) == info
    out = capsys.readouterr().out
    assert f"{run}: status from its storage: 1.00, 1.00 s" in out
