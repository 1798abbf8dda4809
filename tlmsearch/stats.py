"""Statistics of a study, in one place: paired deltas, intervals over seeds, censoring, ranking.

Within a seed every candidate sees the same data order and initial weights (common random
numbers), so a candidate's effect is its *paired delta*: its value minus the uniform baseline's
on the same seed, with a Student t interval over seeds. With pruning, a candidate's seed ends in
one of three ways:

- complete: a COMPLETE trial with a finite value (several such trials: their mean);
- censored: PRUNED or FAIL (or COMPLETE without a value). A pruned seed is informative (the
  pruner stopped it because it looked bad), so it is never dropped: its candidate is *censored*
  and shown as "n of k seeds";
- pending: RUNNING or WAITING, or not run yet: every candidate is planned on every seed of the
  study (``seeds``; by default every seed any trial ran on), so a seed it has no trial on is
  still to come.

:func:`rank` orders candidates so that none wins on fewer seeds without a flag: fully measured
candidates first, compared on their *common seeds* (the seeds every one of them completed), then
those with a seed still running or not run yet, then censored ones, then those with no seed
completed.

Pure pandas / numpy / scipy (no torch, ray or plotting). Input is a trials table
(docs/run_dir.md): columns ``seed``, ``state``, ``is_baseline``, a key naming the candidate
(``candidate`` by default) and a value column. A trial without a seed counts as seed -1
(unknown): it takes part in ranking but is never paired with the baseline.

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

import functools
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

UNKNOWN_SEED = -1
PENDING_STATES = ("RUNNING", "WAITING")
# rank()'s tiers, best first
TIERS = ("complete", "pending", "censored", "unmeasured")


def t_quantile(df: float, level: float = 0.95) -> float:
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


def pooled_sd(groups: Iterable[Sequence[float]]) -> tuple[float, int] | None:
    """(sd, df) of values pooled within groups: sqrt(sum of squares about each group's mean / df).

    Only groups of two or more values count (df = sum of n_i - 1), and not one whose values are
    all exactly 0 (the baseline's own deltas: uniform minus itself, not a draw of seed noise).
    None when no group counts. The seed noise racing, the paired pruner and the conclusions
    judge with.

    >>> pooled_sd([[1.0, 3.0], [5.0], [0.0, 0.0], [2.0, 2.0, 5.0]])
    (1.632993161855452, 3)
    """
    ss, df = 0.0, 0
    for g in groups:
        v = [float(x) for x in g if math.isfinite(x)]
        if len(v) >= 2 and any(x != 0 for x in v):
            m = sum(v) / len(v)
            ss += sum((x - m) ** 2 for x in v)
            df += len(v) - 1
    return (math.sqrt(ss / df), df) if df else None


class Interval(NamedTuple):
    """A sample's mean with a t interval; ``lo``/``hi``/``half_width`` NaN when ``n < 2``."""

    n: int
    mean: float
    sd: float  # sample sd (ddof 1); NaN when n < 2
    lo: float
    hi: float
    half_width: float


def mean_interval(values: Sequence[float] | np.ndarray, level: float = 0.95) -> Interval:
    """Mean of the finite ``values`` and its two-sided ``level`` Student t interval.

    >>> iv = mean_interval([1.0, 2.0, 3.0])
    >>> iv.mean, iv.sd, round(iv.half_width, 4)
    (2.0, 1.0, 2.4841)
    """
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


# -------------------------------------------------------------------------------------------------
# Seeds and paired deltas


class _Cell(NamedTuple):
    """One candidate on one seed."""

    is_baseline: bool
    outcome: str  # complete | censored | pending
    value: float  # mean of the complete trials' values; NaN otherwise
    states: str  # its trials' states, sorted and joined: "COMPLETE" or "FAIL,PRUNED"


Seeds = Sequence[int] | Mapping[Any, Sequence[int]] | None


def _cells(
    trials: pd.DataFrame, value: str, key: str, seeds: Seeds = None
) -> dict[tuple[Any, int], _Cell]:
    """(candidate, seed) -> _Cell, in sorted order (so row order never matters).

    With ``seeds`` (the study's seeds; None: every known seed in ``trials``; a mapping:
    each candidate's own planned seeds, e.g. the ones a race gave it), a candidate without a
    trial on one of them gets a pending cell there (states ``""``: not run yet).
    """
    if trials.empty:
        return {}
    if value in trials:
        values = pd.to_numeric(trials[value], errors="coerce").astype("float64").to_numpy()
    else:
        values = np.full(len(trials), np.nan)
    seed_of = pd.to_numeric(trials["seed"], errors="coerce").fillna(UNKNOWN_SEED).astype("int64")
    acc: dict[tuple[Any, int], list] = {}
    for cand, seed, base, state, v in zip(
        trials[key].to_numpy(),
        seed_of.to_numpy(),
        trials["is_baseline"].astype(bool).to_numpy(),
        trials["state"].astype(str).str.upper().to_numpy(),
        values,
        strict=True,
    ):
        cell = acc.setdefault((cand, int(seed)), [False, [], set()])
        cell[0] = cell[0] or bool(base)
        if state == "COMPLETE" and math.isfinite(v):
            cell[1].append(float(v))
        cell[2].add(state)
    if isinstance(seeds, Mapping):
        planned_of = {c: {int(x) for x in v} for c, v in seeds.items()}
        for cand in {c for c, _ in acc}:
            for seed in planned_of.get(cand, ()):
                acc.setdefault((cand, seed), [False, [], set()])
    else:
        planned = {int(x) for x in (seeds if seeds is not None else _seeds_all(acc))}
        for cand in {c for c, _ in acc}:
            for seed in planned:
                acc.setdefault((cand, seed), [False, [], set()])
    baseline = {c for (c, _), cell in acc.items() if cell[0]}
    for (cand, _), cell in acc.items():  # a not-run cell belongs to the baseline too
        cell[0] = cand in baseline
    out = {}
    for k in sorted(acc, key=lambda c: (str(c[0]), c[1])):
        base, done, states = acc[k]
        if done:
            outcome = "complete"
        elif not states or states & set(PENDING_STATES):
            outcome = "pending"
        else:
            outcome = "censored"
        mean = float(np.mean(done)) if done else math.nan
        out[k] = _Cell(base, outcome, mean, ",".join(sorted(states)))
    return out


def _seeds_all(cells: Any) -> set[int]:
    """Every known seed among (candidate, seed) keys: the study's seeds as far as they ran."""
    return {int(s) for _, s in cells if s != UNKNOWN_SEED}


def seed_outcomes(
    trials: pd.DataFrame,
    value: str,
    *,
    key: str = "candidate",
    seeds: Seeds = None,
) -> pd.DataFrame:
    """One row per (candidate, seed): ``outcome`` complete | censored | pending, and the value.

    Columns: key, seed, is_baseline, outcome, value (mean of the complete trials; NaN
    otherwise), states (the seed's trial states, e.g. ``"PRUNED"``; ``""``: not run yet).
    Sorted by key then seed. ``seeds``: the study's seeds (see the module docstring).
    """
    cells = _cells(trials, value, key, seeds)
    rows = [(c, s, *cell) for (c, s), cell in cells.items()]
    cols = [key, "seed", "is_baseline", "outcome", "value", "states"]
    return pd.DataFrame(rows, columns=cols).astype({"value": "float64"})


def _baseline(cells: dict[tuple[Any, int], _Cell]) -> dict[int, float]:
    acc: dict[int, list[float]] = {}
    for (_, seed), cell in cells.items():
        if cell.is_baseline and cell.outcome == "complete" and seed != UNKNOWN_SEED:
            acc.setdefault(seed, []).append(cell.value)
    return {seed: float(np.mean(v)) for seed, v in acc.items()}


def baseline_by_seed(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> pd.Series:
    """seed -> mean value of that seed's COMPLETE baseline (uniform) trials; known seeds only."""
    ref = _baseline(_cells(trials, value, key))
    return pd.Series(list(ref.values()), index=pd.Index(list(ref), dtype="int64"), dtype="float64")


def paired_deltas(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> pd.DataFrame:
    """Per (candidate, seed) both completed: value minus the same seed's uniform baseline.

    Columns: key, seed, is_baseline, value, baseline, delta (the baseline's own rows are 0).

    >>> t = pd.DataFrame({"candidate": ["u", "u", "c", "c"], "is_baseline": [1, 1, 0, 0],
    ...                   "seed": [0, 1, 0, 1], "state": ["COMPLETE"] * 3 + ["PRUNED"],
    ...                   "v": [2.0, 2.2, 1.9, 1.5]})
    >>> d = paired_deltas(t, "v")
    >>> [(int(r.seed), round(r.delta, 3)) for r in d[~d["is_baseline"]].itertuples()]
    [(0, -0.1)]
    """
    cells = _cells(trials, value, key)
    rows = [
        (c, s, cell.is_baseline, cell.value, b, cell.value - b)
        for (c, s), b, cell in _paired(cells)
    ]
    cols = [key, "seed", "is_baseline", "value", "baseline", "delta"]
    return pd.DataFrame(rows, columns=cols).astype(
        {"seed": "int64", "is_baseline": bool, "value": "float64", "baseline": "float64",
         "delta": "float64"}
    )  # fmt: skip


def _paired(cells: dict[tuple[Any, int], _Cell]) -> list[tuple[tuple[Any, int], float, _Cell]]:
    ref = _baseline(cells)
    return [(k, ref[k[1]], c) for k, c in cells.items() if c.outcome == "complete" and k[1] in ref]


# -------------------------------------------------------------------------------------------------
# Per-candidate summary and ranking

SUMMARY_COLUMNS = (
    "is_baseline",
    "n",  # seeds completed
    "k",  # seeds planned: complete + censored + pending (running or not run yet)
    "n_censored",
    "n_pending",
    "censored",  # pruned or failed on some seed
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
    level: float = 0.95,
    seeds: Seeds = None,
) -> pd.DataFrame:
    """One row per candidate: seeds completed of planned, mean, paired delta and its interval.

    Columns: key, then :data:`SUMMARY_COLUMNS`. Sorted by key. ``seeds``: the study's seeds
    (None: every seed any trial ran on).
    """
    return _summary(_cells(trials, value, key, seeds), key, level)


def _summary(cells: dict[tuple[Any, int], _Cell], key: str, level: float) -> pd.DataFrame:
    by_cand: dict[Any, list[tuple[int, _Cell]]] = {}
    for (cand, seed), cell in cells.items():
        by_cand.setdefault(cand, []).append((seed, cell))
    deltas: dict[Any, list[float]] = {}
    for (cand, _), b, cell in _paired(cells):
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
    out = pd.DataFrame(rows, columns=[key, *SUMMARY_COLUMNS])
    out["within_noise"] = out["within_noise"].astype("boolean")
    for col in ("mean", "sd", "mean_delta", "sd_delta", "lo", "hi", "half_width"):
        out[col] = out[col].astype("float64")
    out["effect_noise"] = out["effect_noise"].astype("float64")
    return out


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


def rank(
    trials: pd.DataFrame,
    value: str,
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = 0.95,
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
    cells = _cells(trials, value, key, seeds)
    s = _summary(cells, key, level)
    per_seed: dict[Any, dict[int, float]] = {}
    for (cand, seed), cell in cells.items():
        if cell.outcome == "complete":
            per_seed.setdefault(cand, {})[seed] = cell.value
    tier = np.select(
        [s["n"] == 0, s["n_censored"] > 0, s["n_pending"] > 0], [3, 2, 1], default=0
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
        text = f"{row.n_of_k} ({row.n_pending} running or not run yet)"
    else:
        text = ""
    if not common:
        text += ("; " if text else "") + "no seed common to the compared candidates: "
        text += "ranked on its own seeds"
    return text


def tier_name(tier: int) -> str:
    """``0`` -> ``'complete'``, ``2`` -> ``'censored'`` (see :data:`TIERS`)."""
    return TIERS[int(tier)]


# -------------------------------------------------------------------------------------------------
# Effects in units of noise, and which candidates can be told apart
#
# A candidate with two or more paired seeds has its own seed-to-seed sd of deltas ("own"). With
# one seed it has none; ``noise`` (e.g. tlmsearch.racing.pooled_noise: the sd of paired deltas
# pooled over the study's candidates with two or more seeds) stands in, said as "pooled": it
# assumes every candidate's delta is as noisy as the others'. Without either the noise is
# "unknown" and nothing is separated. A racing prior (df 0) is an assumption, not a
# measurement: it is never used here.

OWN, POOLED, UNKNOWN = "own", "pooled", "unknown"

EFFECT_COLUMNS = (
    "n",  # paired seeds: completed with a finished uniform of the same seed
    "seeds",  # those seeds (tuple)
    "n_better",  # of them, the seeds on which it beat uniform (``sense`` decides which way)
    "mean_delta",  # mean paired delta vs uniform
    "sd_delta",  # its own seed-to-seed sd of deltas (NaN with one seed)
    "noise",  # where noise_sd comes from: own | pooled | unknown
    "noise_sd",  # the sd the interval and effect_noise use
    "noise_df",  # its degrees of freedom (0 when unknown)
    "lo",  # t interval of mean_delta at ``level`` (NaN when the noise is unknown)
    "hi",
    "half_width",
    "effect_noise",  # mean_delta / noise_sd: the effect in units of seed noise
    "separated",  # the interval excludes 0 (<NA> when the noise is unknown)
    # the interval's half-width with ``noise`` (pooled) for every candidate, whatever its seeds,
    # and whether it excludes 0 (NaN / <NA> without ``noise``); racing tests each look stricter
    "pooled_half_width",
    "pooled_separated",
    "censored",  # pruned or failed on some seed (its completed seeds flatter it)
    "censored_seeds",
    "censored_states",
)

PAIR_COLUMNS = (
    "a",
    "b",
    "n",  # common seeds: both completed
    "seeds",
    "n_better",  # seeds on which a beat b
    "mean",  # mean over the common seeds of a - b
    "sd",  # sd of a - b across them (NaN with one)
    "noise",
    "noise_sd",
    "noise_df",
    "lo",
    "hi",
    "half_width",
    "effect_noise",
    "separated",
    "pooled_half_width",
    "pooled_separated",
)


def _sign(sense: str) -> float:
    if sense not in ("minimize", "maximize"):
        raise ValueError(f"sense must be 'minimize' or 'maximize', but got {sense=}")
    return 1.0 if sense == "minimize" else -1.0


_NOISED = ("noise", "noise_sd", "noise_df", "lo", "hi", "half_width", "effect_noise", "separated",
           "pooled_half_width", "pooled_separated")  # fmt: skip


def _noised(diffs: Sequence[float], noise: Any, level: float) -> dict[str, Any]:
    """Mean of paired differences with its interval: own sd (2+), else ``noise`` (1), else none.

    ``pooled_half_width`` / ``pooled_separated``: the interval every candidate would get from
    ``noise`` (with its n seeds), so a reader sees where the two estimates disagree.
    """
    iv = mean_interval(diffs, level)
    nan = math.nan
    out: dict[str, Any] = dict(mean=iv.mean, sd=iv.sd, noise=UNKNOWN, noise_sd=nan, noise_df=0)
    out.update(lo=nan, hi=nan, half_width=nan, pooled_half_width=nan, pooled_separated=pd.NA)
    pooled = noise is not None and int(noise.df) >= 1 and math.isfinite(noise.sd)
    if iv.n >= 1 and pooled:
        half = t_quantile(int(noise.df), level) * float(noise.sd) / math.sqrt(iv.n)
        out.update(pooled_half_width=half, pooled_separated=bool(abs(iv.mean) > half))
    if iv.n >= 2:
        out.update(noise=OWN, noise_sd=iv.sd, noise_df=iv.n - 1, lo=iv.lo, hi=iv.hi)
        out["half_width"] = iv.half_width
    elif iv.n == 1 and pooled:
        half = out["pooled_half_width"]
        out.update(noise=POOLED, noise_sd=float(noise.sd), noise_df=int(noise.df))
        out.update(lo=iv.mean - half, hi=iv.mean + half, half_width=half)
    if out["noise"] == UNKNOWN:
        out["effect_noise"], out["separated"] = math.nan, pd.NA
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            out["effect_noise"] = float(np.float64(iv.mean) / np.float64(out["noise_sd"]))
        out["separated"] = not (out["lo"] <= 0.0 <= out["hi"])
    return out


def effects(
    trials: pd.DataFrame,
    value: str,
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = 0.95,
    seeds: Seeds = None,
    noise: Any = None,
) -> pd.DataFrame:
    """Every candidate's paired effect vs uniform: mean, ``level`` interval, effect / noise.

    From :func:`summarise` (its mean_delta, sd_delta and interval over the candidate's own
    seeds); a candidate with one paired seed takes ``noise`` (an object with ``sd`` and ``df``
    >= 1, e.g. :func:`tlmsearch.racing.pooled_noise`'s) and says so in ``noise``. One row per
    non-baseline candidate, sorted by key: key, :data:`EFFECT_COLUMNS`.

    >>> t = pd.DataFrame({"candidate": ["u", "u", "c", "c"], "is_baseline": [1, 1, 0, 0],
    ...                   "seed": [0, 1, 0, 1], "state": ["COMPLETE"] * 4,
    ...                   "v": [2.0, 2.2, 1.9, 2.0]})
    >>> e = effects(t, "v").iloc[0]
    >>> int(e["n_better"]), float(round(e["mean_delta"], 3)), e["noise"]
    (2, -0.15, 'own')
    >>> float(round(e["effect_noise"], 2))  # -0.15 / sd 0.0707
    -2.12
    """
    sign = _sign(sense)
    s = summarise(trials, value, key=key, level=level, seeds=seeds)
    s = s[~s["is_baseline"].astype(bool)]
    d = paired_deltas(trials, value, key=key)
    d = d[~d["is_baseline"]]
    per = {c: g for c, g in d.groupby(key, sort=False)}
    rows = []
    for row in s.itertuples(index=False):
        cand = row[0]  # the key column
        g = per.get(cand)
        deltas = [] if g is None else g["delta"].tolist()
        x = _noised(deltas, noise, level)
        rows.append(
            {
                key: cand,
                "n": len(deltas),
                "seeds": () if g is None else tuple(int(v) for v in g["seed"]),
                "n_better": sum(sign * v < 0 for v in deltas),
                "mean_delta": row.mean_delta,
                "sd_delta": row.sd_delta,
                **{c: x[c] for c in _NOISED},
                "censored": bool(row.censored),
                "censored_seeds": row.censored_seeds,
                "censored_states": row.censored_states,
            }
        )
    out = pd.DataFrame(rows, columns=[key, *EFFECT_COLUMNS])
    for col in ("separated", "pooled_separated"):
        out[col] = out[col].astype("boolean")
    floats = ("mean_delta", "sd_delta", "noise_sd", "lo", "hi", "half_width", "effect_noise",
              "pooled_half_width")  # fmt: skip
    return out.astype({c: "float64" for c in floats}).astype({"n": "int64", "noise_df": "int64"})


def pairwise(
    trials: pd.DataFrame,
    value: str,
    candidates: Sequence[Any],
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = 0.95,
    noise: Any = None,
) -> pd.DataFrame:
    """Can these be told apart? Paired differences a - b on the seeds both completed.

    Within a seed both saw the same data and initial weights, so a - b on that seed is a paired
    difference (uniform among ``candidates`` gives the paired delta vs uniform). Over two or
    more common seeds its own sd gives the ``level`` t interval; on one common seed ``noise``
    stands in (as in :func:`effects`: the spread of a - b is taken to be that of a paired
    delta, both being differences of two models on one seed). One row per ordered pair (a, b),
    a != b, in the order of ``candidates``: :data:`PAIR_COLUMNS`; b vs a mirrors a vs b.

    >>> t = pd.DataFrame({"candidate": ["a"] * 3 + ["b"] * 3, "is_baseline": [0] * 6,
    ...                   "seed": [0, 1, 2] * 2, "state": ["COMPLETE"] * 6,
    ...                   "v": [1.0, 2.0, 3.0, 1.5, 2.4, 3.6]})
    >>> p = pairwise(t, "v", ["a", "b"]).iloc[0]
    >>> p["a"], p["b"], int(p["n_better"]), float(round(p["mean"], 3)), bool(p["separated"])
    ('a', 'b', 3, -0.5, True)
    """
    sign = _sign(sense)
    done: dict[Any, dict[int, float]] = {}
    for (cand, seed), cell in _cells(trials, value, key).items():
        if cell.outcome == "complete" and seed != UNKNOWN_SEED:
            done.setdefault(cand, {})[seed] = cell.value
    rows = []
    for a in candidates:
        for b in candidates:
            if a == b:
                continue
            va, vb = done.get(a, {}), done.get(b, {})
            common = sorted(set(va) & set(vb))
            diffs = [va[x] - vb[x] for x in common]
            x = _noised(diffs, noise, level)
            rows.append(
                {"a": a, "b": b, "n": len(common), "seeds": tuple(common),
                 "n_better": sum(sign * v < 0 for v in diffs),
                 **{c: x[c] for c in PAIR_COLUMNS if c in x}}
            )  # fmt: skip
    out = pd.DataFrame(rows, columns=list(PAIR_COLUMNS))
    for col in ("separated", "pooled_separated"):
        out[col] = out[col].astype("boolean")
    floats = ("mean", "sd", "noise_sd", "lo", "hi", "half_width", "effect_noise",
              "pooled_half_width")  # fmt: skip
    return out.astype({c: "float64" for c in floats}).astype({"n": "int64", "noise_df": "int64"})
