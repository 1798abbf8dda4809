"""Proxy-to-target fidelity: does a small proxy rank the candidates as a larger one does?

A ladder run (``ladder:`` in the study, :mod:`tlmsearch.search.ladder`) trains the candidates at
several proxy sizes, one ordinary run per rung. Between every pair of rungs this module measures,
on the candidates both rungs measured on their common seeds:

- Kendall tau-b and Spearman rho of the candidates' *paired effects* (mean over the common seeds
  of the value minus the same seed's uniform value; uniform itself is a candidate at 0), with a
  percentile bootstrap 95% interval that resamples the common seeds with replacement
  (:data:`BOOTSTRAP_RESAMPLES` resamples, ``numpy.random.default_rng(BOOTSTRAP_SEED)``, so the
  same input gives the same interval), and how many distinct resamples S seeds allow
  (:func:`distinct_resamples`: 3 with 2 seeds, however many are drawn);
- decision accuracy: the share of candidate pairs the two rungs order the same way, a pair tied
  at either rung counting one half;
- the null check behind the verdict (:func:`null_check`). Both rungs train on the same seeds
  (the same data order), so their noise is correlated: two rungs with no true agreement at all
  still rank alike. The cross-rung correlation rho of the seed noise is estimated from the two
  rungs' block-design residuals (df (C - 1)(S - 1)) and taken at its one-sided 95% upper bound;
  tau is then compared with the distribution it has when the candidates' true effects are all
  equal (the least favourable null: any true effects, unrelated between the rungs, dilute the
  shared noise) and only that noise, correlated rho between the rungs, ranks them. "Can be
  trusted" needs tau at or above that null's 95th percentile (P(null tau >= tau) <= 5%).
  benchmarks/fidelity.py measures the rule: false trust <= 1% in every null it simulates, where
  a bootstrap-only rule (the interval's lower end above 0.5) trusts up to 52% of null
  ladders sharing their seeds, and the estimated rho without its bound up to 7%. The
  percentile interval is printed, not judged by: it covered the true tau in as few as 16% of
  simulated ladders.

Against the top rung, per cheaper rung, decision accuracy per FLOP (DataDecide, arXiv
2504.11393; :func:`decisions_vs_top`): of the pairs of candidates both rungs measured (uniform
included, each rung on all its seeds), the share the cheaper rung orders as the top rung does,
next to its compute and the ratio to the top rung's. The top rung's own order is noisy too:
pairs its Evidence *separates* (family-wise over those pairs, at its ``stats.level``) are the
decisions it actually makes, and are scored apart from the pairs it leaves within noise, where
agreeing is closer to a coin flip. Every rung's signal-to-noise (:class:`Evidence`'s ``snr``)
sits beside its compute.

Per candidate it fits the paired effect against log10 compute (training FLOPs per token times
the rung's tokens): with two rungs the straight line through the two points (nothing more can be
fitted honestly), with three or more a least-squares line and its residual sd. The paired effect
rather than the metric itself, because every candidate's metric shares the uniform model's
scaling curve, which is far from linear in log compute and would swamp the residual; the
crossings are the same either way (a least-squares fit is linear in y, so the fit of value =
uniform + effect is the fit of uniform plus the fit of the effect). For each pair of candidates,
the compute where their lines cross, or None when they are parallel or cross below the smallest
rung (the data there says nothing). Uniform's line is y = 0: a candidate's crossing with uniform
is where its effect is predicted to change sign.

The verdict (:func:`trust_line`) judges only from :data:`MIN_SEEDS` seeds and
:data:`MIN_CANDIDATES` candidates up; below, it says it cannot and why. Where a rung trained only
the candidates the rung below promoted by rank (``ladder_mode: promote``), every pair with it is
measured on that selection, and its agreement is labelled conditional on it (``conditional_on``).

Pure numpy / pandas / scipy; input is each rung's trials table (docs/run_dir.md).
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tlmsearch import stats
from tlmsearch.constants import FAMILY, LEVEL
from tlmsearch.evidence import Evidence
from tlmsearch.widths.candidate import IDENTITY

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
ABS_TOL = 1e-12  # slopes closer than this (metric units per decade) are parallel
# The least the verdict judges from. A bootstrap resample of S seeds is a multiset of them, and
# there are only C(2S-1, S) of those (3 at 2 seeds, 10 at 3, 35 at 4, 126 at 5): however many
# are drawn, the replicates take at most that many values. Each end of a 95% interval cuts a 2.5%
# tail, one part in 40; with fewer than 40 distinct resamples (S <= 4) a tail is about one of
# them or less, so an end is one seed multiset's value (perfect agreement on each of 2 seeds
# gives [+1, +1] from 3 multisets). 5 seeds are the fewest with several (126 / 40, about 3) in
# each tail.
MIN_SEEDS = 5
# Two random rankings of n candidates agree perfectly (tau +1) 1 time in n!: 1 in 6 with 3
# (tau moves in steps of 2/3), 1 in 24 with 4, the fewest where that is under 5%. Uniform counts.
MIN_CANDIDATES = 4
# The null check (null_check): the most often a ranking with no true agreement, ranked by the
# rungs' shared-seed noise alone, may earn "can be trusted"; its Monte Carlo draws and RNG seed
# (the same input gives the same threshold); the grid the noise correlation's upper bound is
# rounded *up* to (so thresholds are cached, and only more conservative).
NULL_ALPHA = 0.05
NULL_DRAWS = 20_000
NULL_SEED = 0
RHO_GRID = 0.01


# -------------------------------------------------------------------------------------------------
# Rank agreement


def _signs(x: Sequence[float], y: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """sign(x_i - x_j) and sign(y_i - y_j) over the pairs i < j."""
    x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError(f"x and y must be paired 1-d samples, not {x.shape} and {y.shape}")
    i, j = np.triu_indices(len(x), k=1)
    return np.sign(x[i] - x[j]), np.sign(y[i] - y[j])


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b of two paired samples, ties in either handled; NaN when undefined
    (fewer than two items, or every value of one sample tied).

    tau-b = (concordant - discordant) / sqrt((n0 - ties_x) (n0 - ties_y)), n0 the pairs.

    >>> kendall_tau([1, 2, 3], [1, 2, 3]), kendall_tau([1, 2, 3], [3, 2, 1])
    (1.0, -1.0)
    """
    sx, sy = _signs(x, y)
    n0 = len(sx)
    denom = math.sqrt(float(n0 - np.sum(sx == 0)) * float(n0 - np.sum(sy == 0)))
    return float(np.sum(sx * sy) / denom) if denom > 0 else math.nan


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho: the Pearson correlation of average ranks; NaN when undefined.

    >>> spearman_rho([1, 2, 3, 4], [1, 2, 4, 3])
    0.8
    """
    from scipy.stats import rankdata

    x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    if len(x) < 2 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return math.nan
    rx, ry = rankdata(x) - (len(x) + 1) / 2, rankdata(y) - (len(y) + 1) / 2
    return float(round(float(rx @ ry) / math.sqrt(float(rx @ rx) * float(ry @ ry)), 12))


def decision_accuracy(x: Sequence[float], y: Sequence[float]) -> float:
    """Share of the pairs (i, j) that ``x`` and ``y`` order the same way; a pair tied in
    either counts one half. NaN with fewer than two items.

    >>> decision_accuracy([1, 2, 3], [1, 3, 2])  # one of three pairs swapped
    0.6666666666666666
    >>> decision_accuracy([1, 1, 3], [1, 2, 3])  # (0, 1) tied at x: half
    0.8333333333333334
    """
    sx, sy = _signs(x, y)
    if not len(sx):
        return math.nan
    tied = (sx == 0) | (sy == 0)
    return float((np.sum((sx == sy) & ~tied) + 0.5 * np.sum(tied)) / len(sx))


def distinct_resamples(n_seeds: int) -> int:
    """Distinct bootstrap resamples of ``n_seeds`` seeds: the multisets of S seeds drawn from S,
    C(2S-1, S) (0 without seeds), so the most distinct replicates a bootstrap over seeds can
    have, however many it draws.

    >>> [distinct_resamples(s) for s in (1, 2, 3, 4, 5)]
    [1, 3, 10, 35, 126]
    """
    return math.comb(2 * n_seeds - 1, n_seeds) if n_seeds > 0 else 0


def _percentile_interval(values: np.ndarray, level: float) -> list[float] | None:
    v = values[np.isfinite(values)]
    if not len(v):
        return None
    tail = 100 * (1 - level) / 2
    return [float(np.percentile(v, tail)), float(np.percentile(v, 100 - tail))]


# -------------------------------------------------------------------------------------------------
# Agreement beyond the shared seeds' noise


def _two_way_residuals(x: np.ndarray) -> np.ndarray:
    """Residuals of the additive candidate + seed fit of a complete (candidates, seeds) table."""
    return x - x.mean(axis=1, keepdims=True) - x.mean(axis=0, keepdims=True) + x.mean()


def seed_correlation(lower: np.ndarray, upper: np.ndarray) -> tuple[float | None, int]:
    """(rho, df): the correlation between the rungs of the seed noise of the same candidate on
    the same seed, from the two rungs' block-design residuals; df = (C - 1)(S - 1).

    Effects are per-seed paired deltas with uniform's row at 0: the residuals of the delta
    table are those of the raw values (a seed's uniform value is a seed effect). Under the
    block model the residuals are an orthogonal projection of the noise, so they hold df
    independent zero-mean pairs: rho is their uncentred correlation (None without df or
    without residual noise at a rung).

    >>> rng = np.random.default_rng(0)
    >>> z = rng.normal(size=(6, 5))
    >>> rho, df = seed_correlation(z, z + 0.1 * rng.normal(size=(6, 5)))
    >>> round(rho, 2), df
    (0.99, 20)
    """
    lo, hi = _two_way_residuals(lower), _two_way_residuals(upper)
    df = (lower.shape[0] - 1) * (lower.shape[1] - 1)
    denom = math.sqrt(float(np.sum(lo * lo)) * float(np.sum(hi * hi)))
    if df < 1 or denom <= 0:
        return None, max(df, 0)
    return float(np.clip(np.sum(lo * hi) / denom, -1.0, 1.0)), df


def rho_upper(rho: float, df: int, level: float = 0.95) -> float | None:
    """One-sided ``level`` upper confidence bound of rho from :func:`seed_correlation`: Fisher's
    z with se 1 / sqrt(df - 2) (df zero-mean pairs: a sample correlation of df + 1 points),
    at least 0 and rounded up to :data:`RHO_GRID`; None below 3 df.

    >>> rho_upper(0.3, 16)
    0.64
    """
    if df < 3:
        return None
    if rho >= 1.0:
        return 1.0
    from statistics import NormalDist

    z = math.atanh(max(rho, -0.999999)) + NormalDist().inv_cdf(level) / math.sqrt(df - 2)
    return min(1.0, max(0.0, math.ceil(round(math.tanh(z) / RHO_GRID, 6)) * RHO_GRID))


@functools.lru_cache(maxsize=256)
def null_taus(
    n_candidates: int, rho: float, draws: int = NULL_DRAWS, seed: int = NULL_SEED
) -> np.ndarray:
    """Sorted Kendall taus of ``draws`` null ladders: ``n_candidates`` candidates with equal true
    effects, each ranked at both rungs by its mean noise, correlated ``rho`` between the rungs
    and independent across candidates (uniform's own noise shifts every paired delta of a rung
    alike, which moves no rank). Depends on nothing else: not the seeds, not the noise scale."""
    rng = np.random.default_rng(seed)
    i, j = np.triu_indices(n_candidates, k=1)
    chunk = max(1, 2_000_000 // max(1, len(i)))
    out = []
    for start in range(0, draws, chunk):
        k = min(chunk, draws - start)
        x = rng.standard_normal((k, n_candidates))
        y = rho * x + math.sqrt(max(0.0, 1.0 - rho * rho)) * rng.standard_normal(x.shape)
        out.append(np.mean(np.sign(x[:, i] - x[:, j]) * np.sign(y[:, i] - y[:, j]), axis=1))
    return np.sort(np.concatenate(out))


def null_threshold(n_candidates: int, rho: float, alpha: float = NULL_ALPHA) -> float | None:
    """The smallest tau that a null ladder (:func:`null_taus`) reaches or passes in at most
    ``alpha`` of draws; None when even tau = +1 is reached more often (too few candidates, or
    noise that the rungs share almost entirely).

    >>> null_threshold(5, 0.0), null_threshold(4, 0.0), null_threshold(4, 0.5)
    (0.8, 1.0, None)
    """
    taus = null_taus(n_candidates, rho)
    pairs = n_candidates * (n_candidates - 1) // 2
    for t in np.arange(-pairs, pairs + 1, 2) / pairs:  # the values tau takes without ties
        if _tail(taus, float(t)) <= alpha:
            return float(round(t, 12))
    return None


def _tail(taus: np.ndarray, tau: float) -> float:
    """P(null tau >= tau) from the sorted null draws."""
    return float(1.0 - np.searchsorted(taus, tau - 1e-9, side="left") / len(taus))


class NullCheck(NamedTuple):
    """Whether two rungs rank alike beyond their shared seeds' noise (:func:`null_check`)."""

    seed_rho: float | None  # the cross-rung correlation of the seed noise (None: not measured)
    rho_df: int  # its df, (C - 1)(S - 1)
    rho_upper: float | None  # its one-sided 95% upper bound, what the null uses
    null_tau95: float | None  # tau the null reaches in <= 5% (None: even +1 more often)
    null_p: float | None  # P(null tau >= the observed tau)


def null_check(lower: np.ndarray, upper: np.ndarray, tau: float) -> NullCheck:
    """The verdict's check (module doc): the seed noise's cross-rung correlation at its upper
    bound, and where ``tau`` (the candidates' means' Kendall tau) falls in the null ladders'
    distribution of tau under that correlation. Nothing measured below 3 residual df."""
    rho, df = seed_correlation(lower, upper)
    if rho is None:
        # no residual noise at a rung: nothing to compare with (all-equal seeds, or one seed)
        return NullCheck(None, df, None, None, None)
    up = rho_upper(rho, df)
    if up is None or not math.isfinite(tau):
        return NullCheck(rho, df, up, None, None)
    n = lower.shape[0]
    return NullCheck(rho, df, up, null_threshold(n, up), _tail(null_taus(n, up), tau))


class Agreement(NamedTuple):
    """Rank agreement of two rungs over ``n_candidates`` candidates and ``n_seeds`` seeds."""

    n_candidates: int
    n_seeds: int
    kendall_tau: float
    tau_ci95: list[float] | None  # percentile bootstrap over seeds; None with one seed
    spearman_rho: float
    rho_ci95: list[float] | None
    decision_accuracy: float
    accuracy_ci95: list[float] | None
    distinct_resamples: int  # C(2S-1, S): the bootstrap's distinct multisets of the S seeds
    seed_rho: float | None = None  # NullCheck's fields: the verdict's test
    rho_df: int = 0
    rho_upper: float | None = None
    null_tau95: float | None = None
    null_p: float | None = None


def agreement(
    lower: np.ndarray,
    upper: np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = LEVEL,
) -> Agreement:
    """Rank agreement of two rungs from per-seed effects, shape (candidates, seeds) each.

    Column s of both is the same seed (common random numbers: the bootstrap resamples whole
    seeds, keeping each seed's pairing across candidates and rungs). The point estimates use
    every seed; the intervals are percentiles of ``resamples`` bootstrap replicates drawn with
    ``numpy.random.default_rng(seed)`` (None with fewer than two seeds: nothing to resample).
    """
    lower, upper = np.asarray(lower, dtype="float64"), np.asarray(upper, dtype="float64")
    if lower.shape != upper.shape or lower.ndim != 2:
        raise ValueError(
            f"effects must share one (candidates, seeds) shape: {lower.shape}, {upper.shape}"
        )
    n_cand, n_seeds = lower.shape
    a, b = lower.mean(axis=1), upper.mean(axis=1)
    point = (kendall_tau(a, b), spearman_rho(a, b), decision_accuracy(a, b))
    cis: list[list[float] | None] = [None, None, None]
    if n_seeds >= 2 and n_cand >= 2:
        rng = np.random.default_rng(seed)
        reps = np.empty((resamples, 3))
        for r in range(resamples):
            idx = rng.integers(0, n_seeds, n_seeds)
            x, y = lower[:, idx].mean(axis=1), upper[:, idx].mean(axis=1)
            reps[r] = (kendall_tau(x, y), spearman_rho(x, y), decision_accuracy(x, y))
        cis = [_percentile_interval(reps[:, k], level) for k in range(3)]
    check = (
        null_check(lower, upper, point[0]) if n_cand >= 2 else NullCheck(None, 0, None, None, None)
    )
    return Agreement(
        n_cand,
        n_seeds,
        point[0],
        cis[0],
        point[1],
        cis[1],
        point[2],
        cis[2],
        distinct_resamples(n_seeds),
        *check,
    )


# -------------------------------------------------------------------------------------------------
# Effect against compute


class Line(NamedTuple):
    """y = intercept + slope * x, x = log10 compute; residual_sd None where nothing is left."""

    intercept: float
    slope: float
    n_points: int
    residual_sd: float | None  # least squares with >= 3 points: sqrt(SSE / (n - 2))
    kind: str  # "line through 2 points" | "least squares" | "one point"


def fit_line(x: Sequence[float], y: Sequence[float]) -> Line:
    """The line through two points, a least-squares line through three or more.

    >>> fit_line([1.0, 3.0], [2.0, 6.0])[:2]
    (0.0, 2.0)
    """
    x, y = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    n = len(x)
    if n < 2 or np.ptp(x) == 0:
        return Line(float(y.mean()) if n else math.nan, math.nan, n, None, "one point")
    if n == 2:
        slope = (y[1] - y[0]) / (x[1] - x[0])
        return Line(float(y[0] - slope * x[0]), float(slope), 2, None, "line through 2 points")
    slope, intercept = np.polyfit(x, y, 1)
    resid = y - (intercept + slope * x)
    sd = math.sqrt(float(resid @ resid) / (n - 2)) if n > 2 else None
    return Line(float(intercept), float(slope), n, sd, "least squares")


def crossing(a: Line, b: Line, x_min: float, *, rtol: float = 1e-9) -> float | None:
    """x where lines ``a`` and ``b`` cross; None when parallel or when x < ``x_min``.

    >>> crossing(Line(0.0, 1.0, 2, None, ""), Line(2.0, -1.0, 2, None, ""), 0.0)
    1.0
    """
    coefs = (a.slope, b.slope, a.intercept, b.intercept)
    if not all(v is not None and math.isfinite(v) for v in coefs):
        return None
    ds = a.slope - b.slope
    if abs(ds) <= max(
        rtol * max(abs(a.slope), abs(b.slope)), ABS_TOL
    ):  # parallel (or float noise)
        return None
    x = (b.intercept - a.intercept) / ds
    return None if x < x_min - 1e-12 else float(x)


def rung_words(log_c: float, rungs: Sequence[float]) -> str:
    """Where ``log_c`` (log10 compute) lies among the rungs' log10 computes, in words.

    >>> rung_words(9.0, [8.0, 9.0, 10.0]), rung_words(9.5, [8.0, 9.0, 10.0])
    ('at rung 1', 'between rung 1 and rung 2 (0.50 of the way)')
    >>> rung_words(11.0, [8.0, 10.0])
    'beyond rung 1 (10x its compute)'
    """
    order = sorted(range(len(rungs)), key=lambda i: rungs[i])
    for i in order:
        if math.isclose(log_c, rungs[i], abs_tol=1e-6):
            return f"at rung {i}"
    for i, j in itertools.pairwise(order):
        if rungs[i] < log_c < rungs[j]:
            frac = (log_c - rungs[i]) / (rungs[j] - rungs[i])
            return f"between rung {i} and rung {j} ({frac:.2f} of the way)"
    top = order[-1]
    return f"beyond rung {top} ({compute_text(log_c - rungs[top])}x its compute)"


def compute_text(log_c: float) -> str:
    """10 ** log_c as text, however large: ``1.99e+04``, ``10^412``.

    >>> compute_text(4.3), compute_text(412.2)
    ('2e+04', '10^412')
    """
    return f"{10**log_c:.3g}" if log_c < 300 else f"10^{log_c:.0f}"


# -------------------------------------------------------------------------------------------------
# A ladder's rungs -> fidelity.json


class Rung(NamedTuple):
    """One rung: its trials table and the compute one of its trainings spends."""

    trials: pd.DataFrame
    compute: float  # training FLOPs per token x tokens (the uniform model's; all share it)
    label: str = ""
    selected_by: int | None = None  # promote mode: the rung whose ranking chose its candidates
    curves: pd.DataFrame | None = None  # its learning curves (the checkpoint noise; None: n/a)


def _effects_by_seed(trials: pd.DataFrame, value: str, sign: float) -> dict[str, dict[int, float]]:
    """identity -> {seed: paired delta x sign} (lower is better); uniform at 0."""
    d = stats.paired_deltas(trials, value, key=IDENTITY)
    out: dict[str, dict[int, float]] = {}
    for row in d.itertuples(index=False):
        out.setdefault(getattr(row, IDENTITY), {})[int(row.seed)] = sign * float(row.delta)
    return out


def _labels(rungs: Sequence[Rung]) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in rungs:
        for key, label in zip(r.trials[IDENTITY], r.trials["candidate"], strict=True):
            out.setdefault(str(key), str(label))
    return out


def _seeds_with_uniform(eff: dict[str, dict[int, float]], base: str | None) -> set[int]:
    return set(eff.get(base, {})) if base is not None else set()


def _baseline_key(rungs: Sequence[Rung]) -> str | None:
    for r in rungs:
        keys = r.trials.loc[r.trials["is_baseline"].astype(bool), IDENTITY]
        if len(keys):
            return str(keys.iloc[0])
    return None


def pair_agreement(
    lo: dict[str, dict[int, float]],
    hi: dict[str, dict[int, float]],
    base: str | None,
    labels: dict[str, str],
    **kw: Any,
) -> dict[str, Any]:
    """Agreement of two rungs: the seeds both paired with uniform, the candidates complete on
    every one of them at both rungs (the others listed as left out)."""
    seeds = sorted(_seeds_with_uniform(lo, base) & _seeds_with_uniform(hi, base))
    both = sorted(set(lo) & set(hi), key=lambda k: labels.get(k, k))
    cands = [k for k in both if all(s in lo[k] and s in hi[k] for s in seeds)]
    left = sorted(labels.get(k, k) for k in (set(lo) | set(hi)) - set(cands))
    out: dict[str, Any] = {"seeds": seeds, "candidates": [labels.get(k, k) for k in cands]}
    out["left_out"] = left
    if not seeds or len(cands) < 2:
        out.update(n_candidates=len(cands), n_seeds=len(seeds), kendall_tau=None)
        out.update(tau_ci95=None, spearman_rho=None, rho_ci95=None, decision_accuracy=None)
        out.update(accuracy_ci95=None, distinct_resamples=distinct_resamples(len(seeds)))
        out.update(seed_rho=None, rho_df=0, rho_upper=None, null_tau95=None, null_p=None)
        return out
    a = np.array([[lo[k][s] for s in seeds] for k in cands])
    b = np.array([[hi[k][s] for s in seeds] for k in cands])
    out.update({k: _clean(v) for k, v in agreement(a, b, **kw)._asdict().items()})
    return out


def _clean(v: Any) -> Any:
    """NaN -> None (JSON and YAML hold no NaN honestly)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def _order(mean: float) -> int:
    return 0 if not math.isfinite(mean) or mean == 0 else (1 if mean > 0 else -1)


def decisions_vs_top(rungs: Sequence[Rung], evidence: Sequence[Evidence]) -> list[dict[str, Any]]:
    """Decision accuracy per FLOP (DataDecide, arXiv 2504.11393) of every cheaper rung against
    the top one (the last): see the module doc. ``evidence``: each rung's, keyed by identity.

    Per rung: compute and its ratio to the top's; ``n_pairs`` candidate pairs both measured
    (a completed seed in each, uniform a candidate); ``accuracy`` over all of them, a pair tied
    at either rung counting half (DataDecide's measure); ``accuracy_separated`` over the
    ``n_separated`` pairs the top rung separates, ``accuracy_within_noise`` over the rest
    (None where there are none, ``note`` says why).
    """
    top = len(rungs) - 1
    if top < 1:
        return []
    labels = _labels(rungs)

    def measured(ev: Evidence) -> set[str]:
        r = ev.ranking
        return set(r.loc[r["tier"] < 3, ev.key].astype(str))

    top_ev = evidence[top]
    out = []
    for i in range(top):
        cands = sorted(measured(evidence[i]) & measured(top_ev), key=lambda k: labels.get(k, k))
        row: dict[str, Any] = {
            "rung": i,
            "top": top,
            "compute": _clean(rungs[i].compute),
            "compute_ratio": _clean(rungs[i].compute / rungs[top].compute)
            if rungs[top].compute > 0
            else None,
            "n_candidates": len(cands),
            "candidates": [labels.get(k, k) for k in cands],
        }
        hits: dict[bool, list[float]] = {True: [], False: []}
        if len(cands) >= 2:
            lo = evidence[i].pairs(rungs[i].trials, cands)
            hi = top_ev.pairs(rungs[top].trials, cands)
            first = {(a, b) for a, b in itertools.combinations(cands, 2)}
            lo_mean = {(a, b): m for a, b, m in zip(lo["a"], lo["b"], lo["mean"], strict=True)}
            for a, b, m, n, sep in zip(
                hi["a"], hi["b"], hi["mean"], hi["n"], hi["separated"], strict=True
            ):
                if (a, b) not in first or n < 1 or not math.isfinite(lo_mean[(a, b)]):
                    continue
                x, y = _order(lo_mean[(a, b)]), _order(m)
                right = 0.5 if x == 0 or y == 0 else float(x == y)
                hits[sep is not pd.NA and bool(sep)].append(right)
        every = hits[True] + hits[False]

        def share(v: list[float]) -> float | None:
            return float(np.mean(v)) if v else None

        row.update(
            n_pairs=len(every),
            accuracy=share(every),
            n_separated=len(hits[True]),
            accuracy_separated=share(hits[True]),
            accuracy_within_noise=share(hits[False]),
        )
        if not every:
            row["note"] = "n/a: fewer than 2 candidates measured at both rungs"
        elif not hits[True]:
            row["note"] = (
                f"the top rung separates none of the {len(every)} pairs: every "
                "decision it makes is within its noise"
            )
        else:
            row["note"] = ""
        out.append(row)
    return out


def fidelity(
    rungs: Sequence[Rung],
    value: str,
    sense: str = "minimize",
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = LEVEL,
    family: str = FAMILY,
) -> dict[str, Any]:
    """Everything ``tlmsearch fidelity`` prints and ``fidelity.json`` holds (see module doc).

    ``value``: the trials column of the metric; ``sense``: which way is better. Effects are
    reported in the metric's own sign (a negative val_bpb effect beats uniform). ``level``,
    ``family``: the study's ``stats.level`` and ``stats.family``, which decide each rung's
    separated pairs.
    """
    sign = 1.0 if sense == "minimize" else -1.0
    labels = _labels(rungs)
    base = _baseline_key(rungs)
    evidence = [
        Evidence.build(
            r.trials, value, sense, key=IDENTITY, curves=r.curves, level=level, family=family
        )
        for r in rungs
    ]
    eff = [_effects_by_seed(r.trials, value, sign) for r in rungs]
    pairs = []
    for i, j in itertools.combinations(range(len(rungs)), 2):
        p = pair_agreement(eff[i], eff[j], base, labels, resamples=resamples, seed=seed)
        # the candidates both measured are those the upper rung trained: in promote mode, the
        # ones the rung below it ranked best, so tau is measured on that selection only
        by = rungs[j].selected_by if rungs[j].selected_by is not None else rungs[i].selected_by
        chosen = None if by is None else f"the candidates rung {by} promoted by rank"
        pairs.append({"lower": i, "upper": j, **p, "conditional_on": chosen})
    logc = [math.log10(r.compute) if r.compute > 0 else math.nan for r in rungs]
    # every rung's point of a candidate: its mean effect over the seeds paired at every rung
    common = set.intersection(*(_seeds_with_uniform(e, base) for e in eff)) if eff else set()
    fits = []
    for key in sorted({k for e in eff for k in e}, key=lambda k: labels.get(k, k)):
        pts = [
            (logc[i], float(np.mean([e[key][s] for s in sorted(common)])))
            for i, e in enumerate(eff)
            if key in e and common and all(s in e[key] for s in common)
        ]
        pts = [(x, sign * y) for x, y in pts if math.isfinite(x)]
        line = fit_line([p[0] for p in pts], [p[1] for p in pts])
        fits.append(
            {
                "candidate": labels.get(key, key),
                IDENTITY: key,
                "points": [{"log10_compute": x, "compute": 10**x, "effect": y} for x, y in pts],
                **{k: _clean(v) for k, v in line._asdict().items()},
            }
        )
    crossings = _crossings(fits, logc)
    return {
        "metric": value,
        "sense": sense,
        "effect": "mean paired delta vs the same seed's uniform, over the seeds paired at every "
        "rung (value minus uniform; uniform is 0)",
        "bootstrap": {
            "resamples": resamples,
            "rng_seed": seed,
            "level": LEVEL,
            "resampled": "seeds, with replacement",
        },
        "rungs": [
            {
                "index": i,
                "label": r.label,
                "compute": r.compute,
                "log10_compute": _clean(logc[i]),
                "signal_to_noise": ev.snr.as_dict() if ev.snr is not None else None,
            }
            for i, (r, ev) in enumerate(zip(rungs, evidence, strict=True))
        ],
        "pairs": pairs,
        "decisions": decisions_vs_top(rungs, evidence),
        "fits": fits,
        "crossings": crossings,
        "trust": trust_line(pairs[-1] if pairs else None, len(rungs)),
    }


def _crossings(fits: list[dict[str, Any]], logc: list[float]) -> list[dict[str, Any]]:
    """Where each pair of candidates' effect-vs-compute lines cross, at or above the smallest
    rung (``logc``: each rung's log10 compute)."""
    crossings = []
    x_min = min((x for x in logc if math.isfinite(x)), default=math.nan)
    for fa, fb in itertools.combinations([f for f in fits if f["slope"] is not None], 2):
        la, lb = (
            Line(f["intercept"], f["slope"], f["n_points"], None, f["kind"]) for f in (fa, fb)
        )
        x = crossing(la, lb, x_min)
        crossings.append(
            {
                "a": fa["candidate"],
                "b": fb["candidate"],
                "log10_compute": x,
                "compute": None if x is None or x > 300 else 10**x,
                "effect": None if x is None else la.intercept + la.slope * x,
                "where": "no crossing at or above the smallest rung"
                if x is None
                else rung_words(x, logc),
            }
        )
    return crossings


def with_ci(value: float | None, ci: Sequence[float] | None) -> str:
    """``+0.80 [+0.33, +1.00]``; ``-`` when not measured; no interval with one seed, said.

    >>> with_ci(0.8, [0.33, 1.0]), with_ci(None, None), with_ci(1.0, None)
    ('+0.80 [+0.33, +1.00]', '-', '+1.00 (1 seed: no CI)')
    """
    if value is None:
        return "-"
    return f"{value:+.2f}" + (f" [{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else " (1 seed: no CI)")


def snr_cells(snr: dict[str, Any] | None) -> list[str]:
    """A ``signal_to_noise`` block (best.yaml, fidelity.json) as table cells: spread, SNR over
    seeds (and what noise alone gives), SNR over checkpoints; ``n/a (why)`` where unmeasured."""
    if not snr:
        return ["-", "n/a", "n/a"]
    seed, ck = snr["seed_noise"], snr["checkpoint_noise"]
    spread = "-" if snr["dispersion"] is None else f"{snr['dispersion']:.4g}"
    by_seed = (
        f"{seed['snr']:.1f} (all equal: ~{seed['snr_if_all_equal']:.1f})"
        if seed["snr"] is not None
        else f"n/a ({seed['why']})"
    )
    by_ck = f"{ck['snr']:.1f}" if ck["snr"] is not None else f"n/a ({ck['why']})"
    return [spread, by_seed, by_ck]


def top_pair(doc: dict[str, Any]) -> dict[str, Any] | None:
    """The agreement between the two largest rungs (the last two)."""
    n = len(doc.get("rungs") or [])
    for p in doc.get("pairs") or []:
        if p["lower"] == n - 2 and p["upper"] == n - 1:
            return p
    return None


def _too_few(n_candidates: int, n_seeds: int) -> list[str]:
    """Why the verdict cannot judge from this many candidates and seeds (empty: it can)."""
    out = []
    if n_seeds < MIN_SEEDS:
        d, s = distinct_resamples(n_seeds), n_seeds
        out.append(
            f"only {d} distinct bootstrap resample{'s' * (d != 1)} with {s} seed{'s' * (s != 1)}"
            f" ({MIN_SEEDS} seeds give {distinct_resamples(MIN_SEEDS)})"
        )
    if n_candidates < MIN_CANDIDATES:
        out.append(
            f"only {n_candidates} candidates (tau is +1 by chance 1 time in "
            f"{math.factorial(n_candidates)}; {MIN_CANDIDATES} are the fewest to judge from)"
        )
    return out


def _null_verdict(pair: dict[str, Any]) -> str:
    """The verdict from the pair's null check (:func:`null_check`), in words."""
    rho, up, thr, p = (pair.get(k) for k in ("seed_rho", "rho_upper", "null_tau95", "null_p"))
    if rho is None:
        return "no residual seed noise at a rung to test the agreement against: too few to judge"
    if up is None:
        return (
            f"the seed noise's correlation between the rungs ({rho:+.2f}) rests on "
            f"{pair.get('rho_df')} df, too few to bound: too few to judge"
        )
    shared = (
        f"the rungs share their seeds, whose noise correlates {rho:+.2f} between them "
        f"(95% upper bound {up:+.2f}, {pair.get('rho_df')} df)"
    )
    if thr is None:
        return (
            f"{shared}; with that correlation a ranking with no true agreement reaches even "
            f"tau +1.00 in more than {NULL_ALPHA:.0%} of draws: too few to judge"
        )
    null = (
        f"{shared}; a ranking with no true agreement and that correlation reaches tau "
        f"{thr:+.2f} or more in at most {NULL_ALPHA:.0%} of draws, this tau or more in "
        f"{p:.1%}"
    )
    if pair["kendall_tau"] >= thr - 1e-9:
        return f"{null}: the proxy's ranking can be trusted at this step"
    return f"{null}: the proxy's ranking is not shown to hold at the larger size"


def trust_line(pair: dict[str, Any] | None, n_rungs: int) -> str:
    """One sentence: how far the proxy's ranking can be trusted, from the top two rungs.

    "Can be trusted" only where tau passes the null check (:func:`null_check`: a ranking with
    no true agreement, its noise as correlated between the rungs as the shared seeds', reaches
    that tau in at most :data:`NULL_ALPHA` of draws). Never below :data:`MIN_SEEDS` seeds or
    :data:`MIN_CANDIDATES` candidates: it says which is short instead.
    """
    if pair is None or pair.get("kendall_tau") is None:
        return (
            "not measured: the top two rungs share fewer than two candidates on a common seed, "
            "so the proxy's ranking is untested"
        )
    tau, ci = pair["kendall_tau"], pair.get("tau_ci95")
    acc, n_seeds = pair["decision_accuracy"], pair["n_seeds"]
    d = distinct_resamples(n_seeds)
    span = (
        f" (95% CI {ci[0]:+.2f} to {ci[1]:+.2f}, {d} distinct resamples)"
        if ci
        else " (one seed: no interval)"
    )
    head = (
        f"rung {pair['lower']} ranks {pair['n_candidates']} candidates as rung {pair['upper']} "
        f"does with Kendall tau {tau:+.2f}{span} over {n_seeds} seed(s); it orders "
        f"{acc:.0%} of candidate pairs the same"
    )
    if pair.get("conditional_on"):
        head += (
            f", conditional on {pair['conditional_on']} (chosen by that ranking: the order among "
            "them, not over the whole space)"
        )
    short = _too_few(pair["n_candidates"], n_seeds)
    if short:
        verdict = f"{'; '.join(short)}: too few to judge"
    elif ci is None:
        verdict = "no interval: too few to judge"
    else:
        verdict = _null_verdict(pair)
    return f"{head}: {verdict}"
