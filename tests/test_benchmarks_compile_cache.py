"""benchmarks/compile_cache.py --quick: cold and warm compiles side by side, each in a fresh
process whose compile cache is set as a trial's is (runtime.use_compile_cache)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow  # three compiling processes: ~1-2 minutes on 2 cores


def test_a_warm_cache_serves_the_same_widths_and_the_table_compares_the_rows(
    tmp_path: Path,
) -> None:
    out = tmp_path / "compile.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TLMSEARCH_CACHE": str(tmp_path / "cache")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/compile_cache.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = {r["row"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == ["solo, cold", "solo, warm, same widths", "solo, warm, other widths"]
    for r in rows.values():
        assert "error" not in r, r
        assert math.isfinite(r["compile_s"]) and r["compile_s"] > 0 < r["step_s"]
        assert 0 < r["of_trial"] < 1
    cold, same, other = rows.values()
    assert cold["miss"] > 0 and cold["hit"] == 0  # an empty cache compiles everything
    assert same["hit"] > 0 and same["miss"] == 0  # the same widths load what cold compiled
    assert other["widths"] != cold["widths"]
    assert "compile_s" in proc.stdout and "of a trial" in proc.stdout  # the table
