"""benchmarks/paper.py prints the effect table of a run dir, beside the paper's 440M numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fixtures_run import make_run

ROOT = Path(__file__).resolve().parent.parent


def test_the_paper_tables_come_from_the_run_dir(tmp_path: Path) -> None:
    run = make_run(tmp_path / "syn", seeds=(0, 1, 2))
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/paper.py"), str(run)],
        capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("## syn") and "uniform: val_bpb 1.49" in out
    rows = [ln for ln in out.splitlines() if ln.startswith(("| cosine", "| linear"))]
    assert len(rows) == 6  # 2 shapes x 3 ratios, each with its seeds, interval and ppl ratio
    assert all("| 3 |" in r and "(own)" in r for r in rows)
    assert "no analysis.parquet" in out
