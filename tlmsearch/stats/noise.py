"""The noise of one paired delta, from the study's fit as a randomized block design
(``value ~ candidate + seed``, uniform one of the candidates; docs/statistics.md): one estimate
for every candidate, with the df of the whole design; and with setting dimensions, each
setting's own, and the noise of a delta across settings (Satterthwaite)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.stats.deltas import UNKNOWN_SEED, any_pruned, pruner_selected, trial_cells
from tlmsearch.stats.quantiles import t_quantile


@dataclass(frozen=True)
class Noise:
    """The sd of one paired delta (a candidate minus uniform on one seed) and its df.

    From the block-design fit (:func:`block_noise`): ``sd`` = sqrt(2) x the residual sd of
    ``value ~ candidate + seed``, ``df`` its residual degrees of freedom. ``df`` 0 is a racing
    prior (an assumption, not a measurement): a normal quantile.
    """

    sd: float
    df: int

    def quantile(self, confidence: float) -> float:
        """Two-sided quantile at ``confidence`` (t with ``df``; normal for the prior)."""
        return t_quantile(1e9 if self.df == 0 else self.df, confidence)

    def one_sided(self, confidence: float) -> float:
        """One-sided quantile at ``confidence``: the two-sided one at ``2 * confidence - 1``."""
        return self.quantile(2.0 * confidence - 1.0)

    def pair(self, a: Any, b: Any) -> Noise:
        """The noise of a paired delta between rows ``a`` and ``b``: this one for every pair
        (the pooled model; :class:`tlmsearch.stats.RowNoise` gives each pair its own)."""
        return self

    def source(self, a: Any, b: Any) -> str:
        """Whose own variance the pair uses: none, the pooled one for every pair."""
        return "pooled"

    def share(self, a: Any, b: Any) -> float:
        """``b``'s share of a paired delta's variance: half, every row equally noisy."""
        return 0.5


def block_fit(
    candidates: Sequence[Any], seeds: Sequence[int], values: Sequence[float]
) -> tuple[float, int]:
    """(residual sum of squares, residual df) of the two-way additive fit value ~ candidate + seed.

    A study is a randomized block design: candidates are treatments (uniform one of them), seeds
    are blocks, y(c, s) = mu + tau_c + u_s + e_cs. Every paired delta on seed s subtracts the
    same uniform value, so the deltas of one seed share its -e_us: pooling each candidate's
    deltas as if independent misstates the noise (docs/contributing.md). The residuals of this
    fit estimate sigma_e^2 with df = cells - rank(design) ((C - 1)(S - 1) in a complete design);
    cells a race or pruner left empty are simply absent. Equal to statsmodels'
    ``ols("value ~ C(candidate) + C(seed)")`` (tests/test_stats.py checks it).

    >>> rss, df = block_fit(["u", "u", "a", "a"], [0, 1, 0, 1], [1.0, 2.0, 1.5, 2.1])
    >>> round(rss, 4), df
    (0.04, 1)
    """
    y = np.asarray(values, dtype="float64")
    if len(y) == 0:
        return 0.0, 0
    fit = two_way(candidates, seeds, y)
    rss = float(fit.resid @ fit.resid)
    if rss <= len(y) * (1e-12 * float(np.abs(y).max())) ** 2:  # rounding, not noise: exactly 0
        rss = 0.0
    return rss, int(len(y) - fit.rank)


@dataclass(frozen=True)
class TwoWay:
    """The least-squares fit of value ~ row + block, kept in its structure: the hat matrix is
    H = P_G + U U' with P_G the within-row means and U (cells x r) the block indicators
    centred within their row (W), whitened by W'W's pseudo-inverse (r = rank W). Nothing
    here is cells x cells or cells x rows, so a fit of 5,000 candidates on 3 seeds costs
    milliseconds, where the design's pseudo-inverse took minutes."""

    codes: np.ndarray  # each cell's row (index into names)
    names: pd.Index  # the rows, in order of first appearance
    n: np.ndarray  # cells per row
    means: np.ndarray  # rows x blocks: each row's share of its cells in each block
    vec: np.ndarray  # blocks x r: an orthonormal basis of W's row space (W'W's eigenvectors)
    lam: np.ndarray  # r: their eigenvalues
    u: np.ndarray  # cells x r: W vec / sqrt(lam), so the block part of H is u u'
    resid: np.ndarray  # the fit's residuals, cell by cell
    rank: int  # rank of the design: rows + r

    @property
    def leverage(self) -> np.ndarray:
        """H's diagonal, cell by cell: 1 / n_row + |u_k|^2."""
        return 1.0 / self.n[self.codes] + (self.u * self.u).sum(axis=1)

    def contrast(self, rows: np.ndarray, weights: np.ndarray) -> np.ndarray | None:
        """a with a'y the least-squares estimate of sum_j weights_j tau_(rows_j) (row effects,
        weights summing to 0), None where that is not estimable (rows in unconnected parts of
        the design). A row's effect is its mean less its cells' block effects, so
        a = sum_j w_j (g_j / n_j - W K m_j) with m_j the row's block shares, K = (W'W)^+;
        estimable when sum_j w_j m_j lies in W's row space."""
        m = weights @ self.means[rows]
        along = self.vec.T @ m
        # np.allclose(..., 0.0, atol=1e-8), without its overhead (one call per contrast)
        if not (np.abs(m - self.vec @ along) <= 1e-8).all():
            return None
        per_row = np.zeros(len(self.names))
        np.add.at(per_row, rows, weights / self.n[rows])
        return per_row[self.codes] - self.u @ (along / np.sqrt(self.lam))


def two_way(rows: Sequence[Any], blocks: Sequence[Any], values: Sequence[float]) -> TwoWay:
    """:class:`TwoWay` of value ~ row + block (an intercept, row and block effects).

    >>> f = two_way(["u", "u", "a", "a"], [0, 1, 0, 1], [1.0, 2.0, 1.5, 2.1])
    >>> f.rank, f.resid.round(4).tolist(), f.leverage.round(4).tolist()
    (3, [-0.1, 0.1, 0.1, -0.1], [0.75, 0.75, 0.75, 0.75])
    """
    y = np.asarray(values, dtype="float64")
    codes, names = pd.factorize(pd.Series(list(rows), dtype="object"))
    b_codes = pd.factorize(pd.Series(list(blocks), dtype="object").astype(str))[0]
    n_rows, n_blocks = len(names), int(b_codes.max()) + 1 if len(y) else 0
    n = np.bincount(codes, minlength=n_rows).astype("float64")
    means = np.zeros((n_rows, n_blocks))
    np.add.at(means, (codes, b_codes), 1.0)
    means /= np.maximum(n, 1.0)[:, None]
    w = -means[codes]
    w[np.arange(len(y)), b_codes] += 1.0
    lam, vec = np.linalg.eigh(w.T @ w) if n_blocks else (np.zeros(0), np.zeros((0, 0)))
    keep = lam > 1e-10 * max(float(lam.max()), 1.0) if lam.size else np.zeros(0, dtype=bool)
    u = w @ (vec[:, keep] / np.sqrt(lam[keep]))
    centred = y - (np.bincount(codes, weights=y, minlength=n_rows) / np.maximum(n, 1.0))[codes]
    resid = centred - u @ (u.T @ centred)
    return TwoWay(
        codes,
        pd.Index(names),
        n,
        means,
        vec[:, keep],
        lam[keep],
        u,
        resid,
        n_rows + int(keep.sum()),
    )


def block_noise(
    trials: pd.DataFrame,
    value: str,
    *,
    key: str = "candidate",
    unselected: bool = True,
    pruned: bool | None = None,
) -> Noise | None:
    """The study's noise of a paired delta from the block-design fit (:func:`block_fit`).

    On the completed (candidate, seed) cells of known seeds that no pruner selected
    (:func:`~tlmsearch.stats.deltas.pruner_selected`; ``unselected=False``: every completed
    cell, the pooled model: one noise for every comparison; ``pruned``: whether the whole study
    pruned anything, for a table of one setting); a replayed twin (``same_as``) repeats another
    trial's numbers and is left out. None when the fit leaves no residual df (e.g. one seed):
    then nothing can be separated.
    """
    if "same_as" in trials:
        trials = trials[trials["same_as"].isna()]
    cells = trial_cells(trials, value, key)
    out = pruner_selected(cells, pruned) if unselected else set()
    # blocks are seeds, or (setting, seed) with setting dimensions: each setting's uniform is the
    # baseline of its own candidates on a seed
    done = [
        (c, (cell.setting, s) if cell.setting else s, cell.value)
        for (c, s), cell in cells.items()
        if cell.outcome == "complete" and s != UNKNOWN_SEED and c not in out
    ]
    if not done:
        return None
    rss, df = block_fit(*zip(*done, strict=True))
    if df < 1:
        return None
    return Noise(math.sqrt(2.0 * rss / df), df)


def setting_column(trials: pd.DataFrame) -> pd.Series | None:
    """The trials' ``setting`` column as text when it holds two or more values (a study with
    setting dimensions, each value its own comparison with its own uniform), else None."""
    if "setting" not in trials:
        return None
    settings = trials["setting"].fillna("").astype(str)
    return settings if settings.nunique() > 1 else None


def setting_noises(
    trials: pd.DataFrame, value: str, *, key: str = "candidate"
) -> dict[str, Noise | None]:
    """{setting: :func:`block_noise` of that setting's cells} (None where a setting has no
    residual df); {} without two or more settings. Each setting's effects are judged on its
    own entry (:mod:`tlmsearch.evidence`)."""
    settings = setting_column(trials)
    if settings is None:
        return {}
    pruned = any_pruned(trials)  # the study's pruner judged every setting's trials
    return {
        str(s): block_noise(sub, value, key=key, pruned=pruned)
        for s, sub in trials.groupby(settings, sort=True)
    }


def setting_noise(
    trials: pd.DataFrame, value: str, *, key: str = "candidate", pruned: bool | None = None
) -> Noise | None:
    """The noise of a delta between two cells of one seed at *different* settings (a schedule at
    its best LR minus uniform at its own): None when it cannot be estimated.

    With setting dimensions a cell is (schedule, setting) and, on a seed, the cells of one
    setting share more than the seed's level: its data order *and* how that LR treats that seed,
    y = mu_cell + u_seed + g_(setting, seed) + e. A delta within a setting cancels g (var
    2 sigma_e^2: :func:`block_noise`'s (setting, seed) blocks); one across settings does not
    (var 2 sigma_e^2 + 2 sigma_g^2). Two block fits on the same cells estimate both: blocks
    (setting, seed) give sigma_e^2; blocks seed leave the seed-by-setting interaction in the
    residual, whose extra mean square estimates sigma_e^2 + S sigma_g^2 (S the cells per
    block in a complete balanced grid; computed exactly from the design otherwise). The variance
    2 (1 - 1/S) sigma_e^2 + (2 / S) MS_interaction, never below 2 sigma_e^2, has
    Satterthwaite's df (rounded down).

    A per-(setting, seed) level of sd 0.01 shared by the three cells, cell noise sd 0.001:

    >>> rng = np.random.default_rng(0)
    >>> g = rng.normal(0, 0.01, (8, 2))
    >>> rows = [(c, lr, s, g[s, lr - 1] + rng.normal(0, 0.001))
    ...         for s in range(8) for lr in (1, 2) for c in ("u", "a", "b")]
    >>> t = pd.DataFrame({"candidate": [f"{c}{lr}" for c, lr, _, _ in rows],
    ...     "setting": [f"lr={lr}" for _, lr, _, _ in rows], "seed": [r[2] for r in rows],
    ...     "is_baseline": [r[0] == "u" for r in rows], "state": "COMPLETE",
    ...     "v": [r[3] for r in rows]})
    >>> within, across = block_noise(t, "v"), setting_noise(t, "v")
    >>> across.sd > 3 * within.sd, within.df, across.df > 0
    (True, 28, True)
    """
    parts = interaction(trials, value, key=key, pruned=pruned)
    if parts is None:
        return None
    var_e, df_in, ms_x, df_x, c = parts
    if not c > 1.0:  # most blocks hold one cell: no split of the two components, the larger
        var, df = max((2.0 * var_e, df_in), (2.0 * ms_x / max(c, 1e-12), df_x))
        return Noise(math.sqrt(var), int(df)) if var > 0 else None
    a = 2.0 * (1.0 - 1.0 / c) * var_e
    b = 2.0 / c * ms_x
    var = a + b
    if var <= 2.0 * var_e:  # no interaction beyond sigma_e: the within-setting noise
        return Noise(math.sqrt(2.0 * var_e), int(df_in)) if var_e > 0 else None
    df = var**2 / (a**2 / df_in + b**2 / df_x)
    return Noise(math.sqrt(var), max(1, int(df)))


def interaction(
    trials: pd.DataFrame, value: str, *, key: str = "candidate", pruned: bool | None = None
) -> tuple[float, int, float, int, float] | None:
    """The two block fits :func:`setting_noise` splits a delta across settings with, on the
    completed cells of known seeds no pruner selected: (sigma_e^2 from blocks (setting, seed),
    its df, the seed-by-setting interaction's mean square MS_x, its df, c with E[MS_x] =
    sigma_e^2 + c sigma_g^2); None when either has no df."""
    if "same_as" in trials:
        trials = trials[trials["same_as"].isna()]
    cells = trial_cells(trials, value, key)
    out = pruner_selected(cells, pruned)  # a pruner's selected rows flatter the noise: left out
    done = [
        (c, cell.setting, s, cell.value)
        for (c, s), cell in cells.items()
        if cell.outcome == "complete" and s != UNKNOWN_SEED and c not in out
    ]
    if not done:
        return None
    cands, settings, seeds, values = zip(*done, strict=True)
    blocks = [f"{a}\x00{b}" for a, b in zip(settings, seeds, strict=True)]
    rss_in, df_in = block_fit(cands, blocks, values)
    rss_out, df_out = block_fit(cands, seeds, values)
    df_x = df_out - df_in  # the seed-by-setting interaction's df
    if df_in < 1 or df_x < 1:
        return None
    var_e = rss_in / df_in
    ms_x = max(rss_out - rss_in, 0.0) / df_x
    # E[MS_x] = sigma_e^2 + c sigma_g^2 with c = tr(Z' (I - P) Z) / df_x, Z the (setting, seed)
    # indicators and P the projection onto candidate + seed: S, the cells per block, in a
    # complete balanced grid, less where settings hold different numbers of cells
    z = pd.get_dummies(pd.Series(blocks)).to_numpy(dtype="float64")
    c = sum(float(r @ r) for r in (two_way(cands, seeds, col).resid for col in z.T)) / df_x
    return var_e, int(df_in), ms_x, int(df_x), c
