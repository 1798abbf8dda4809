"""Effects in units of noise: every candidate's paired effect vs uniform, its interval and
p-value on the noise of its own comparison, and the family's decision over every comparison
with uniform."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.constants import FAMILY, LEVEL
from tlmsearch.stats.deltas import Seeds, as_dtypes, paired_deltas
from tlmsearch.stats.maxt import joint_critical, step_down
from tlmsearch.stats.multiplicity import adjust
from tlmsearch.stats.noise import Noise
from tlmsearch.stats.quantiles import mean_interval, t_quantile, t_sf
from tlmsearch.stats.ranking import summarise
from tlmsearch.stats.row_variances import RowNoise, row_noise

# Effects in units of noise, and which candidates can be told apart
#
# Every interval and test uses the noise of its own comparison from the study's fit
# (:func:`tlmsearch.stats.row_noise`, said as "model"): the block design's pooled residual
# variance for every row whose seeds do not show it noisier, a candidate's own where they do,
# uniform's own unless its seeds rule out twice the others' sd (every comparison rests on it),
# a delta's variance the sum of its two rows'. A candidate's own
# seed-to-seed sd of deltas (``sd_delta``) is kept beside it as a description. Without residual
# df the noise is "unknown" and nothing is separated. A racing prior (df 0) is an assumption,
# not a measurement: it is never used here.
#
# ``lo``/``hi`` hold over the family, as the decision does (:func:`decide`): under holm
# simultaneous at the comparisons' joint t critical value (:mod:`tlmsearch.stats.maxt`: they
# share uniform's noise, so the joint value lies below Bonferroni's), false-coverage adjusted
# (Benjamini-Yekutieli, with the R separated) under bh, per comparison under none. The
# best-ranked candidate is picked by the data, so a per-comparison interval around it excluded
# zero in 15-18% of null studies of 15 candidates; a simultaneous one cannot exceed the stated
# 5% (benchmarks/stats.py).

MODEL, UNKNOWN = "model", "unknown"
UNSEEN = "planned, not measured yet"  # the noise group of a planned comparison still to come

EFFECT_COLUMNS = (
    "n",  # paired seeds: completed with a finished uniform of the same seed
    "seeds",  # those seeds (tuple)
    "n_better",  # of them, the seeds on which it beat uniform (``sense`` decides which way)
    "mean_delta",  # mean paired delta vs uniform
    "sd_delta",  # its own seed-to-seed sd of deltas (NaN with one seed): a description only
    "noise",  # model (the study's fit) | unknown (no residual df yet)
    "noise_from",  # whose own variance it uses: pooled | candidate | uniform | both
    "noise_sd",  # the sd of one paired delta the interval and effect_noise use
    "noise_df",  # its degrees of freedom (0 when unknown)
    "noise_shared",  # uniform's share of that variance: how the comparisons move together
    "noise_group",  # comparisons with one baseline (one uniform, one fit): joint within a group
    "lo",  # t interval of mean_delta over the family (see ci_level; NaN when noise unknown)
    "hi",
    "half_width",
    "ci_level",  # the confidence of lo/hi per comparison (see ci_level): level under none
    "effect_noise",  # mean_delta / noise_sd: the effect in units of seed noise
    "p",  # two-sided p-value of mean_delta = 0, per comparison
    "p_adj",  # adjusted over the family (``family``) of comparisons with uniform
    "separated",  # p_adj < 1 - level: the family's decision (<NA> when the noise is unknown)
    "family",  # holm | bh | none
    "family_size",  # comparisons with uniform in the family
    "censored",  # pruned or failed on some seed (its completed seeds flatter it)
    "censored_seeds",
    "censored_states",
)


def _sign(sense: str) -> float:
    if sense not in ("minimize", "maximize"):
        raise ValueError(f"sense must be 'minimize' or 'maximize', but got {sense=}")
    return 1.0 if sense == "minimize" else -1.0


_NOISED = (
    "noise",
    "noise_from",
    "noise_sd",
    "noise_df",
    "lo",
    "hi",
    "half_width",
    "effect_noise",
    "p",
)


def _noised(diffs: Sequence[float], noise: Noise | None, level: float) -> dict[str, Any]:
    """Mean of paired differences with its interval, p-value and effect / noise from ``noise``.

    A difference of two models on one seed has the sd of one paired delta, ``noise.sd``; over
    n seeds the mean's standard error is noise.sd / sqrt(n), with ``noise.df`` df.
    """
    iv = mean_interval(diffs, level)
    nan = math.nan
    out: dict[str, Any] = dict(
        mean=iv.mean, sd=iv.sd, noise=UNKNOWN, noise_from="", noise_sd=nan, noise_df=0
    )
    out.update(lo=nan, hi=nan, half_width=nan, effect_noise=nan, p=nan)
    if iv.n >= 1 and noise is not None and noise.df >= 1 and math.isfinite(noise.sd):
        se = noise.sd / math.sqrt(iv.n)
        half = t_quantile(noise.df, level) * se
        out.update(noise=MODEL, noise_sd=noise.sd, noise_df=noise.df, half_width=half)
        out.update(lo=iv.mean - half, hi=iv.mean + half)
        with np.errstate(divide="ignore", invalid="ignore"):
            out["effect_noise"] = float(np.float64(iv.mean) / np.float64(noise.sd))
            z = float(np.float64(abs(iv.mean)) / np.float64(se))
        out["p"] = 1.0 if iv.mean == 0 else 2.0 * t_sf(z, noise.df)
    return out


def effects(
    trials: pd.DataFrame,
    value: str,
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = LEVEL,
    seeds: Seeds = None,
    noise: Noise | RowNoise | None = None,
    family: str = FAMILY,
    planned: int = 0,
    pruned: bool | None = None,
) -> pd.DataFrame:
    """Every candidate's paired effect vs uniform: mean, interval, p-value, the family's verdict.

    The noise is ``noise`` (a :class:`Noise`: one for every comparison, the pooled model) or,
    by default, the study's :func:`row_noise` (each comparison its own). ``separated`` is the
    decision over the family of every candidate's comparison with uniform (``family``: holm,
    bh or none; :func:`adjust`), at ``1 - level``; ``lo``/``hi`` hold over the same family
    (:func:`decide`). One row per non-baseline candidate, sorted by key: key,
    :data:`EFFECT_COLUMNS`. ``pruned``: whether the whole study pruned anything, for the
    default model of a table that is part of one (a setting's cells, the cells a tuned
    comparison chose): the pruner's survivors never measure the noise.

    >>> t = pd.DataFrame({"candidate": ["u", "u", "c", "c"], "is_baseline": [1, 1, 0, 0],
    ...                   "seed": [0, 1, 0, 1], "state": ["COMPLETE"] * 4,
    ...                   "v": [2.0, 2.2, 1.9, 2.0]})
    >>> e = effects(t, "v").iloc[0]
    >>> int(e["n_better"]), float(round(e["mean_delta"], 3)), e["noise"], int(e["noise_df"])
    (2, -0.15, 'model', 1)
    >>> float(round(e["effect_noise"], 2))  # -0.15 / sd 0.0707
    -2.12
    """
    sign = _sign(sense)
    if noise is None and not trials.empty:
        noise = row_noise(trials, value, key=key, level=level, pruned=pruned)
    s = summarise(trials, value, key=key, level=level, seeds=seeds)
    baseline = list(s.loc[s["is_baseline"].astype(bool), key])
    ref = baseline[0] if baseline else None  # one uniform per table (per setting)
    s = s[~s["is_baseline"].astype(bool)]
    d = paired_deltas(trials, value, key=key)
    d = d[~d["is_baseline"]]
    # each candidate's (seed, delta) pairs in table order: one pass over the columns (a groupby
    # and two column reads per candidate cost ~0.4 s at 5,000 candidates)
    per: dict[Any, list[tuple[int, float]]] = {}
    for cand, seed, delta in zip(
        d[key].tolist(), d["seed"].tolist(), d["delta"].tolist(), strict=True
    ):
        per.setdefault(cand, []).append((seed, delta))
    rows = []
    for row in s.itertuples(index=False):
        cand = row[0]  # the key column
        pairs = per.get(cand, [])
        deltas = [x for _, x in pairs]
        x = _noised(deltas, None if noise is None else noise.pair(cand, ref), level)
        x["noise_shared"] = math.nan
        if x["noise"] == MODEL:
            x["noise_from"] = _from(noise.source(cand, ref), cand, ref)
            x["noise_shared"] = noise.share(cand, ref)
        rows.append(
            {
                key: cand,
                "n": len(deltas),
                "seeds": tuple(int(v) for v, _ in pairs),
                "n_better": sum(sign * v < 0 for v in deltas),
                "mean_delta": row.mean_delta,
                "sd_delta": row.sd_delta,
                **{c: x[c] for c in _NOISED},
                "noise_shared": x["noise_shared"],
                "noise_group": 0,
                "censored": bool(row.censored),
                "censored_seeds": row.censored_seeds,
                "censored_states": row.censored_states,
            }
        )
    return decide(pd.DataFrame(rows, columns=[key, *EFFECT_COLUMNS]), family, level, planned)


def _from(source: str, cand: Any, ref: Any) -> str:
    """:meth:`RowNoise.source` in the effects' words: pooled | candidate | uniform | both."""
    if source in ("pooled", "both"):
        return source
    return "uniform" if source == str(ref) and source != str(cand) else "candidate"


def _two_sided(c: float, df: int) -> float:
    """The per-comparison confidence of an interval of ``c`` standard errors on ``df`` df."""
    return 1.0 - 2.0 * t_sf(c, df)


def ci_level(family: str, level: float, m: int, separated: int = 0) -> float:
    """The per-comparison confidence of an interval that holds over a family of ``m``: holm,
    Bonferroni's 1 - (1 - level) / m (simultaneous: every interval of the family covers at once
    with chance >= level, whichever the data rank first); bh, Benjamini and Yekutieli's
    false-coverage level 1 - (1 - level) max(R, 1) / m (R = ``separated``); none, ``level``.

    >>> round(ci_level("holm", 0.95, 15), 5), ci_level("none", 0.95, 15)
    (0.99667, 0.95)
    """
    if family == "none" or m <= 1:
        return level
    if family == "bh":
        return 1.0 - (1.0 - level) * min(m, max(1, separated)) / m
    return 1.0 - (1.0 - level) / m


def uses_joint(out: pd.DataFrame, family: str, planned: int = 0) -> bool:
    """Whether :func:`decide` takes this table's decision at the joint t: holm, more than one
    comparison in the family, and every tested row saying how it shares uniform's noise."""
    tested = out["p"].notna() if "p" in out else pd.Series([], dtype=bool)
    m = int(tested.sum())
    return (
        family == "holm"
        and "noise_shared" in out
        and m > 0
        and max(m, int(planned)) > 1
        and bool(out.loc[tested, "noise_shared"].notna().all())
    )


def decide(out: pd.DataFrame, family: str, level: float, planned: int = 0) -> pd.DataFrame:
    """An effects table's family decision over all its rows: ``p_adj`` (``family``), ``separated``
    at ``1 - level``, ``family`` and ``family_size`` (the rows with a p-value, or ``planned``
    where the study plans more comparisons than have a p-value yet: a family fixed before the
    data, each comparison still to come counted as never rejected), and the
    intervals ``lo``/``hi``/``half_width`` that hold over the same family (``ci_level``). For
    tables put together from several :func:`effects` calls (each row on the noise that fits
    it; ``noise_group`` tells comparisons with different baselines apart).

    Under holm the step-down and the intervals use the comparisons' joint t distribution
    (:mod:`tlmsearch.stats.maxt`: Holm's scheme with each step at the exact critical value of
    the comparisons left, which Bonferroni's m bounds from above; Dunnett's step-down with each
    comparison on its own variance) when every tested row says how it shares uniform's noise
    (``noise_shared``); the intervals are then simultaneous at the joint critical value.
    """
    out = out.copy()
    tested = out["p"].notna()
    m = int(tested.sum())
    unseen = max(0, int(planned) - m)  # comparisons planned but without a p-value yet
    joint = uses_joint(out, family, planned)
    se = out["noise_sd"].to_numpy(dtype="float64") / np.sqrt(
        np.maximum(out["n"].to_numpy(dtype="float64"), 1.0)
    )
    mean = out["mean_delta"].to_numpy(dtype="float64")
    df = out["noise_df"].to_numpy(dtype="float64")
    groups = out["noise_group"].tolist() if "noise_group" in out else [0] * len(out)
    if joint:
        idx = np.flatnonzero(tested.to_numpy())
        with np.errstate(divide="ignore", invalid="ignore"):
            t = np.where(se > 0, mean / se, np.where(mean == 0, 0.0, np.inf))
        shared = out["noise_shared"].to_numpy(dtype="float64")[idx]
        # a comparison still to come: t 0 (never rejected first), the smallest df, its own
        # group, sharing no noise (independent comparisons are the conservative side: the
        # max over them is the largest; a setting still to come has its own baseline anyway)
        p_adj = np.full(len(out), math.nan)
        p_adj[idx] = step_down(
            t[idx].tolist() + [0.0] * unseen,
            shared.tolist() + [0.0] * unseen,
            [int(x) for x in df[idx]] + [int(np.min(df[idx]))] * unseen,
            [groups[i] for i in idx] + [UNSEEN] * unseen,
        )[:m]
        out["p_adj"] = p_adj
    else:
        p = out["p"].astype("float64").tolist()
        out["p_adj"] = adjust(p + [1.0] * unseen, family)[: len(p)] if len(out) else []
    out["separated"] = pd.array(
        [
            bool(q < 1.0 - level) if ok else pd.NA
            for q, ok in zip(out["p_adj"], tested, strict=True)
        ],
        dtype="boolean",
    )
    out["family"] = family
    out["family_size"] = m + unseen
    known = df >= 1
    if joint:
        shares = out.loc[tested, "noise_shared"].tolist()
        fam = [g for g, ok in zip(groups, tested, strict=True) if ok]
        shares, fam = shares + [0.0] * unseen, fam + [UNSEEN] * unseen
        crit = {int(x): joint_critical(shares, int(x), level, fam) for x in set(df[known])}
        q = np.array([crit[int(x)] if ok else math.nan for x, ok in zip(df, known, strict=True)])
        out["ci_level"] = [
            _two_sided(c, int(x)) if ok else level for c, x, ok in zip(q, df, known, strict=True)
        ]
    else:
        conf = ci_level(family, level, m + unseen, int(out["separated"].fillna(False).sum()))
        out["ci_level"] = conf
        q = np.array(
            [t_quantile(int(x), conf) if ok else math.nan for x, ok in zip(df, known, strict=True)]
        )
    if known.any():
        half = np.where(known, q * se, out["half_width"].to_numpy(dtype="float64"))
        out["half_width"] = half
        out["lo"] = np.where(known, mean - half, out["lo"].to_numpy(dtype="float64"))
        out["hi"] = np.where(known, mean + half, out["hi"].to_numpy(dtype="float64"))
    floats = (
        "mean_delta",
        "sd_delta",
        "noise_sd",
        "lo",
        "hi",
        "half_width",
        "effect_noise",
        "p",
        "p_adj",
        "ci_level",
        "noise_shared",
    )
    dtypes = {c: "float64" for c in floats} | {"n": "int64", "noise_df": "int64"}
    return as_dtypes(out, dtypes | {"family_size": "int64"})
