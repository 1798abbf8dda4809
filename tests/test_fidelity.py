"""tlmsearch.evidence.fidelity: rank agreement between rungs, lines in log compute, where they
cross."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.evidence import fidelity as fid
from tlmsearch.run_dir.tables import trials_frame


def test_tau_and_rho_of_identical_reversed_and_one_swap_rankings() -> None:
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert fid.kendall_tau(x, x) == 1.0 and fid.spearman_rho(x, x) == 1.0
    rev = x[::-1]
    assert fid.kendall_tau(x, rev) == -1.0 and fid.spearman_rho(x, rev) == -1.0
    swap = [1.0, 2.0, 3.0, 5.0, 4.0]  # one adjacent swap of 10 pairs: tau = (9 - 1) / 10
    assert fid.kendall_tau(x, swap) == pytest.approx(0.8)
    assert fid.spearman_rho(x, swap) == pytest.approx(1 - 6 * 2 / (5 * 24))  # 0.9
    assert fid.decision_accuracy(x, swap) == pytest.approx(0.9)


def test_ties() -> None:
    # tau-b with one tie in x: concordant 5, discordant 0, ties 1 of 6 pairs
    x, y = [1.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]
    assert fid.kendall_tau(x, y) == pytest.approx(5 / math.sqrt(5 * 6))
    # Spearman with average ranks: x ranks 1.5, 1.5, 3, 4
    rho = np.corrcoef([1.5, 1.5, 3, 4], [1, 2, 3, 4])[0, 1]
    assert fid.spearman_rho(x, y) == pytest.approx(rho)
    assert fid.decision_accuracy(x, y) == pytest.approx(5.5 / 6)  # the tied pair counts 1/2
    assert math.isnan(fid.kendall_tau([1.0, 1.0], [1.0, 2.0]))  # all tied: undefined


def test_decision_accuracy_by_hand() -> None:
    # pairs: (a,b) same, (a,c) same, (b,c) swapped, (a,d) same, (b,d) tied in y: 1/2, (c,d) same
    x, y = [0.0, 1.0, 2.0, 3.0], [0.0, 2.0, 1.0, 2.0]
    assert fid.decision_accuracy(x, y) == pytest.approx(4.5 / 6)


def test_bootstrap_interval_holds_the_estimate_and_is_deterministic() -> None:
    rng = np.random.default_rng(5)
    truth = np.linspace(-0.05, 0.05, 6)[:, None]
    lower = truth + rng.normal(0, 0.02, (6, 4))
    upper = truth + rng.normal(0, 0.02, (6, 4))
    a = fid.agreement(lower, upper, resamples=300)
    b = fid.agreement(lower, upper, resamples=300)
    assert a == b  # the fixed RNG seed
    assert a.tau_ci95[0] <= a.kendall_tau <= a.tau_ci95[1]
    assert a.rho_ci95[0] <= a.spearman_rho <= a.rho_ci95[1]
    assert a.n_candidates == 6 and a.n_seeds == 4
    assert fid.agreement(lower[:, :1], upper[:, :1]).tau_ci95 is None  # one seed


def test_two_rung_fit_is_the_line_through_the_points() -> None:
    line = fid.fit_line([9.0, 10.0], [-0.02, -0.05])
    assert line.kind == "line through 2 points" and line.residual_sd is None
    assert line.slope == pytest.approx(-0.03)
    assert line.intercept + line.slope * 9.0 == pytest.approx(-0.02)
    three = fid.fit_line([1.0, 2.0, 3.0], [1.0, 2.0, 4.0])
    assert three.kind == "least squares"
    assert three.slope == pytest.approx(1.5)
    assert three.residual_sd == pytest.approx(math.sqrt(1 / 6))


def test_crossing_at_a_known_x_and_parallel_or_behind_gives_none() -> None:
    a = fid.fit_line([0.0, 1.0], [0.0, 1.0])  # y = x
    b = fid.fit_line([0.0, 1.0], [3.0, 2.0])  # y = 3 - x
    assert fid.crossing(a, b, 0.0) == pytest.approx(1.5)
    assert fid.crossing(a, fid.fit_line([0.0, 1.0], [1.0, 2.0]), 0.0) is None  # parallel
    assert fid.crossing(a, b, 2.0) is None  # behind the smallest rung


@settings(max_examples=40, deadline=None)
@given(st.floats(-2, 2), st.floats(-2, 2), st.floats(-2, 2), st.floats(-2, 2), st.floats(0.5, 3))
def test_lines_meet_at_the_crossing(a0: float, a1: float, b0: float, b1: float, x: float) -> None:
    """Two lines built to meet at x: the fits through two points each cross there."""
    if abs(a1 - b1) < 1e-3:
        return
    y = a0 + a1 * x
    la = fid.fit_line([0.0, 4.0], [y - a1 * x, y + a1 * (4.0 - x)])
    lb = fid.fit_line([0.0, 4.0], [y - b1 * x, y + b1 * (4.0 - x)])
    assert fid.crossing(la, lb, 0.0) == pytest.approx(x, abs=1e-6)


def _rung(effects: dict[str, list[float]], base: list[float]) -> pd.DataFrame:
    rows = [{"params": {"shape": "uniform"}, "seed": s, "val_bpb": v} for s, v in enumerate(base)]
    for r, deltas in effects.items():
        rows += [
            {"params": {"shape": "cosine", "r_start": float(r)}, "seed": s, "val_bpb": base[s] + d}
            for s, d in enumerate(deltas)
        ]
    return trials_frame(rows)


def test_fidelity_of_a_two_rung_ladder() -> None:
    lo = _rung({"1.25": [-0.02, -0.03], "1.5": [-0.01, -0.01], "1.75": [0.01, 0.02]}, [2.0, 2.1])
    hi = _rung({"1.25": [-0.04, -0.05], "1.5": [-0.05, -0.04], "1.75": [0.0, 0.01]}, [1.8, 1.9])
    doc = fid.fidelity([fid.Rung(lo, 1e9), fid.Rung(hi, 1e10)], "val_bpb", resamples=200)
    (pair,) = doc["pairs"]
    assert pair["n_candidates"] == 4 and pair["n_seeds"] == 2  # uniform is a candidate at 0
    # lower order: 1.25 < 1.5 < uniform < 1.75; upper: 1.5 = 1.25 (tie on mean -0.045) < ...
    assert pair["decision_accuracy"] == pytest.approx(5.5 / 6)
    fit = {f["candidate"]: f for f in doc["fits"]}
    assert fit["cosine 1.5->0.5"]["slope"] == pytest.approx(-0.035)
    assert fit["uniform"]["slope"] == 0.0
    cross = {(c["a"], c["b"]): c for c in doc["crossings"]}
    c = cross[("cosine 1.25->0.75", "cosine 1.5->0.5")]
    assert c["log10_compute"] == pytest.approx(10.0) and c["where"] == "at rung 1"
    assert "Kendall tau" in doc["trust"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), min_size=2, max_size=12))
def test_tau_b_and_rho_match_scipy_with_ties(pairs: list[tuple[int, int]]) -> None:
    from scipy.stats import kendalltau, spearmanr

    x, y = [float(a) for a, _ in pairs], [float(b) for _, b in pairs]
    tau, rho = fid.kendall_tau(x, y), fid.spearman_rho(x, y)
    if len(set(x)) < 2 or len(set(y)) < 2:
        assert math.isnan(tau) and math.isnan(rho)
        return
    assert tau == pytest.approx(kendalltau(x, y, variant="b").statistic, abs=1e-9)
    assert rho == pytest.approx(spearmanr(x, y).statistic, abs=1e-9)


def test_rungs_of_equal_compute_fit_no_line_and_cross_nowhere() -> None:
    lo = _rung({"1.25": [-0.02, -0.03], "1.5": [-0.01, -0.01]}, [2.0, 2.1])
    hi = _rung({"1.25": [-0.04, -0.05], "1.5": [-0.05, -0.04]}, [1.8, 1.9])
    doc = fid.fidelity([fid.Rung(lo, 1e9), fid.Rung(hi, 1e9)], "val_bpb", resamples=50)
    assert {f["kind"] for f in doc["fits"]} == {"one point"}
    assert doc["crossings"] == [] and doc["pairs"][0]["n_candidates"] == 3


def test_distinct_resamples_are_the_multisets_of_seeds() -> None:
    import itertools

    assert [fid.distinct_resamples(s) for s in (2, 3, 4)] == [3, 10, 35]
    for s in range(1, 6):  # by enumeration: every draw of s seeds from s, as a multiset
        draws = {tuple(sorted(d)) for d in itertools.product(range(s), repeat=s)}
        assert fid.distinct_resamples(s) == len(draws)
    rng = np.random.default_rng(0)
    effects = rng.normal(0, 0.02, (5, 3))
    assert fid.agreement(effects, effects + 0.01, resamples=50).distinct_resamples == 10


def _agreeing(n_seeds: int, rs: tuple[str, ...] = ("1.25", "1.5", "1.75")) -> pd.DataFrame:
    """Candidates whose effects keep one order on every seed (uniform at 0 among them)."""
    effects = {r: [-0.01 * (i + 1) - 0.001 * s for s in range(n_seeds)] for i, r in enumerate(rs)}
    return _rung(effects, [2.0 + 0.1 * s for s in range(n_seeds)])


def test_perfect_agreement_on_two_seeds_is_too_few_to_judge() -> None:
    rungs = [fid.Rung(_agreeing(2), 1e9), fid.Rung(_agreeing(2), 1e10)]
    doc = fid.fidelity(rungs, "val_bpb", resamples=200)
    (pair,) = doc["pairs"]
    assert pair["n_candidates"] == 4 and pair["kendall_tau"] == 1.0
    assert pair["tau_ci95"] == [1.0, 1.0]  # every one of the 3 distinct resamples agrees
    assert pair["distinct_resamples"] == 3
    assert "can be trusted" not in doc["trust"]
    assert "only 3 distinct bootstrap resamples with 2 seeds" in doc["trust"]
    assert doc["trust"].endswith("too few to judge")
    # on MIN_SEEDS seeds it is judged; on 3 candidates it is not
    five = [fid.Rung(_agreeing(fid.MIN_SEEDS), 1e9), fid.Rung(_agreeing(fid.MIN_SEEDS), 1e10)]
    doc = fid.fidelity(five, "val_bpb", resamples=200)
    assert "126 distinct resamples" in doc["trust"] and "can be trusted" not in doc["trust"]
    three = [fid.Rung(_agreeing(5, ("1.25", "1.5")), 1e9)] * 2
    doc = fid.fidelity(three, "val_bpb", resamples=200)
    assert "only 3 candidates (tau is +1 by chance 1 time in 6" in doc["trust"]
    assert "can be trusted" not in doc["trust"]


def test_a_promoted_rung_makes_the_agreement_conditional() -> None:
    lo, hi = _agreeing(fid.MIN_SEEDS), _agreeing(fid.MIN_SEEDS)
    doc = fid.fidelity(
        [fid.Rung(lo, 1e9), fid.Rung(hi, 1e10, selected_by=0)], "val_bpb", resamples=100
    )
    (pair,) = doc["pairs"]
    assert pair["conditional_on"] == "the candidates rung 0 promoted by rank"
    assert "conditional on the candidates rung 0 promoted by rank" in doc["trust"]
    doc = fid.fidelity([fid.Rung(lo, 1e9), fid.Rung(hi, 1e10)], "val_bpb", resamples=100)
    assert doc["pairs"][0]["conditional_on"] is None and "conditional" not in doc["trust"]


def _noisy(effects: dict[str, float], shift: dict[str, int]) -> pd.DataFrame:
    """4 seeds; each candidate's delta wiggles by +-0.001/0.002 in its own seed pattern."""
    wiggle = [
        [0.002, -0.002, 0.001, -0.001],
        [-0.002, 0.002, -0.001, 0.001],
        [0.001, -0.001, 0.002, -0.002],
    ]
    return _rung(
        {r: [e + w for w in wiggle[shift[r]]] for r, e in effects.items()}, [2.0, 2.1, 2.2, 2.3]
    )


def test_decision_accuracy_per_flop_scores_the_top_rungs_separated_pairs_apart() -> None:
    shift = {"1.25": 0, "1.5": 1, "1.75": 2}
    # top: 1.25 (-0.050) ~ 1.5 (-0.049) within noise; both beat uniform, which beats 1.75
    top = _noisy({"1.25": -0.050, "1.5": -0.049, "1.75": 0.05}, shift)
    same = _noisy({"1.25": -0.030, "1.5": -0.020, "1.75": 0.01}, shift)
    # the cheapest rung swaps 1.25/1.5 (within the top's noise) and uniform/1.75 (separated)
    swapped = _noisy({"1.25": -0.05, "1.5": -0.06, "1.75": -0.01}, shift)
    rungs = [fid.Rung(swapped, 1e9), fid.Rung(same, 1e10), fid.Rung(top, 1e11)]
    doc = fid.fidelity(rungs, "val_bpb", resamples=20)
    cheap, mid = doc["decisions"]
    assert (cheap["rung"], cheap["top"], mid["rung"]) == (0, 2, 1)
    assert cheap["compute_ratio"] == pytest.approx(0.01) and mid["compute_ratio"] == 0.1
    assert cheap["n_candidates"] == 4 and cheap["n_pairs"] == 6  # uniform is a candidate
    assert cheap["n_separated"] == 5  # every pair but 1.25 vs 1.5
    assert cheap["accuracy"] == pytest.approx(4 / 6)
    assert cheap["accuracy_separated"] == pytest.approx(4 / 5)
    assert cheap["accuracy_within_noise"] == 0.0 and cheap["note"] == ""
    assert mid["accuracy"] == mid["accuracy_separated"] == mid["accuracy_within_noise"] == 1.0
    # DataDecide's all-pairs accuracy is the pair table's decision accuracy on common seeds
    pair = next(p for p in doc["pairs"] if (p["lower"], p["upper"]) == (0, 2))
    assert pair["decision_accuracy"] == pytest.approx(cheap["accuracy"])


def test_separated_pairs_use_the_studys_level_and_family() -> None:
    shift = {"1.25": 0, "1.5": 1, "1.75": 2}
    top = _noisy({"1.25": -0.050, "1.5": -0.045, "1.75": 0.05}, shift)
    rungs = [fid.Rung(top, 1e9), fid.Rung(top, 1e10)]
    n_sep = {
        (lv, fam): fid.fidelity(rungs, "val_bpb", resamples=10, level=lv, family=fam)["decisions"][
            0
        ]["n_separated"]
        for lv, fam in ((0.95, "none"), (0.95, "holm"), (0.9999, "holm"))
    }
    assert n_sep[0.95, "none"] >= n_sep[0.95, "holm"] > n_sep[0.9999, "holm"]


def test_decisions_say_why_when_nothing_is_measured_or_separated() -> None:
    one_seed = _rung({"1.25": [-0.02], "1.5": [-0.01]}, [2.0])  # no seed noise: nothing separated
    doc = fid.fidelity(
        [fid.Rung(one_seed, 1e9), fid.Rung(one_seed, 1e10)], "val_bpb", resamples=10
    )
    (d,) = doc["decisions"]
    assert d["n_pairs"] == 3 and d["n_separated"] == 0 and d["accuracy_separated"] is None
    assert "separates none of the 3 pairs" in d["note"]
    snr = doc["rungs"][0]["signal_to_noise"]
    assert snr["seed_noise"]["snr"] is None and "no seed noise yet" in snr["seed_noise"]["why"]
    lone = _rung({}, [2.0, 2.1])  # uniform alone
    doc = fid.fidelity([fid.Rung(lone, 1e9), fid.Rung(one_seed, 1e10)], "val_bpb", resamples=10)
    (d,) = doc["decisions"]
    assert d["n_pairs"] == 0 and d["accuracy"] is None and d["note"].startswith("n/a")
    assert doc["rungs"][0]["signal_to_noise"]["signal"] is None


def test_each_rung_reports_its_signal_to_noise_with_its_checkpoint_noise() -> None:
    t = _noisy({"1.25": -0.050, "1.5": -0.049, "1.75": 0.05}, {"1.25": 0, "1.5": 1, "1.75": 2})
    t["trial_id"] = [f"t{i}" for i in range(len(t))]
    curves = pd.DataFrame(
        [
            {"trial_id": tid, "tokens": k * 100, "val_bpb": v + 0.01 * (4 - k) + 0.001 * (k % 2)}
            for tid, v in zip(t["trial_id"], t["val_bpb"], strict=True)
            for k in range(1, 5)
        ]
    )  # a line in tokens, plus 0.001 on every other eval
    doc = fid.fidelity(
        [fid.Rung(t, 1e9, curves=curves), fid.Rung(t, 1e10)], "val_bpb", resamples=10
    )
    with_curves, without = (r["signal_to_noise"] for r in doc["rungs"])
    ck = with_curves["checkpoint_noise"]
    assert ck["trials"] == 16 and ck["sd"] == pytest.approx(0.0005 * math.sqrt(4 / 2 * 0.8))
    assert with_curves["dispersion"] == pytest.approx(0.1)  # 1.75 (+0.05) vs 1.25 (-0.05)
    assert without["checkpoint_noise"]["snr"] is None
    assert without["checkpoint_noise"]["why"] == "no learning curves given"


# -------------------------------------------------------------------------------------------------
# The verdict's null check: both rungs train on the same seeds, so their noise is
# correlated and rankings with no true agreement still agree


def _shared_noise(c: int, s: int, rho: float, rng: np.random.Generator, signal: float = 0.0):
    """(lower, upper) per-seed paired effects, (C, S), uniform's row at 0: true effects
    ``signal`` * (0, 1, ..., C-1) at both rungs (0: none), noise N(0, 1) correlated ``rho``
    between the rungs on the same candidate and seed."""
    e_lo = rng.standard_normal((c, s))
    e_hi = rho * e_lo + math.sqrt(1 - rho * rho) * rng.standard_normal((c, s))
    truth = signal * np.arange(c)[:, None]
    y_lo, y_hi = truth + e_lo, truth + e_hi
    return y_lo - y_lo[:1], y_hi - y_hi[:1]


def test_the_null_of_no_agreement_is_the_permutation_null_at_zero_correlation() -> None:
    import itertools

    perms = list(itertools.permutations(range(5)))
    exact = np.array([fid.kendall_tau(range(5), p) for p in perms])
    taus = fid.null_taus(5, 0.0)
    for t in (0.6, 0.8, 1.0):  # 14, 5 and 1 of the 120 orders
        assert fid._tail(taus, t) == pytest.approx(np.mean(exact >= t - 1e-9), abs=0.004)
    assert fid.null_threshold(5, 0.0) == 0.8 and fid.null_threshold(4, 0.0) == 1.0
    assert fid.null_threshold(3, 0.0) is None  # tau +1 by chance 1 time in 6
    assert np.array_equal(fid.null_taus(6, 0.3), fid.null_taus.__wrapped__(6, 0.3))  # seeded


def test_the_null_threshold_grows_with_the_noise_the_rungs_share() -> None:
    thr = [fid.null_threshold(8, r) for r in (0.0, 0.3, 0.5, 0.7, 0.9)]
    assert thr == sorted(thr) and thr[0] < thr[-1] == 1.0
    assert fid.null_threshold(5, 0.9) is None  # shared noise alone gives +1 too often


def test_seed_correlation_is_the_rungs_residual_correlation() -> None:
    rng = np.random.default_rng(0)
    lo, hi = _shared_noise(30, 30, 0.6, rng, signal=0.5)  # candidate effects do not enter
    rho, df = fid.seed_correlation(lo, hi)
    assert df == 29 * 29 and rho == pytest.approx(0.6, abs=0.05)
    assert fid.seed_correlation(lo, lo)[0] == pytest.approx(1.0)
    assert fid.seed_correlation(lo[:, :1], hi[:, :1]) == (None, 0)  # one seed: no residual
    # the upper bound: above the estimate, tighter with more df, None below 3 df
    assert fid.rho_upper(0.3, 16) > fid.rho_upper(0.3, 100) > 0.3
    assert fid.rho_upper(0.3, 2) is None and fid.rho_upper(-0.9, 8) == 0.0


@pytest.mark.slow  # a rate over many simulated studies
def test_shared_seed_noise_alone_is_not_trusted() -> None:
    """8 candidates with no true effect at either rung, 8 seeds whose noise correlates 0.95
    between the rungs: tau is large by the shared noise alone. The bootstrap interval's lower
    end passed 0.5 in over a quarter of them (the old "can be trusted"); the null check
    trusts at most 5% + 2 Monte Carlo se (benchmarks/fidelity.py for more scenarios)."""
    rng = np.random.default_rng(3)
    n, old, new = 120, 0, 0
    for _ in range(n):
        a = fid.agreement(*_shared_noise(8, 8, 0.95, rng), resamples=100)
        old += a.tau_ci95 is not None and a.tau_ci95[0] > 0.5
        new += "can be trusted" in fid.trust_line({"lower": 0, "upper": 1, **a._asdict()}, 2)
    assert old / n > 0.25
    assert new / n <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / n)


def test_agreement_beyond_the_shared_noise_is_trusted_and_says_why() -> None:
    """True effects one noise sd apart at both rungs, independent noise: tau is far above what
    the null reaches, and the sentence gives the null's numbers."""
    rng = np.random.default_rng(1)
    lo, hi = _shared_noise(6, 5, 0.0, rng, signal=1.0)
    base = [2.0 + 0.01 * s for s in range(5)]
    rows = [
        _rung({str(1 + c / 10): (0.01 * x[c]).tolist() for c in range(1, 6)}, base)
        for x in (lo, hi)
    ]
    doc = fid.fidelity([fid.Rung(rows[0], 1e9), fid.Rung(rows[1], 1e10)], "val_bpb", resamples=200)
    (pair,) = doc["pairs"]
    assert pair["n_candidates"] == 6 and pair["rho_df"] == 5 * 4
    assert pair["null_tau95"] is not None and pair["kendall_tau"] >= pair["null_tau95"]
    assert pair["null_p"] <= 0.05 and pair["rho_upper"] >= max(pair["seed_rho"], 0)
    assert doc["trust"].endswith("can be trusted at this step"), doc["trust"]
    assert f"95% upper bound {pair['rho_upper']:+.2f}, 20 df" in doc["trust"]
    assert f"reaches tau {pair['null_tau95']:+.2f} or more in at most 5%" in doc["trust"]
    from tlmsearch.evidence.fidelity_tables import agreement

    table = agreement(doc)
    assert table.rows[0][5].startswith(f"p {pair['null_p']:.3f}, needs {pair['null_tau95']:+.2f}")
