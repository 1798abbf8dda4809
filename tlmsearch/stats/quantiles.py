"""Student t and Tukey's range: quantiles, a mean's interval, a tail probability, the critical
value over every pair of m means. Every interval and test of the package reads these."""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from tlmsearch.constants import LEVEL


def t_quantile(df: float, level: float = LEVEL) -> float:
    """Two-sided Student t quantile: the half-width of a ``level`` interval in standard errors.

    >>> round(t_quantile(1), 3), round(t_quantile(30), 3), round(t_quantile(10_000), 2)
    (12.706, 2.042, 1.96)
    """
    if not df >= 1:
        raise ValueError(f"degrees of freedom must be >= 1, but got {df=}")
    return _t_ppf(0.5 + level / 2, float(df))


@functools.lru_cache(maxsize=256)
def _t_ppf(q: float, df: float) -> float:
    from scipy.stats import t as student_t  # imported here: scipy.stats takes ~0.3 s to load

    return float(student_t.ppf(q, df))


class Interval(NamedTuple):
    """A sample's mean with a t interval; ``lo``/``hi``/``half_width`` NaN when ``n < 2``."""

    n: int
    mean: float
    sd: float  # sample sd (ddof 1); NaN when n < 2
    lo: float
    hi: float
    half_width: float


def mean_interval(values: Sequence[float] | np.ndarray, level: float = LEVEL) -> Interval:
    """Mean of the finite ``values`` and its two-sided ``level`` Student t interval.

    >>> iv = mean_interval([1.0, 2.0, 3.0])
    >>> iv.mean, iv.sd, round(iv.half_width, 4)
    (2.0, 1.0, 2.4841)
    """
    if isinstance(values, (list, tuple)) and len(values) < 2:  # one seed: most candidates
        # as numpy reads it: None is NaN, and a mean is never -0.0
        x = math.nan if not values or values[0] is None else float(values[0]) + 0.0
        if not math.isfinite(x):
            return Interval(0, math.nan, math.nan, math.nan, math.nan, math.nan)
        return Interval(1, x, math.nan, math.nan, math.nan, math.nan)
    v = np.asarray(values, dtype="float64")
    v = v[np.isfinite(v)]
    n = len(v)
    if n == 0:
        return Interval(0, math.nan, math.nan, math.nan, math.nan, math.nan)
    mean = float(v.mean())
    if n < 2:
        return Interval(1, mean, math.nan, math.nan, math.nan, math.nan)
    sd = float(v.std(ddof=1))
    half = t_quantile(n - 1, level) * sd / math.sqrt(n)
    return Interval(n, mean, sd, mean - half, mean + half, half)


def t_sf(t: float, df: float) -> float:
    """Upper tail of Student t: P(T > t) with ``df`` degrees of freedom.

    >>> round(t_sf(2.0, 10), 4), t_sf(0.0, 3)
    (0.0367, 0.5)
    """
    if df > 0 and not math.isnan(t):
        from scipy.special import stdtr  # what scipy.stats.t.sf computes, without its checks

        return float(stdtr(df, -t))
    from scipy.stats import t as student_t

    return float(student_t.sf(t, df))


def f_sf(x: float, dfn: float, dfd: float) -> float:
    """Upper tail of the F distribution, P(F > x) (scipy.stats.f.sf, the same number).

    >>> round(f_sf(3.0, 2, 10), 4), f_sf(0.0, 2, 10), f_sf(math.inf, 2, 10)
    (0.0954, 1.0, 0.0)
    """
    if dfn > 0 and dfd > 0 and x > 0 and x < math.inf:
        from scipy.special import fdtrc

        return float(fdtrc(dfn, dfd, x))
    from scipy.stats import f as f_dist

    return float(f_dist.sf(x, dfn, dfd))


def f_ppf(q: float, dfn: float, dfd: float) -> float:
    """The F distribution's ``q`` quantile (scipy.stats.f.ppf, the same number).

    >>> round(f_ppf(0.95, 2, 10), 4)
    4.1028
    """
    if dfn > 0 and dfd > 0 and 0 < q < 1:
        from scipy.special import fdtri

        return float(fdtri(dfn, dfd, q))
    from scipy.stats import f as f_dist

    return float(f_dist.ppf(q, dfn, dfd))


@functools.lru_cache(maxsize=256)
def range_critical(m: int, df: float, level: float) -> float:
    """Tukey's critical value for every pair of ``m`` means at once, in standard errors of a
    difference: the studentized range quantile over sqrt(2) (df 0 or above 1000: 1000).

    Any claim "a differs from b" among m candidates made with it holds its family-wise error
    at ``1 - level`` over all the pairs, also when every candidate is equal (where comparing
    each with the data's best, at a one-sided level per comparison, does not).

    >>> round(range_critical(2, 1000, 0.95), 2)  # two means: the two-sided normal quantile
    1.96
    """
    from scipy.stats import studentized_range

    df = 1000.0 if df == 0 or df > 1000 else float(df)
    return float(studentized_range.ppf(level, max(2, int(m)), df)) / math.sqrt(2.0)
