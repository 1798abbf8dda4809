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

    raw_d, avg_d = [-0.02, 0.0, -0.01, -0.03], [-0.013, -0.007, -0.010, -0.014]
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
    assert 0 < out["pitman_morgan_p"] < 0.1  # a 4x smaller sd on 4 paired seeds


def test_pitman_morgan_holds_its_rate_on_correlated_pairs_where_the_f_test_does_not() -> None:
    """raw and averaged weights score the same trainings, so their deltas are paired
    and strongly correlated. Under equal variances the Pitman-Morgan test rejects at its 5%;
    the F test for independent samples almost never does (its p-values are too large)."""
    import numpy as np
    from scipy.stats import f as f_dist

    from tlmsearch.stats import pitman_morgan

    rng, reps, n = np.random.default_rng(0), 2000, 6
    pm = ft = 0
    for _ in range(reps):
        common = rng.normal(0, 1, n)
        x, y = common + rng.normal(0, 0.3, n), common + rng.normal(0, 0.3, n)
        pm += pitman_morgan(x, y)[1] < 0.05
        f = float(np.var(x, ddof=1) / np.var(y, ddof=1))
        ft += 2 * min(f_dist.cdf(f, n - 1, n - 1), f_dist.sf(f, n - 1, n - 1)) < 0.05
    assert abs(pm / reps - 0.05) < 0.015 and ft / reps < 0.005
    # and it sees a 30% cut in the sd of correlated pairs that the F test misses
    common = rng.normal(0, 1, (reps, n))
    power = np.mean(
        [
            pitman_morgan(c * 0.7 + rng.normal(0, 0.1, n), c + rng.normal(0, 0.1, n))[1] < 0.05
            for c in common
        ]
    )
    assert power > 0.8
