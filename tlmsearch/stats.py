"""Statistics of a study, in one place: paired deltas, intervals over seeds, censoring, ranking.

Within a seed every candidate sees the same data order and initial weights (common random
numbers), so a candidate's effect is its *paired delta*: its value minus the uniform baseline's
on the same seed, with a Student t interval over seeds. With pruning, a candidate's seed ends in
one of four ways:

- complete: a COMPLETE trial with a finite value (several such trials: their mean);
- censored: PRUNED, or FAIL of its own (diverged, a non-finite objective, an exception), or
  COMPLETE without a value. A pruned seed is informative (the pruner stopped it because it
  looked bad), so it is never dropped: its candidate is *censored* and shown as "n of k seeds";
- missing: FAIL that the system lost (a worker or node, memory; tlmsearch/reasons.py): the
  seed says nothing about the candidate's numbers, as the race judges it too;
- pending: RUNNING or WAITING, or not run yet: every candidate is planned on every seed of the
  study (``seeds``; by default every seed any trial ran on), so a seed it has no trial on is
  still to come.

:func:`rank` orders candidates so that none wins on fewer seeds without a flag: fully measured
candidates first, compared on their *common seeds* (the seeds every one of them completed), then
those with a seed still running, not run yet or missing, then censored ones, then those with no
seed completed.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tlmsearch.reasons import is_lost

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


def t_sf(t: float, df: float) -> float:
    """Upper tail of Student t: P(T > t) with ``df`` degrees of freedom.

    >>> round(t_sf(2.0, 10), 4), t_sf(0.0, 3)
    (0.0367, 0.5)
    """
    from scipy.stats import t as student_t

    return float(student_t.sf(t, df))


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


@dataclass(frozen=True)
class Noise:
    """The sd of one paired delta (a candidate minus uniform on one seed) and its df.

    From the block-design fit (:func:`block_noise`): ``sd`` = sqrt(2) x the residual sd of
    ``value ~ candidate + seed``, ``df`` its residual degrees of freedom. ``df`` 0 is a racing
    prior (an assumption, not a measurement): a normal quantile.
    """

    sd: float
    df: int

    def quantile(self, confidence: float) -> float:
        """Two-sided quantile at ``confidence`` (t with ``df``; normal for the prior)."""
        return t_quantile(1e9 if self.df == 0 else self.df, confidence)

    def one_sided(self, confidence: float) -> float:
        """One-sided quantile at ``confidence``: the two-sided one at ``2 * confidence - 1``."""
        return self.quantile(2.0 * confidence - 1.0)


def block_fit(candidates: Sequence[Any], seeds: Sequence[int], values: Sequence[float]) -> tuple[
    float, int
]:
    """(residual sum of squares, residual df) of the two-way additive fit value ~ candidate + seed.

    A study is a randomized block design: candidates are treatments (uniform one of them), seeds
    are blocks, y(c, s) = mu + tau_c + u_s + e_cs. Every paired delta on seed s subtracts the
    same uniform value, so the deltas of one seed share its -e_us: pooling each candidate's
    deltas as if independent misstates the noise (docs/contributing.md). The residuals of this
    fit estimate sigma_e^2 with df = cells - rank(design) ((C - 1)(S - 1) in a complete design);
    cells a race or pruner left empty are simply absent. Equal to statsmodels'
    ``ols("value ~ C(candidate) + C(seed)")`` (tests/test_stats.py checks it).

    >>> rss, df = block_fit(["u", "u", "a", "a"], [0, 1, 0, 1], [1.0, 2.0, 1.5, 2.1])
    >>> round(rss, 4), df
    (0.04, 1)
    """
    y = np.asarray(values, dtype="float64")
    if len(y) == 0:
        return 0.0, 0
    x = _block_design(candidates, seeds)
    beta, _, rank, _ = np.linalg.lstsq(x, y, rcond=None)
    resid = y - x @ beta
    rss = float(resid @ resid)
    if rss <= len(y) * (1e-12 * float(np.abs(y).max())) ** 2:  # rounding, not noise: exactly 0
        rss = 0.0
    return rss, int(len(y) - rank)


def _block_design(candidates: Sequence[Any], blocks: Sequence[Any]) -> np.ndarray:
    """The design matrix of value ~ candidate + block: intercept, then dummies (first levels
    dropped)."""
    c_codes = pd.factorize(pd.Series(list(candidates), dtype="object").astype(str))[0]
    s_codes = pd.factorize(pd.Series(list(blocks), dtype="object").astype(str))[0]
    cols = [np.ones(len(c_codes))]
    cols += [(c_codes == k).astype(float) for k in range(1, c_codes.max() + 1)]
    cols += [(s_codes == k).astype(float) for k in range(1, s_codes.max() + 1)]
    return np.column_stack(cols)


def block_noise(
    trials: pd.DataFrame, value: str, *, key: str = "candidate"
) -> Noise | None:
    """The study's noise of a paired delta from the block-design fit (:func:`block_fit`).

    On the completed (candidate, seed) cells of known seeds; a replayed twin (``same_as``)
    repeats another trial's numbers and is left out. None when the fit leaves no residual df
    (e.g. one seed): then nothing can be separated.
    """
    if "same_as" in trials:
        trials = trials[trials["same_as"].isna()]
    # blocks are seeds, or (setting, seed) with setting dimensions: each setting's uniform is the
    # control of its own candidates on a seed
    done = [(c, (cell.setting, s) if cell.setting else s, cell.value)
            for (c, s), cell in _cells(trials, value, key).items()
            if cell.outcome == "complete" and s != UNKNOWN_SEED]  # fmt: skip
    if not done:
        return None
    rss, df = block_fit(*zip(*done, strict=True))
    if df < 1:
        return None
    return Noise(math.sqrt(2.0 * rss / df), df)


def setting_column(trials: pd.DataFrame) -> pd.Series | None:
    """The trials' ``setting`` column as text when it holds two or more values (a study with
    setting dimensions, each value its own comparison with its own uniform), else None."""
    if "setting" not in trials:
        return None
    settings = trials["setting"].fillna("").astype(str)
    return settings if settings.nunique() > 1 else None


def setting_noises(
    trials: pd.DataFrame, value: str, *, key: str = "candidate"
) -> dict[str, Noise | None]:
    """{setting: :func:`block_noise` of that setting's cells} (None where a setting has no
    residual df); {} without two or more settings. Each setting's effects are judged on its
    own entry (:mod:`tlmsearch.evidence`)."""
    settings = setting_column(trials)
    if settings is None:
        return {}
    return {str(s): block_noise(sub, value, key=key)
            for s, sub in trials.groupby(settings, sort=True)}  # fmt: skip


def setting_noise(
    trials: pd.DataFrame, value: str, *, key: str = "candidate"
) -> Noise | None:
    """The noise of a delta between two cells of one seed at *different* settings (a schedule at
    its best LR minus uniform at its own): None when it cannot be estimated.

    With setting dimensions a cell is (schedule, setting) and, on a seed, the cells of one
    setting share more than the seed's level: its data order *and* how that LR treats that seed,
    y = mu_cell + u_seed + g_(setting, seed) + e. A delta within a setting cancels g (var
    2 sigma_e^2: :func:`block_noise`'s (setting, seed) blocks); one across settings does not
    (var 2 sigma_e^2 + 2 sigma_g^2). Two block fits on the same cells estimate both: blocks
    (setting, seed) give sigma_e^2; blocks seed leave the seed-by-setting interaction in the
    residual, whose extra mean square estimates sigma_e^2 + S sigma_g^2 (S the cells per
    block in a complete balanced grid; computed exactly from the design otherwise). The variance
    2 (1 - 1/S) sigma_e^2 + (2 / S) MS_interaction, never below 2 sigma_e^2, has
    Satterthwaite's df (rounded down).

    A per-(setting, seed) level of sd 0.01 shared by the three cells, cell noise sd 0.001:

    >>> rng = np.random.default_rng(0)
    >>> g = rng.normal(0, 0.01, (8, 2))
    >>> rows = [(c, lr, s, g[s, lr - 1] + rng.normal(0, 0.001))
    ...         for s in range(8) for lr in (1, 2) for c in ("u", "a", "b")]
    >>> t = pd.DataFrame({"candidate": [f"{c}{lr}" for c, lr, _, _ in rows],
    ...     "setting": [f"lr={lr}" for _, lr, _, _ in rows], "seed": [r[2] for r in rows],
    ...     "is_baseline": [r[0] == "u" for r in rows], "state": "COMPLETE",
    ...     "v": [r[3] for r in rows]})
    >>> within, across = block_noise(t, "v"), setting_noise(t, "v")
    >>> across.sd > 3 * within.sd, within.df, across.df > 0
    (True, 28, True)
    """
    if "same_as" in trials:
        trials = trials[trials["same_as"].isna()]
    done = [(c, cell.setting, s, cell.value)
            for (c, s), cell in _cells(trials, value, key).items()
            if cell.outcome == "complete" and s != UNKNOWN_SEED]  # fmt: skip
    if not done:
        return None
    cands, settings, seeds, values = zip(*done, strict=True)
    blocks = [f"{a}\x00{b}" for a, b in zip(settings, seeds, strict=True)]
    rss_in, df_in = block_fit(cands, blocks, values)
    rss_out, df_out = block_fit(cands, seeds, values)
    df_x = df_out - df_in  # the seed-by-setting interaction's df
    if df_in < 1 or df_x < 1:
        return None
    var_e = rss_in / df_in
    ms_x = max(rss_out - rss_in, 0.0) / df_x
    # E[MS_x] = sigma_e^2 + c sigma_g^2 with c = tr(Z' (I - P) Z) / df_x, Z the (setting, seed)
    # indicators and P the projection onto candidate + seed: S, the cells per block, in a
    # complete balanced grid, less where settings hold different numbers of cells
    z = pd.get_dummies(pd.Series(blocks)).to_numpy(dtype="float64")
    x = _block_design(cands, seeds)
    resid = z - x @ np.linalg.lstsq(x, z, rcond=None)[0]
    c = float((resid * resid).sum()) / df_x
    if not c > 1.0:  # most blocks hold one cell: no split of the two components, the larger
        var, df = max((2.0 * var_e, df_in), (2.0 * ms_x / max(c, 1e-12), df_x))
        return Noise(math.sqrt(var), int(df)) if var > 0 else None
    a = 2.0 * (1.0 - 1.0 / c) * var_e
    b = 2.0 / c * ms_x
    var = a + b
    if var <= 2.0 * var_e:  # no interaction beyond sigma_e: the within-setting noise
        return Noise(math.sqrt(2.0 * var_e), int(df_in)) if var_e > 0 else None
    df = var**2 / (a**2 / df_in + b**2 / df_x)
    return Noise(math.sqrt(var), max(1, int(df)))


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


FAMILIES = ("holm", "bh", "none")


def adjust(p_values: Sequence[float], family: str = "holm") -> list[float]:
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
    name = {"holm": "Holm", "bh": "Benjamini-Hochberg (false discovery rate)",
            "none": "no correction"}[family]  # fmt: skip
    if family == "none":
        return f"{name}: per comparison, {m} in the study"
    return f"{name} over {m} comparison{'s' * (m != 1)}"


# -------------------------------------------------------------------------------------------------
# Seeds and paired deltas


class _Cell(NamedTuple):
    """One candidate on one seed."""

    is_baseline: bool
    outcome: str  # complete | censored | pending | missing
    value: float  # mean of the complete trials' values; NaN otherwise
    states: str  # its trials' states, sorted and joined: "COMPLETE" or "FAIL,PRUNED"
    # the candidate's setting (``lr=0.003``; ``""`` without setting dimensions): it is paired
    # with the uniform of its own setting and seed (tlmsearch/settings.py)
    setting: str = ""


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
    reasons = (trials["reason"].fillna("").astype(str).to_numpy() if "reason" in trials
               else np.full(len(trials), ""))  # fmt: skip
    setting_of = (dict(zip(trials[key].to_numpy(), trials["setting"].fillna("").astype(str),
                           strict=True)) if "setting" in trials else {})  # fmt: skip
    acc: dict[tuple[Any, int], list] = {}
    for cand, seed, base, state, v, why in zip(
        trials[key].to_numpy(),
        seed_of.to_numpy(),
        trials["is_baseline"].astype(bool).to_numpy(),
        trials["state"].astype(str).str.upper().to_numpy(),
        values,
        reasons,
        strict=True,
    ):
        cell = acc.setdefault((cand, int(seed)), [False, [], set()])
        cell[0] = cell[0] or bool(base)
        if state == "COMPLETE" and math.isfinite(v):
            cell[1].append(float(v))
        # a seed the system lost says nothing about the candidate (as the race judges it):
        # missing, not censored (tlmsearch/reasons.py)
        cell[2].add("FAIL:lost" if state == "FAIL" and is_lost(why) else state)
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
        elif states == {"FAIL:lost"}:
            outcome = "missing"  # the system lost it: it says nothing of the candidate
        else:
            outcome = "censored"
        mean = float(np.mean(done)) if done else math.nan
        states = {"FAIL" if x == "FAIL:lost" else x for x in states}
        out[k] = _Cell(base, outcome, mean, ",".join(sorted(states)), setting_of.get(k[0], ""))
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
    rows = [(c, s, cell.is_baseline, cell.outcome, cell.value, cell.states)
            for (c, s), cell in cells.items()]  # fmt: skip
    cols = [key, "seed", "is_baseline", "outcome", "value", "states"]
    return pd.DataFrame(rows, columns=cols).astype({"value": "float64"})


def _baseline(cells: dict[tuple[Any, int], _Cell]) -> dict[tuple[str, int], float]:
    """(setting, seed) -> the mean of that seed's COMPLETE uniform trials at that setting."""
    acc: dict[tuple[str, int], list[float]] = {}
    for (_, seed), cell in cells.items():
        if cell.is_baseline and cell.outcome == "complete" and seed != UNKNOWN_SEED:
            acc.setdefault((cell.setting, seed), []).append(cell.value)
    return {block: float(np.mean(v)) for block, v in acc.items()}


def baseline_by_seed(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> pd.Series:
    """seed -> mean value of that seed's COMPLETE baseline (uniform) trials; known seeds only.

    For one setting: a study with setting dimensions has a uniform per setting, so pass the
    trials of one setting (``trials[trials["setting"] == s]``).
    """
    ref = _baseline(_cells(trials, value, key))
    if len({setting for setting, _ in ref}) > 1:
        raise ValueError("trials of several settings: select one setting's rows first")
    return pd.Series(list(ref.values()), index=pd.Index([s for _, s in ref], dtype="int64"),
                     dtype="float64")  # fmt: skip


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
    return [(k, ref[c.setting, k[1]], c) for k, c in cells.items()
            if c.outcome == "complete" and (c.setting, k[1]) in ref]  # fmt: skip


# -------------------------------------------------------------------------------------------------
# Per-candidate summary and ranking

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
        [s["n"] == 0, s["n_censored"] > 0, (s["n_pending"] + s["n_missing"]) > 0], [3, 2, 1],
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


# -------------------------------------------------------------------------------------------------
# Effects in units of noise, and which candidates can be told apart
#
# Every interval and test uses the study's noise of a paired delta from the block-design fit
# (:func:`block_noise`, said as "model"): one estimate for every candidate, whatever its seeds,
# with the df of the whole design. A candidate's own seed-to-seed sd of deltas (``sd_delta``) is
# kept beside it as a description, never as a second verdict. Without residual df the noise is
# "unknown" and nothing is separated. A racing prior (df 0) is an assumption, not a
# measurement: it is never used here.

MODEL, UNKNOWN = "model", "unknown"

EFFECT_COLUMNS = (
    "n",  # paired seeds: completed with a finished uniform of the same seed
    "seeds",  # those seeds (tuple)
    "n_better",  # of them, the seeds on which it beat uniform (``sense`` decides which way)
    "mean_delta",  # mean paired delta vs uniform
    "sd_delta",  # its own seed-to-seed sd of deltas (NaN with one seed): a description only
    "noise",  # model (the block-design fit) | unknown (no residual df yet)
    "noise_sd",  # the sd of one paired delta the interval and effect_noise use
    "noise_df",  # its degrees of freedom (0 when unknown)
    "lo",  # t interval of mean_delta at ``level``, per comparison (NaN when the noise is unknown)
    "hi",
    "half_width",
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


def _sign(sense: str) -> float:
    if sense not in ("minimize", "maximize"):
        raise ValueError(f"sense must be 'minimize' or 'maximize', but got {sense=}")
    return 1.0 if sense == "minimize" else -1.0


_NOISED = ("noise", "noise_sd", "noise_df", "lo", "hi", "half_width", "effect_noise", "p")


def _noised(diffs: Sequence[float], noise: Noise | None, level: float) -> dict[str, Any]:
    """Mean of paired differences with its interval, p-value and effect / noise from ``noise``.

    A difference of two models on one seed has the sd of one paired delta, ``noise.sd``; over
    n seeds the mean's standard error is noise.sd / sqrt(n), with ``noise.df`` df.
    """
    iv = mean_interval(diffs, level)
    nan = math.nan
    out: dict[str, Any] = dict(mean=iv.mean, sd=iv.sd, noise=UNKNOWN, noise_sd=nan, noise_df=0)
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
    level: float = 0.95,
    seeds: Seeds = None,
    noise: Noise | None = None,
    family: str = "holm",
) -> pd.DataFrame:
    """Every candidate's paired effect vs uniform: mean, interval, p-value, the family's verdict.

    The noise is ``noise`` or, by default, the study's :func:`block_noise`. ``separated`` is the
    decision over the family of every candidate's comparison with uniform (``family``: holm,
    bh or none; :func:`adjust`), at ``1 - level``; ``lo``/``hi`` are per comparison. One row
    per non-baseline candidate, sorted by key: key, :data:`EFFECT_COLUMNS`.

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
    if noise is None:
        noise = block_noise(trials, value, key=key)
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
    return decide(pd.DataFrame(rows, columns=[key, *EFFECT_COLUMNS]), family, level)


def decide(out: pd.DataFrame, family: str, level: float) -> pd.DataFrame:
    """An effects table's family decision over all its rows: ``p_adj`` (``family``), ``separated``
    at ``1 - level``, ``family`` and ``family_size`` (the rows with a p-value). For tables put
    together from several :func:`effects` calls (each row on the noise that fits it)."""
    out = out.copy()
    out["p_adj"] = adjust(out["p"].astype("float64").tolist(), family) if len(out) else []
    tested = out["p"].notna()
    out["separated"] = pd.array(
        [bool(q < 1.0 - level) if ok else pd.NA for q, ok in zip(out["p_adj"], tested,
                                                                 strict=True)],
        dtype="boolean",
    )  # fmt: skip
    out["family"] = family
    out["family_size"] = int(tested.sum())
    floats = ("mean_delta", "sd_delta", "noise_sd", "lo", "hi", "half_width", "effect_noise",
              "p", "p_adj")  # fmt: skip
    return out.astype({c: "float64" for c in floats}).astype(
        {"n": "int64", "noise_df": "int64", "family_size": "int64"}
    )


def _complete_by_seed(trials: pd.DataFrame, value: str, key: str) -> dict[Any, dict[int, float]]:
    done: dict[Any, dict[int, float]] = {}
    for (cand, seed), cell in _cells(trials, value, key).items():
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
    level: float = 0.95,
    noise: Noise | None = None,
    family: str = "holm",
) -> pd.DataFrame:
    """Can these be told apart? Paired differences a - b on the seeds both completed.

    Within a seed both saw the same data and initial weights, so a - b on that seed is a paired
    difference with the sd of one paired delta (``noise``; by default :func:`block_noise`).
    ``separated``: the p-value adjusted over the unordered pairs of ``candidates`` (``family``)
    is below ``1 - level``. One row per ordered pair (a, b), a != b, in the order of
    ``candidates``: :data:`PAIR_COLUMNS`; b vs a mirrors a vs b.

    >>> t = pd.DataFrame({"candidate": ["a"] * 3 + ["b"] * 3, "is_baseline": [0] * 6,
    ...                   "seed": [0, 1, 2] * 2, "state": ["COMPLETE"] * 6,
    ...                   "v": [1.0, 2.0, 3.0, 1.5, 2.4, 3.6]})
    >>> p = pairwise(t, "v", ["a", "b"]).iloc[0]
    >>> p["a"], p["b"], int(p["n_better"]), float(round(p["mean"], 3)), bool(p["separated"])
    ('a', 'b', 3, -0.5, True)
    """
    sign = _sign(sense)
    if noise is None:
        noise = block_noise(trials, value, key=key)
    done = _complete_by_seed(trials, value, key)
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
    # the family: each unordered pair once (a vs b and b vs a are one comparison)
    index = {c: i for i, c in enumerate(candidates)}
    first = np.array([index[a] < index[b] for a, b in zip(out["a"], out["b"], strict=True)],
                     dtype=bool)  # fmt: skip
    half = out[first]
    adj = dict(zip(zip(half["a"], half["b"], strict=True),
                   adjust(half["p"].astype("float64").tolist(), family), strict=True))  # fmt: skip
    out["p_adj"] = [adj.get((a, b), adj.get((b, a), math.nan))
                    for a, b in zip(out["a"], out["b"], strict=True)]  # fmt: skip
    out["separated"] = pd.array(
        [pd.NA if math.isnan(q) else bool(q < 1.0 - level) for q in out["p_adj"]],
        dtype="boolean",
    )
    floats = ("mean", "sd", "noise_sd", "lo", "hi", "half_width", "effect_noise", "p", "p_adj")
    return out.astype({c: "float64" for c in floats}).astype({"n": "int64", "noise_df": "int64"})


MCB_COLUMNS = (
    "candidate",
    "mean",  # its mean value over its completed seeds (what the leader is ranked on: see rank)
    "eliminated",  # worse than some other candidate, Tukey over every pair: not the best
    "by",  # that other candidate (the one it is furthest behind, in standard errors)
    "selected",  # better than every other candidate at the joint level: the best
    "critical",  # the one-sided critical value the selection uses (elimination: Tukey's)
)


def mcb(
    trials: pd.DataFrame,
    value: str,
    candidates: Sequence[Any],
    sense: str = "minimize",
    *,
    key: str = "candidate",
    level: float = 0.95,
    noise: Noise | None = None,
) -> pd.DataFrame:
    """Multiple comparisons with the best (Hsu 1984/1996) among ``candidates``, uniform included.

    For each pair on its common seeds, D_ij = mean of (y_i - y_j) (sign-adjusted so lower is
    better) with standard error noise.sd / sqrt(n_ij). With d the one-sided t critical value at
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
    if noise is None:
        noise = block_noise(trials, value, key=key)
    done = _complete_by_seed(trials, value, key)
    k = len(candidates)
    known = noise is not None and noise.df >= 1 and k >= 2
    d = noise.one_sided(1.0 - (1.0 - level) / (k - 1)) if known else math.nan
    r = range_critical(k, noise.df, level) if known else math.nan
    rows = []
    for i in candidates:
        vi = done.get(i, {})
        worst, by, best_all = -math.inf, None, known and bool(vi)
        for j in candidates:
            if j == i:
                continue
            vj = done.get(j, {})
            common = sorted(set(vi) & set(vj))
            if not common or not known:
                best_all = False
                continue
            diff = sign * float(np.mean([vi[x] - vj[x] for x in common]))
            se = noise.sd / math.sqrt(len(common))
            if diff + d * se >= 0:
                best_all = False
            z = (diff - r * se) / se if se > 0 else (math.inf if diff > 0 else -math.inf)
            if diff - r * se > 0 and z > worst:
                worst, by = z, j
        mean = float(np.mean(list(vi.values()))) if vi else math.nan
        rows.append((i, mean, by is not None, by, best_all, d))
    return pd.DataFrame(rows, columns=list(MCB_COLUMNS))


# -------------------------------------------------------------------------------------------------
# Signal and noise (Heineman et al. 2025, "Signal and Noise", arXiv 2508.13144, section 2)
#
# Their signal is the *relative dispersion* of the candidates' scores, max_{j,k} |m_j - m_k| / m̄,
# their noise the *relative standard deviation* of one model's score over its final checkpoints,
# sd / m̄, and SNR = signal / noise (allenai/signal-and-noise, snr/metrics.py). Here the scores
# are the candidates' means on the study's seeds, and there are two noises: (a) seeds, the sd of
# one paired delta (:func:`block_noise`): what separates or ties two candidates; (b) checkpoints,
# their noise: how much the metric moves between the last evals of one training.

CHECKPOINT_EVALS = 4  # the last 4 evals of a trial (the second half of the default 8 evals)


def relative_dispersion(means: Sequence[float]) -> float:
    """Signal (arXiv 2508.13144, eq. 1): max_{j,k} |m_j - m_k| / |mean of m|; NaN with fewer
    than two finite means or a mean of 0.

    >>> relative_dispersion([2.0, 2.1, 1.9])  # 0.2 / 2.0
    0.1
    """
    m = np.asarray(means, dtype="float64")
    m = m[np.isfinite(m)]
    centre = float(abs(m.mean())) if len(m) else 0.0
    if len(m) < 2 or centre == 0.0:
        return math.nan
    return float(round(float(np.ptp(m)) / centre, 15))


@functools.lru_cache(maxsize=64)
def expected_range(k: int) -> float:
    """E[max - min] of ``k`` independent standard normals (Tippett's d2): what the dispersion of
    k means is in their sd when every candidate is equal. 0 for k < 2.

    >>> round(expected_range(2), 4), round(expected_range(10), 3)  # 2 / sqrt(pi); 3.078
    (1.1284, 3.078)
    """
    if k < 2:
        return 0.0
    from scipy.special import ndtr  # the normal cdf, without scipy.stats' import time

    x = np.linspace(-12.0, 12.0, 48_001)
    cdf = ndtr(x)
    return float(np.trapezoid(1.0 - cdf**k - (1.0 - cdf) ** k, x))


class CheckpointNoise(NamedTuple):
    """The metric's checkpoint-to-checkpoint sd over the last ``k`` evals of each trial."""

    sd: float  # detrended: pooled residual sd of a least-squares line in tokens (df k - 2 each)
    sd_raw: float  # their literal definition: pooled sd around each trial's mean (df k - 1 each)
    mean: float  # mean of those evals (the relative noise's denominator)
    n_trials: int
    k: int


def checkpoint_noise(
    curves: pd.DataFrame, value: str, *, k: int = CHECKPOINT_EVALS, trial: str = "trial_id"
) -> CheckpointNoise | None:
    """Checkpoint noise from learning curves: one row per (``trial``, eval) with ``tokens`` and
    ``value``; each trial's last ``k`` finite evals by tokens (trials with fewer are left out).

    ``sd`` detrends: a proxy's last evals still fall (its LR decays over them), and a trend that
    every seed shares is no noise, so each trial's evals are fitted by a line in tokens and the
    residuals pooled (variance sum over df sum). ``sd_raw`` keeps the trend, as the paper does
    for checkpoints late in a long run, where the trend is small. None when no trial has ``k``
    evals (``k`` >= 3: a line needs one df left).

    >>> c = pd.DataFrame({"trial_id": ["a"] * 4, "tokens": [1, 2, 3, 4],
    ...                   "v": [4.1, 2.9, 1.9, 1.1]})  # 5 - x, then +-0.1: SSE 0.04 over 2 df
    >>> n = checkpoint_noise(c, "v")
    >>> round(n.sd, 4), round(n.sd_raw, 4), n.n_trials  # sqrt(0.02); sqrt(5.04 / 3) with trend
    (0.1414, 1.2961, 1)
    """
    if k < 3:
        raise ValueError(f"k must be >= 3 (a line and one df), but got {k=}")
    if curves.empty or value not in curves or "tokens" not in curves:
        return None
    frame = curves[[trial, "tokens", value]].copy()
    frame[value] = pd.to_numeric(frame[value], errors="coerce")
    frame = frame[np.isfinite(frame[value].astype("float64"))]
    sse = sse_raw = 0.0
    n, values = 0, []
    for _, g in frame.sort_values([trial, "tokens"], kind="stable").groupby(trial, sort=True):
        x = g["tokens"].to_numpy(dtype="float64")[-k:]
        y = g[value].to_numpy(dtype="float64")[-k:]
        if len(g) < k or len(np.unique(x)) < k:  # too few evals, or one eval recorded twice
            continue
        slope, intercept = np.polyfit(x - x.mean(), y, 1)
        resid = y - (intercept + slope * (x - x.mean()))
        sse += float(resid @ resid)
        sse_raw += float(((y - y.mean()) ** 2).sum())
        n += 1
        values.extend(y.tolist())
    if n == 0:
        return None
    return CheckpointNoise(math.sqrt(sse / (n * (k - 2))), math.sqrt(sse_raw / (n * (k - 1))),
                           float(np.mean(values)), n, k)  # fmt: skip


@dataclass(frozen=True)
class SignalToNoise:
    """A study's signal over its two noises (arXiv 2508.13144): see :func:`signal_to_noise`.

    Every ratio is None where it cannot be measured, with the reason in ``why_*``.
    """

    n_candidates: int  # the candidates the signal spreads over, uniform included
    n_seeds: float  # their paired seeds (harmonic mean)
    mean: float  # m̄: the mean of the candidates' means
    dispersion: float  # max_{j,k} |m_j - m_k| in the metric's units
    signal: float | None  # dispersion / |m̄| (relative dispersion)
    seed_sd: float | None  # (a) the sd of one paired delta (block design)
    seed_df: int
    seed_snr: float | None  # signal / (seed_sd / |m̄|) = dispersion / seed_sd
    null_snr: float | None  # seed_snr expected when every candidate is equal
    checkpoint: CheckpointNoise | None  # (b)
    checkpoint_snr: float | None  # signal / (checkpoint sd / |its mean|)
    why_signal: str = ""
    why_seed: str = ""
    why_checkpoint: str = ""

    def as_dict(self) -> dict[str, Any]:
        """best.yaml's / fidelity.json's ``signal_to_noise`` block: numbers and what they mean."""
        ck = self.checkpoint

        def num(v: float | None) -> float | None:
            return None if v is None or not math.isfinite(v) else float(v)

        return {
            "definition": "Signal and Noise (Heineman et al. 2025, arXiv 2508.13144): signal = "
            "relative dispersion max|m_j - m_k| / mean of the candidates' means; SNR = signal / "
            "(noise sd / mean)",
            "candidates": self.n_candidates,  # seeds: their paired seeds, harmonic mean
            "seeds": None if num(self.n_seeds) is None else round(self.n_seeds, 3),
            "dispersion": num(self.dispersion),
            "signal": num(self.signal),
            "signal_why": self.why_signal or None,
            "seed_noise": {
                "meaning": "sd of one paired delta (a candidate minus uniform on one seed) from "
                "the block-design fit: what separates two candidates",
                "sd": num(self.seed_sd),
                "df": self.seed_df,
                "snr": num(self.seed_snr),
                "snr_if_all_equal": num(self.null_snr),
                "why": self.why_seed or None,
            },
            "checkpoint_noise": {
                "meaning": f"sd of the metric over the last {ck.k if ck else CHECKPOINT_EVALS} "
                "evals of each complete trial around a line in tokens (detrended), pooled over "
                "trials: how much one number moves between checkpoints",
                "sd": num(ck.sd) if ck else None,
                "sd_not_detrended": num(ck.sd_raw) if ck else None,
                "trials": ck.n_trials if ck else 0,
                "snr": num(self.checkpoint_snr),
                "why": self.why_checkpoint or None,
            },
        }

    def line(self) -> str:
        """One line for ``tlmsearch status``: both SNRs, or n/a and why."""
        if self.signal is None:
            return f"signal-to-noise: n/a ({self.why_signal})"
        seed = (f"{self.seed_snr:.1f} over seeds (noise alone gives ~{self.null_snr:.1f})"
                if self.seed_snr is not None else f"n/a over seeds ({self.why_seed})")  # fmt: skip
        ck = (f"{self.checkpoint_snr:.1f} over checkpoints" if self.checkpoint_snr is not None
              else f"n/a over checkpoints ({self.why_checkpoint})")  # fmt: skip
        return (
            f"signal-to-noise (arXiv 2508.13144): {seed}; {ck}; spread of "
            f"{self.n_candidates} candidates' means {self.dispersion:.4g}"
        )


def candidate_means(trials: pd.DataFrame, value: str, *, key: str = "candidate") -> pd.DataFrame:
    """Each uncensored candidate's mean on the study's seeds: uniform's mean plus its mean paired
    delta (the block design's adjusted mean: on common seeds, its plain mean; on fewer, no
    seed's level leaks in). Uniform is at its own mean. With setting dimensions, "uniform" is
    the uniform of the candidate's own setting (each setting's uniform at its own mean, n its
    own seeds). Columns: key, mean, n (paired seeds).

    >>> t = pd.DataFrame({"candidate": ["u", "u", "c", "c"], "is_baseline": [1, 1, 0, 0],
    ...                   "seed": [0, 1, 0, 1], "state": ["COMPLETE"] * 3 + ["RUNNING"],
    ...                   "v": [2.0, 2.2, 1.9, 0.0]})
    >>> candidate_means(t, "v")["mean"].round(3).tolist()  # c: 2.1 - 0.1 (seed 0 only)
    [2.0, 2.1]
    """
    cells = _cells(trials, value, key)
    s = _summary(cells, key, 0.95)
    base = _baseline(cells)
    cols = [key, "mean", "n"]
    if not base or s.empty:
        return pd.DataFrame(columns=cols).astype({"mean": "float64", "n": "int64"})
    # with setting dimensions each setting has its own uniform (the control of that setting's
    # candidates): u_s over that setting's seeds, never pooled over settings
    per_setting: dict[str, list[float]] = {}
    for (setting, _), v in base.items():
        per_setting.setdefault(setting, []).append(v)
    setting_of = {cand: cell.setting for (cand, _), cell in cells.items()}
    rows = []
    for r in s.itertuples(index=False):
        u = per_setting.get(setting_of[r[0]])
        if u is None or not (r.is_baseline or (not r.censored and r.n_paired > 0)):
            continue
        u_s = float(np.mean(u))
        rows.append((r[0], u_s if r.is_baseline else u_s + r.mean_delta,
                     len(u) if r.is_baseline else r.n_paired))  # fmt: skip
    return pd.DataFrame(rows, columns=cols).astype({"mean": "float64", "n": "int64"})


def signal_to_noise(
    means: Sequence[float],
    n_seeds: Sequence[int],
    noise: Noise | None,
    checkpoint: CheckpointNoise | None = None,
    *,
    why_checkpoint: str = "",
    baseline: bool = True,
) -> SignalToNoise:
    """Signal over (a) seed noise and (b) checkpoint noise, as arXiv 2508.13144 defines them.

    ``means``: the candidates' means (uniform included; :func:`candidate_means`), ``n_seeds``
    their paired seeds. SNR over seeds = signal / (noise.sd / |m̄|) = dispersion / noise.sd:
    the spread of the means in sds of *one* paired delta (their scale: one checkpoint's noise
    beside means). Even when every candidate is equal the means spread: by about
    d2(K) x sd / sqrt(2 n) (:func:`expected_range`; means over n seeds, a paired delta's sd
    is sqrt(2) x one model's), given as ``null_snr`` = d2(K) / sqrt(2 n). ``baseline``: False
    for a study without uniform trials (then n/a, and why).

    >>> s = signal_to_noise([2.0, 2.1, 1.9], [4, 4, 4], Noise(0.05, 6))
    >>> round(s.signal, 3), round(s.seed_snr, 1), round(s.null_snr, 2)  # 0.2 / 0.05
    (0.1, 4.0, 0.6)
    """
    m = np.asarray(means, dtype="float64")
    n = np.asarray(n_seeds, dtype="float64")
    ok = np.isfinite(m) & (n > 0)
    m, n = m[ok], n[ok]
    k = len(m)
    centre = float(m.mean()) if k else math.nan
    hmean = float(k / np.sum(1.0 / n)) if k else math.nan
    dispersion = float(np.ptp(m)) if k else math.nan
    signal = relative_dispersion(m)
    why_signal = why_seed = ""
    seed_sd = seed_snr = null = ck_snr = None
    df = 0
    if not baseline:  # every mean is uniform's plus a paired delta: nothing to measure
        why_signal = "no uniform baseline (search.baseline: false): the means pair with uniform"
    elif k < 2:
        why_signal = ("fewer than 2 candidates measured: uniform and those with a seed paired "
                      "with it, never pruned or failed")
    elif not math.isfinite(signal):
        why_signal = "the candidates' mean is 0: no relative dispersion"
    if noise is not None and noise.df >= 1 and math.isfinite(noise.sd):
        seed_sd, df = float(noise.sd), int(noise.df)
    if seed_sd is None:
        why_seed = "no seed noise yet: needs 2 seeds of 2 candidates, uniform included"
    elif seed_sd == 0:
        why_seed = "the seed noise is exactly 0"
    if why_signal:
        why_seed = why_seed or why_signal
        why_checkpoint = why_checkpoint or why_signal
    if not why_signal and not why_seed and seed_sd:
        seed_snr = signal / (seed_sd / abs(centre))
        null = expected_range(k) / math.sqrt(2.0 * hmean)
    if checkpoint is None:
        why_checkpoint = why_checkpoint or (
            f"no complete trial has {CHECKPOINT_EVALS} evals with this metric")
    elif checkpoint.sd == 0 or checkpoint.mean == 0:
        why_checkpoint = why_checkpoint or "the checkpoint noise is exactly 0"
    if not why_signal and checkpoint is not None and not why_checkpoint:
        ck_snr = signal / (checkpoint.sd / abs(checkpoint.mean))
    return SignalToNoise(
        k, hmean, centre, dispersion, None if why_signal else signal, seed_sd, df, seed_snr,
        null, checkpoint, ck_snr, why_signal, why_seed if seed_snr is None else "",
        why_checkpoint if ck_snr is None else "",
    )  # fmt: skip
