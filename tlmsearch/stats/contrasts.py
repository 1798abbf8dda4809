"""Questions as contrasts, from one fit of every completed cell of a study.

A study's cells are (schedule, setting, seed): every schedule, uniform included, trains at every
setting (``train.lr``, ``train.parametrization``) on every seed. Write a final value as

    y = mu + tau_(schedule, setting) + b_(setting, seed) + e

with b the block of a setting on a seed (the seed's level *and* how that setting treats that
seed: seed and seed x setting). A question is a linear contrast of the cell effects tau whose
weights sum to zero within each setting: "cosine vs uniform over every LR" is the mean over
settings of (tau_cosine - tau_uniform), "early-heavy vs uniform" the mean over the schedules that
put capacity toward layer 0 (taper strength > 0, :func:`tlmsearch.widths.space.taper_strength`),
"does it depend on train.lr" the effect at the highest LR minus the effect at the lowest.

Why fixed blocks and not a mixed model: every contrast here compares cells *within* a setting
and seed, so the (setting, seed) blocks cancel from it exactly, and an ordinary least squares fit
with the blocks as fixed effects (``value ~ C(cell) + C(block)``) gives the same estimates a
mixed model with seed and seed x setting random effects would, without estimating their
variances: with 2-3 seeds those estimates sit on the boundary (zero) in many studies and
``statsmodels`` MixedLM warns of non-convergence there. The blocks nest in settings, so the fit
is one block-design fit per setting (:func:`tlmsearch.stats.block_fit`), and each setting keeps
its own noise model (:func:`tlmsearch.stats.row_noise`: each row, uniform or a candidate, on
its own variance where its seeds show it noisier; a high LR's seeds scatter several times more
than a low one's). A contrast is a'y with a the least-squares weights of L
(:meth:`TwoWay.contrast`); its variance sum_k a_k^2 sigma_k^2 adds the settings' pooled and own
variance components, with Satterthwaite's df (rounded down).

The words (better, worse, equivalent within +-d, inconclusive) are decided over the family of
all the contrasts (:mod:`tlmsearch.stats.words`), split in four groups (:data:`GROUPS`): the
families of schedules over the settings share 40% of the family's error rate, each schedule
over the settings (or the contrasts a study names) 30%, the interactions 20%, the per-setting
contrasts (the effects table's comparisons again) 10%. A study of 5 early-heavy schedules at 4
LRs asks "does the early-heavy family beat uniform?" at alpha / 2.5 instead of alpha / 32.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.constants import LEVEL
from tlmsearch.stats.deltas import UNKNOWN_SEED, trial_cells
from tlmsearch.stats.noise import Noise, TwoWay, two_way
from tlmsearch.stats.questions import (
    FAMILY_KIND,
    INTERACTION,
    MAIN,
    NAMED,
    SETTING,
    Question,
    _Row,
    asked,
    design_rows,
)
from tlmsearch.stats.row_variances import OWN, RowNoise
from tlmsearch.stats.words import (
    INCONCLUSIVE,
    MIN_DF,
    decide_words,
    family_rule,
    group_weights,
    seeds_to_decide,
)

CONTRAST_COLUMNS = (
    "name",  # what it asks, in words
    "kind",  # main | setting | family | interaction | named
    "members",  # the schedules on its plus side (tuple)
    "settings",  # the settings it reads (int)
    "at",  # the one setting it reads ("lr=0.003"; "" without settings, NaN: several)
    "estimate",  # in the metric's units: members minus the reference (uniform)
    "se",
    "df",  # Satterthwaite's df of its variance (0: unknown)
    "lo",  # the interval its difference question was judged at (ci_level)
    "hi",
    "ci_level",
    "p",  # two-sided p of estimate = 0, per contrast
    "p_adj",  # over the family (words.step_down)
    "margin",  # the equivalence margin d (NaN: none)
    "eq_lo",  # the (1 - 2 alpha') interval its equivalence question was judged at
    "eq_hi",
    "eq_level",
    "p_equiv",  # TOST p of |estimate| >= margin, per contrast
    "p_equiv_adj",
    "word",  # better | worse | equivalent | inconclusive
    "why",  # why inconclusive (or a caveat): "cannot be bounded yet (2 df)", ...
    "seeds",  # the fewest complete seeds of a row it reads
    "seeds_to_decide",  # inconclusive: seeds that would decide it at this estimate (NaN: none)
)


# the family's groups (what, the contrast kinds in it, its share of the error rate), in the order
# they are named: the question a study is run for first (does a family of schedules beat
# uniform?), then each schedule, then what drills into them
GROUPS = (
    ("families", (FAMILY_KIND,), 0.4),
    ("schedules", (MAIN, NAMED), 0.3),
    ("interactions", (INTERACTION,), 0.2),
    ("per-setting", (SETTING,), 0.1),
)


def family_groups(
    kinds: Sequence[str],
) -> tuple[list[int], list[float], list[tuple[str, int, float]]]:
    """Each contrast's group (an index into the shares), the shares, and (what, contrasts,
    share) of each group present (:func:`tlmsearch.stats.words.family_rule`).

    >>> family_groups(["main", "setting", "setting"])[::2]
    ([1, 3, 3], [('schedules', 1, 0.3), ('per-setting', 2, 0.1)])
    """
    index = {kind: g for g, (_, kinds_, _) in enumerate(GROUPS) for kind in kinds_}
    unknown = sorted({k for k in kinds if k not in index})
    if unknown:
        raise ValueError(f"contrast kinds {unknown} belong to no group of GROUPS")
    group = [index[k] for k in kinds]
    present = [
        (what, group.count(g), share) for g, (what, _, share) in enumerate(GROUPS) if g in group
    ]
    return group, [share for _, _, share in GROUPS], present


def first_weights(kinds: Sequence[str]) -> list[float]:
    """Each contrast's weight at the step-down's first step: its question is judged at alpha x
    this (1 / m under plain Holm).

    >>> [round(w, 3) for w in first_weights(["main", "main", "setting"])]
    [0.375, 0.375, 0.25]
    """
    group, shares, _ = family_groups(kinds)
    w = group_weights(shares, [group.count(g) for g in range(len(shares))])
    return [w[g] for g in group]


@dataclass(frozen=True)
class _Fit:
    """One setting's block-design fit, value ~ row + seed (:class:`~tlmsearch.stats.noise.TwoWay`,
    in its structure: no cells x columns pseudo-inverse): its rows' keys per cell, the values."""

    keys: tuple[Any, ...]  # per cell
    two: TwoWay
    y: np.ndarray

    @functools.cached_property
    def cells(self) -> dict[Any, int]:
        """Each row's number of cells in this fit."""
        return {name: int(n) for name, n in zip(self.two.names, self.two.n, strict=True)}

    @functools.cached_property
    def column(self) -> dict[Any, int]:
        """Each row's index in the fit."""
        return {name: j for j, name in enumerate(self.two.names)}


def fits(
    trials: pd.DataFrame, value: str, rows: Sequence[_Row], key: str = "candidate"
) -> dict[str, _Fit]:
    """setting -> :class:`_Fit` of its completed cells of known seeds."""
    setting_of = {r.key: r.setting for r in rows}
    by: dict[str, list[tuple[Any, int, float]]] = {}
    for (c, seed), cell in trial_cells(trials, value, key).items():
        if cell.outcome == "complete" and seed != UNKNOWN_SEED and c in setting_of:
            by.setdefault(setting_of[c], []).append((c, seed, cell.value))
    out = {}
    for s, done in by.items():
        keys, seeds, ys = zip(*done, strict=True)
        y = np.asarray(ys, dtype="float64")
        out[s] = _Fit(tuple(keys), two_way(keys, [str(x) for x in seeds], y), y)
    return out


def _weights_on_cells(fit: _Fit, weights: Mapping[Any, float]) -> np.ndarray | None:
    """a with a'y the OLS estimate of sum_r w_r tau_r in one setting's fit; None when it is not
    estimable there (a row of it has no complete cell, or its rows share no seed)."""
    if any(k not in fit.column for k, w in weights.items() if w != 0.0):
        return None
    if not math.isclose(sum(w for k, w in weights.items() if k in fit.column), 0.0, abs_tol=1e-9):
        return None
    # l is sparse (a contrast reads a few rows): only its rows enter, so a study of k
    # candidates costs k contrasts x cells, not k x k^2
    idx = np.array([fit.column[k] for k, w in weights.items() if w != 0.0], dtype=int)
    lv = np.array([weights[fit.two.names[j]] for j in idx], dtype="float64")
    a = fit.two.contrast(idx, lv)
    if a is None:
        return None
    # rounding leaves ~1e-17 on cells the contrast does not read: zero, so that only the rows
    # it reads bring their variance (and their df) into it
    a[np.abs(a) <= 1e-12 * max(float(np.abs(a).max()), 1e-300)] = 0.0
    return a


def _cell_variance(model: RowNoise | Noise | None, key: Any) -> tuple[str, float, int] | None:
    """(component, variance of one cell, its df) in a setting's noise model."""
    if model is None or not model.df >= 1:
        return None
    if isinstance(model, RowNoise):
        r = model.rows.get(key)
        if r is not None and r.source == OWN and r.df >= 1:
            return f"own:{key}", r.var, r.df
        return "pooled", model.pooled.sd**2 / 2.0, model.pooled.df
    return "pooled", model.sd**2 / 2.0, model.df


def estimate(
    fitted: Mapping[str, _Fit],
    weights: Mapping[Any, float],
    models: Mapping[str, RowNoise | Noise | None],
    rows: Sequence[_Row],
    setting_of: Mapping[Any, str] | None = None,
) -> tuple[float, float, float]:
    """(estimate, se, Satterthwaite df) of the contrast sum_r w_r tau_r over the settings its
    weights touch (:func:`fits`; ``models``: each setting's noise, one for all when it holds
    one); NaNs (df 0) when it is not estimable or a setting's noise is unknown.

    Uniform's part of the variance, sum over its cells of a_k^2 sigma_u^2, is judged as a whole
    (:func:`_uniform_part`): its own estimate where that exceeds the pool's, as the rows model
    judges uniform in one setting, but summed over every setting the contrast reads, so a
    contrast over 4 settings of 3 seeds rests on uniform's 8 df, not on 2 per setting.
    ``setting_of``: each row key's setting, when the caller has it (a study's contrasts share
    one)."""
    if not weights:
        return math.nan, math.nan, 0.0
    if setting_of is None:
        setting_of = {r.key: r.setting for r in rows}
    only = next(iter(models.values())) if len(models) == 1 else None
    est, comps, uniform = 0.0, {}, []
    for s in sorted({setting_of[k] for k in weights if k in setting_of}):
        fit = fitted.get(s)
        w = {k: x for k, x in weights.items() if setting_of.get(k) == s}
        a = _weights_on_cells(fit, w) if fit is not None else None
        if a is None:
            return math.nan, math.nan, 0.0
        read = np.flatnonzero(a)  # a few rows' cells: a dot over every cell cost more (BLAS)
        est += float(a[read] @ fit.y[read])
        model = models.get(s, only)
        for i in read:
            c, ai = fit.keys[i], float(a[i])
            part = _cell_variance(model, c)
            if part is None:
                return est, math.nan, 0.0
            if isinstance(model, RowNoise) and c in model.baseline and c in model.rows:
                own, n = model.rows[c].own, fit.cells[c]
                uniform.append((s, ai * ai, own, n - 1, model.pooled.sd**2 / 2.0, model.pooled.df))
                continue
            name, var, df = part
            comp = comps.setdefault((s, name), [0.0, df])
            comp[0] += ai * ai * var
    for name, var, df in _uniform_part(uniform):
        comp = comps.setdefault(name, [0.0, df])
        comp[0] += var
    var = sum(v for v, _ in comps.values())
    denom = sum(v * v / df for v, df in comps.values())
    if comps and var == 0:  # every cell it reads measured without noise (a fit exactly 0)
        scale = max(float(np.abs(f.y).max()) for f in fitted.values())
        est = 0.0 if abs(est) <= 1e-12 * max(scale, 1.0) else est  # rounding, not an effect
        return est, 0.0, float(min(df for _, df in comps.values()))
    if not var > 0 or not denom > 0:
        return est, math.nan, 0.0
    return est, math.sqrt(var), float(max(1, math.floor(var * var / denom)))


def _uniform_part(
    terms: Sequence[tuple[str, float, float, int, float, int]],
) -> list[tuple[Any, float, int]]:
    """Uniform's variance components of one contrast from its cells' terms (setting, sum of
    a_k^2 there, its own variance estimate there, its df, the setting's pooled cell variance,
    its df): each setting's own (one component each, n - 1 df) where their sum exceeds the
    pooled sum and every setting has an own estimate, else the pooled ones."""
    own_sum = sum(c * max(own, 0.0) for _, c, own, _, _, _ in terms)
    pool_sum = sum(c * vp for _, c, _, _, vp, _ in terms)
    known = all(math.isfinite(own) and df >= 1 for _, _, own, df, _, _ in terms)
    if terms and known and own_sum > pool_sum * (1.0 + 1e-9):
        return [((s, "uniform own"), c * max(own, 0.0), df) for s, c, own, df, _, _ in terms]
    return [((s, "pooled"), c * vp, dfp) for s, c, _, _, vp, dfp in terms]


def contrast_table(
    trials: pd.DataFrame,
    value: str,
    sense: str = "minimize",
    *,
    models: Mapping[str, RowNoise | Noise | None],
    key: str = "candidate",
    level: float = LEVEL,
    margin: float | None = None,
    questions: Sequence[Question] = (),
    settings: Mapping[Any, Mapping[str, Any]] | None = None,
) -> pd.DataFrame:
    """Every contrast of a study with its four-word answer, over one family.

    ``models``: each setting's noise model (``""`` without settings), as the effects use them
    (:func:`tlmsearch.stats.row_noise`); ``settings``: each candidate's settings by key
    ({"train.lr": 0.003}; default: parsed from its setting label); ``margin``: the
    equivalence margin d in the metric's units (None: no equivalence question);
    ``questions``: the study's own contrasts (default: :func:`default_questions`). Columns:
    :data:`CONTRAST_COLUMNS`, one row per contrast.

    >>> t = pd.DataFrame({"candidate": ["u"] * 3 + ["c"] * 3, "is_baseline": [1] * 3 + [0] * 3,
    ...                   "seed": [0, 1, 2] * 2, "state": "COMPLETE",
    ...                   "v": [2.0, 2.1, 1.9, 1.9, 2.01, 1.79]})
    >>> from tlmsearch.stats import row_noise
    >>> c = contrast_table(t, "v", models={"": row_noise(t, "v")}, margin=0.5)
    >>> r = c.iloc[0]
    >>> r["name"], round(float(r["estimate"]), 3), int(r["df"]), r["word"]
    ('c vs uniform', -0.1, 2, 'better')
    """
    if sense not in ("minimize", "maximize"):
        raise ValueError(f"sense must be 'minimize' or 'maximize', but got {sense=}")
    rows = design_rows(trials, value, key, settings)
    if not any(r.baseline for r in rows) or not any(not r.baseline for r in rows):
        return pd.DataFrame(columns=list(CONTRAST_COLUMNS))
    recs = []
    censored = {r.schedule for r in rows if r.censored and not r.baseline}
    fitted = fits(trials, value, rows, key)
    setting_of = {r.key: r.setting for r in rows}
    row_of = {r.key: r for r in rows}
    for kind, q, plus, w, n in asked(rows, questions):
        est, se, df = estimate(fitted, w, models, rows, setting_of)
        why = ""
        if not w:
            why = "not estimable: a side has no complete cell at some setting it reads"
        elif not df >= 1:
            why = "noise unknown: a setting it reads has no residual df yet"
        # a pruned or failed cell of any schedule it reads (either side) is not missing at random
        read = {row_of[k].schedule for k, x in w.items() if x and not row_of[k].baseline}
        blocked = bool((read | set(plus)) & censored)
        if blocked:
            why = (why + "; " if why else "") + "a member was pruned or failed on some seed"
        touched = {setting_of[k] for k, x in w.items() if x and k in setting_of}
        recs.append(
            {
                "name": q.name,
                "kind": kind,
                "members": tuple(plus),
                "settings": n,
                "at": next(iter(touched)) if len(touched) == 1 else math.nan,
                "estimate": est,
                "se": se,
                "df": df,
                "why": why,
                "blocked": blocked,
                "seeds": _fewest_seeds(fitted, w, setting_of),
            }
        )
    out = pd.DataFrame(recs)
    sign = 1.0 if sense == "minimize" else -1.0
    group, shares, _ = family_groups(out["kind"].tolist())
    dec = decide_words(
        out["estimate"].tolist(),
        out["se"].tolist(),
        out["df"].tolist(),
        sign,
        margin,
        level,
        out["blocked"].tolist(),
        group,
        shares,
    )
    for k, v in dec.items():
        out[k] = v
    # a noise of 1-2 df bounds nothing the reader can use (column-wise: a row at a time cost
    # ~1 s at 5,000 contrasts)
    out["why"] = [
        "; ".join(filter(None, [f"cannot be bounded yet ({int(df)} df)", why]))
        if word == INCONCLUSIVE and 1 <= df < MIN_DF
        else why
        for word, df, why in zip(out["word"], out["df"], out["why"], strict=True)
    ]
    out["margin"] = math.nan if margin is None else float(margin)
    out["seeds_to_decide"] = [
        _to_decide(r, margin) if r["word"] == INCONCLUSIVE and not r["blocked"] else math.nan
        for r in out.to_dict("records")
    ]
    out["df"] = out["df"].astype("int64")
    return out[list(CONTRAST_COLUMNS)].reset_index(drop=True)


def _fewest_seeds(
    fitted: Mapping[str, _Fit], weights: Mapping[Any, float], setting_of: Mapping[Any, str]
) -> int:
    """The fewest complete seeds of a row a contrast reads (0: a row it reads has none)."""
    counts = [
        fitted[setting_of[k]].cells.get(k, 0) if setting_of[k] in fitted else 0
        for k, x in weights.items()
        if x and k in setting_of
    ]
    return min(counts, default=0)


def _to_decide(row: Mapping[str, Any], margin: float | None) -> float:
    """:func:`seeds_to_decide` of an inconclusive contrast at the step it was judged at (NaN
    where its noise has fewer than :data:`MIN_DF` df or nothing can be said; inf: more than
    :data:`~tlmsearch.stats.words.MOST_SEEDS`)."""
    if not row["df"] >= MIN_DF:
        return math.nan
    n = seeds_to_decide(
        float(row["estimate"]),
        float(row["se"]),
        float(row["df"]),
        int(row["seeds"]),
        float(row["ci_level"]),
        float(row["eq_level"]) if margin is not None else math.nan,
        margin,
    )
    return math.nan if n is None else float(n)


def contrasts_rule(table: pd.DataFrame, level: float) -> str:
    """How a contrasts table's words were decided, in one line (:func:`family_rule`): the
    error rate split over the groups with a question asked (a contrast that cannot be
    estimated asks none, and its group's share goes to the others).

    >>> t = pd.DataFrame({"kind": ["family", "main", "setting"], "p": [math.nan, 0.01, 0.2],
    ...                   "margin": math.nan})
    >>> contrasts_rule(t, 0.95).split("; ")[0]
    'weighted Holm over 3 contrasts (2 estimable), family-wise error 5% shared: schedules (1) 75%, per-setting (1) 25%'
    """  # noqa: E501
    margin = table["margin"].iloc[0] if len(table) else math.nan
    kinds = table["kind"].tolist() if "kind" in table else [MAIN] * len(table)
    if "p" in table:
        kinds = [k for k, p in zip(kinds, table["p"], strict=True) if math.isfinite(p)]
    return family_rule(
        len(table),
        level,
        None if not math.isfinite(margin) else float(margin),
        family_groups(kinds)[2],
        len(kinds),
    )
