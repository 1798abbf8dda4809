"""The trial-array benchmarks run on a CPU (--quick): benchmarks/gpu.py --array (gpu_array.py)
without Ray, Optuna or rich importable, and benchmarks/trial_array.py's array vs processes."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # ~10-30 s each on 2 cores: tiny arrays, and 3 processes

# Run a script as __main__ with the packages a bare GPU box lacks made unimportable.
BLOCKED = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {"ray", "optuna", "rich", "typer", "plotly"}:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)")
sys.meta_path.insert(0, Block())
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TLMSEARCH_CACHE": str(tmp_path / "cache")}
    return subprocess.run(
        [sys.executable, "-c", BLOCKED, *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )


def test_the_gpu_array_rows_run_on_a_cpu_without_ray_or_optuna(tmp_path: Path) -> None:
    out = tmp_path / "array.json"
    proc = _run(tmp_path, str(ROOT / "benchmarks/gpu.py"), "--array", "--quick", "--out", str(out))
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [(r["rows"], r["mix"], r["members"]) for r in rows] == [
        ("solo Trainer", "uniform", 1),
        ("array", "uniform", 1),
        ("array", "mixed", 1),
        ("array", "uniform", 2),
        ("array", "mixed", 2),
    ]
    for r in rows:
        assert "error" not in r, r
        for key in ("tokens_per_s_member", "tokens_per_s_all", "compile_s", "gpu_s_per_member"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert r["tokens_per_s_all"] == pytest.approx(r["members"] * r["tokens_per_s_member"])
        assert 0 < r["mfu"] < 1 and r.get("vmap_fallbacks", []) == []
    assert rows[-1]["padding_flops"] > 0 == rows[-2]["padding_flops"]  # mixed widths pad
    assert "tok/s member" in proc.stdout  # the table


def test_the_cpu_benchmark_prints_both_setups_and_their_ratio(tmp_path: Path) -> None:
    out = tmp_path / "cpu.json"
    # --timeout: the benchmark's own limit inside the test's, so a hang says where it hung
    proc = _run(
        tmp_path,
        str(ROOT / "benchmarks/trial_array.py"),
        "--quick",
        "--timeout",
        "240",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    for setup in ("array", "processes"):
        assert set(result["mean"][setup]) == {"uniform", "taper", "mirror"}
        assert all(v > 0 for v in result["mean"][setup].values())
    total = result["total"]
    assert result["ratio"] == pytest.approx(total["array"] / total["processes"])
    assert "array / processes:" in proc.stdout
