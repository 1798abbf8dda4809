"""Seeds for a study's contrasts: to separate ``min_effect`` and to call a true 0 "equivalent
within +-d", at the contrasts' family-wise level (``tlmsearch plan``).

A contrast is sum_r w_r tau_r over the cells of a complete block design (every row on every
seed, :mod:`tlmsearch.stats.contrasts`); its estimate is sum_r w_r mean_r and its variance
sum_r w_r^2 sigma^2 / n with sigma^2 = sd^2 / 2 the variance of one cell, sd that of one paired
delta. So a contrast's standard error is sd sqrt(f / n) with f = sum w^2 / 2: 1 for one
schedule against uniform at one setting, 0.15 for "5 early-heavy schedules vs uniform over 4
settings" (each taper cell 1/20, each uniform cell 1/4), 2 for an interaction (an effect at one
setting minus at another). A family contrast needs fewer seeds than a single comparison; an
interaction more.

Its df are Satterthwaite's over the parts the study judges it with: at each setting it reads,
uniform on its own variance (n - 1 df) and the candidates on the setting's pool (m_s (n - 1) df,
m_s the candidates there; with one candidate the two are one paired variance on n - 1 df),
as :func:`tlmsearch.evidence.power.comparison_df` assumes for one comparison. The study computes
those df from the *estimated* parts (:func:`tlmsearch.stats.contrasts.estimate`), and at few
seeds they scatter well below the df of the true parts (5 early-heavy schedules over 4 LRs at
3 seeds: power 37% where the true parts' df say 52%), so the power averages over the parts'
estimates: exactly (Gauss-Legendre) for one part, over 4,096 fixed draws for several.

The family is every contrast the study asks (:func:`tlmsearch.stats.questions.asked`), decided
by a weighted Holm step-down in which each contrast's two questions count once
(:mod:`tlmsearch.stats.words`; the families share 40% of the error rate, each schedule or
named contrast 30%, the interactions 20%, the per-setting contrasts 10%:
:data:`tlmsearch.stats.contrasts.GROUPS`):
both are sized at its first step, alpha w two-sided for "differs from 0" and alpha w one-sided
on each side for the equivalence (TOST), w its weight there
(:func:`tlmsearch.stats.contrasts.first_weights` over the contrasts that read a cell: 1 / m
under plain Holm), an upper bound on
the seeds (later steps are looser). Given the variance estimate (s = se_hat / se, df),
the difference is separated with probability P(|Z + theta / se| > t s) and called equivalent
with P(|Z + theta / se| < d / se - t s), Z standard normal (:func:`separate_power`,
:func:`equivalent_power`; tests/test_contrast_power.py checks both against a simulation of
the test and against the study's own contrasts on simulated studies).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tlmsearch.constants import MAX_SEEDS
from tlmsearch.stats.contrasts import GROUPS, family_groups, first_weights
from tlmsearch.stats.questions import SETTING, Question, asked, planned_row
from tlmsearch.stats.words import family_size, group_split

_NODES = 256  # Gauss-Legendre nodes over one part's sd ratio (exact to ~1e-6 here)
_DRAWS = 4096  # Monte Carlo draws of several parts' estimates (the power's MC se < 0.3 points)
_SEED = 20240611  # fixed: a plan prints the same seeds every time

if TYPE_CHECKING:
    from tlmsearch.config import StudyConfig
    from tlmsearch.stats.questions import _Row


@dataclass(frozen=True)
class Shape:
    """How a contrast's standard error and df grow with the seeds n, in units of the sd of one
    paired delta: se = sd sqrt(factor / n); ``parts`` its variance parts (:func:`parts`)."""

    factor: float  # sum of the weights squared / 2 (1: one comparison with uniform)
    parts: tuple[tuple[float, float], ...]  # (sum of w^2, df per seed past the first)

    def se(self, sd: float, n: int) -> float:
        return sd * math.sqrt(self.factor / n)

    def df(self, n: int) -> int:
        """Satterthwaite's df at the parts' true variances (the study's, from its estimated
        parts, scatter below it at few seeds)."""
        if n < 2:
            return 0
        total = sum(c for c, _ in self.parts)
        rate = total * total / sum(c * c / g for c, g in self.parts)
        return max(1, math.floor((n - 1) * rate + 1e-9))


def parts(rows: Sequence[_Row], weights: Mapping[Any, float]) -> list[tuple[float, float]]:
    """The variance parts of a contrast the study judges it with: (sum of its weights squared
    on the part's cells, the part's df per seed past the first): at each setting uniform's own
    (1) and the candidates' pool (m_s), or one paired variance (1) where one candidate is
    there.

    >>> from tlmsearch.stats.questions import planned_row
    >>> rows = [planned_row("u", "", "", {}, 0.0, True)] + [
    ...     planned_row(k, k, "", {}, 1.0, False) for k in "abc"]
    >>> parts(rows, {"u": -1.0, "a": 1.0})  # one comparison with uniform, 3 candidates
    [(1.0, 1.0), (1.0, 3.0)]
    """
    out: list[tuple[float, float]] = []
    for s in sorted({r.setting for r in rows}):
        here = [r for r in rows if r.setting == s]
        m_s = sum(not r.baseline for r in here)
        c_u = sum(weights.get(r.key, 0.0) ** 2 for r in here if r.baseline)
        c_c = sum(weights.get(r.key, 0.0) ** 2 for r in here if not r.baseline)
        if m_s < 2:  # one candidate: the block fit is the paired test, one variance
            out.append((c_u + c_c, 1.0))
        else:
            out += [(c_u, 1.0), (c_c, float(m_s))]
    return [(c, g) for c, g in out if c > 0]


def shape(rows: Sequence[_Row], weights: Mapping[Any, float]) -> Shape | None:
    """A contrast's :class:`Shape` from its weights on the design's rows (:func:`parts`); None
    when it reads no cell (not estimable in this design).

    >>> from tlmsearch.stats.questions import planned_row
    >>> rows = [planned_row("u", "", "", {}, 0.0, True)] + [
    ...     planned_row(k, k, "", {}, 1.0, False) for k in "abc"]
    >>> s = shape(rows, {"u": -1.0, "a": 1.0})
    >>> s.factor, s.df(3)  # comparison_df(3, 3): 4 / (1 / 6 + 1 / 2) = 6
    (1.0, 6)
    """
    got = parts(rows, weights)
    total = sum(c for c, _ in got)
    if not total > 0:
        return None
    return Shape(total / 2.0, tuple(got))


@functools.lru_cache(maxsize=1024)
def _ratios(parts_: tuple[tuple[float, float], ...], n: int) -> tuple[Any, Any, Any]:
    """(s, df, weight): the estimated se over the true one, the df the study judges the
    contrast on, and each point's probability. One part: Gauss-Legendre nodes over s, whose
    density s^(k - 1) exp(-k s^2 / 2) (k = g (n - 1)) has no singularity. Several: draws of
    each part's estimate (a chi-square on its df), Satterthwaite's df from the estimated
    parts as :func:`tlmsearch.stats.contrasts.estimate` computes it, a fixed seed."""
    import numpy as np
    from scipy.special import gammaln

    total = sum(c for c, _ in parts_)
    if len(parts_) == 1:
        k = parts_[0][1] * (n - 1)
        lo = max(0.0, 1.0 - 12.0 / math.sqrt(2.0 * k))
        hi = 1.0 + 12.0 / math.sqrt(2.0 * k) + 8.0  # past it no mass, at any df
        x, w = _legendre()
        s = lo + (hi - lo) * (x + 1.0) / 2.0
        log_f = (
            math.log(2.0)
            + (k - 1) * np.log(s)
            - k * s * s / 2.0
            + (k / 2.0) * math.log(k / 2.0)
            - gammaln(k / 2.0)
        )
        return s, np.full(len(s), math.floor(k + 1e-9)), w * np.exp(log_f) * (hi - lo) / 2.0
    rng = np.random.default_rng(_SEED)
    comps = [c * rng.chisquare(g * (n - 1), _DRAWS) / (g * (n - 1)) for c, g in parts_]
    var = np.sum(comps, axis=0)
    denom = np.sum(
        [v * v / (g * (n - 1)) for v, (_, g) in zip(comps, parts_, strict=True)], axis=0
    )
    df = np.maximum(1.0, np.floor(var * var / denom + 1e-9))
    return np.sqrt(var / total), df, np.full(_DRAWS, 1.0 / _DRAWS)


@functools.cache
def _legendre() -> tuple[Any, Any]:
    import numpy as np

    return np.polynomial.legendre.leggauss(_NODES)


def _quantiles(df: Any, level: float) -> Any:
    """Student t's ``level`` quantile at each df (computed once per distinct df)."""
    import numpy as np
    from scipy.stats import t as student_t

    values, where = np.unique(df, return_inverse=True)
    return student_t.ppf(level, values)[where]


def separate_power(n: int, effect: float, sd: float, sh: Shape, alpha: float) -> float:
    """Power of the two-sided t test at ``alpha`` to separate a contrast whose true value is
    ``effect``, on ``n`` seeds: the mean over the variance estimates (:func:`_ratios`) of
    P(|Z + delta| > t s), delta = effect / se (the noncentral t's power with one part).

    >>> sh = Shape(1.0, ((1.0, 1.0),))  # one paired delta
    >>> from tlmsearch.evidence.power import nct_power
    >>> abs(separate_power(6, 1.0, 1.0, sh, 0.05) - nct_power(6 ** 0.5, 5, 0.05)) < 1e-6
    True
    """
    if n < 2:
        return 0.0
    return _power(n, abs(effect) / sh.se(sd, n), sh.parts, alpha, "separate")


def equivalent_power(
    n: int, margin: float, sd: float, sh: Shape, alpha: float, theta: float = 0.0
) -> float:
    """The chance that TOST at one-sided ``alpha`` on each side calls a contrast whose true
    value is ``theta`` "equivalent within +-margin" on ``n`` seeds: its (1 - 2 alpha)
    interval inside (-margin, margin), P(|Z + theta / se| < margin / se - t s) averaged over
    the variance estimates.

    >>> sh = Shape(1.0, ((2.0, 1.0),))
    >>> round(equivalent_power(20, 1.0, 1.0, sh, 0.05), 3)  # ~ P(|Z| < 4.47 - 1.73)
    0.992
    >>> round(equivalent_power(2, 1.0, 1.0, sh, 0.05), 3)  # 1 df: t_0.95 is 6.3
    0.086
    """
    if n < 2 or not margin > 0:
        return 0.0
    se = sh.se(sd, n)
    return _power(n, theta / se, sh.parts, alpha, "equivalent", margin / se)


@functools.lru_cache(maxsize=8192)
def _power(
    n: int,
    shift: float,
    parts_: tuple[tuple[float, float], ...],
    alpha: float,
    question: str,
    r: float = 0.0,
) -> float:
    import numpy as np
    from scipy.special import ndtr

    s, df, w = _ratios(parts_, n)
    if question == "separate":
        c = _quantiles(df, 1.0 - alpha / 2.0) * s
        got = ndtr(shift - c) + ndtr(-shift - c)
    else:
        u = r - _quantiles(df, 1.0 - alpha) * s
        got = np.where(u > 0, np.clip(ndtr(u - shift) - ndtr(-u - shift), 0.0, 1.0), 0.0)
    return float(min(1.0, max(0.0, np.sum(w * got))))


def smallest_seeds(power_at: Callable[[int], float], target: float) -> int | None:
    """The smallest n >= 2 with ``power_at(n) >= target`` (power grows with n); None past
    :data:`~tlmsearch.constants.MAX_SEEDS`."""
    lo, hi = 1, 2
    while power_at(hi) < target:
        lo, hi = hi, hi * 2
        if hi > MAX_SEEDS:
            return None
    while hi - lo > 1:  # invariant: power(lo) < target <= power(hi)
        mid = (lo + hi) // 2
        if power_at(mid) >= target:
            hi = mid
        else:
            lo = mid
    return hi


@dataclass(frozen=True)
class ContrastSize:
    """One contrast of the plan: its shape and the seeds each question needs."""

    name: str
    kind: str  # main | setting | family | interaction | named
    shape: Shape | None  # None: it reads no cell of this design
    separate: int | None  # seeds to separate min_effect (None: more than MAX_SEEDS)
    equivalent: int | None  # seeds to call a true 0 equivalent within +-margin (None: no margin)
    power_now: float  # separating min_effect at the study's seeds
    equivalent_now: float  # calling a true 0 equivalent at the study's seeds
    alpha: float  # each of its questions' level at the step-down's first step (NaN: none asked)


@dataclass(frozen=True)
class ContrastPlan:
    """The contrasts' part of a plan: the family and each contrast's seeds."""

    m: int  # contrasts in the family
    alpha: float  # the first estimable contrast's level at the first step ((1 - level) / m,
    # m the estimable ones, under plain Holm)
    margin: float | None  # the equivalence margin d (None: no equivalence question)
    margin_from: str
    rows: tuple[ContrastSize, ...]
    note: str = ""  # why there are no rows (a sampler's schedules are not known up front)
    groups: tuple[tuple[str, int, float], ...] = ()  # (what, contrasts, share) of each group


def planned_rows(cfg: StudyConfig) -> list[_Row]:
    """The study's design rows, one per training (a grid's trainings or its listed candidates),
    as its trials table will name them."""
    from tlmsearch.widths.schedules import ScheduleError
    from tlmsearch.widths.space import describe, schedule_of, setting_label, settings_of
    from tlmsearch.widths.space import taper_strength as strength

    out = []
    for t in cfg.trainings():
        c = t.candidate
        try:
            taper = strength(c)
        except ScheduleError:  # validate names it; the plan only cannot class it
            taper = math.nan
        out.append(
            planned_row(
                c.label,
                describe(schedule_of(c)),
                setting_label(c, exact=True),
                settings_of(c),
                taper,
                c.is_baseline,
            )
        )
    return out


def study_questions(cfg: StudyConfig | None) -> list[Question]:
    """A study's ``stats.contrasts`` as questions ([] without any, or without a study: the
    default ones)."""
    if cfg is None:
        return []
    return [
        Question(
            c.name,
            tuple(c.schedules),
            tuple(c.vs),
            {d: tuple(v) for d, v in c.where.items()},
            c.by,
            tuple(c.levels) if c.levels else None,
            c.terms,
        )
        for c in cfg.stats.contrasts
    ]


def size_contrasts(
    cfg: StudyConfig,
    *,
    effect: float,
    sd: float,
    margin: float | None,
    margin_from: str,
    target: float,
    n_now: int,
) -> ContrastPlan:
    """Every contrast the study asks, sized at the contrasts' family level."""
    if cfg.search.sampler != "grid" and cfg.search.candidates is None:
        return ContrastPlan(
            0,
            math.nan,
            margin,
            margin_from,
            (),
            note=(
                "a sampler's schedules are drawn as it runs, so its contrasts are not known "
                "before it does: each is sized like a comparison above by its weights (a "
                "family of k schedules over s settings needs about (1 + 1/k) / (2 s) of a "
                "comparison's variance)"
            ),
        )
    rows = planned_rows(cfg)
    family = asked(rows, study_questions(cfg))
    m = max(1, len(family))
    shapes = [shape(rows, weights) if weights else None for _, _, _, weights, _ in family]
    # a contrast that reads no cell asks nothing: its group's share goes to the others
    kinds = [kind for (kind, *_), sh in zip(family, shapes, strict=True) if sh is not None]
    first = iter(first_weights(kinds))
    out = []
    for (kind, q, *_), sh in zip(family, shapes, strict=True):
        if sh is None:
            out.append(ContrastSize(q.name, kind, None, None, None, 0.0, 0.0, math.nan))
            continue
        alpha = (1.0 - cfg.stats.level) * next(first)

        def sep(n: int, sh: Shape = sh, alpha: float = alpha) -> float:
            return separate_power(n, effect, sd, sh, alpha)

        def eq(n: int, sh: Shape = sh, alpha: float = alpha) -> float:
            return equivalent_power(n, margin or 0.0, sd, sh, alpha)

        has_margin = margin is not None
        out.append(
            ContrastSize(
                q.name,
                kind,
                sh,
                smallest_seeds(sep, target),
                smallest_seeds(eq, target) if has_margin else None,
                sep(n_now),
                eq(n_now) if has_margin else 0.0,
                alpha,
            )
        )
    return ContrastPlan(
        m,
        next((r.alpha for r in out if r.shape is not None), (1.0 - cfg.stats.level) / m),
        margin,
        margin_from,
        tuple(out),
        groups=tuple(family_groups(kinds)[2]),
    )


def _n(n: int | None, per_seed: int) -> tuple[str, str]:
    if n is None:
        return f">{MAX_SEEDS:.0e}", "-"
    return str(n), str(per_seed * n)


def contrast_plan_lines(
    cp: ContrastPlan | None,
    effect: float,
    level: float,
    per_seed: int,
    n_now: int,
    percent: Callable[[float], str],
) -> list[str]:
    """The contrasts' table of ``tlmsearch plan``: each contrast's seeds and trainings to
    separate ``effect`` and to call a true 0 equivalent, and its power at the study's seeds;
    the per-setting contrasts in one line (the most any of them needs)."""
    if cp is None:
        return []
    if not cp.rows:
        return ["", f"contrasts: {cp.note}"] if cp.note else []
    eq = cp.margin is not None
    over = family_size(cp.m, sum(r.shape is not None for r in cp.rows))
    if len(cp.groups) > 1:
        first = {r.kind: r.alpha for r in cp.rows if r.shape is not None}
        levels = ", ".join(
            f"{what} {first[next(k for k in kinds if k in first)]:.3g}"
            for what, kinds, _ in GROUPS
            if any(k in first for k in kinds)
        )
        head = (
            f"contrasts: weighted Holm over {over} at {level:.0%} "
            f"({group_split(cp.groups)}), each "
            f"question sized at its first step ({levels} two-sided to separate {effect:g}"
        )
        alpha_eq = "the same"
    else:
        head = (
            f"contrasts: Holm over {over} at {level:.0%}, each "
            f"question sized at its first step ({cp.alpha:.3g} two-sided to separate "
            f"{effect:g}"
        )
        alpha_eq = f"{cp.alpha:.3g}"
    head += (
        f"; {alpha_eq} a side for equivalence within +-{cp.margin:g}, {cp.margin_from},"
        " TOST at a true effect 0)"
        if eq
        else "; no equivalence margin: stats.equivalence or min_effect)"
    )
    shown = [r for r in cp.rows if r.kind != SETTING]
    at = [r for r in cp.rows if r.kind == SETTING and r.shape is not None]
    if at:
        worst = max(at, key=lambda r: (r.separate or MAX_SEEDS + 1, r.equivalent or 0))
        shown.append(
            ContrastSize(
                f"each schedule at one setting ({len(at)}, the most any needs)",
                SETTING,
                worst.shape,
                worst.separate,
                worst.equivalent,
                min(r.power_now for r in at),
                min(r.equivalent_now for r in at),
                worst.alpha,
            )
        )
    width = max(len("contrast"), *(len(r.name) for r in shown))
    cols = f"{'se/sd':>5}  {'separate: seeds':>15} {'trainings':>9} {'power':>5}"
    if eq:
        cols += f"  {'equivalent: seeds':>17} {'trainings':>9} {'power':>5}"
    out = ["", head, "", f"{'contrast':<{width}}  {cols}"]
    for r in shown:
        if r.shape is None:
            out.append(
                f"{r.name:<{width}}  not estimable in this design (a side has no training"
                " at a setting it reads)"
            )
            continue
        s, t = _n(r.separate, per_seed)
        line = (
            f"{r.name:<{width}}  {math.sqrt(r.shape.factor):>5.2f}  {s:>15} {t:>9} "
            f"{percent(r.power_now):>5}"
        )
        if eq:
            s, t = _n(r.equivalent, per_seed)
            line += f"  {s:>17} {t:>9} {percent(r.equivalent_now):>5}"
        out.append(line)
    out.append(
        f"se/sd: the contrast's standard error at one seed in units of one paired delta's "
        f"sd (1: a comparison with uniform); seeds for every training of the study; "
        f"power: at this study's {n_now} seed(s)"
    )
    return out
