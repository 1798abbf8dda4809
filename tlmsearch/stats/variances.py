"""Equal variances of *paired* samples (Pitman-Morgan): are two scores of the same trainings
equally variable?"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def pitman_morgan(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """(sd(x) / sd(y), two-sided p) of the Pitman-Morgan test of equal variances of *paired*
    samples: var(x) = var(y) exactly when x + y and x - y are uncorrelated, so the test is the t
    test of that correlation on n - 2 df. An F test treats the pairs as independent samples, and
    paired ones (the same trainings scored two ways) are correlated, which makes its p-values
    too large (Pitman 1939, Morgan 1939).

    >>> x = [1.0, 2.0, 3.0, 4.0, 5.0]
    >>> ratio, p = pitman_morgan(x, [2 * v + 0.1 * (-1) ** i for i, v in enumerate(x)])
    >>> round(ratio, 3), p < 1e-4
    (0.5, True)
    """
    from scipy.stats import t as t_dist

    a, b = np.asarray(x, dtype="float64"), np.asarray(y, dtype="float64")
    if a.shape != b.shape or len(a) < 3:
        raise ValueError(f"need two paired samples of 3 or more, but got {len(a)} and {len(b)}")
    ratio = float(a.std(ddof=1) / b.std(ddof=1))
    r = float(np.corrcoef(a + b, a - b)[0, 1])
    if not math.isfinite(r):
        return ratio, math.nan
    if abs(r) >= 1.0:
        return ratio, 0.0
    n = len(a)
    t = r * math.sqrt((n - 2) / (1.0 - r * r))
    return ratio, float(min(1.0, 2.0 * t_dist.sf(abs(t), n - 2)))
