"""The noise of a comparison between cells of *different* settings (a schedule at its own best
learning rate minus uniform at its own), on the rows model every other comparison uses.

Within one setting a paired delta's variance is its two rows' (:class:`RowNoise.pair`: the
pooled residual variance, or a row's own where its seeds show it noisier; uniform's own whenever
it exceeds the pool). Across settings a delta also carries how each setting treated the seed
(y = mu_cell + u_seed + g_(setting, seed) + e, :func:`tlmsearch.stats.setting_noise`), so its
variance is (uniform's share, how the comparisons with it move together, is its row's part and
half the interaction's)

    v_a (row a in its setting's model) + v_b (row b in its) + 2 sigma_g^2

with 2 sigma_g^2 = (2 / c) (MS_x - sigma_e^2) from the two block fits of
:func:`tlmsearch.stats.noise.interaction` (0 where MS_x does not exceed sigma_e^2), and
Satterthwaite's df over every part (rounded down; the interaction's two mean squares each
counted with their own df, which is conservative). When both rows are on their own variance the
comparison is the exact paired test: the sample variance of a - b over their common seeds
(n - 1 df), which holds g whatever its size. With every row on the pool this is
:func:`~tlmsearch.stats.setting_noise` exactly.

:class:`PairNoises` carries each comparison's noise under the name :func:`tlmsearch.stats.
effects` reads it by, for a table keyed by something else than the fits' rows (the tuned
comparison names a schedule; its fits name a schedule at a setting). A comparison whose noise
is unknown (a pruned study with no row the pruner could not stop, no residual df) stays
unknown: it is never measured on the cells that happen to remain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tlmsearch.stats.noise import Noise
from tlmsearch.stats.row_variances import OWN, RowNoise


@dataclass(frozen=True)
class PairNoises:
    """Each comparison's noise by the name of its non-baseline side: the interface
    :func:`tlmsearch.stats.effects` reads of a noise model (``pair``, ``source``, ``share``).

    >>> p = PairNoises({"a": Noise(0.1, 4)}, {"a": "pooled"}, {"a": 0.5})
    >>> p.pair("a", "u"), p.pair("b", "u"), p.source("a", "u"), p.share("a", "u")
    (Noise(sd=0.1, df=4), None, 'pooled', 0.5)
    """

    noises: Mapping[Any, Noise | None]
    sources: Mapping[Any, str] = field(default_factory=dict)
    shares: Mapping[Any, float] = field(default_factory=dict)

    def pair(self, a: Any, b: Any) -> Noise | None:
        return self.noises.get(a)

    def source(self, a: Any, b: Any) -> str:
        return self.sources.get(a, "pooled")

    def share(self, a: Any, b: Any) -> float:
        return self.shares.get(a, 0.5)


def cell_variance(model: RowNoise | Noise | None, key: Any) -> tuple[float, int, bool] | None:
    """(variance of one cell of row ``key``, its df, whether it is the row's own) in one
    setting's model; None when the model is unknown."""
    if model is None or not model.df >= 1:
        return None
    if isinstance(model, RowNoise):
        r = model.rows.get(key)
        if r is not None and r.source == OWN and r.df >= 1:
            return r.var, r.df, True
        return model.pooled.sd**2 / 2.0, model.pooled.df, False
    return model.sd**2 / 2.0, model.df, False


def across_pair(
    a: Any,
    model_a: RowNoise | Noise | None,
    b: Any,
    model_b: RowNoise | Noise | None,
    parts: tuple[float, int, float, int, float] | None,
    cells: Mapping[Any, Mapping[Any, float]] | None = None,
) -> tuple[Noise | None, str, float]:
    """(noise of the delta a - b, whose own variance it uses: pooled | a | b | both, b's share
    of its variance) for rows ``a`` and ``b`` of different settings' models; ``parts``: the
    interaction fit of the two settings' cells (:func:`tlmsearch.stats.noise.interaction`);
    ``cells``: row -> seed -> value, for the exact paired test when both rows are on their own.

    Both on the pool (cell variance 1 each), sigma_e^2 1, MS_x 3 on 4 df, c 3: the delta adds
    2/3 (3 - 1):

    >>> n, src, share = across_pair("a", Noise(math.sqrt(2.0), 20), "u",
    ...                             Noise(math.sqrt(2.0), 20), (1.0, 40, 3.0, 4, 3.0))
    >>> round(n.sd ** 2, 4), src, round(share, 3)
    (3.3333, 'pooled', 0.5)
    """
    va, vb = cell_variance(model_a, a), cell_variance(model_b, b)
    if va is None or vb is None or parts is None:
        return None, "pooled", math.nan
    source = "both" if va[2] and vb[2] else str(b) if vb[2] else str(a) if va[2] else "pooled"
    if va[2] and vb[2] and cells is not None:
        exact = _paired(cells.get(a, {}), cells.get(b, {}))
        if exact is not None:
            return exact, source, vb[0] / (va[0] + vb[0]) if va[0] + vb[0] > 0 else 0.5
    var_e, df_in, ms_x, df_x, c = parts
    comps = [(va[0], va[1]), (vb[0], vb[1])]
    if not c > 1.0:  # blocks of one cell: no split of the interaction from the cells' noise
        rows, inter = va[0] + vb[0], 2.0 * ms_x / max(c, 1e-12)
        if inter > rows:
            return _noise(inter, [(inter, df_x)]), source, 0.5
        return _noise(rows, comps), source, vb[0] / rows if rows > 0 else 0.5
    extra = 2.0 / c * (ms_x - var_e)
    var = va[0] + vb[0] + max(extra, 0.0)
    if extra > 0:
        comps += [(2.0 / c * ms_x, df_x), (2.0 / c * var_e, df_in)]
    # uniform's share (how the comparisons with it move together): its row's part and half the
    # interaction's, its own setting's g_(setting, seed), which every comparison with it carries
    shared = vb[0] + max(extra, 0.0) / 2.0
    return _noise(var, comps), source, shared / var if var > 0 else 0.5


def _noise(var: float, comps: list[tuple[float, int]]) -> Noise | None:
    denom = sum(v * v / df for v, df in comps if df >= 1)
    if not var > 0:
        return Noise(0.0, int(min(df for _, df in comps))) if var == 0 else None
    if not denom > 0:
        return None
    return Noise(math.sqrt(var), max(1, int(var * var / denom)))


def _paired(va: Mapping[Any, float], vb: Mapping[Any, float]) -> Noise | None:
    """The paired test's noise of a - b over their common seeds (None below 2)."""
    common = sorted(set(va) & set(vb), key=str)
    if len(common) < 2:
        return None
    d = np.array([va[k] - vb[k] for k in common])
    sd = float(d.std(ddof=1))
    return Noise(sd, len(d) - 1) if sd > 0 else None
