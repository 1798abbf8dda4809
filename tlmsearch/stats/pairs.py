"""Which candidates can be told apart: paired differences of every pair on the seeds both
completed, and multiple comparisons with the best (Hsu), each pair on the noise of its own
paired delta (the same model as the effects vs uniform: :func:`tlmsearch.stats.row_noise`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.constants import FAMILY, LEVEL
from tlmsearch.stats.deltas import UNKNOWN_SEED, as_dtypes, trial_cells
from tlmsearch.stats.effects_vs_uniform import _noised, _sign
from tlmsearch.stats.multiplicity import adjust
from tlmsearch.stats.noise import Noise
from tlmsearch.stats.quantiles import range_critical
from tlmsearch.stats.row_variances import RowNoise, row_noise

PAIR_COLUMNS = (
    "a",
    "b",
    "n",  # common seeds: both completed
    "seeds",
    "n_better",  # seeds on which a beat b
    "mean",  # mean over the common seeds of a - b
    "sd",  # sd of a - b across them (NaN with one): a description only
    "noise",
    "noise_sd",
    "noise_df",
    "lo",
    "hi",
    "half_width",
    "effect_noise",
    "p",
    "p_adj",  # adjusted over the unordered pairs asked for (``family``)
    "separated",
)


def _complete_by_seed(trials: pd.DataFrame, value: str, key: str) -> dict[Any, dict[int, float]]:
    done: dict[Any, dict[int, float]] = {}
    for (cand, seed), cell in trial_cells(trials, value, key).items():
        if cell.outcome == "complete" and seed != UNKNOWN_SEED:
            done.setdefault(cand, {})[seed] = cell.value
    return done


def pairwise(
    trials: pd.DataFrame,
    value: str,
    candidates: Sequence[Any],
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = LEVEL,
    noise: Noise | RowNoise | None = None,
    family: str = FAMILY,
    family_size: int = 0,
) -> pd.DataFrame:
    """Can these be told apart? Paired differences a - b on the seeds both completed.

    Within a seed both saw the same data and initial weights, so a - b on that seed is a paired
    difference with the sd of one paired delta between the two (``noise.pair(a, b)``; by
    default the study's :func:`row_noise`).
    ``separated``: the p-value adjusted over the unordered pairs of ``candidates`` (``family``)
    is below ``1 - level``; ``family_size``: the pairs the family covers when ``candidates`` is
    a choice from more (the top k of a ranking picks the pairs most likely to differ: Holm over
    the shown pairs alone made 6% of null studies of 60 candidates claim one), each
    pair not shown counted as never rejected. One row per ordered pair (a, b), a != b, in the
    order of ``candidates``: :data:`PAIR_COLUMNS`; b vs a mirrors a vs b.

    >>> t = pd.DataFrame({"candidate": ["a"] * 3 + ["b"] * 3, "is_baseline": [0] * 6,
    ...                   "seed": [0, 1, 2] * 2, "state": ["COMPLETE"] * 6,
    ...                   "v": [1.0, 2.0, 3.0, 1.5, 2.4, 3.6]})
    >>> p = pairwise(t, "v", ["a", "b"]).iloc[0]
    >>> p["a"], p["b"], int(p["n_better"]), float(round(p["mean"], 3)), bool(p["separated"])
    ('a', 'b', 3, -0.5, True)
    """
    sign = _sign(sense)
    if noise is None and not trials.empty:
        noise = row_noise(trials, value, key=key, level=level)
    done = _complete_by_seed(trials, value, key)
    rows = []
    for a in candidates:
        for b in candidates:
            if a == b:
                continue
            va, vb = done.get(a, {}), done.get(b, {})
            common = sorted(set(va) & set(vb))
            diffs = [va[x] - vb[x] for x in common]
            x = _noised(diffs, None if noise is None else noise.pair(a, b), level)
            rows.append(
                {
                    "a": a,
                    "b": b,
                    "n": len(common),
                    "seeds": tuple(common),
                    "n_better": sum(sign * v < 0 for v in diffs),
                    **{c: x[c] for c in PAIR_COLUMNS if c in x},
                }
            )
    out = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
    # the family: each unordered pair once (a vs b and b vs a are one comparison)
    index = {c: i for i, c in enumerate(candidates)}
    first = np.array(
        [index[a] < index[b] for a, b in zip(out["a"], out["b"], strict=True)], dtype=bool
    )
    half = out[first]
    p = half["p"].astype("float64").tolist()
    unseen = max(0, int(family_size) - len(p))  # pairs of the family not shown: p = 1
    adj = dict(
        zip(
            zip(half["a"], half["b"], strict=True),
            adjust(p + [1.0] * unseen, family)[: len(p)],
            strict=True,
        )
    )
    out["p_adj"] = [
        adj.get((a, b), adj.get((b, a), math.nan)) for a, b in zip(out["a"], out["b"], strict=True)
    ]
    out["separated"] = pd.array(
        [pd.NA if math.isnan(q) else bool(q < 1.0 - level) for q in out["p_adj"]],
        dtype="boolean",
    )
    floats = ("mean", "sd", "noise_sd", "lo", "hi", "half_width", "effect_noise", "p", "p_adj")
    return as_dtypes(out, {c: "float64" for c in floats} | {"n": "int64", "noise_df": "int64"})


MCB_COLUMNS = (
    "candidate",
    "mean",  # its mean value over its completed seeds (what the leader is ranked on: see rank)
    "eliminated",  # worse than some other candidate, Tukey over every pair: not the best
    "by",  # that other candidate (the one it is furthest behind, in standard errors)
    "selected",  # better than every other candidate at the joint level: the best
    "critical",  # the selection's one-sided critical value on the pooled df (a pair on its
    # rows' own variances uses its own df; elimination: Tukey's)
)


def mcb(
    trials: pd.DataFrame,
    value: str,
    candidates: Sequence[Any],
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = LEVEL,
    noise: Noise | RowNoise | None = None,
) -> pd.DataFrame:
    """Multiple comparisons with the best (Hsu 1984/1996) among ``candidates``, uniform included.

    For each pair on its common seeds, D_ij = mean of (y_i - y_j) (sign-adjusted so lower is
    better) with standard error sd_ij / sqrt(n_ij), sd_ij the noise of a paired delta between
    the two (``noise.pair(i, j)``; by default the study's :func:`row_noise`, each critical
    value on that pair's df). With d the one-sided t critical value at
    ``level`` for the K - 1 comparisons with the best (Bonferroni: (1 - level) / (K - 1), a
    bound on Dunnett's exact value) and r Tukey's critical value over every pair
    (:func:`range_critical`):

    - i is **selected** (the best) when D_ij + d se_ij < 0 for every j != i (no pair without a
      common seed): a wrong selection means the truly best was beaten by d, chance <= 1 - level;
    - i is **eliminated** (not the best) when D_ij - r se_ij > 0 for some j. Hsu's d would
      bound the chance of eliminating *the* best, but with several equally good candidates
      each one is a best, and the claims "not the best" hold their family-wise error only over
      every pair (``benchmarks/stats.py`` measures both).

    The selection is not a winner's curse: the intervals hold for whichever candidate the data
    rank first. Without a noise estimate nothing is eliminated or selected.
    """
    sign = _sign(sense)
    if noise is None and not trials.empty:
        noise = row_noise(trials, value, key=key, level=level)
    done = _complete_by_seed(trials, value, key)
    k = len(candidates)
    known = noise is not None and noise.df >= 1 and k >= 2
    one = noise.one_sided(1.0 - (1.0 - level) / (k - 1)) if known else math.nan
    means = {
        i: float(np.mean(list(done[i].values()))) if done.get(i) else math.nan for i in candidates
    }
    if not known:  # no pair can be judged: nothing eliminated or selected (no k^2 walk)
        return pd.DataFrame(
            [(i, means[i], False, None, False, one) for i in candidates], columns=list(MCB_COLUMNS)
        )
    seeds = {i: set(done.get(i, {})) for i in candidates}
    critical: dict[int, tuple[float, float]] = {}  # df -> (one-sided d, Tukey's r)
    rows = []
    for i in candidates:
        vi = done.get(i, {})
        worst, by, best_all = -math.inf, None, bool(vi)
        for j in candidates:
            if j == i:
                continue
            vj = done.get(j, {})
            common = sorted(seeds[i] & seeds[j])
            pn = noise.pair(i, j)
            if not common or pn is None or pn.df < 1:
                best_all = False
                continue
            if pn.df not in critical:
                critical[pn.df] = (
                    pn.one_sided(1.0 - (1.0 - level) / (k - 1)),
                    range_critical(k, pn.df, level),
                )
            d, r = critical[pn.df]
            diff = sign * float(np.mean([vi[x] - vj[x] for x in common]))
            se = pn.sd / math.sqrt(len(common))
            if diff + d * se >= 0:
                best_all = False
            z = (diff - r * se) / se if se > 0 else (math.inf if diff > 0 else -math.inf)
            if diff - r * se > 0 and z > worst:
                worst, by = z, j
        rows.append((i, means[i], by is not None, by, best_all, one))
    return pd.DataFrame(rows, columns=list(MCB_COLUMNS))
