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
its own noise model (:func:`tlmsearch.stats.row_noise`: each row, uniform or a candidate, on its
own variance where its seeds show it noisier; a high LR's seeds scatter several times more than
a low one's). A contrast is a'y with a = pinv(X)' L; its variance sum_k a_k^2 sigma_k^2 adds the
settings' pooled and own variance components, with Satterthwaite's df (rounded down).

The words (better, worse, equivalent within +-d, inconclusive) are decided over the family of
all the contrasts (:mod:`tlmsearch.stats.words`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.constants import LEVEL
from tlmsearch.stats.deltas import UNKNOWN_SEED, _cells
from tlmsearch.stats.noise import Noise
from tlmsearch.stats.rows import OWN, RowNoise
from tlmsearch.stats.words import INCONCLUSIVE, MIN_DF, decide_words, family_rule

EARLY, LATE, ALL = "early-heavy", "late-heavy", "all"  # schedule families by where capacity goes
FAMILY_NAMES = (EARLY, LATE, ALL)
UNIFORM = "uniform"
MAIN, SETTING, FAMILY_KIND, INTERACTION, NAMED = (
    "main",
    "setting",
    "family",
    "interaction",
    "named",
)

CONTRAST_COLUMNS = (
    "name",  # what it asks, in words
    "kind",  # main | setting | family | interaction | named
    "members",  # the schedules on its plus side (tuple)
    "settings",  # the settings it reads (int)
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
)


@dataclass(frozen=True)
class Question:
    """A named contrast: ``schedules`` (labels or a family: early-heavy, late-heavy, all) minus
    ``vs`` (default uniform), over the settings that match ``where`` (dimension -> values;
    default every setting); with ``by`` (a setting dimension) the interaction: the effect at
    ``levels[1]`` minus the effect at ``levels[0]`` (default its largest and smallest value)."""

    name: str
    schedules: tuple[str, ...]
    vs: tuple[str, ...] = (UNIFORM,)
    where: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    by: str | None = None
    levels: tuple[Any, ...] | None = None


@dataclass(frozen=True)
class _Row:
    """One row of the design: a candidate (a schedule at a setting)."""

    key: Any
    schedule: str
    setting: str
    settings: Mapping[str, Any]  # {"train.lr": 0.003}
    taper: float
    baseline: bool
    censored: bool


def _from_label(label: str) -> dict[str, Any]:
    """Settings from a setting label (``lr=0.003, parametrization=mup``): names without their
    section, values as text."""
    out = {}
    for part in filter(None, (p.strip() for p in str(label or "").split(","))):
        name, _, value = part.partition("=")
        out[name] = value
    return out


def design_rows(
    trials: pd.DataFrame,
    value: str,
    key: str = "candidate",
    settings: Mapping[Any, Mapping[str, Any]] | None = None,
) -> list[_Row]:
    """The candidates of a trials table, each with its schedule (the ``schedule`` column, else
    its key), setting, settings (``settings[key]``: {"train.lr": 0.003}, else parsed from its
    setting label), taper strength (the ``taper`` column; NaN without one), and whether a
    pruner or a failure censored it on some seed."""
    if trials.empty:
        return []
    first = trials.drop_duplicates(key).set_index(key)
    cells = _cells(trials, value, key)
    censored = {c for (c, _), cell in cells.items() if cell.outcome == "censored"}
    out = []
    for k, r in first.iterrows():
        base = bool(r.get("is_baseline", False))
        has = "schedule" in first and isinstance(r.get("schedule"), str) and r.get("schedule")
        schedule = UNIFORM if base else str(r["schedule"]) if has else str(k)
        setting = str(r.get("setting", "") or "") if "setting" in first else ""
        taper = pd.to_numeric(pd.Series([r.get("taper")]), errors="coerce").iloc[0]
        given = settings.get(k) if settings is not None else None
        out.append(_Row(k, schedule, setting,
                        dict(given) if given is not None else _from_label(setting),
                        0.0 if base else float(taper), base, k in censored))  # fmt: skip
    return out


def _same(a: Any, b: Any) -> bool:
    """Two setting values are the same (numbers by value, anything else as text)."""
    try:
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    except (TypeError, ValueError):
        return str(a) == str(b)


def _value(settings: Mapping[str, Any], dim: str) -> Any:
    """A row's value of setting dimension ``dim`` (``train.lr`` or ``lr``); None if absent."""
    if dim in settings:
        return settings[dim]
    short = dim.partition(".")[2] or dim
    for k, v in settings.items():
        if k == short or k.partition(".")[2] == short:
            return v
    return None


def _order(values: Sequence[Any]) -> list[Any]:
    """Distinct setting values, numbers by value, else as text."""
    distinct: list[Any] = []
    for v in values:
        if v is not None and not any(_same(v, d) for d in distinct):
            distinct.append(v)
    try:
        return sorted(distinct, key=float)
    except (TypeError, ValueError):
        return sorted(distinct, key=str)


def members(rows: Sequence[_Row], names: Sequence[str]) -> list[str]:
    """The schedules ``names`` stand for: labels as given, a family's schedules (early-heavy:
    taper > 0, late-heavy: taper < 0, all: every one but uniform)."""
    scheds = {r.schedule: r.taper for r in rows if not r.baseline}
    out: list[str] = []
    for n in names:
        if n == EARLY:
            out += [s for s, t in scheds.items() if t > 0]
        elif n == LATE:
            out += [s for s, t in scheds.items() if t < 0]
        elif n == ALL:
            out += list(scheds)
        else:
            out.append(n)
    return list(dict.fromkeys(sorted(out)))


def _weights(rows: Sequence[_Row], plus: Sequence[str], minus: Sequence[str],
             settings: Sequence[str], scale: float = 1.0) -> dict[Any, float]:  # fmt: skip
    """Row key -> weight of "mean of ``plus`` minus mean of ``minus``", averaged over
    ``settings`` (each setting equally, each schedule equally within it); {} when a setting
    lacks either side."""
    out: dict[Any, float] = {}
    for s in settings:
        here = [r for r in rows if r.setting == s]
        for names, sign in ((set(plus), scale), (set(minus), -scale)):
            by_sched: dict[str, list[_Row]] = {}
            for r in here:
                if r.schedule in names:
                    by_sched.setdefault(r.schedule, []).append(r)
            if not by_sched:
                return {}
            for group in by_sched.values():
                for r in group:
                    w = sign / (len(settings) * len(by_sched) * len(group))
                    out[r.key] = out.get(r.key, 0.0) + w
    return out


def _settings_where(rows: Sequence[_Row], where: Mapping[str, Sequence[Any]]) -> list[str]:
    """The settings whose values match every entry of ``where``."""
    out = []
    for s in sorted({r.setting for r in rows}):
        values = next(r.settings for r in rows if r.setting == s)
        if all(any(_same(_value(values, d), v) for v in vs) for d, vs in where.items()):
            out.append(s)
    return out


def dimensions(rows: Sequence[_Row]) -> dict[str, list[Any]]:
    """Every setting dimension with two or more values among the rows, and its values."""
    dims: dict[str, list[Any]] = {}
    for r in rows:
        for d, v in r.settings.items():
            dims.setdefault(d, []).append(v)
    return {d: _order(v) for d, v in sorted(dims.items()) if len(_order(v)) > 1}


def _spec(rows: Sequence[_Row], q: Question) -> tuple[list[str], dict[Any, float], int]:
    """(members, weights, settings read) of a question."""
    plus, minus = members(rows, q.schedules), members(rows, q.vs)
    settings = _settings_where(rows, {d: tuple(v) for d, v in q.where.items()})
    if q.by is None:
        return plus, _weights(rows, plus, minus, settings), len(settings)
    values = _order([_value(r.settings, q.by) for r in rows if r.setting in settings])
    lo_hi = list(q.levels) if q.levels else values[:1] + values[-1:]
    if len(lo_hi) != 2 or len(values) < 2:
        return plus, {}, 0
    w: dict[Any, float] = {}
    for sign, level in ((-1.0, lo_hi[0]), (1.0, lo_hi[1])):
        at = [
            s
            for s in settings
            if _same(_value(next(r.settings for r in rows if r.setting == s), q.by), level)
        ]
        part = _weights(rows, plus, minus, at, sign) if at else {}
        if not part:
            return plus, {}, 0
        for k, x in part.items():
            w[k] = w.get(k, 0.0) + x
    return plus, w, len(settings)


def default_questions(rows: Sequence[_Row]) -> list[tuple[str, Question]]:
    """(kind, question) of the contrasts a study asks unless it names its own: each schedule vs
    uniform over every setting (main) and, with settings, at each (setting); the early-heavy and
    late-heavy families where they hold two or more schedules (family); and for each setting
    dimension each schedule's and family's effect at its largest minus its smallest value
    (interaction)."""
    scheds = members(rows, [ALL])
    settings = sorted({r.setting for r in rows})
    out: list[tuple[str, Question]] = []
    many = len(settings) > 1
    for s in scheds:
        out.append((MAIN, Question(f"{s} vs uniform" + (f" over {len(settings)} settings"
                                                        if many else ""), (s,))))  # fmt: skip
    families = [f for f in (EARLY, LATE) if len(members(rows, [f])) >= 2]
    for f in families:
        n = len(members(rows, [f]))
        out.append((FAMILY_KIND, Question(f"{f} ({n} schedules) vs uniform" + (
            f" over {len(settings)} settings" if many else ""), (f,))))  # fmt: skip
    if many:
        for s in scheds:
            for st in settings:
                q = Question(f"{s} vs uniform at {st}", (s,))
                out.append((SETTING, _at(q, rows, st)))
    for dim, values in dimensions(rows).items():
        for s in [*scheds, *families]:
            lo, hi = values[0], values[-1]
            name = f"{s} x {dim}: effect at {hi} minus at {lo}"
            out.append((INTERACTION, Question(name, (s,), by=dim, levels=(lo, hi))))
    return out


def _at(q: Question, rows: Sequence[_Row], setting: str) -> Question:
    """``q`` restricted to one setting (its every dimension's value there)."""
    values = next(r.settings for r in rows if r.setting == setting)
    return Question(q.name, q.schedules, q.vs, {d: (v,) for d, v in values.items()})


@dataclass(frozen=True)
class _Fit:
    """One setting's block-design fit, value ~ row + seed: its rows' keys per cell, the design
    and its pseudo-inverse, the values."""

    keys: tuple[Any, ...]  # per cell
    names: tuple[Any, ...]  # the distinct rows, in the design's column order
    x: np.ndarray
    pinv: np.ndarray
    y: np.ndarray


def fits(trials: pd.DataFrame, value: str, rows: Sequence[_Row],
         key: str = "candidate") -> dict[str, _Fit]:  # fmt: skip
    """setting -> :class:`_Fit` of its completed cells of known seeds."""
    setting_of = {r.key: r.setting for r in rows}
    by: dict[str, list[tuple[Any, int, float]]] = {}
    for (c, seed), cell in _cells(trials, value, key).items():
        if cell.outcome == "complete" and seed != UNKNOWN_SEED and c in setting_of:
            by.setdefault(setting_of[c], []).append((c, seed, cell.value))
    out = {}
    for s, done in by.items():
        keys, seeds, ys = zip(*done, strict=True)
        k_codes, k_names = pd.factorize(pd.Series(list(keys), dtype="object"))
        s_codes = pd.factorize(pd.Series([str(x) for x in seeds], dtype="object"))[0]
        cols = [np.ones(len(ys))]
        cols += [(k_codes == j).astype(float) for j in range(1, len(k_names))]
        cols += [(s_codes == j).astype(float) for j in range(1, s_codes.max() + 1)]
        x = np.column_stack(cols)
        out[s] = _Fit(tuple(keys), tuple(k_names), x, np.linalg.pinv(x),
                      np.asarray(ys, dtype="float64"))  # fmt: skip
    return out


def _weights_on_cells(fit: _Fit, weights: Mapping[Any, float]) -> np.ndarray | None:
    """a with a'y the OLS estimate of sum_r w_r tau_r in one setting's fit; None when it is not
    estimable there (a row of it has no complete cell, or its rows share no seed)."""
    if any(k not in fit.names for k, w in weights.items() if w != 0.0):
        return None
    lvec = np.zeros(fit.x.shape[1])
    for j, name in enumerate(fit.names):
        if j > 0:
            lvec[j] = weights.get(name, 0.0)
    if not math.isclose(sum(weights.get(n, 0.0) for n in fit.names), 0.0, abs_tol=1e-9):
        return None
    if not np.allclose(lvec @ fit.pinv @ fit.x, lvec, atol=1e-8):
        return None
    return fit.pinv.T @ lvec


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


def estimate(fitted: Mapping[str, _Fit], weights: Mapping[Any, float],
             models: Mapping[str, RowNoise | Noise | None],
             rows: Sequence[_Row]) -> tuple[float, float, float]:  # fmt: skip
    """(estimate, se, Satterthwaite df) of the contrast sum_r w_r tau_r over the settings its
    weights touch (:func:`fits`; ``models``: each setting's noise, one for all when it holds
    one); NaNs (df 0) when it is not estimable or a setting's noise is unknown.

    Uniform's part of the variance, sum over its cells of a_k^2 sigma_u^2, is judged as a whole
    (:func:`_uniform_part`): its own estimate where that exceeds the pool's, as the rows model
    judges uniform in one setting, but summed over every setting the contrast reads, so a
    contrast over 4 settings of 3 seeds rests on uniform's 8 df, not on 2 per setting."""
    if not weights:
        return math.nan, math.nan, 0.0
    setting_of = {r.key: r.setting for r in rows}
    only = next(iter(models.values())) if len(models) == 1 else None
    est, comps, uniform = 0.0, {}, []
    for s in sorted({setting_of[k] for k in weights if k in setting_of}):
        fit = fitted.get(s)
        w = {k: x for k, x in weights.items() if setting_of.get(k) == s}
        a = _weights_on_cells(fit, w) if fit is not None else None
        if a is None:
            return math.nan, math.nan, 0.0
        est += float(a @ fit.y)
        model = models.get(s, only)
        for c, ai in zip(fit.keys, a, strict=True):
            if ai == 0.0:
                continue
            part = _cell_variance(model, c)
            if part is None:
                return est, math.nan, 0.0
            if isinstance(model, RowNoise) and c in model.control and c in model.rows:
                own, n = model.rows[c].own, fit.keys.count(c)
                uniform.append((s, ai * ai, own, n - 1, model.pooled.sd**2 / 2.0,
                                model.pooled.df))  # fmt: skip
                continue
            name, var, df = part
            comp = comps.setdefault((s, name), [0.0, df])
            comp[0] += ai * ai * var
    for name, var, df in _uniform_part(uniform):
        comp = comps.setdefault(name, [0.0, df])
        comp[0] += var
    var = sum(v for v, _ in comps.values())
    denom = sum(v * v / df for v, df in comps.values())
    if not var > 0 or not denom > 0:
        return est, math.nan, 0.0
    return est, math.sqrt(var), float(max(1, math.floor(var * var / denom)))


def _uniform_part(terms: Sequence[tuple[str, float, float, int, float, int]]
                  ) -> list[tuple[Any, float, int]]:  # fmt: skip
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
    asked = [(NAMED, q) for q in questions] if questions else default_questions(rows)
    recs = []
    censored = {r.schedule for r in rows if r.censored and not r.baseline}
    fitted = fits(trials, value, rows, key)
    for kind, q in asked:
        plus, w, n = _spec(rows, q)
        est, se, df = estimate(fitted, w, models, rows)
        why = ""
        if not w:
            why = "not estimable: a side has no complete cell at some setting it reads"
        elif not df >= 1:
            why = "noise unknown: a setting it reads has no residual df yet"
        blocked = bool(set(plus) & censored)
        if blocked:
            why = (why + "; " if why else "") + "a member was pruned or failed on some seed"
        recs.append(
            {
                "name": q.name,
                "kind": kind,
                "members": tuple(plus),
                "settings": n,
                "estimate": est,
                "se": se,
                "df": df,
                "why": why,
                "blocked": blocked,
            }
        )
    out = pd.DataFrame(recs)
    sign = 1.0 if sense == "minimize" else -1.0
    dec = decide_words(out["estimate"].tolist(), out["se"].tolist(), out["df"].tolist(), sign,
                       margin, level, out["blocked"].tolist())  # fmt: skip
    for k, v in dec.items():
        out[k] = v
    for i in out.index:  # a noise of 1-2 df bounds nothing the reader can use
        if out.at[i, "word"] == INCONCLUSIVE and 1 <= out.at[i, "df"] < MIN_DF:
            out.at[i, "why"] = "; ".join(
                filter(
                    None, [f"cannot be bounded yet ({int(out.at[i, 'df'])} df)", out.at[i, "why"]]
                )
            )
    out["margin"] = math.nan if margin is None else float(margin)
    out["df"] = out["df"].astype("int64")
    return out[list(CONTRAST_COLUMNS)].reset_index(drop=True)


def contrasts_rule(table: pd.DataFrame, level: float) -> str:
    """How a contrasts table's words were decided, in one line (:func:`family_rule`)."""
    margin = table["margin"].iloc[0] if len(table) else math.nan
    return family_rule(len(table), level, None if not math.isfinite(margin) else float(margin))
