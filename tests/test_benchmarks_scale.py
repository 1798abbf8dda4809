"""benchmarks/scale.py's driver profile: the profiled CLI writes its profile, and the
breakdown reads milliseconds per trial by component from it (~5 s)."""

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
