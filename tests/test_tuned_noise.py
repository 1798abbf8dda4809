"""The tuned and shared-setting comparisons on the rows model the effects use, with the
pruner's survivors never measuring the noise (evidence/tuned.py, stats/across.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from fixtures_run import lr_cells_frame
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch import stats
from tlmsearch.evidence.tuned import tuned


def _frame(rows, unpruned=()) -> pd.DataFrame:
    """(schedule, lr, seed, value[, state]) tuples -> a trials table of (schedule, lr) cells."""
    t = lr_cells_frame(rows)
    if unpruned:
        t["unpruned"] = t["schedule"].isin(unpruned)
    return t


def _noisy_uniform(seed: int = 0, n_seeds: int = 6) -> pd.DataFrame:
    """Uniform and five schedules at two LRs, all equal; uniform's cells scatter 4x the others'
    (sd 0.02 vs 0.005) at every LR; lr 1 best for everyone by 0.1."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        level = rng.normal(0, 0.01)
        for lr in (1, 2):
            for sch in ("uniform", "a", "b", "c", "d", "e"):
                sd = 0.02 if sch == "uniform" else 0.005
                rows.append((sch, lr, s, 2.0 + level + 0.1 * (lr == 2) + rng.normal(0, sd)))
    return _frame(rows)


def test_the_tuned_and_shared_comparisons_use_uniforms_own_variance_as_the_effects_do():
    """A uniform 4x noisier: the effects judge every comparison on uniform's own variance;
    the tuned and shared-LR comparisons did on the pooled block fit (understated: 13-23% false
    claims in benchmarks/stats.py --tuned)."""
    t = _noisy_uniform()
    tu = tuned(t, "v", seeds=list(range(6)))
    assert tu.measure_seeds == (3, 4, 5)
    measured = t[t["seed"].isin(tu.measure_seeds) & (t["setting"] == "lr=1")]
    model = stats.row_noise(measured, "v")
    assert model.rows["uniform @ lr=1"].source == stats.row_variances.OWN
    for frame in (tu.effects, tu.shared):
        f = frame.set_index("schedule")
        for sch in ("a", "b", "c", "d", "e"):
            pair = model.pair(f"{sch} @ lr=1", "uniform @ lr=1")
            assert f.at[sch, "noise_sd"] == pytest.approx(pair.sd)
            assert f.at[sch, "noise_df"] == pair.df
            assert f.at[sch, "noise_from"] == "uniform"
    pooled = stats.block_noise(measured, "v")
    assert (tu.effects["noise_sd"] > 1.5 * pooled.sd).all()


def _pruned_none_unpruned(unpruned=()) -> pd.DataFrame:
    """Every schedule best at lr 1, where every cell completed; b pruned at lr 2 on seed 0."""
    rng = np.random.default_rng(4)
    rows = []
    for s in range(3):
        for lr in (1, 2):
            for sch in ("uniform", "a", "b", "c"):
                state = "PRUNED" if (sch, lr, s) == ("b", 2, 0) else "COMPLETE"
                rows.append((sch, lr, s, 2.0 + 0.1 * (lr == 2) + rng.normal(0, 0.005), state))
    return _frame(rows, unpruned)


def test_a_pruned_study_with_nothing_unpruned_does_not_measure_the_noise_on_the_survivors():
    """With nothing unpruned the rows the pruner could stop (every candidate) leave uniform alone:
    the noise is unknown, in the tuned and the shared-LR comparisons alike. The chosen cells
    (all at lr 1) all survived, and were once the fit the noise came from."""
    tu = tuned(_pruned_none_unpruned(), "v")
    assert set(tu.best["setting"]) == {"lr=1"}
    for frame in (tu.effects, tu.shared):
        assert set(frame["noise"]) == {stats.UNKNOWN}
        assert frame["separated"].isna().all()
    rows = tu.as_dict()["schedules"]
    assert all(r.get("separated_from_uniform") is None for r in rows if "delta_vs_uniform" in r)


def test_a_pruned_study_measures_the_tuned_noise_on_the_unpruned_rows():
    t = _pruned_none_unpruned(unpruned=("a",))
    tu = tuned(t, "v")
    at = t[t["setting"] == "lr=1"]
    model = stats.row_noise(at, "v", pruned=True)
    assert model.pooled.df == 2  # uniform and a on 3 seeds: (2 - 1) x (3 - 1)
    f = tu.effects.set_index("schedule")
    assert set(tu.effects["noise"]) == {stats.MODEL}
    assert f.at["c", "noise_sd"] == pytest.approx(model.pair("c @ lr=1", "uniform @ lr=1").sd)


def test_effects_pass_the_whole_studys_pruned_flag_to_their_default_model():
    """A table of survivors alone (nothing pruned in it) is still a pruned study's."""
    t = _pruned_none_unpruned()
    survivors = t[(t["setting"] == "lr=1")]
    assert stats.effects(survivors, "v")["noise"].eq(stats.MODEL).all()
    assert stats.effects(survivors, "v", pruned=True)["noise"].eq(stats.UNKNOWN).all()


def test_across_settings_the_noise_adds_each_rows_own_variance():
    """A schedule whose best LR is not uniform's: uniform's own variance (its setting's
    model) plus the schedule's row plus the seed-by-LR interaction."""
    rng = np.random.default_rng(7)
    rows = []
    for s in range(8):
        for lr in (1, 2):
            g = rng.normal(0, 0.01)
            for sch in ("uniform", "a", "b", "c"):
                sd = 0.03 if sch == "uniform" else 0.005
                best = 1 if sch != "a" else 2
                rows.append((sch, lr, s, 2.0 + g - 0.05 * (lr == best) + rng.normal(0, sd)))
    t = _frame(rows)
    tu = tuned(t, "v", seeds=list(range(8)))
    f = tu.effects.set_index("schedule")
    assert tu.best.set_index("schedule").at["a", "setting"] == "lr=2"
    measured = t[t["seed"].isin(tu.measure_seeds)]
    m1 = stats.row_noise(measured[measured["setting"] == "lr=1"], "v")
    m2 = stats.row_noise(measured[measured["setting"] == "lr=2"], "v")
    parts = stats.noise_interaction(measured, "v")
    n, src, _ = stats.across_pair("a @ lr=2", m2, "uniform @ lr=1", m1, parts)
    assert src == "uniform @ lr=1" and f.at["a", "noise_from"] == "uniform"
    assert f.at["a", "noise_sd"] == pytest.approx(n.sd) and f.at["a", "noise_df"] == n.df
    assert n.sd**2 >= m1.rows["uniform @ lr=1"].var + m2.pooled.sd**2 / 2 - 1e-15
    assert n.sd > stats.setting_noise(measured, "v").sd  # the pooled one understated it


@settings(max_examples=60, deadline=None)
@given(
    var_e=st.floats(1e-4, 1.0),
    ms_ratio=st.floats(0.0, 20.0),
    c=st.floats(1.01, 12.0),
    df_in=st.integers(1, 60),
    df_x=st.integers(1, 30),
)
def test_across_pair_on_the_pool_is_setting_noise(var_e, ms_ratio, c, df_in, df_x):
    """Both rows on their setting's pool (each sigma_e^2): var 2 sigma_e^2 + (2 / c) (MS_x -
    sigma_e^2), never below 2 sigma_e^2 (stats.setting_noise's formula)."""
    pool = stats.Noise(math.sqrt(2.0 * var_e), df_in)
    ms_x = ms_ratio * var_e
    n, src, share = stats.across_pair("a", pool, "u", pool, (var_e, df_in, ms_x, df_x, c))
    want = max(2.0 * var_e, 2.0 * (1.0 - 1.0 / c) * var_e + 2.0 / c * ms_x)
    assert n.sd**2 == pytest.approx(want, rel=1e-9)
    assert src == "pooled" and 0.0 < share <= 0.5 + 1e-12 and n.df >= 1


def _worse_at_uniforms_best(n_seeds: int, seed: int = 0) -> pd.DataFrame:
    """Uniform and three schedules, all equal, at 4 LRs; uniform's noise makes its best LR the
    one where its seeds happened to land low."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        for lr in (1, 2, 4, 8):
            for sch in ("uniform", "a", "b", "c"):
                v = 2.0 + rng.normal(0, 0.01)
                if sch == "uniform" and lr == 2:
                    v -= 0.05  # uniform's best LR, luckily low on these very seeds
                rows.append((sch, lr, s, v))
    return _frame(rows)


def test_below_four_seeds_the_shared_setting_comparison_is_shown_but_not_judged():
    """Uniform's best LR chosen on the seeds that measure the effect leans every schedule's
    effect there toward "loses to uniform": its numbers stay, its decision is None."""
    tu = tuned(_worse_at_uniforms_best(3), "v")
    assert tu.selection == "same seeds" and tu.shared_setting == {"": "lr=2"}
    assert (tu.shared["mean_delta"] > 0.03).all()  # every schedule looks worse there
    assert tu.shared["p"].notna().all() and tu.shared["separated"].isna().all()
    for r in tu.as_dict()["schedules"]:
        if "at_shared_setting" in r:
            at = r["at_shared_setting"]
            assert at["separated_from_uniform"] is None and "not judged" in at["note"]
            assert at["delta_vs_uniform"] > 0.03
    held = tuned(_worse_at_uniforms_best(4), "v")  # held out: judged
    assert held.selection == "held-out seeds" and held.shared["separated"].notna().all()


def test_a_survivor_of_the_pruner_is_never_called_separated_in_the_tuned_comparison():
    """In a pruned study a schedule the pruner could have stopped, compared at a cell it let
    run, survived by looking good: conditional on surviving, never separated (a null benchmark
    with 2 unpruned called 15-25% of studies separated; benchmarks/stats.py --tuned)."""
    rng = np.random.default_rng(2)
    rows = []
    for s in range(6):
        for lr in (1, 2):
            for sch in ("uniform", "a", "b", "c"):
                v = 2.0 + rng.normal(0, 0.002) - 0.05 * (sch == "c")  # c: far better
                state = "PRUNED" if (sch, lr) == ("b", 2) and s == 0 else "COMPLETE"
                rows.append((sch, lr, s, v, state))
    t = _frame(rows, unpruned=("a",))
    tu = tuned(t, "v", seeds=list(range(6)))
    eff = tu.effects.set_index("schedule")
    assert eff.at["c", "conditional"] and eff.at["b", "conditional"]
    assert not eff.at["a", "conditional"]  # unpruned: the pruner could not stop it
    assert eff.at["c", "mean_delta"] < -0.04 and pd.isna(eff.at["c", "separated"])
    row = {r["schedule"]: r for r in tu.as_dict()["schedules"]}["c"]
    assert row["separated_from_uniform"] is None
    assert row["conditional_on_surviving_the_pruner"] is True
    unpruned = tuned(t.assign(state="COMPLETE"), "v", seeds=list(range(6)))
    assert bool(unpruned.effects.set_index("schedule").at["c", "separated"])
