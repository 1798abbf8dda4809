"""benchmarks/gpu.py runs on a CPU (--quick): every row of its table has finite numbers."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# ~30 s on 2 idle cores: 1 + 1 + 2 + 2 training processes (~3 s a row, mostly torch's import),
# a search (~13 s: Ray's start, two trials)
pytestmark = pytest.mark.slow


def test_the_gpu_benchmark_runs_on_a_cpu(tmp_path: Path) -> None:
    out = tmp_path / "gpu.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TLMSEARCH_CACHE": str(tmp_path / "cache")}
    # 0.2 s timed a row, not 0.5: the test reads no speed, only that every number is there
    args = ["--quick", "--seconds", "0.2", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/gpu.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(out.read_text())
    rows = result["rows"]
    throughput = [r for r in rows if r["trials"] in (1, 2)]  # --quick: 2 at once, not 4
    assert [(r["model"], r["trials"]) for r in throughput] == [
        ("uniform", 1),
        ("taper", 1),
        ("uniform", 2),
        ("taper", 2),
    ]
    (search,) = [r for r in rows if r["trials"] == "2 (search)"]
    for r in rows:
        assert "error" not in r, r
        for key in ("tokens_per_s_trial", "tokens_per_s_all", "wall_s", "flops_per_token"):
            assert math.isfinite(r[key]) and r[key] > 0, (key, r)
        assert 0 < r["mfu"] < 1, r
    for r in throughput:
        assert r["tokens_per_s_all"] == pytest.approx(r["trials"] * r["tokens_per_s_trial"])
        assert r["compile_s"] > 0 and r["timed_s"] >= result["seconds"]
        assert r["compiled"] is False and r["mem_gb"] is None  # eager, on a CPU
    # the taper keeps the uniform budget exactly: the same parameters and FLOPs per token
    assert len({(r["params"], r["flops_per_token"]) for r in rows}) == 1
    assert all(math.isfinite(r["vs_uniform"]) for r in throughput if r["model"] == "taper")
    assert search["tokens_per_s_all"] == pytest.approx(2 * search["tokens_per_s_trial"])
    # one table, every row in it
    table = proc.stdout[proc.stdout.index("tok/s all") :]
    assert table.count("tiny-32") == len(rows) and table.count(" ok ") == len(rows)
