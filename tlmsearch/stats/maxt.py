"""The joint t distribution of many comparisons with one baseline: adjusted p-values and a
simultaneous critical value that use how the comparisons move together (Dunnett's idea, with
each comparison on its own variance as Hasler and Hothorn 2008 do).

Every candidate's delta vs uniform carries uniform's own noise, so the comparisons are
correlated: with uniform's share of comparison i's variance ``s_i`` (v_u / (v_i + v_u)) the
standardized deltas are ``Z_i = l_i W + sqrt(1 - l_i^2) X_i`` with ``l_i = sqrt(s_i)``, W and
the X_i independent standard normals (a one-factor structure: corr(Z_i, Z_j) = l_i l_j). A
max over correlated deltas is smaller than over independent ones, so the joint critical value
is below Bonferroni's (15 comparisons, equal variances, 30 df: 3.02 vs 3.26 at 95%), and the
more uniform's noise dominates, the closer it is to one comparison's.

The studentized deltas share their variance estimate through uniform's part, and each has its
own degrees of freedom (Satterthwaite's, :class:`tlmsearch.stats.RowNoise`): comparison i's
joint tail is taken with its own df for every member (Hasler and Hothorn's approximation),
T_j = Z_j / S with S^2 ~ chi^2_df / df. The integral over W and S is numeric (Gauss-Hermite
nodes for W, quantile nodes for S): 1e-4 absolute accuracy, checked against scipy's
``multivariate_t`` in the tests.

What it buys, and what it cannot, on simulated studies (benchmarks/stats.py): with every row
equally noisy it recovers about half the power that uniform's own variance costs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import numpy as np

from tlmsearch.stats.quantiles import t_sf

_W_NODES = 48  # Gauss-Hermite nodes for the shared normal W
_S_NODES = 256  # quantile nodes for the shared chi S
_DF_EXACT = 2000  # above this, S = 1 (the normal limit)


@functools.cache
def _w_nodes() -> tuple[np.ndarray, np.ndarray]:
    x, w = np.polynomial.hermite_e.hermegauss(_W_NODES)
    return x, w / w.sum()


@functools.lru_cache(maxsize=512)
def _s_nodes(df: int) -> np.ndarray:
    if df > _DF_EXACT:
        return np.ones(1)
    from scipy.stats import chi2  # imported here: scipy.stats takes ~0.3 s to load

    q = (np.arange(_S_NODES) + 0.5) / _S_NODES
    return np.sqrt(chi2.ppf(q, df) / df)


def joint_below(
    c: float, shares: Sequence[float], df: int, groups: Sequence[object] | None = None
) -> float:
    """P(max_i |T_i| < c) for the comparisons with uniform's variance shares ``shares``, each
    T_i on ``df`` degrees of freedom (the module docstring). ``groups``: comparisons with
    different baselines (a study's settings, each with its own uniform and fit) are independent,
    and the joint chance is the product over groups.

    One comparison is Student's t; uncorrelated ones multiply; fully shared ones are one:

    >>> from scipy.stats import t
    >>> round(joint_below(2.0, [0.5], 10), 3), round(float(t.cdf(2.0, 10) - t.cdf(-2.0, 10)), 3)
    (0.927, 0.927)
    >>> round(joint_below(2.5, [0.0, 0.0], 10**6), 4), round((2 * 0.99379 - 1) ** 2, 4)
    (0.9753, 0.9753)
    """
    if not c > 0:
        return 0.0
    if groups is not None and len(set(groups)) > 1:
        g = list(groups)
        return math.prod(
            joint_below(c, [x for x, k in zip(shares, g, strict=True) if k == key], df)
            for key in dict.fromkeys(g)
        )
    from scipy.special import ndtr

    # comparisons with the same share contribute the same factor: once each, to its power
    share, count = np.unique(
        np.clip(np.round(np.asarray(shares, dtype="float64"), 9), 0.0, 1.0 - 1e-9),
        return_counts=True,
    )
    lam = np.sqrt(share)
    rest = np.sqrt(1.0 - lam**2)[:, None, None]  # (distinct shares, 1, 1)
    w, ww = _w_nodes()
    s = _s_nodes(int(df))
    cs = c * s[None, :, None]  # (1, S, 1)
    mid = lam[:, None, None] * w[None, None, :]  # (distinct shares, 1, W)
    # shares first: every elementwise step runs over long (S, W) rows
    inner = ndtr((cs - mid) / rest) - ndtr((-cs - mid) / rest)  # (distinct shares, S, W)
    # over the comparisons (in order, a power only for a repeated share), then W
    prob = inner[0] ** count[0] if count[0] > 1 else inner[0]
    for j in range(1, len(count)):
        prob = prob * (inner[j] ** count[j] if count[j] > 1 else inner[j])
    return float(np.clip((prob @ ww).mean(), 0.0, 1.0))


def joint_sf(
    t: float, shares: Sequence[float], df: int, groups: Sequence[object] | None = None
) -> float:
    """P(max_i |T_i| >= |t|): the chance that any of the comparisons is as extreme as ``t``
    when none differs from uniform (a single-step adjusted p-value)."""
    return 1.0 - joint_below(abs(t), shares, df, groups)


def joint_critical(
    shares: Sequence[float], df: int, level: float, groups: Sequence[object] | None = None
) -> float:
    """The c with P(max_i |T_i| < c) = ``level``: an interval of c standard errors around every
    comparison covers all of them at once with chance ``level``.

    >>> round(joint_critical([0.5] * 15, 30, 0.95), 2), round(joint_critical([0.5], 30, 0.95), 3)
    (3.02, 2.042)
    """
    from scipy.optimize import brentq

    if not shares:
        return math.nan
    hi = 4.0
    while joint_below(hi, shares, df, groups) < level:
        hi *= 2.0
    return float(brentq(lambda c: joint_below(c, shares, df, groups) - level, 0.0, hi, xtol=1e-5))


def step_down(
    t: Sequence[float],
    shares: Sequence[float],
    dfs: Sequence[int],
    groups: Sequence[object] | None = None,
) -> list[float]:
    """Adjusted p-values of the step-down max-t test (Holm's scheme, each step at the joint
    distribution of the comparisons not yet rejected, in the order of their own p-values):
    comparison i's is the largest over the steps up to its own of P(max over those left
    |T| >= |t|), with its df (an infinite t, a
    difference with zero noise, has p 0). NaN t stays NaN and is no member.

    >>> [round(p, 3) for p in step_down([5.0, 0.3], [0.5, 0.5], [30, 30])]
    [0.0, 0.766]
    """
    tt = np.asarray(t, dtype="float64")
    out = np.full(len(tt), math.nan)
    ok = np.flatnonzero(~np.isnan(tt))
    # the steps go by each comparison's own p-value, not |t|: with unequal df a t on 2 df is
    # weaker evidence than a smaller t on 18 (ordering by |t| let one noisy row's step carry
    # its large tail probability to every comparison after it)
    raw = np.array([t_sf(abs(tt[i]), max(int(dfs[i]), 1)) for i in ok])
    order = ok[np.lexsort((-np.abs(tt[ok]), raw))]
    sh = np.asarray(shares, dtype="float64")
    gr = list(groups) if groups is not None else [0] * len(tt)
    running = 0.0
    for j, i in enumerate(order):
        left = order[j:]
        running = max(
            running, joint_sf(float(tt[i]), sh[left].tolist(), int(dfs[i]), [gr[k] for k in left])
        )
        out[i] = min(running, 1.0)
    return out.tolist()
