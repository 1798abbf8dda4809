"""benchmarks/noise.py: the summary of raw vs averaged paired deltas, on known numbers."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_summary_compares_the_sd_of_raw_and_averaged_deltas() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import noise

    raw_d, avg_d = [-0.02, 0.0, -0.01, -0.03], [-0.012, -0.008, -0.010, -0.014]
    rows = []
    for s, (r, a) in enumerate(zip(raw_d, avg_d, strict=True)):
        rows.append({"candidate": "uniform", "seed": s, "raw": 2.0 + s, "avg": 1.9 + s})
        rows.append({"candidate": "cosine", "seed": s, "raw": 2.0 + s + r, "avg": 1.9 + s + a})
    out = noise.summarise(rows)
    assert out["raw"]["mean_delta"] == pytest.approx(-0.015)
    assert out["raw"]["sd_delta"] == pytest.approx(statistics.stdev(raw_d))
    assert out["avg"]["sd_delta"] == pytest.approx(statistics.stdev(avg_d))
    ratio = statistics.stdev(avg_d) / statistics.stdev(raw_d)
    assert out["ratio"] == pytest.approx(ratio) and ratio < 0.3
    assert 0 < out["f_test_p"] < 0.1  # a 4x smaller sd on 3 df each: borderline, as it should
