"""The noise of each comparison when the rows are not equally noisy: every candidate and uniform
(a *row* of the candidate x seed table) gets its own residual variance where its seeds show it
noisier than the pooled one, and a paired delta's variance is the sum of its two rows'.

The block fit (:func:`tlmsearch.stats.block_noise`) assumes one residual variance for every
row. When one row is noisier the pooled estimate understates that row's comparisons, and when
that row is uniform it understates *every* comparison at once: with 15 candidates and 3 seeds,
uniform's residual sd 2x (3x) the candidates' made 13% (25%) of null studies claim a false
separation under Holm at 5%, one candidate's 3x made 13% (``benchmarks/stats.py``). The model
here (``rows``):

- every row's own variance from the same fit: E[SS_i] = sum_r A_ir sigma_r^2 with
  A_ir = sum over row i's cells k and row r's cells j of M_kj^2, M = I - H the fit's residual
  projection; solving it is Shukla's (1972) stability-variance estimator in a complete table
  and the same unbiased estimate with cells missing (raced, pruned, lost);
- a *candidate* row keeps the pooled variance unless a one-sided F test of its residual mean
  square against the other rows' rejects at ``1 - level`` (then its own, n_i - 1 df): its
  comparison is the only one that leans on it;
- *uniform* takes its own variance (n_i - 1 df) whenever its estimate exceeds the pooled one,
  and keeps the pool otherwise. Every comparison leans on it, and with 3 seeds its own variance
  has 2 df: a test of "noisier" at 5% misses a 2x noisier uniform in most studies, so the
  burden of proof is on "as quiet as the rest". No tolerance above the pool: a gate "pooled
  unless the seeds rule out 4x the others' variance at 80%" pooled a modestly noisier uniform
  more often the more seeds it had (its ratio concentrates below 4), and its false-claim rate
  grew with seeds (``benchmarks/stats.py --gate``). (Its own variance whatever its size, below
  the pool too, was measured as well: 7-8% family-wise error with every row equally noisy or
  one candidate 3x noisier, where a quiet uniform's 2 df make every comparison look precise.)
- a paired delta between rows a and b has variance v_a + v_b (the seed's level cancels), with
  Satterthwaite's df over the pooled part and each own part (rounded down); when both rows use
  their own, the exact paired test: the sample variance of a - b over their common seeds.

With every row equally noisy uniform still takes its own variance in 39% of studies of 3 seeds
(42% of 5; benchmarks/power_frontier.py, "own when larger") and a candidate in 4.5%: those
comparisons pay with fewer df. :meth:`RowNoise.share` is uniform's share of a comparison's
variance: how the comparisons with uniform move together (:mod:`tlmsearch.stats.maxt` wins
back part of that power). What it costs and buys: docs/statistics.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.constants import LEVEL
from tlmsearch.stats.deltas import UNKNOWN_SEED, pruned_in, pruner_selected, trial_cells
from tlmsearch.stats.noise import Noise, two_way
from tlmsearch.stats.quantiles import f_ppf, f_sf

POOLED, OWN = "pooled", "own"  # where a row's variance comes from
# the variance models a study's comparisons can use: rows (this module) or pooled (the block
# fit's one noise for every comparison, :func:`tlmsearch.stats.block_noise`)
ROWS = "rows"
VARIANCES = (ROWS, POOLED)
# uniform's gate: it keeps the pooled variance where its residual mean square over the other
# rows' is below UNIFORM_RATIO x the F quantile at 1 - UNIFORM_CONFIDENCE (and takes its own
# only when that is above the pool). With ratio 0 the gate is "its own whenever its estimate
# exceeds the pool": every comparison rests on uniform, and any fixed tolerance above 1 leaks
# as seeds grow (a modestly noisier uniform's ratio concentrates below it, is pooled, and every
# comparison is understated: 4x at 80% made 10.5% +- 1.0 of 1000 null studies of 20 seeds
# with uniform's sd 1.5x claim a false separation, 4.7% at 3 seeds; benchmarks/stats.py --gate,
# docs/statistics.md). The constants stay so that benchmarks/power_frontier.py can sweep gates.
UNIFORM_RATIO, UNIFORM_CONFIDENCE = 0.0, 0.8


@dataclass(frozen=True)
class RowVariance:
    """One row's residual variance (one cell's, not a delta's) and where it came from."""

    var: float  # sigma_i^2 the comparisons use: the pooled or its own
    df: int  # its degrees of freedom
    source: str  # pooled | own
    own: float  # its own estimate (unbiased; NaN when the row has one cell)
    p: float  # one-sided p of "noisier than the other rows" (NaN when not testable)


@dataclass(frozen=True)
class RowNoise:
    """Each row's noise and the pooled one: :meth:`pair` is the noise of one paired delta.

    ``sd`` and ``df`` are the pooled noise of one paired delta (the block fit's,
    :class:`Noise`), so a reader of "the study's noise" sees the same number as before.
    """

    pooled: Noise
    rows: Mapping[Any, RowVariance]
    baseline: tuple[Any, ...] = ()  # uniform's key(s): the rows that use their own when larger
    cells: Mapping[Any, Mapping[Any, float]] = field(default_factory=dict, repr=False)

    @property
    def sd(self) -> float:
        return self.pooled.sd

    @property
    def df(self) -> int:
        return self.pooled.df

    def quantile(self, confidence: float) -> float:
        return self.pooled.quantile(confidence)

    def one_sided(self, confidence: float) -> float:
        return self.pooled.one_sided(confidence)

    def source(self, a: Any, b: Any) -> str:
        """Whose own variance the pair (a, b) uses: pooled | a | b | both (row keys)."""
        own = [r for r in (a, b) if r in self.rows and self.rows[r].source == OWN]
        return "pooled" if not own else "both" if len(own) == 2 else str(own[0])

    def share(self, a: Any, b: Any) -> float:
        """``b``'s share of the variance of the paired delta a - b (b: the baseline).

        Two comparisons with the same baseline correlate by the product of the square roots of
        their shares (:mod:`tlmsearch.stats.maxt`); with every row on the pooled variance each
        share is 1/2.
        """
        ra, rb = self.rows.get(a), self.rows.get(b)
        var_p = self.pooled.sd**2 / 2.0
        va = ra.var if ra is not None and ra.source == OWN else var_p
        vb = rb.var if rb is not None and rb.source == OWN else var_p
        return vb / (va + vb) if va + vb > 0 else 0.5

    def pair(self, a: Any, b: Any) -> Noise | None:
        """The noise of one paired delta a - b on a seed: sd and df.

        >>> rv = {"u": RowVariance(4.0, 2, OWN, 4.0, 0.01), "c": RowVariance(1.0, 30, POOLED,
        ...       0.9, 0.5)}
        >>> m = RowNoise(Noise(math.sqrt(2.0), 30), rv, ("u",))
        >>> n = m.pair("c", "u")  # 1 + 4, Satterthwaite: 25 / (1/30 + 16/2)
        >>> round(n.sd ** 2, 6), n.df
        (5.0, 3)
        >>> m.pair("c", "x") == m.pooled  # both on the pooled variance
        True
        """
        ra, rb = self.rows.get(a), self.rows.get(b)
        var_p = self.pooled.sd**2 / 2.0
        own = [r for r in (ra, rb) if r is not None and r.source == OWN]
        if not own:
            return self.pooled
        if len(own) == 2:
            exact = _paired(self.cells.get(a, {}), self.cells.get(b, {}))
            if exact is not None:
                return exact
        pooled_parts = 2 - len(own)
        var = pooled_parts * var_p + sum(r.var for r in own)
        denom = (pooled_parts * var_p) ** 2 / self.pooled.df + sum(r.var**2 / r.df for r in own)
        if not var > 0 or not denom > 0:
            return self.pooled
        return Noise(math.sqrt(var), max(1, int(var * var / denom)))


def _deltas(va: Mapping[Any, float], vb: Mapping[Any, float]) -> np.ndarray:
    """a - b on the blocks both rows completed."""
    return np.array([va[k] - vb[k] for k in sorted(set(va) & set(vb), key=str)])


def _paired(va: Mapping[Any, float], vb: Mapping[Any, float]) -> Noise | None:
    """The paired test's noise of a - b: the sample sd of a - b over the common blocks."""
    d = _deltas(va, vb)
    if len(d) < 2:
        return None
    sd = float(d.std(ddof=1))
    return Noise(sd, len(d) - 1) if sd > 0 else None


def row_fit(
    rows: Sequence[Any], blocks: Sequence[Any], values: Sequence[float]
) -> tuple[dict[Any, tuple[float, float, float, int]], float, int]:
    """Each row's (own variance, residual sum of squares, residual df share, cells) from the
    additive fit value ~ row + block, and the fit's (residual sum of squares, residual df).

    The own variances solve E[SS_i] = sum_r A_ir sigma_r^2 (the module docstring); a row whose
    residuals carry no information (one cell, fit exactly) gets NaN. In a complete table this
    is Shukla's estimator, (R SS_i / (S - 1) - pooled) / (R - 2).

    Unbiased, so a quiet row's can fall below zero; in a complete table their mean is the
    pooled residual variance:

    >>> own, rss, df = row_fit(list("uuuaaabbb"), [0, 1, 2] * 3,
    ...                        [0.0, 1.0, 2.0, 0.2, 1.0, 2.0, 0.0, 1.3, 1.9])
    >>> df, {r: round(v[0], 4) for r, v in own.items()}, round(rss / df, 4)
    (4, {'u': -0.0067, 'a': 0.02, 'b': 0.05}, 0.0211)
    """
    y = np.asarray(values, dtype="float64")
    fit = two_way(rows, blocks, y)
    codes, names, n = fit.codes, fit.names, fit.n
    df = len(y) - fit.rank
    resid = fit.resid
    rss = float(resid @ resid)
    tiny = len(y) * (1e-12 * float(np.abs(y).max())) ** 2 if len(y) else 0.0
    if rss <= tiny:  # rounding, not noise: exactly 0 (as block_fit)
        rss, resid = 0.0, np.zeros_like(resid)
    ss = np.bincount(codes, weights=resid * resid, minlength=len(names))
    # M = I - P_G - u u' (stats.noise.TwoWay). Within row i, sum_k M_kk = n_i - 1 - t_i with
    # t_i = sum_k |u_k|^2 (row i's share of the residual df); A_ir = sum of M_kj^2 over row i's
    # cells k and row r's cells j is f_i . f_r with f_i = sum_k vec(u_k u_k') (M_kj = -u_k.u_j
    # across rows; u sums to 0 within a row), plus n_i - 1 - 2 t_i on the diagonal
    t = np.bincount(codes, weights=(fit.u * fit.u).sum(axis=1), minlength=len(names))
    share = n - 1.0 - t
    r = fit.u.shape[1]
    f = np.zeros((len(names), r * r))
    np.add.at(f, codes, (fit.u[:, :, None] * fit.u[:, None, :]).reshape(len(y), r * r))
    informative = share > 1e-9
    own = np.full(len(names), math.nan)
    # Two rows (uniform and one candidate) share every residual (one is minus the other): only
    # their sum is measured, and a least-squares split of it is the linear algebra library's
    # choice, not the data's. Own variances exist where the system pins each of them.
    if informative.any() and df > 0:
        solved = _solve_rows(
            n[informative] - 1.0 - 2.0 * t[informative], f[informative], ss[informative]
        )
        if solved is not None:
            own[informative] = solved
    out = {
        name: (float(own[i]), float(ss[i]), float(share[i]), int(n[i]))
        for i, name in enumerate(names)
    }
    return out, rss, df


def _solve_rows(d: np.ndarray, f: np.ndarray, ss: np.ndarray) -> np.ndarray | None:
    """x with (diag(d) + f f') x = ss, None where the system does not pin every x (rank below
    its size at rcond 1e-9). Woodbury's identity (f has r^2 columns, r = the blocks' rank)
    where it is the smaller system (r^2 below the rows: many candidates, few blocks) and
    diag(d) and the r^2 x r^2 capacitance are well conditioned; else the explicit rows x rows
    least squares. (With settings the blocks are seed x setting: 10 seeds x 4 settings make
    r^2 = 1,521 against 24 rows, and the capacitance's condition number alone, an SVD, took
    2.6 s a fit.)"""
    woodbury = 0 < f.shape[1] < len(d)
    if woodbury and float(np.abs(d).min()) > 1e-6 * max(float(np.abs(d).max()), 1.0):
        fd = f / d[:, None]
        cap = np.eye(f.shape[1]) + f.T @ fd
        if np.linalg.cond(cap) < 1e6:
            x = ss / d
            return x - fd @ np.linalg.solve(cap, f.T @ x)
    a = np.diag(d) + f @ f.T
    solved, _, rank, _ = np.linalg.lstsq(a, ss, rcond=1e-9)
    return solved if rank == len(d) else None


def row_noise(
    trials: pd.DataFrame,
    value: str,
    *,
    key: str = "candidate",
    level: float = LEVEL,
    pruned: bool | None = None,
) -> RowNoise | None:
    """The study's :class:`RowNoise` from its completed cells of known seeds (blocks: seeds, or
    (setting, seed) with setting dimensions, as :func:`tlmsearch.stats.block_noise`); None
    when the fit leaves no residual df. Rows a pruner selected (:func:`pruner_selected`: a
    pruned or failed seed, or, once anything was pruned, every row it could have stopped) are
    left out of the fit, and use the pooled variance unless their own paired deltas scatter
    more (:func:`_censored_row`); when the rows the pruner could not stop (uniform, ``unpruned``)
    leave no residual df the noise is unknown (None). A replayed twin (``same_as``) takes its
    original's row. ``pruned``: whether the whole study pruned anything
    (:func:`~tlmsearch.stats.deltas.any_pruned`), for a table of one setting; None: this table's.

    A candidate row uses its own variance when the one-sided F test of its residual mean square
    against the other rows' rejects at ``1 - level``; uniform (``is_baseline``) whenever its own
    estimate is larger than the pooled one (:data:`UNIFORM_RATIO`).
    """
    twins = _twins(trials, key)
    if "same_as" in trials:
        trials = trials[trials["same_as"].isna()]
    cells = trial_cells(trials, value, key)
    done = [
        (c, (cell.setting, s) if cell.setting else s, cell.value, cell.is_baseline)
        for (c, s), cell in cells.items()
        if cell.outcome == "complete" and s != UNKNOWN_SEED
    ]
    if not done:
        return None
    # a row the pruner stopped on some seed kept only the seeds it did well on, and once it
    # stopped anything, the rows it let run survived by looking good: their complete cells are
    # selected, and their residuals would shrink the noise (measured: a median-pruned null
    # study's complete cells read its variance at 0.77x the truth). Those rows are left
    # out of the fit and judged on the noise of the rows the pruner could not stop (uniform and
    # search.unpruned_candidates), while those leave residual df
    censored = pruner_selected(cells, pruned)
    kept = [d for d in done if d[0] not in censored]
    if censored and not _has_df(kept):
        # only the pruner's survivors could measure it: unknown, not biased (a median-pruned
        # null study's complete cells read its variance at 0.77x the truth, 0.01-0.06x in
        # single studies, and false claims followed; benchmarks/stats.py)
        return None
    rows, blocks, values, base = zip(*kept, strict=True)
    fit, rss, df = row_fit(rows, blocks, values)
    if df < 1:
        return None
    var_p = rss / df
    pooled = Noise(math.sqrt(2.0 * var_p), df)
    baseline = tuple(dict.fromkeys(r for r, b in zip(rows, base, strict=True) if b))
    # with two rows (uniform and one candidate) their residuals mirror each other: the pooled
    # fit is the paired test itself, and no row can be told noisier than the other
    testable = sum(share > 1e-9 for _, _, share, _ in fit.values()) >= 3
    noisy = _noisier_rows(fit, baseline, var_p, level) if testable and var_p > 0 else {}
    out: dict[Any, RowVariance] = {}
    for row, (own, _, _, n) in fit.items():
        p = noisy.get(row, (False, math.nan))[1]
        if noisy.get(row, (False,))[0] and n >= 2 and math.isfinite(own):
            out[row] = RowVariance(max(own, 0.0), n - 1, OWN, own, p)
        else:
            out[row] = RowVariance(var_p, df, POOLED, own, p)
    by_row: dict[Any, dict[Any, float]] = {}
    for r, b, v, _ in done:
        by_row.setdefault(r, {})[b] = float(v)
    ref = out.get(baseline[0]) if baseline else None
    for row in {d[0] for d in done} - set(out):  # censored, left out of the fit
        out[row] = _censored_row(
            by_row[row], by_row.get(baseline[0], {}) if baseline else {}, ref, var_p, df, level
        )
    for twin, original in twins.items():  # a replayed twin is its original's row
        if original in out and twin not in out:
            out[twin] = out[original]
            by_row[twin] = by_row.get(original, {})
    return RowNoise(pooled, out, baseline, by_row)


NO_DF = "the design has no residual degrees of freedom yet"


def unknown_why(
    trials: pd.DataFrame, value: str, *, key: str = "candidate", pruned: bool | None = None
) -> str:
    """Why :func:`row_noise` is None for this table, in words: no residual df yet, or a pruner
    stopped some candidate and the rows it could not stop (uniform and the ``unpruned``
    candidates) leave none.

    >>> t = pd.DataFrame({"candidate": ["u", "u", "a", "a", "b", "b"], "seed": [0, 1] * 3,
    ...                   "state": ["COMPLETE"] * 5 + ["PRUNED"], "v": [1.0] * 6,
    ...                   "is_baseline": [True, True, False, False, False, False]})
    >>> unknown_why(t, "v")[:60]
    'a pruner stopped a candidate, and only uniform and the candi'
    >>> unknown_why(t.iloc[:2], "v")
    'the design has no residual degrees of freedom yet'
    """
    cells = trial_cells(trials, value, key) if not trials.empty else {}
    if not (pruned_in(cells) if pruned is None else pruned):
        return NO_DF
    unpruned = {c for (c, _), cell in cells.items() if cell.unpruned}
    which = (
        f"{len(unpruned)} unpruned"
        if unpruned
        else "none unpruned: search.unpruned_candidates was 0, or the run predates it"
    )
    return (
        "a pruner stopped a candidate, and only uniform and the candidates it could not "
        f"stop ({which}) measure the noise; they leave no residual degrees of freedom "
        "yet"
    )


def _twins(trials: pd.DataFrame, key: str) -> dict[Any, Any]:
    """A replayed twin's row -> its original's (``same_as`` names the original's trial
    number): the same model, so the same variance."""
    if "same_as" not in trials or "number" not in trials:
        return {}
    first = trials.drop_duplicates("number").set_index("number")[key]
    out = {}
    for row, number in zip(trials[key], trials["same_as"], strict=True):
        if pd.notna(number) and number in first.index and first[number] != row:
            out[row] = first[number]
    return out


def _censored_row(
    cells: Mapping[Any, float],
    baseline: Mapping[Any, float],
    ref: RowVariance | None,
    var_p: float,
    df: int,
    level: float,
) -> RowVariance:
    """A pruned row, left out of the fit: the pool, unless its own paired deltas with uniform
    scatter more than the model's pair says (one-sided F test at ``1 - level``, as a
    candidate row in the fit): then its own, the deltas' variance less uniform's."""
    d = _deltas(cells, baseline)
    if len(d) < 2 or ref is None:
        return RowVariance(var_p, df, POOLED, math.nan, math.nan)
    s2, v_u = float(d.var(ddof=1)), ref.var
    model = var_p + v_u
    p = f_sf(s2 / model, len(d) - 1, df) if model > 0 else 0.0
    own = s2 - v_u
    if p < 1.0 - level:
        return RowVariance(max(own, 0.0), len(d) - 1, OWN, own, p)
    return RowVariance(var_p, df, POOLED, own, p)


def _has_df(done: Sequence[tuple[Any, Any, float, bool]]) -> bool:
    """Whether an additive fit of these (row, block, value, _) cells leaves residual df."""
    if not done:
        return False
    rows, blocks = {d[0] for d in done}, {d[1] for d in done}
    return len(done) - (len(rows) + len(blocks) - 1) >= 1


def _noisier_rows(
    fit: Mapping[Any, tuple[float, float, float, int]],
    baseline: Sequence[Any],
    var_p: float,
    level: float,
) -> dict[Any, tuple[bool, float]]:
    """row -> (noisier than the rest, one-sided p of the F test of its residual mean square
    against the other rows').

    A candidate qualifies at ``1 - level``; uniform when its own estimate exceeds the pooled
    one (never below the pool), and its mean-square ratio reaches :data:`UNIFORM_RATIO` x the F
    quantile at ``1 -`` :data:`UNIFORM_CONFIDENCE` (0 as shipped: no further condition). Each
    row is tested against all the others once: testing again against the rows left quiet
    would read the loudest rows' absence as a quieter reference and, with every row equally
    noisy, flag more of them (2-3 points of power at 5 seeds in ``benchmarks/stats.py``).
    """
    ss_all = sum(ss for _, ss, _, _ in fit.values())
    df_all = sum(share for _, _, share, _ in fit.values())
    out: dict[Any, tuple[bool, float]] = {}
    for row, (own, ss, share, _) in fit.items():
        rest, ss_rest = df_all - share, ss_all - ss
        if not (share > 1e-9 and rest > 1e-9):
            out[row] = (False, math.nan)
            continue
        ratio = (ss / share) / (ss_rest / rest) if ss_rest > 0 else math.inf
        p = f_sf(ratio, share, rest)
        if row in baseline:
            close = UNIFORM_RATIO * f_ppf(1.0 - UNIFORM_CONFIDENCE, share, rest)
            out[row] = (not ratio < close and own > var_p * (1.0 + 1e-9), p)
        else:
            out[row] = (p < 1.0 - level, p)
    return out
