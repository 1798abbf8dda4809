"""A selection-adjusted estimate for the candidate the data rank first: empirical-Bayes
shrinkage of the effects vs uniform.

The best of m noisy means is the one whose noise happened to run its way: for the best of 15
candidates equal to uniform at 3 seeds its raw mean delta lies about 0.7 noise sd below the
truth (the winner's curse), and it does not shrink with more candidates. The normal-normal model

    d_i = theta_i + (uniform's error, shared) + e_i,   theta_i ~ N(mu, tau^2),  e_i ~ N(0, s_i^2)

with s_i^2 the candidate's own part of its comparison's variance (se^2 x (1 - uniform's share):
uniform's error moves every delta at once and says nothing about which is larger) gives each
candidate's posterior mean mu + B_i (d_i - mu), B_i = tau^2 / (tau^2 + s_i^2), with mu the mean
of the deltas and tau^2 = max(0, their sample variance - the mean s_i^2) (method of moments).
With every candidate equal, tau^2 is 0 in most studies and every estimate is the mean delta:
unbiased for the best as for any; with real spread it keeps most of it. It is an estimate, not
an interval: the decisions stay the family's (Efron 2011, "Tweedie's formula and selection
bias"; Andrews, Kitagawa and McCloskey 2024 give intervals that condition on the selection).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd


def shrunk(eff: pd.DataFrame) -> pd.Series:
    """Each effects row's selection-adjusted mean delta (NaN where its noise is unknown),
    shrunk within its ``noise_group`` (comparisons with one baseline), from ``mean_delta``,
    ``noise_sd``, ``n`` and ``noise_shared`` (:func:`tlmsearch.stats.effects`' columns).

    >>> e = pd.DataFrame({"mean_delta": [-1.0, 0.0, 1.0], "noise_sd": [1.0] * 3, "n": [1] * 3,
    ...                   "noise_shared": [0.5] * 3, "noise_group": [0] * 3})
    >>> [round(x, 3) for x in shrunk(e)]  # spread 1 over own variance 0.5: B = 0.5 / 1
    [-0.5, 0.0, 0.5]
    """
    out = pd.Series(math.nan, index=eff.index, dtype="float64")
    if eff.empty:
        return out
    groups = eff["noise_group"] if "noise_group" in eff else pd.Series(0, index=eff.index)
    for _, idx in eff.groupby(groups, sort=False).groups.items():
        sub = eff.loc[idx]
        d = sub["mean_delta"].to_numpy(dtype="float64")
        se2 = sub["noise_sd"].to_numpy(dtype="float64") ** 2 / np.maximum(
            sub["n"].to_numpy(dtype="float64"), 1.0
        )
        share = (
            sub["noise_shared"].to_numpy(dtype="float64")
            if "noise_shared" in sub
            else (np.full(len(sub), 0.5))
        )
        own = se2 * (1.0 - np.where(np.isfinite(share), share, 0.5))
        ok = np.isfinite(d) & np.isfinite(own)
        if ok.sum() < 3:  # no spread to estimate: each keeps its own mean
            out.loc[sub.index[ok]] = d[ok]
            continue
        mu = float(d[ok].mean())
        tau2 = max(0.0, float(d[ok].var(ddof=1)) - float(own[ok].mean()))
        with np.errstate(divide="ignore", invalid="ignore"):
            b = np.where(tau2 + own > 0, tau2 / (tau2 + own), 1.0)
        out.loc[sub.index[ok]] = mu + b[ok] * (d[ok] - mu)
    return out
