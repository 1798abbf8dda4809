"""tlmsearch.stats on small frames with hand-computed answers, plus invariants (hypothesis)."""

from __future__ import annotations

import gc
import math
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch import stats
from tlmsearch.stats import maxt

T975_2DF = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2); tables round it to 4.303


def frame(rows: list[tuple]) -> pd.DataFrame:
    """(candidate, seed, state, value) rows; the candidate "uniform" is the baseline."""
    df = pd.DataFrame(rows, columns=["candidate", "seed", "state", "v"])
    df["is_baseline"] = df["candidate"] == "uniform"
    return df


def by_cand(df: pd.DataFrame) -> pd.DataFrame:
    return df.set_index("candidate")


# -------------------------------------------------------------------------------------------------
# quantiles and intervals


def test_t_quantiles_match_the_tables():
    assert stats.t_quantile(1) == pytest.approx(12.706, abs=5e-4)
    assert stats.t_quantile(2) == pytest.approx(4.303, abs=5e-4)
    assert stats.t_quantile(30) == pytest.approx(2.042, abs=5e-4)
    assert stats.t_quantile(31) == pytest.approx(2.040, abs=5e-4)  # not yet 1.96
    assert stats.t_quantile(1, level=0.90) == pytest.approx(6.314, abs=5e-4)
    assert stats.t_quantile(10**6) == pytest.approx(1.960, abs=5e-4)
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.t_quantile(0)


def test_mean_interval_known_answers():
    iv = stats.mean_interval([1.0, 2.0, 3.0])
    assert (iv.n, iv.mean, iv.sd) == (3, 2.0, 1.0)
    assert iv.half_width == pytest.approx(T975_2DF / math.sqrt(3))
    assert (iv.lo, iv.hi) == pytest.approx((2.0 - iv.half_width, 2.0 + iv.half_width))
    one = stats.mean_interval([5.0, float("nan")])  # NaN is not a measurement
    assert one.n == 1 and one.mean == 5.0 and math.isnan(one.sd) and math.isnan(one.lo)
    assert stats.mean_interval([]).n == 0


_ONE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.integers(-(2**53), 2**53),
    st.floats(width=32).map(np.float32),
    st.floats().map(np.float64),
)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(_ONE, max_size=1), as_tuple=st.booleans())
def test_mean_interval_of_one_value_or_none_is_the_arrays(values, as_tuple):
    """A list or tuple of at most one value (most candidates: one seed) skips numpy: the same
    interval to the bit (None as NaN, never -0.0), as plain floats."""
    given_ = tuple(values) if as_tuple else values
    fast = stats.mean_interval(given_)
    full = stats.mean_interval(np.array(values, dtype="float64"))
    assert fast.n == full.n and all(type(x) is float for x in fast[1:])
    assert [repr(x) for x in fast] == [repr(x) for x in full]


# -------------------------------------------------------------------------------------------------
# paired deltas


def test_paired_deltas_against_the_same_seed_baseline():
    t = frame(
        [
            ("uniform", 0, "COMPLETE", 2.0),
            ("uniform", 0, "COMPLETE", 2.2),  # two baselines on a seed: their mean, 2.1
            ("uniform", 1, "PRUNED", 2.5),  # no finished baseline on seed 1
            ("A", 0, "COMPLETE", 1.9),
            ("A", 1, "COMPLETE", 1.8),
            ("A", 2, "COMPLETE", 1.7),  # no baseline trial on seed 2 at all
            ("B", 0, "PRUNED", 1.0),  # a pruned value is partial: never a delta
            ("B", None, "COMPLETE", 1.0),  # unknown seed: never paired
        ]
    )
    d = stats.paired_deltas(t, "v")
    got = {(c, s): x for c, s, x in zip(d["candidate"], d["seed"], d["delta"], strict=True)}
    assert got == {("A", 0): pytest.approx(-0.2), ("uniform", 0): 0.0}
    assert stats.baseline_by_seed(t, "v").to_dict() == {0: pytest.approx(2.1)}


def test_seed_outcomes_complete_censored_pending():
    t = frame(
        [
            ("A", 0, "COMPLETE", 1.0),
            ("A", 1, "PRUNED", 3.0),
            ("A", 2, "FAIL", float("nan")),
            ("A", 3, "RUNNING", 2.0),
            ("A", 4, "COMPLETE", float("nan")),  # finished without a value: censored
            ("A", 5, "COMPLETE", 1.0),
            ("A", 5, "PRUNED", 9.0),  # a complete trial on the seed wins
        ]
    )
    so = stats.seed_outcomes(t, "v").set_index("seed")
    assert so["outcome"].to_dict() == {
        0: "complete",
        1: "censored",
        2: "censored",  # a failure of its own (not the system's): it would fail again
        3: "pending",
        4: "censored",
        5: "complete",
    }
    assert so.loc[5, "value"] == 1.0 and math.isnan(so.loc[1, "value"])
    assert so.loc[1, "states"] == "PRUNED" and so.loc[5, "states"] == "COMPLETE,PRUNED"
    # a seed the system lost (a dead worker, memory) says nothing of the candidate: missing, as
    # in the race; a diverged one or an exception is its own: censored
    t["reason"] = ""
    t.loc[t["seed"] == 2, "reason"] = "diverged: loss nan at 4,096 tokens"
    assert stats.seed_outcomes(t, "v").set_index("seed").loc[2, "outcome"] == "censored"
    t.loc[t["seed"] == 2, "reason"] = "worker died (pid 41213)"
    assert stats.seed_outcomes(t, "v").set_index("seed").loc[2, "outcome"] == "missing"
    r = stats.rank(t.assign(is_baseline=False), "v").iloc[0]
    assert r["n_missing"] == 1 and "1 lost to the system" not in r["flag"]  # censored first


# -------------------------------------------------------------------------------------------------
# summary


def _deltas_frame(deltas: dict[str, list[float]]) -> pd.DataFrame:
    rows = [("uniform", s, "COMPLETE", 10.0 + s) for s in range(3)]
    for cand, ds in deltas.items():
        rows += [(cand, s, "COMPLETE", 10.0 + s + d) for s, d in enumerate(ds)]
    return frame(rows)


def test_summary_mean_delta_interval_and_noise():
    t = _deltas_frame({"A": [-0.1, -0.2, -0.3], "B": [-0.1, -0.11, -0.09]})
    s = by_cand(stats.summarise(t, "v"))
    a = s.loc["A"]
    assert a["n"] == a["k"] == a["n_paired"] == 3 and not a["censored"]
    assert a["n_of_k"] == "3 of 3 seeds" and a["seeds"] == (0, 1, 2)
    assert a["mean"] == pytest.approx(10.8) and a["sd"] == pytest.approx(0.9)
    assert a["mean_delta"] == pytest.approx(-0.2) and a["sd_delta"] == pytest.approx(0.1)
    half = T975_2DF * 0.1 / math.sqrt(3)  # 0.2484: the interval (-0.448, 0.048) contains 0
    assert a["half_width"] == pytest.approx(half)
    assert (a["lo"], a["hi"]) == pytest.approx((-0.2 - half, -0.2 + half))
    assert a["effect_noise"] == pytest.approx(-2.0)
    assert bool(a["within_noise"]) is True
    b = s.loc["B"]  # sd 0.01, half-width 0.0248: clearly below 0
    assert b["mean_delta"] == pytest.approx(-0.1) and bool(b["within_noise"]) is False
    assert b["effect_noise"] == pytest.approx(-10.0)
    u = s.loc["uniform"]
    assert u["is_baseline"] and u["mean_delta"] == 0.0 and u["sd_delta"] == 0.0


def test_summary_single_seed_has_no_interval():
    s = by_cand(stats.summarise(_deltas_frame({"A": [0.3]}), "v"))
    a = s.loc["A"]
    assert a["n_of_k"] == "1 of 3 seeds" and a["mean_delta"] == pytest.approx(0.3)
    assert math.isnan(a["half_width"]) and math.isnan(a["effect_noise"])
    assert pd.isna(a["within_noise"])


def test_summary_of_an_empty_frame():
    t = frame([])
    assert stats.summarise(t, "v").empty and stats.rank(t, "v").empty
    assert stats.paired_deltas(t, "v").empty


# -------------------------------------------------------------------------------------------------
# ranking and censoring


def pruned_good_seed() -> pd.DataFrame:
    """A: pruned (bad) on seed 1, good on seed 0. B: middling on both seeds."""
    return frame(
        [
            ("uniform", 0, "COMPLETE", 2.00),
            ("uniform", 1, "COMPLETE", 2.20),
            ("A", 0, "COMPLETE", 1.70),
            ("A", 1, "PRUNED", 2.60),
            ("B", 0, "COMPLETE", 1.90),
            ("B", 1, "COMPLETE", 2.10),
        ]
    )


def test_a_censored_candidate_never_outranks_a_fully_measured_one():
    r = stats.rank(pruned_good_seed(), "v")
    assert r["candidate"].tolist() == ["B", "uniform", "A"]
    assert r["rank"].tolist() == [1, 2, 3]
    a = by_cand(r).loc["A"]
    assert a["censored"] and a["tier"] == 2 and stats.tier_name(a["tier"]) == "censored"
    assert a["n_of_k"] == "1 of 2 seeds" and a["censored_seeds"] == (1,)
    assert a["flag"] == "censored: 1 of 2 seeds (pruned on seed 1)"
    assert a["ranked_seeds"] == (0,) and a["score"] == pytest.approx(1.70)
    # It does look better than the best on the seed both completed; that is said, not hidden.
    assert a["delta_best"] == pytest.approx(-0.20) and a["n_best"] == 1
    assert bool(a["better_than_best"])
    b = by_cand(r).loc["B"]
    assert b["flag"] == "" and b["ranked_seeds"] == (0, 1) and b["score"] == pytest.approx(2.0)
    assert b["mean_delta"] == pytest.approx(-0.1) and b["delta_best"] == 0.0
    assert not bool(b["better_than_best"])


def test_failed_running_and_unmeasured_tiers():
    t = frame(
        [
            ("uniform", 0, "COMPLETE", 2.0),
            ("uniform", 1, "COMPLETE", 2.0),
            ("F", 0, "COMPLETE", 1.0),
            ("F", 1, "FAIL", float("nan")),
            ("R", 0, "COMPLETE", 1.5),
            ("R", 1, "RUNNING", 1.9),
            ("N", 0, "PRUNED", 3.0),
            ("N", 1, "PRUNED", 3.0),
        ]
    )
    t["reason"] = ["", "", "", "diverged: loss inf", "", "", "", ""]
    r = stats.rank(t, "v")
    assert r["candidate"].tolist() == ["uniform", "R", "F", "N"]
    assert r["tier"].tolist() == [0, 1, 2, 3]
    assert r["rank"].tolist()[:3] == [1, 2, 3] and pd.isna(r["rank"].iloc[3])
    flags = dict(zip(r["candidate"], r["flag"], strict=True))
    assert flags["R"] == "1 of 2 seeds (1 running or not run yet)"
    assert flags["F"] == "censored: 1 of 2 seeds (fail on seed 1)"
    assert flags["N"] == "no seed completed (0 of 2; PRUNED)"
    assert not by_cand(r).loc["R", "censored"]  # running is pending, not censored


def test_a_candidate_with_seeds_still_to_run_is_not_fully_measured():
    # Seed 1 of B has not run (queued). A's mean over both seeds (1.5) is flattered by an easy
    # seed 1; on seed 0, the only seed both completed, B is better. A ranks first as the only
    # fully measured candidate; B is flagged and said to look better on seed 0.
    t = frame([("A", 0, "COMPLETE", 2.0), ("A", 1, "COMPLETE", 1.0), ("B", 0, "COMPLETE", 1.8)])
    r = by_cand(stats.rank(t, "v"))
    assert r.index.tolist() == ["A", "B"] and r["tier"].tolist() == [0, 1]
    assert r.loc["A", "flag"] == "" and r.loc["A", "ranked_seeds"] == (0, 1)
    assert r.loc["A", "score"] == r.loc["A", "mean"] == 1.5
    b = r.loc["B"]
    assert b["n_of_k"] == "1 of 2 seeds" and b["n_pending"] == 1 and not b["censored"]
    assert b["flag"] == "1 of 2 seeds (1 running or not run yet)"
    assert b["ranked_seeds"] == (0,) and b["score"] == 1.8
    assert b["delta_best"] == pytest.approx(-0.2) and b["n_best"] == 1
    assert bool(b["better_than_best"])
    so = stats.seed_outcomes(t, "v").set_index(["candidate", "seed"])
    assert so.loc[("B", 1), "outcome"] == "pending" and so.loc[("B", 1), "states"] == ""


def test_the_study_seeds_decide_what_fully_measured_means():
    # Seed 2 of the study has not started for anyone: nobody is fully measured yet, and the
    # candidates are compared on the seeds they all completed.
    t = frame(
        [
            ("A", 0, "COMPLETE", 2.0),
            ("A", 1, "COMPLETE", 1.0),
            ("B", 0, "COMPLETE", 1.8),
            ("B", 1, "COMPLETE", 1.3),
            ("C", 0, "COMPLETE", 1.0),
            ("C", 1, "PRUNED", 3.0),
        ]
    )
    r = by_cand(stats.rank(t, "v", seeds=[0, 1, 2]))
    assert r.index.tolist() == ["A", "B", "C"] and r["tier"].tolist() == [1, 1, 2]
    assert r.loc["A", "n_of_k"] == "2 of 3 seeds" and r.loc["A", "ranked_seeds"] == (0, 1)
    assert r.loc["C", "ranked_seeds"] == (0,) and r.loc["C", "n_of_k"] == "1 of 3 seeds"
    assert stats.rank(t, "v")["tier"].tolist() == [0, 0, 2]  # by default: the seeds that ran


def test_no_common_seed_is_flagged():
    t = frame([("A", 0, "COMPLETE", 2.0), ("B", 1, "COMPLETE", 1.0)])
    r = stats.rank(t, "v")
    assert r["candidate"].tolist() == ["B", "A"] and (r["tier"] == 1).all()
    assert (
        r["flag"]
        .str.endswith("no seed common to the compared candidates: ranked on its own seeds")
        .all()
    )
    assert r["n_best"].tolist() == [1, 0] and math.isnan(r["delta_best"].iloc[1])


def test_maximize_reverses_the_order_within_a_tier_only():
    r = stats.rank(pruned_good_seed(), "v", sense="maximize")
    assert r["candidate"].tolist() == ["uniform", "B", "A"]
    assert not r["better_than_best"].any()  # A's 1.70 is worse than uniform's 2.00 here
    with pytest.raises(ValueError, match="sense"):
        stats.rank(pruned_good_seed(), "v", sense="up")


# -------------------------------------------------------------------------------------------------
# invariants

STATES = ["COMPLETE"] * 4 + ["PRUNED", "FAIL", "RUNNING"]
cells = st.lists(
    st.tuples(
        st.sampled_from(["uniform", "A", "B", "C"]),
        st.integers(0, 3),
        st.sampled_from(STATES),
        st.integers(0, 1000),
    ),
    min_size=1,
    max_size=24,
    unique_by=lambda x: (x[0], x[1]),  # one trial per (candidate, seed), as a search runs them
)


def _frame_from(cells_: list[tuple]) -> pd.DataFrame:
    # distinct values (i / 7 + small integer part) keep ties out of the order checks
    return frame([(c, s, state, v / 7.0 + i * 1e-6) for i, (c, s, state, v) in enumerate(cells_)])


@settings(max_examples=80, deadline=None)
@given(cells, st.randoms(use_true_random=False), st.sampled_from(["minimize", "maximize"]))
def test_row_order_never_changes_the_ranking(cells_, rnd, sense):
    t = _frame_from(cells_)
    perm = list(range(len(t)))
    rnd.shuffle(perm)
    a = stats.rank(t, "v", sense)
    b = stats.rank(t.iloc[perm].reset_index(drop=True), "v", sense)
    cols = ["candidate", "rank", "tier", "n_of_k", "ranked_seeds", "flag"]
    assert a[cols].astype(str).values.tolist() == b[cols].astype(str).values.tolist()
    np.testing.assert_allclose(a["score"], b["score"])
    np.testing.assert_allclose(a["mean_delta"], b["mean_delta"])


@settings(max_examples=80, deadline=None)
@given(cells)
def test_mean_paired_delta_is_a_difference_of_means_over_the_paired_seeds(cells_):
    t = _frame_from(cells_)
    s = by_cand(stats.summarise(t, "v"))
    done = t[t["state"] == "COMPLETE"].set_index(["candidate", "seed"])["v"]
    base = {seed: v for (c, seed), v in done.items() if c == "uniform"}
    for cand, row in s.iterrows():
        mine = {seed: v for (c, seed), v in done.items() if c == cand}
        paired = sorted(set(mine) & set(base))
        assert row["n_paired"] == len(paired)
        assert row["n"] == len(mine) and row["k"] == t["seed"].nunique()  # every seed is planned
        if paired:
            expect = np.mean([mine[x] for x in paired]) - np.mean([base[x] for x in paired])
            assert row["mean_delta"] == pytest.approx(expect, abs=1e-9)
        else:
            assert math.isnan(row["mean_delta"])


@settings(max_examples=80, deadline=None)
@given(cells, st.lists(st.floats(-5, 5), min_size=4, max_size=4))
def test_tiers_come_first_and_a_seed_effect_changes_no_comparison(cells_, shift):
    """Adding a constant per seed (a harder or easier seed) moves no paired comparison."""
    t = _frame_from(cells_)
    r = stats.rank(t, "v")
    assert r["tier"].is_monotonic_increasing  # never a censored candidate above a complete one
    moved = t.assign(v=t["v"] + t["seed"].map(dict(enumerate(shift))))
    r2 = stats.rank(moved, "v")
    full = r[r["tier"] == 0]
    if (full["flag"] == "").all():  # compared on common seeds (else each on its own: flagged)
        names = full["candidate"].tolist()
        assert r2[r2["tier"] == 0]["candidate"].tolist() == names or _tied(r, names)
    a, b = by_cand(r)["mean_delta"], by_cand(r2)["mean_delta"]
    np.testing.assert_allclose(a, b.loc[a.index], atol=1e-9)


def _tied(r: pd.DataFrame, names: list[str]) -> bool:
    scores = r.set_index("candidate").loc[names, "score"].to_numpy()
    return bool(np.any(np.isclose(np.diff(np.sort(scores)), 0.0, atol=1e-6)))


# -------------------------------------------------------------------------------------------------
# effects in units of noise, pairwise differences

T975_4DF = 2.7764451051977987  # scipy.stats.t.ppf(0.975, 4)


_Noise = stats.Noise


def test_effects_known_answers_on_the_block_design_noise():
    # the pooled model (one block-design noise for every comparison) given explicitly: the
    # default is each comparison's own (stats.row_noise), tested below
    t = _deltas_frame({"A": [-0.1, -0.2, -0.3], "B": [-0.1, -0.11, -0.09], "C": [0.1, -0.1, 0.3]})
    noise = stats.block_noise(t, "v")  # 4 candidates x 3 seeds: (4 - 1)(3 - 1) = 6 df
    e = by_cand(stats.effects(t, "v", noise=noise))
    assert "uniform" not in e.index  # an effect vs uniform of uniform is nothing
    a = e.loc["A"]
    assert (a["n"], a["seeds"], a["n_better"]) == (3, (0, 1, 2), 3)
    assert (a["noise"], a["noise_df"], noise.df) == ("model", 6, 6)
    assert a["noise_from"] == "pooled"
    assert a["mean_delta"] == pytest.approx(-0.2) and a["sd_delta"] == pytest.approx(0.1)
    assert a["noise_sd"] == pytest.approx(noise.sd)
    # the interval holds over the family of 3 at the comparisons' joint t critical value
    # (every row pooled: each shares half its variance with uniform), which lies
    # between one comparison's and Bonferroni's
    assert a["noise_shared"] == 0.5
    crit = maxt.joint_critical([0.5] * 3, 6, 0.95)
    assert stats.t_quantile(6, 0.95) < crit < stats.t_quantile(6, 1 - 0.05 / 3)
    assert a["ci_level"] == pytest.approx(1 - 2 * stats.t_sf(crit, 6))
    half = crit * noise.sd / math.sqrt(3)
    assert a["half_width"] == pytest.approx(half)
    assert (a["lo"], a["hi"]) == pytest.approx((-0.2 - half, -0.2 + half))
    assert (a["family"], a["family_size"]) == ("holm", 3)
    p = 2 * stats.t_sf(0.2 / (noise.sd / math.sqrt(3)), 6)
    assert a["p"] == pytest.approx(p)
    # the step-down's first step is the joint tail of all 3; no adjusted p-value exceeds
    # Holm's (Bonferroni's bound on each step)
    first = e["p"].idxmin()
    t_first = abs(e.loc[first, "mean_delta"]) / (noise.sd / math.sqrt(3))
    assert e.loc[first, "p_adj"] == pytest.approx(maxt.joint_sf(t_first, [0.5] * 3, 6))
    holm = pd.Series(stats.adjust(list(e["p"]), "holm"), index=e.index)
    assert (e["p_adj"] <= holm + 1e-9).all() and (e["p_adj"] >= e["p"] - 1e-9).all()
    assert bool(a["separated"]) == bool(a["p_adj"] < 0.05)
    assert e.loc["C", "n_better"] == 1  # better than uniform on seed 1 only


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 8), st.sampled_from(["holm", "bh", "none"]))
def test_the_interval_holds_over_the_family_the_decision_does(seed, m, family):
    # lo/hi are simultaneous under holm (the joint t critical value of the family:
    # between one comparison's level and Bonferroni's; an interval that excludes 0 is always
    # separated), Benjamini-Yekutieli's false-coverage interval under bh (every separated
    # row's excludes 0), per comparison under none
    rng = np.random.default_rng(seed)
    effect = rng.choice([0.0, 0.0, 0.02, -0.05], size=m)
    deltas = {f"c{i}": list(effect[i] + rng.normal(0, 0.01, 3)) for i in range(m)}
    e = stats.effects(_deltas_frame(deltas), "v", family=family)
    e = e[e["noise_df"] >= 1]
    excludes = (e["lo"] > 0) | (e["hi"] < 0)
    if family == "holm":
        bonferroni = stats.ci_level(family, 0.95, len(e))
        assert ((e["ci_level"] > 0.95) & (e["ci_level"] <= bonferroni + 1e-9)).all()
        assert not (excludes & ~e["separated"].astype(bool)).any()
        conf = e["ci_level"].tolist()
    elif family == "bh":
        conf = [stats.ci_level(family, 0.95, len(e), int(e["separated"].fillna(False).sum()))]
        assert (e["ci_level"] == conf[0]).all()
        assert not (e["separated"].astype(bool) & ~excludes).any()
    else:
        assert (excludes == (e["p"] < 0.05)).all() and (e["ci_level"] == 0.95).all()
        conf = [0.95]
    conf = conf * len(e) if len(conf) == 1 else conf
    half = [
        stats.t_quantile(int(df), c) * sd / math.sqrt(n)
        for df, sd, n, c in zip(e["noise_df"], e["noise_sd"], e["n"], conf, strict=True)
    ]
    assert list(e["half_width"]) == pytest.approx(half)


def test_effects_on_one_seed_use_the_given_noise_or_none():
    t = _deltas_frame({"A": [-0.3], "B": [-0.05]})
    e = by_cand(stats.effects(t, "v", noise=_Noise(0.05, 4), family="none"))
    a = e.loc["A"]
    assert (a["n"], a["noise"], a["noise_df"]) == (1, "model", 4)
    assert math.isnan(a["sd_delta"]) and a["noise_sd"] == 0.05  # its own sd: none
    assert a["half_width"] == pytest.approx(T975_4DF * 0.05)  # 0.139: -0.3 is separated
    assert a["effect_noise"] == pytest.approx(-6.0) and bool(a["separated"]) is True
    assert bool(e.loc["B", "separated"]) is False  # -0.05 +- 0.139 contains 0
    # one seed: the design has no residual df (and the racing prior, df 0, is no measurement)
    for noise in (None, _Noise(0.05, 0)):
        u = by_cand(stats.effects(t, "v", noise=noise)).loc["A"]
        assert u["noise"] == "unknown" and u["noise_df"] == 0 and pd.isna(u["separated"])
        assert math.isnan(u["half_width"]) and math.isnan(u["effect_noise"])
        assert u["mean_delta"] == pytest.approx(-0.3)


def test_effects_maximize_unpaired_and_censored():
    t = frame(
        [
            ("uniform", 0, "COMPLETE", 2.0),
            ("uniform", 1, "COMPLETE", 2.2),
            ("A", 0, "COMPLETE", 2.1),
            ("A", 1, "PRUNED", 1.0),
            ("N", 0, "FAIL", float("nan")),
        ]
    )
    e = by_cand(stats.effects(t, "v", "maximize"))
    a = e.loc["A"]
    assert a["n_better"] == 1 and a["censored"] and a["censored_seeds"] == (1,)
    assert a["censored_states"] == "PRUNED" and a["noise"] == "unknown"
    n = e.loc["N"]
    assert n["n"] == 0 and n["seeds"] == () and math.isnan(n["mean_delta"])
    assert n["noise"] == "unknown"
    with pytest.raises(ValueError, match="sense"):
        stats.effects(t, "v", "down")
    assert stats.effects(frame([]), "v").empty


def test_pairwise_known_answers_mirror_and_common_seeds():
    t = frame(
        [
            ("uniform", 0, "COMPLETE", 2.0),
            ("uniform", 1, "COMPLETE", 2.2),
            ("uniform", 2, "COMPLETE", 2.1),
            ("a", 0, "COMPLETE", 1.5),
            ("a", 1, "COMPLETE", 1.8),
            ("a", 2, "COMPLETE", 1.5),
            ("b", 0, "COMPLETE", 2.0),
            ("b", 1, "COMPLETE", 2.2),
            ("b", 2, "PRUNED", 1.0),  # pruned: not a common seed
        ]
    )
    noise = _Noise(0.1, 4)
    p = stats.pairwise(t, "v", ["a", "b", "uniform"], noise=noise).set_index(["a", "b"])
    assert len(p) == 6  # every ordered pair
    ab = p.loc[("a", "b")]  # a - b on seeds 0, 1: -0.5, -0.4
    assert (ab["n"], ab["seeds"], ab["n_better"], ab["noise"]) == (2, (0, 1), 2, "model")
    assert ab["mean"] == pytest.approx(-0.45) and ab["sd"] == pytest.approx(math.sqrt(0.005))
    half = T975_4DF * 0.1 / math.sqrt(2)
    assert ab["half_width"] == pytest.approx(half)
    ba = p.loc[("b", "a")]
    assert ba["mean"] == pytest.approx(0.45) and ba["half_width"] == pytest.approx(half)
    assert ba["n_better"] == 0 and ba["effect_noise"] == pytest.approx(-ab["effect_noise"])
    assert ab["p_adj"] == ba["p_adj"]  # one comparison, one decision
    # Holm over the 3 unordered pairs
    firsts = [p.loc[x, "p"] for x in [("a", "b"), ("a", "uniform"), ("b", "uniform")]]
    assert sorted(p["p_adj"].unique()) == pytest.approx(sorted(stats.adjust(firsts, "holm")))
    # a vs uniform is a's paired effect vs uniform: deltas -0.5, -0.4, -0.6
    au = p.loc[("a", "uniform")]  # per comparison, as the effects' interval without a family
    e = by_cand(stats.effects(t, "v", noise=noise, family="none")).loc["a"]
    assert au["mean"] == pytest.approx(-0.5) and au["n"] == 3
    assert (au["lo"], au["hi"]) == pytest.approx((e["lo"], e["hi"]))


def test_pairwise_one_common_seed_and_none():
    t = frame(
        [
            ("a", 0, "COMPLETE", 1.0),
            ("b", 0, "COMPLETE", 1.5),
            ("b", 1, "COMPLETE", 1.5),
            ("c", 1, "COMPLETE", 1.4),
        ]
    )
    p = stats.pairwise(t, "v", ["a", "b", "c", "ghost"], noise=_Noise(0.1, 4), family="none")
    p = p.set_index(["a", "b"])
    ab = p.loc[("a", "b")]
    assert (ab["n"], ab["noise"], ab["noise_df"]) == (1, "model", 4)
    assert ab["half_width"] == pytest.approx(T975_4DF * 0.1) and bool(ab["separated"]) is True
    ac = p.loc[("a", "c")]  # no seed in common
    assert ac["n"] == 0 and ac["noise"] == "unknown" and pd.isna(ac["separated"])
    assert p.loc[("ghost", "a"), "n"] == 0  # a name with no trials: nothing to compare


@settings(max_examples=60, deadline=None)
@given(cells, st.lists(st.floats(-5, 5), min_size=4, max_size=4))
def test_pairwise_is_antisymmetric_and_blind_to_a_seed_effect(cells_, shift):
    t = _frame_from(cells_)
    names = sorted(set(t["candidate"]))
    p = stats.pairwise(t, "v", names).set_index(["a", "b"])
    moved = t.assign(v=t["v"] + t["seed"].map(dict(enumerate(shift))))
    q = stats.pairwise(moved, "v", names).set_index(["a", "b"])
    for a in names:
        for b in names:
            if a == b:
                continue
            ab, ba = p.loc[(a, b)], p.loc[(b, a)]
            assert ab["n"] == ba["n"] and ab["n_better"] + ba["n_better"] <= ab["n"]
            if ab["n"]:
                assert ab["mean"] == pytest.approx(-ba["mean"], abs=1e-9)
                assert q.loc[(a, b), "mean"] == pytest.approx(ab["mean"], abs=1e-6)
            if ab["n"] >= 2:
                assert ab["half_width"] == pytest.approx(ba["half_width"], abs=1e-9, nan_ok=True)


# -------------------------------------------------------------------------------------------------
# the block-design fit and the family adjustments against statsmodels


def _hand_table() -> pd.DataFrame:
    """4 candidates x 3 seeds, one cell missing (a raced or pruned cell): an incomplete block."""
    rows = [
        ("uniform", 0, 2.00),
        ("uniform", 1, 2.11),
        ("uniform", 2, 1.93),
        ("a", 0, 1.97),
        ("a", 1, 2.05),
        ("a", 2, 1.92),
        ("b", 0, 2.02),
        ("b", 1, 2.16),
        ("c", 0, 1.99),
        ("c", 1, 2.08),
        ("c", 2, 1.96),
    ]
    return pd.DataFrame(rows, columns=["candidate", "seed", "v"])


def test_block_fit_equals_statsmodels_ols_with_candidate_and_seed_effects():
    smf = pytest.importorskip("statsmodels.formula.api")
    t = _hand_table()
    fit = smf.ols("v ~ C(candidate) + C(seed)", data=t).fit()
    rss, df = stats.block_fit(t["candidate"], t["seed"], t["v"])
    assert df == int(fit.df_resid) == 11 - 4 - 3 + 1
    assert rss == pytest.approx(float(fit.ssr), rel=1e-9)
    # a complete design: the contrast's standard error is the sd of one paired delta / sqrt(S)
    full = t[t["candidate"] != "b"]
    fit = smf.ols("v ~ C(candidate, Treatment('uniform')) + C(seed)", data=full).fit()
    frame_ = full.assign(state="COMPLETE", is_baseline=full["candidate"] == "uniform")
    noise = stats.block_noise(frame_, "v")
    se = fit.bse["C(candidate, Treatment('uniform'))[T.a]"]
    assert noise.sd / math.sqrt(3) == pytest.approx(float(se), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=12))
def test_holm_and_bh_equal_statsmodels(p_values):
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    for ours, theirs in (("holm", "holm"), ("bh", "fdr_bh")):
        # statsmodels' Holm runs gc.collect() every call: 0.1 s in a suite's heap, 20-30 s of
        # the suite for this test alone; the comparison needs no collection
        with mock.patch.object(gc, "collect", lambda *_: 0):
            expect = multitest.multipletests(p_values, method=theirs)[1]
        assert stats.adjust(p_values, ours) == pytest.approx(list(expect), rel=1e-9)
    assert stats.adjust(p_values, "none") == pytest.approx(p_values)


# -------------------------------------------------------------------------------------------------
# signal and noise (arXiv 2508.13144)


def test_relative_dispersion_is_the_widest_gap_over_the_mean() -> None:
    assert stats.relative_dispersion([1.0, 3.0]) == 1.0  # 2 / 2
    assert stats.relative_dispersion([2.0, math.nan, 2.5, 1.5]) == pytest.approx(0.5)
    assert math.isnan(stats.relative_dispersion([2.0]))
    assert math.isnan(stats.relative_dispersion([1.0, -1.0]))  # mean 0: nothing relative


def test_expected_range_of_normals_matches_tippetts_d2() -> None:
    assert stats.expected_range(2) == pytest.approx(2 / math.sqrt(math.pi), abs=1e-6)
    assert stats.expected_range(3) == pytest.approx(3 / math.sqrt(math.pi), abs=1e-6)
    assert stats.expected_range(5) == pytest.approx(2.3259, abs=1e-4)  # d2 tables
    assert stats.expected_range(1) == 0.0


def test_checkpoint_noise_pools_the_last_k_evals_around_a_line() -> None:
    rows = [("a", 100 * k, v) for k, v in enumerate([9.0, 7.0, 4.1, 2.9, 1.9, 1.1], 1)]
    rows += [("b", 100 * k, 10.0 - 0.01 * k) for k in range(1, 5)]  # an exact line: 0 noise
    rows += [("c", 100 * k, 5.0 + k % 2) for k in range(1, 4)]  # 3 evals: left out
    c = pd.DataFrame(rows[::-1], columns=["trial_id", "tokens", "v"])  # any row order
    n = stats.checkpoint_noise(c, "v")
    # a's last 4 evals: 5 - x +-0.1 (SSE 0.04), b's: SSE 0; 2 df each
    assert (n.n_trials, n.k) == (2, 4) and n.sd == pytest.approx(math.sqrt(0.04 / 4))
    b_ss = sum((0.01 * (k - 2.5)) ** 2 for k in range(1, 5))  # b around its mean
    assert n.sd_raw == pytest.approx(math.sqrt((5.04 + b_ss) / 6))
    assert n.mean == pytest.approx((2.5 * 4 + (10.0 - 0.025) * 4) / 8)
    assert stats.checkpoint_noise(c[c["trial_id"] == "c"], "v") is None
    assert stats.checkpoint_noise(c, "no_such_metric") is None
    with pytest.raises(ValueError, match="k must be >= 3"):
        stats.checkpoint_noise(c, "v", k=2)


def test_signal_to_noise_by_hand_and_na_with_the_reason() -> None:
    ck = stats.CheckpointNoise(sd=0.02, sd_raw=0.05, mean=2.0, n_trials=6, k=4)
    s = stats.signal_to_noise([2.0, 2.1, 1.9], [2, 2, 2], stats.Noise(0.05, 2), ck)
    assert s.dispersion == pytest.approx(0.2) and s.signal == pytest.approx(0.1)
    assert s.seed_snr == pytest.approx(4.0)  # 0.1 / (0.05 / 2.0): the spread in sds of a delta
    assert s.checkpoint_snr == pytest.approx(10.0)  # 0.1 / (0.02 / 2.0)
    assert s.null_snr == pytest.approx(stats.expected_range(3) / 2.0)  # d2(3) / sqrt(2 x 2)
    assert "4.0 over seeds" in s.line() and "10.0 over checkpoints" in s.line()
    lone = stats.signal_to_noise([2.0], [2], stats.Noise(0.05, 2), ck)
    assert lone.signal is None and lone.seed_snr is None and lone.checkpoint_snr is None
    assert lone.line() == (
        "signal-to-noise: n/a (fewer than 2 candidates measured: uniform and "
        "those with a seed paired with it that no pruner selected)"
    )
    blind = stats.signal_to_noise([2.0, 2.1], [1, 1], None, None)
    assert blind.seed_snr is None and "no seed noise yet" in blind.why_seed
    assert blind.checkpoint_snr is None and "4 evals" in blind.why_checkpoint
    assert blind.as_dict()["seed_noise"]["why"] == blind.why_seed


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.floats(0.5, 5.0), min_size=2, max_size=8, unique=True),
    st.floats(1e-3, 1.0),
    st.floats(1e-3, 1.0),
    st.floats(0.01, 100.0),
)
def test_signal_to_noise_is_free_of_the_metrics_scale(means, sd, ck_sd, c) -> None:
    def snr(scale: float) -> stats.SignalToNoise:
        ck = stats.CheckpointNoise(ck_sd * scale, ck_sd * scale, 3.0 * scale, 2, 4)
        return stats.signal_to_noise(
            [m * scale for m in means], [3] * len(means), stats.Noise(sd * scale, 4), ck
        )

    one, scaled = snr(1.0), snr(c)
    assert one.seed_snr == pytest.approx(np.ptp(means) / sd)  # the mean cancels
    assert scaled.seed_snr == pytest.approx(one.seed_snr)
    assert scaled.checkpoint_snr == pytest.approx(one.checkpoint_snr)
    assert scaled.null_snr == one.null_snr


def test_candidate_means_leave_censored_candidates_out_and_adjust_for_seeds() -> None:
    t = frame(
        [
            ("uniform", 0, "COMPLETE", 2.0),
            ("uniform", 1, "COMPLETE", 2.4),
            ("a", 0, "COMPLETE", 1.9),
            ("a", 1, "RUNNING", math.nan),
            ("b", 0, "COMPLETE", 1.5),
            ("b", 1, "PRUNED", 3.0),
        ]
    )
    # search.unpruned_candidates: the pruner could not stop a
    t["unpruned"] = t["candidate"] == "a"
    m = stats.candidate_means(t, "v").set_index("candidate")
    assert list(m.index) == ["a", "uniform"]  # b: pruned on seed 1, its seed 0 flatters it
    assert m.loc["a", "mean"] == pytest.approx(2.1)  # uniform's 2.2, then a's -0.1 on seed 0
    assert (m.loc["a", "n"], m.loc["uniform", "n"]) == (1, 2)
    # a candidate the pruner could have stopped and did not survived by looking good: once
    # anything is pruned it is left out of the spread too
    survivor = stats.candidate_means(t.assign(unpruned=False), "v")
    assert survivor["candidate"].tolist() == ["uniform"]


def test_candidate_means_use_each_settings_own_uniform() -> None:
    # 2 settings x {uniform, cosine}: a candidate is its own setting's uniform plus its delta;
    # each uniform sits at its own mean over its own seeds (never one mean pooled over settings)
    vals = {
        ("uniform", 1): [2.0, 2.1],
        ("uniform", 3): [1.5, 1.6],
        ("cosine", 1): [1.9, 2.0],
        ("cosine", 3): [1.45, 1.56],
    }
    t = pd.DataFrame(
        [
            {
                "candidate": f"{s} @ lr={lr}",
                "schedule": s,
                "setting": f"lr={lr}",
                "is_baseline": s == "uniform",
                "seed": seed,
                "state": "COMPLETE",
                "v": v,
            }
            for (s, lr), vs in vals.items()
            for seed, v in enumerate(vs)
        ]
    )
    m = stats.candidate_means(t, "v").set_index("candidate")
    assert m["mean"].to_dict() == pytest.approx(
        {
            "cosine @ lr=1": 1.95,
            "cosine @ lr=3": 1.505,
            "uniform @ lr=1": 2.05,
            "uniform @ lr=3": 1.55,
        }
    )
    assert m["n"].to_dict() == {
        "cosine @ lr=1": 2,
        "cosine @ lr=3": 2,
        "uniform @ lr=1": 2,
        "uniform @ lr=3": 2,
    }


def test_with_equal_candidates_the_seed_snr_is_what_noise_alone_gives() -> None:
    rng = np.random.default_rng(0)
    k, n, got = 6, 4, []
    for _ in range(60):  # a null study: seed levels shared by every candidate, then noise
        level = rng.normal(0.0, 0.1, n)
        t = frame(
            [
                (
                    "uniform" if c == 0 else f"c{c}",
                    s,
                    "COMPLETE",
                    2.0 + level[s] + rng.normal(0.0, 0.01),
                )
                for c in range(k)
                for s in range(n)
            ]
        )
        m = stats.candidate_means(t, "v")
        s = stats.signal_to_noise(m["mean"], m["n"], stats.block_noise(t, "v"))
        got.append(s.seed_snr)
    # d2(6) / sqrt(8) = 0.90; the estimated sd (15 df) divides, so the mean sits a little above
    assert s.null_snr == pytest.approx(stats.expected_range(6) / math.sqrt(8))
    assert np.mean(got) == pytest.approx(s.null_snr, rel=0.15)


def _two_settings(
    rng, cells: tuple[int, int], n_seeds: int, sd_g: float, sd_e: float, missing: float = 0.0
) -> pd.DataFrame:
    """Cells at two settings (uniform + others each), a level per (setting, seed) shared by the
    setting's cells, and cell noise; ``missing``: the share of non-uniform cells left out."""
    rows = []
    for s in range(n_seeds):
        for setting, k in zip(("lr=1", "lr=2"), cells, strict=True):
            g = rng.normal(0, sd_g)
            for c in range(k):
                if c and rng.random() < missing:
                    continue
                rows.append((f"c{c} @ {setting}", setting, s, c == 0, g + rng.normal(0, sd_e)))
    return pd.DataFrame(rows, columns=["candidate", "setting", "seed", "is_baseline", "v"]).assign(
        state="COMPLETE"
    )


@pytest.mark.parametrize(
    ("cells", "missing"), [((3, 3), 0.0), ((2, 6), 0.0), ((2, 10), 0.0), ((4, 4), 0.4)]
)
def test_setting_noise_is_unbiased_for_a_delta_across_settings(cells, missing) -> None:
    """E[var] = 2 sigma_e^2 + 2 sigma_g^2 in balanced, unbalanced and incomplete grids (the mean
    cells per block, not the design's coefficient, gave 0.65x with 2 vs 10 cells)."""
    rng = np.random.default_rng(0)
    sd_g, sd_e = 0.02, 0.01
    var = [
        stats.setting_noise(_two_settings(rng, cells, 6, sd_g, sd_e, missing), "v").sd ** 2
        for _ in range(300)
    ]
    assert np.mean(var) / (2 * sd_e**2 + 2 * sd_g**2) == pytest.approx(1.0, abs=0.1)


def test_setting_noise_without_an_interaction_is_the_within_setting_noise() -> None:
    rng = np.random.default_rng(1)
    t = _two_settings(rng, (3, 3), 6, 0.0, 0.01)
    t.loc[t["candidate"].str.startswith("c0"), "v"] = 0.0  # no noise in uniform: MS_x ~ 0
    t["v"] = t["v"] - t.groupby(["setting", "seed"])["v"].transform("mean")  # no g at all
    within, across = stats.block_noise(t, "v"), stats.setting_noise(t, "v")
    assert (across.sd, across.df) == pytest.approx((within.sd, within.df))


def test_a_matrix_of_the_top_pairs_is_adjusted_over_every_pair_it_could_have_shown():
    # Holm over the shown pairs only lets the data pick the family
    t = _deltas_frame({"A": [-0.1, -0.2, -0.3], "B": [-0.1, -0.11, -0.09], "C": [0.1, -0.1, 0.3]})
    shown = stats.pairwise(t, "v", ["A", "B"])
    wider = stats.pairwise(t, "v", ["A", "B"], family_size=6)
    first = shown.iloc[0]
    assert first["p_adj"] == pytest.approx(first["p"])  # one pair: nothing to adjust
    assert wider.iloc[0]["p_adj"] == pytest.approx(min(1.0, 6 * first["p"]))  # Holm's first step


@pytest.mark.parametrize("family", ["holm", "bh", "none"])
def test_a_planned_family_counts_the_comparisons_still_to_come(family):
    # mid-run the family is the one planned, not the candidates finished so far
    t = _deltas_frame({"A": [-0.1, -0.2, -0.3], "B": [-0.1, -0.11, -0.09]})
    now = by_cand(stats.effects(t, "v", family=family))
    planned = by_cand(stats.effects(t, "v", family=family, planned=6))
    assert set(now["family_size"]) == {2} and set(planned["family_size"]) == {6}
    if family == "none":
        assert list(planned["p_adj"]) == list(now["p_adj"])
        return
    assert (planned["p_adj"] >= now["p_adj"] - 1e-12).all()
    assert (planned["p_adj"] > now["p_adj"]).any()
    assert (planned["half_width"] >= now["half_width"] - 1e-12).all()


def test_one_summary_serves_every_statistic_of_a_build_and_none_sees_anothers_change():
    """Inside cells_once the ranking, the effects and the signal to noise read one summary per
    table (computed once); each gets its own copy, so a caller's change stays its own."""
    from tlmsearch.stats import ranking
    from tlmsearch.stats.deltas import cells_once

    t = pd.DataFrame(
        {
            "candidate": ["u", "u", "a", "a", "b", "b"],
            "is_baseline": [True, True, False, False, False, False],
            "seed": [0, 1, 0, 1, 0, 1],
            "state": ["COMPLETE"] * 6,
            "v": [2.0, 2.2, 1.9, 2.0, 2.1, 2.4],
        }
    )
    fresh = stats.summarise(t, "v")
    with mock.patch.object(ranking, "_summary", wraps=ranking._summary) as computed:
        with cells_once():
            first = stats.summarise(t, "v")
            first.loc[:, "mean"] = -1.0  # a caller changes its copy
            again = stats.summarise(t, "v")
            stats.effects(t, "v")
            stats.candidate_means(t, "v")
        assert computed.call_count == 1
    pd.testing.assert_frame_equal(again, fresh)
    with mock.patch.object(ranking, "_summary", wraps=ranking._summary) as computed:
        with cells_once():
            stats.summarise(t, "v")
            stats.rank(t, "v")  # every seed: the summary above
            stats.rank(t, "v", seeds=[0, 1])  # the study's seeds: cells of their own
        assert computed.call_count == 2
    with mock.patch.object(ranking, "_summary", wraps=ranking._summary) as computed:
        stats.summarise(t, "v")
        stats.summarise(t, "v")
        assert computed.call_count == 2  # outside a build: every call computes
    from tlmsearch.stats import deltas

    for read in (stats.rank, stats.candidate_means):  # alone: their cells once, not twice
        with mock.patch.object(deltas, "_cells_of", wraps=deltas._cells_of) as cells:
            read(t, "v")
        assert cells.call_count == 1, read
