"""benchmarks/fidelity.py: simulated ladders through fidelity.agreement and trust_line (~2 s)."""

from __future__ import annotations

import numpy as np
from bench_module import load


def _bench():
    return load("fidelity")


def test_a_ladder_shares_its_seeds_noise_between_the_rungs() -> None:
    bench = _bench()
    lo, hi, t = bench.ladder("same", 6, 4, 0.8, 2.0, np.random.default_rng(0))
    assert lo.shape == hi.shape == (6, 4) and not lo[0].any() and not hi[0].any()
    assert np.array_equal(t[0], t[1]) and t[0, 0] == 0.0  # the same truth, uniform at 0
    lo, hi, t = bench.ladder("none", 6, 4, 0.8, 2.0, np.random.default_rng(0))
    assert not t.any()


def test_the_benchmark_reports_rates_for_old_and_new_rules() -> None:
    bench = _bench()
    rows = bench.run(
        reps=8,
        resamples=20,
        scenarios=[("none", "none", 5, 5, 0.95, 0.0), ("same", "same", 5, 5, 0.0, 3.0)],
    )
    assert [r["null"] for r in rows] == [True, False]
    for r in rows:
        for rule in ("old", "new", "plugin"):
            assert 0.0 <= r[rule]["rate"] <= 1.0 and r[rule]["n"] == 8
    assert rows[0]["coverage"] is None and rows[1]["coverage"]["n"] == 8
    text = bench.table(rows)
    assert text.splitlines()[0].startswith("scenario") and len(text.splitlines()) == 3
