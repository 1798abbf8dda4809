"""benchmarks/contrasts.py: the contrasts' words on simulated studies with settings."""

from __future__ import annotations

import math

import numpy as np
from bench_module import load


def _bench():
    return load("contrasts")


def test_a_drawn_study_has_every_schedule_at_every_lr_and_seed() -> None:
    bench = _bench()
    t = bench.draw(np.random.default_rng(0), -1.0, uniform_sd=(1.0, 1.0, 1.0, 3.0))
    assert len(t) == (len(bench.R_STARTS) + 1) * len(bench.LRS) * 3
    assert t.groupby("setting")["schedule"].nunique().eq(len(bench.R_STARTS) + 1).all()
    assert (t.loc[~t["is_baseline"], "taper"] > 0).all()


def test_a_huge_effect_is_better_everywhere_and_judged_right() -> None:
    bench = _bench()
    noise = math.sqrt(2.0) * 0.005
    t = bench.draw(np.random.default_rng(1), -30.0)
    c = bench.judge(t, -30.0 * noise, bench.MARGIN * noise)
    assert c["family_better"] == 1 and c["cell_separated"] == 1
    assert c["false_direction"] == 0 and c["false_equivalent"] == 0


def test_the_table_names_each_goal() -> None:
    bench = _bench()
    res = bench.run(reps=2, which=["power", "null"])
    text = bench.table(res)
    assert "| power |" in text and "| null |" in text
    assert all(
        0.0 <= r["rate"] <= 1.0 for k in res for r in res[k].values() if isinstance(r, dict)
    )
