"""Per-candidate summary and ranking.

:func:`rank` orders candidates so that none wins on fewer seeds without a flag: fully measured
candidates first, compared on their *common seeds* (the seeds every one of them completed), then
those with a seed still running, not run yet or missing, then censored ones, then those with no
seed completed.

>>> t = pd.DataFrame({
...     "candidate": ["uniform", "uniform", "A", "A", "B", "B"],
...     "is_baseline": [True, True, False, False, False, False],
...     "seed": [0, 1, 0, 1, 0, 1],
...     "state": ["COMPLETE", "COMPLETE", "COMPLETE", "PRUNED", "COMPLETE", "COMPLETE"],
...     "val_bpb": [2.0, 2.2, 1.7, 2.5, 1.9, 2.1],
... })
>>> r = rank(t, "val_bpb")
>>> r[["candidate", "rank", "n_of_k"]].values.tolist()
[['B', 1, '2 of 2 seeds'], ['uniform', 2, '2 of 2 seeds'], ['A', 3, '1 of 2 seeds']]
>>> r["flag"].iloc[2]
'censored: 1 of 2 seeds (pruned on seed 1)'
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.constants import LEVEL
from tlmsearch.stats.deltas import (
    Cell,
    Seeds,
    _seeds_key,
    as_dtypes,
    cells_once,
    once,
    paired_cells,
    trial_cells,
)
from tlmsearch.stats.quantiles import mean_interval

# rank()'s tiers, best first
TIERS = ("complete", "pending", "censored", "unmeasured")

SUMMARY_COLUMNS = (
    "is_baseline",
    "n",  # seeds completed
    "k",  # seeds planned: complete + censored + pending (running or not run yet)
    "n_censored",
    "n_pending",
    "n_missing",  # seeds the system lost (a worker or node, memory): no data, no verdict
    "censored",  # pruned or diverged on some seed
    "n_of_k",  # "1 of 2 seeds"
    "seeds",  # completed seeds (tuple)
    "censored_seeds",
    "censored_states",  # e.g. "PRUNED" or "FAIL,PRUNED"
    "mean",  # mean value over the completed seeds
    "sd",
    "n_paired",  # completed seeds whose baseline completed too
    "mean_delta",  # mean paired delta vs uniform
    "sd_delta",  # sd of the paired deltas across seeds: the seed noise of the effect
    "lo",  # t interval of mean_delta (NaN with fewer than 2 paired seeds)
    "hi",
    "half_width",
    "effect_noise",  # mean_delta / sd_delta: the effect in units of seed noise
    "within_noise",  # the interval contains 0 (<NA> with fewer than 2 paired seeds)
)


def summarise(
    trials: pd.DataFrame,
    value: str,
    *,
    key: str = "candidate",
    level: float = LEVEL,
    seeds: Seeds = None,
) -> pd.DataFrame:
    """One row per candidate: seeds completed of planned, mean, paired delta and its interval.

    Columns: key, then :data:`SUMMARY_COLUMNS`. Sorted by key. ``seeds``: the study's seeds
    (None: every seed any trial ran on).
    """
    return _summary_once(trials, value, key, seeds, level).copy()


def _summary_once(
    trials: pd.DataFrame, value: str, key: str, seeds: Seeds, level: float
) -> pd.DataFrame:
    """:func:`summarise` without the copy: once per table inside
    :func:`~tlmsearch.stats.deltas.cells_once` (the effects and the signal to noise read the
    same summary, and the ranking too when it ranks on every seed: 0.1 s each at 5,000
    candidates). Never changed in place."""
    args = (value, key, _seeds_key(seeds), level)
    return once("summary", trials, args, _summary_of, seeds, level)


def _summary_of(
    trials: pd.DataFrame, value: str, key: str, seeds: Seeds, level: float
) -> pd.DataFrame:
    return _summary(trial_cells(trials, value, key, seeds), key, level)


def _summary(cells: dict[tuple[Any, int], Cell], key: str, level: float) -> pd.DataFrame:
    by_cand: dict[Any, list[tuple[int, Cell]]] = {}
    for (cand, seed), cell in cells.items():
        by_cand.setdefault(cand, []).append((seed, cell))
    deltas: dict[Any, list[float]] = {}
    for (cand, _), b, cell in paired_cells(cells):
        deltas.setdefault(cand, []).append(cell.value - b)
    rows = []
    for cand, seeds in by_cand.items():
        comp = [(s, c) for s, c in seeds if c.outcome == "complete"]
        cens = [(s, c) for s, c in seeds if c.outcome == "censored"]
        n, k = len(comp), len(seeds)
        values = mean_interval([c.value for _, c in comp], level)
        d = mean_interval(deltas.get(cand, []), level)
        with np.errstate(divide="ignore", invalid="ignore"):
            effect = float(np.float64(d.mean) / np.float64(d.sd)) if d.n >= 2 else math.nan
        ended = sorted({x for _, c in cens for x in c.states.split(",")})
        rows.append(
            {
                key: cand,
                "is_baseline": any(c.is_baseline for _, c in seeds),
                "n": n,
                "k": k,
                "n_censored": len(cens),
                "n_pending": sum(c.outcome == "pending" for _, c in seeds),
                "n_missing": sum(c.outcome == "missing" for _, c in seeds),
                "censored": len(cens) > 0,
                "n_of_k": f"{n} of {k} seeds",
                "seeds": tuple(s for s, _ in comp),
                "censored_seeds": tuple(s for s, _ in cens),
                "censored_states": ",".join(ended),
                "mean": values.mean,
                "sd": values.sd,
                "n_paired": d.n,
                "mean_delta": d.mean,
                "sd_delta": d.sd,
                "lo": d.lo,
                "hi": d.hi,
                "half_width": d.half_width,
                "effect_noise": effect,
                "within_noise": pd.NA if d.n < 2 else bool(d.lo <= 0.0 <= d.hi),
            }
        )
    floats = ("mean", "sd", "mean_delta", "sd_delta", "lo", "hi", "half_width", "effect_noise")
    out = pd.DataFrame(rows, columns=[key, *SUMMARY_COLUMNS])
    return as_dtypes(out, {"within_noise": "boolean"} | {c: "float64" for c in floats})


RANK_COLUMNS = (
    "tier",  # index into TIERS: 0 complete, 1 pending, 2 censored, 3 unmeasured
    "ranked_seeds",  # the seeds its score is the mean over
    "score",  # mean value over ranked_seeds: what the ranking sorts on within a tier
    "rank",  # 1 = best; <NA> for candidates with no completed seed
    "flag",  # "" for a fully measured candidate ranked on the common seeds; else why not
    "delta_best",  # mean paired difference vs the rank-1 candidate on the seeds both completed
    "n_best",  # how many seeds that is
    "better_than_best",  # a lower-tier candidate whose delta_best is better than 0
)


@cells_once()  # its cells and its summary's cells: computed once
def rank(
    trials: pd.DataFrame,
    value: str,
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = LEVEL,
    seeds: Seeds = None,
) -> pd.DataFrame:
    """:func:`summarise` plus a ranking that never rewards a candidate for its missing seeds.

    Tiers, in order: fully measured (every seed of the study completed), pending (some seed
    still running or not run yet), censored (some seed pruned or failed), unmeasured (no seed
    completed; not ranked). ``seeds``: the study's seeds (None: every seed any trial ran on).
    Fully measured candidates are compared on the *common seeds*, those every one of them
    completed (when none is fully measured: the candidates of the best tier present; each on
    its own seeds, flagged, when they share none); a lower-tier candidate on its completed
    seeds among the common ones (its own seeds if none). Within a tier: by
    ``score`` (``sense`` decides which way), ties by key, so row order never matters.

    ``seeds`` as a mapping (candidate -> its planned seeds, as a race gives them: a candidate
    separated after one seed is fully measured on that one) ranks within a tier by the mean
    *paired delta* vs uniform over each candidate's own paired seeds: their seed sets differ,
    so raw means would mix the seeds' levels in; a paired delta cancels them. ``score`` stays
    the mean value over the candidate's own completed seeds (``ranked_seeds``); a candidate
    without a paired seed sorts last in its tier.

    Returns one row per candidate, best first: key, :data:`SUMMARY_COLUMNS`,
    :data:`RANK_COLUMNS`.
    """
    if sense not in ("minimize", "maximize"):
        raise ValueError(f"sense must be 'minimize' or 'maximize', but got {sense=}")
    cells = trial_cells(trials, value, key, seeds)
    s = _summary_once(trials, value, key, seeds, level).copy()
    per_seed: dict[Any, dict[int, float]] = {}
    for (cand, seed), cell in cells.items():
        if cell.outcome == "complete":
            per_seed.setdefault(cand, {})[seed] = cell.value
    tier = np.select(
        [s["n"] == 0, s["n_censored"] > 0, (s["n_pending"] + s["n_missing"]) > 0],
        [3, 2, 1],
        default=0,
    ).astype(int)
    s["tier"] = tier
    own_seeds = isinstance(seeds, Mapping)
    if own_seeds:  # each on its own seeds, compared by paired delta: nothing needs sharing
        common = set().union(*(set(x) for x in s["seeds"])) if len(s) else set()
    else:  # the common seeds: those every candidate of the best tier present completed
        rankable = s["tier"][s["tier"] < 3]
        pool = s[s["tier"] == rankable.min()] if len(rankable) else s.iloc[:0]
        common = set.intersection(*(set(x) for x in pool["seeds"])) if len(pool) else set()
    ranked, scores, flags = [], [], []
    for row in s.itertuples(index=False):
        own = set(row.seeds)
        on = sorted(own & common) or sorted(own)
        vals = [per_seed[row[0]][x] for x in on]  # row[0]: the key column
        ranked.append(tuple(on))
        scores.append(float(np.mean(vals)) if vals else math.nan)
        flags.append(_flag(row, common))
    s["ranked_seeds"] = ranked
    s["score"] = pd.Series(scores, dtype="float64")
    s["flag"] = flags
    sign = 1.0 if sense == "minimize" else -1.0
    s["_key"] = sign * (s["mean_delta"] if own_seeds else s["score"])
    s["_name"] = s[key].astype(str)
    s = s.sort_values(["tier", "_key", "_name"], kind="stable", na_position="last")
    s = s.drop(columns=["_key", "_name"]).reset_index(drop=True)
    s["rank"] = pd.array(
        [i + 1 if t < 3 else pd.NA for i, t in enumerate(s["tier"])], dtype="Int64"
    )
    delta_best, n_best = [], []
    top = per_seed.get(s[key].iloc[0], {}) if len(s) and s["tier"].iloc[0] < 3 else {}
    for cand in s[key]:
        mine = per_seed.get(cand, {})
        shared = sorted(set(mine) & set(top))
        diffs = [mine[x] - top[x] for x in shared]
        delta_best.append(float(np.mean(diffs)) if diffs else math.nan)
        n_best.append(len(shared))
    s["delta_best"] = pd.Series(delta_best, dtype="float64")
    s["n_best"] = n_best
    s["better_than_best"] = (s["tier"] > 0) & (s["tier"] < 3) & (sign * s["delta_best"] < 0)
    return s[[key, *SUMMARY_COLUMNS, *RANK_COLUMNS]]


def _flag(row: Any, common: set[int]) -> str:
    """Why a candidate's rank is not a plain comparison on the common seeds ("" if it is)."""
    if row.tier == 3:
        ended = row.censored_states or "running or not run yet"
        return f"no seed completed (0 of {row.k}; {ended})"
    if row.tier == 2:
        ended = (row.censored_states or "censored").lower().replace(",", "/")
        on = ", ".join(str(x) for x in row.censored_seeds)
        text = f"censored: {row.n_of_k} ({ended} on seed {on})"
    elif row.tier == 1:
        parts = [f"{row.n_pending} running or not run yet"] if row.n_pending else []
        parts += [f"{row.n_missing} lost to the system"] if row.n_missing else []
        text = f"{row.n_of_k} ({', '.join(parts)})"
    else:
        text = ""
    if not common:
        text += ("; " if text else "") + "no seed common to the compared candidates: "
        text += "ranked on its own seeds"
    return text


def tier_name(tier: int) -> str:
    """``0`` -> ``'complete'``, ``2`` -> ``'censored'`` (see :data:`TIERS`)."""
    return TIERS[int(tier)]
