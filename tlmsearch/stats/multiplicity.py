"""Multiple comparisons: adjusted p-values over a family (Holm, Benjamini-Hochberg or none) and
how a family is said in words."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tlmsearch.constants import FAMILIES, FAMILY


def adjust(p_values: Sequence[float], family: str = FAMILY) -> list[float]:
    """Family-wise adjusted p-values: ``holm`` (step-down, family-wise error), ``bh``
    (Benjamini-Hochberg, false discovery rate) or ``none``. NaN stays NaN and is no member.

    >>> [round(x, 3) for x in adjust([0.01, 0.04, 0.03], "holm")]
    [0.03, 0.06, 0.06]
    >>> [round(x, 3) for x in adjust([0.01, 0.04, 0.03], "bh")]
    [0.03, 0.04, 0.04]
    """
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, but got {family=}")
    p = np.asarray(p_values, dtype="float64")
    out = p.copy()
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if family == "none" or m == 0:
        return out.tolist()
    order = ok[np.argsort(p[ok], kind="stable")]
    ranked = p[order]
    if family == "holm":
        adj = np.maximum.accumulate((m - np.arange(m)) * ranked)
    else:  # bh: step-up
        adj = np.minimum.accumulate((m / np.arange(1, m + 1) * ranked)[::-1])[::-1]
    out[order] = np.minimum(adj, 1.0)
    return out.tolist()


def family_words(family: str, m: int) -> str:
    """How a decision's family is said: 'Holm over 15 comparisons with uniform'."""
    name = {
        "holm": "Holm",
        "bh": "Benjamini-Hochberg (false discovery rate)",
        "none": "no correction",
    }[family]
    if family == "none":
        return f"{name}: per comparison, {m} in the study"
    return f"{name} over {m} comparison{'s' * (m != 1)}"
