"""The questions a study asks, as weights on its cells: each schedule, each family
(early-heavy: taper strength > 0, capacity toward layer 0; late-heavy: < 0) against uniform
over the settings, at each setting, and its interaction with each setting dimension; or the
study's own (``stats.contrasts``). :mod:`tlmsearch.stats.contrasts` fits and decides them.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from tlmsearch.constants import SCHEDULE_FAMILIES
from tlmsearch.stats.deltas import trial_cells

FAMILY_NAMES = SCHEDULE_FAMILIES  # schedule families by where capacity goes
EARLY, LATE, ALL = FAMILY_NAMES
UNIFORM = "uniform"
MAIN, SETTING, FAMILY_KIND, INTERACTION, NAMED = (
    "main",
    "setting",
    "family",
    "interaction",
    "named",
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
    # explicit weights on schedules (summing to 0), in place of schedules minus vs
    terms: Mapping[str, float] | None = None


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
) -> Rows:
    """The candidates of a trials table, each with its schedule (the ``schedule`` column, else
    its key), setting, settings (``settings[key]``: {"train.lr": 0.003}, else parsed from its
    setting label), taper strength (the ``taper`` column; NaN without one), and whether a
    pruner or a failure censored it on some seed."""
    if trials.empty:
        return Rows()
    first = trials.drop_duplicates(key).set_index(key)
    cells = trial_cells(trials, value, key)
    censored = {c for (c, _), cell in cells.items() if cell.outcome == "censored"}

    def column(name: str, default: Any) -> list[Any]:
        return first[name].tolist() if name in first else [default] * len(first)

    tapers = pd.to_numeric(pd.Series(column("taper", None), dtype=object), errors="coerce")
    out = []
    for k, is_base, sched, label, taper in zip(
        first.index,
        column("is_baseline", False),
        column("schedule", None),
        column("setting", ""),
        tapers.tolist(),
        strict=True,
    ):  # plain lists, not iterrows: 5,000 candidates took 4 s that way
        base = bool(is_base)
        schedule = UNIFORM if base else sched if isinstance(sched, str) and sched else str(k)
        setting = str(label or "")
        given = settings.get(k) if settings is not None else None
        out.append(
            _Row(
                k,
                schedule,
                setting,
                dict(given) if given is not None else _from_label(setting),
                0.0 if base else float(taper),
                base,
                k in censored,
            )
        )
    return Rows(out)


def planned_row(
    key: Any,
    schedule: str,
    setting: str,
    settings: Mapping[str, Any],
    taper: float,
    baseline: bool,
) -> _Row:
    """A design row known before any data (``tlmsearch plan``: a study's trainings), never
    censored; uniform's schedule is ``uniform`` whatever ``schedule`` says.

    >>> planned_row("u", "x", "", {}, 0.0, True).schedule
    'uniform'
    """
    return _Row(
        key,
        UNIFORM if baseline else schedule,
        setting,
        dict(settings),
        0.0 if baseline else float(taper),
        bool(baseline),
        False,
    )


def asked(
    rows: Sequence[_Row], questions: Sequence[Question] = ()
) -> list[tuple[str, Question, list[str], dict[Any, float], int]]:
    """(kind, question, members, weights on row keys, settings read) of every contrast a study
    asks: ``questions`` (kind ``named``) or, without any, :func:`default_questions`."""
    rows = rows if isinstance(rows, Rows) else Rows(rows)  # indexed once, not per question
    pairs = [(NAMED, q) for q in questions] if questions else default_questions(rows)
    return [(kind, q, *_spec(rows, q)) for kind, q in pairs]


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
    taper > 0, late-heavy: taper < 0, all: every one but uniform).

    >>> rows = [_Row("u", "uniform", "", {}, 0.0, True, False),
    ...         _Row("c", "cosine 1.5->0.5", "", {}, 1.0, False, False),
    ...         _Row("g", "cosine 0.5->1.5", "", {}, -1.0, False, False)]
    >>> members(rows, ["early-heavy"]), members(rows, ["late-heavy", "cosine 1.5->0.5"])
    (['cosine 1.5->0.5'], ['cosine 0.5->1.5', 'cosine 1.5->0.5'])
    """
    families = (EARLY, LATE, ALL)
    scheds = (
        {r.schedule: r.taper for r in rows if not r.baseline}
        if any(n in families for n in names)
        else {}
    )
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


class Rows(list):  # type: ignore[type-arg]
    """:func:`design_rows`' rows, indexed once by setting and by (setting, schedule): a study
    of k candidates asks about k questions, each reading a few rows, so a question must not
    scan every row (k^2: minutes at 5,000 candidates)."""

    @functools.cached_property
    def index(self) -> tuple[dict[str, list[_Row]], dict[tuple[str, str], list[_Row]]]:
        by_setting: dict[str, list[_Row]] = {}
        by_schedule: dict[tuple[str, str], list[_Row]] = {}
        for r in self:
            by_setting.setdefault(r.setting, []).append(r)
            by_schedule.setdefault((r.setting, r.schedule), []).append(r)
        return by_setting, by_schedule


def _index(
    rows: Sequence[_Row],
) -> tuple[dict[str, list[_Row]], dict[tuple[str, str], list[_Row]]]:
    return (rows if isinstance(rows, Rows) else Rows(rows)).index


def _weights(
    rows: Sequence[_Row],
    plus: Sequence[str],
    minus: Sequence[str],
    settings: Sequence[str],
    scale: float = 1.0,
) -> dict[Any, float]:
    """Row key -> weight of "mean of ``plus`` minus mean of ``minus``", averaged over
    ``settings`` (each setting equally, each schedule equally within it); {} when a setting
    lacks either side."""
    by_schedule = _index(rows)[1]
    out: dict[Any, float] = {}
    for s in settings:
        for names, sign in ((plus, scale), (minus, -scale)):
            groups = [by_schedule[(s, n)] for n in dict.fromkeys(names) if (s, n) in by_schedule]
            if not groups:
                return {}
            for group in groups:
                for r in group:
                    w = sign / (len(settings) * len(groups) * len(group))
                    out[r.key] = out.get(r.key, 0.0) + w
    return out


def _settings_where(rows: Sequence[_Row], where: Mapping[str, Sequence[Any]]) -> list[str]:
    """The settings whose values match every entry of ``where``."""
    out = []
    by_setting = _index(rows)[0]
    for s in sorted(by_setting):
        values = by_setting[s][0].settings
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


def _terms_weights(
    rows: Sequence[_Row], terms: Mapping[str, float], settings: Sequence[str], scale: float = 1.0
) -> dict[Any, float]:
    """Row key -> weight of ``sum_s w_s x mean(schedule s)`` averaged over ``settings``; {}
    when a setting lacks one of the schedules."""
    out: dict[Any, float] = {}
    for s in settings:
        for schedule, w in terms.items():
            group = _index(rows)[1].get((s, schedule), [])
            if not group:
                return {}
            for r in group:
                out[r.key] = out.get(r.key, 0.0) + scale * w / (len(settings) * len(group))
    return out


def _spec(rows: Sequence[_Row], q: Question) -> tuple[list[str], dict[Any, float], int]:
    """(members, weights, settings read) of a question."""
    settings = _settings_where(rows, {d: tuple(v) for d, v in q.where.items()})
    if q.terms is not None:  # explicit weights: members are the positive side
        plus = sorted(s for s, w in q.terms.items() if w > 0 and s != UNIFORM)
        return plus, _terms_weights(rows, q.terms, settings), len(settings)
    plus, minus = members(rows, q.schedules), members(rows, q.vs)
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
    """(kind, question) of the contrasts a study asks unless it names its own, in this order:
    the early-heavy and late-heavy families where they hold two or more schedules (family); each
    schedule vs uniform over every setting (main) and, with settings, at each (setting); and for
    each setting dimension each schedule's and family's effect at its largest minus its smallest
    value (interaction)."""
    scheds = members(rows, [ALL])
    settings = sorted({r.setting for r in rows})
    out: list[tuple[str, Question]] = []
    many = len(settings) > 1
    families = [f for f in (EARLY, LATE) if len(members(rows, [f])) >= 2]
    for f in families:
        n = len(members(rows, [f]))
        out.append(
            (
                FAMILY_KIND,
                Question(
                    f"{f} ({n} schedules) vs uniform"
                    + (f" over {len(settings)} settings" if many else ""),
                    (f,),
                ),
            )
        )
    for s in scheds:
        out.append(
            (
                MAIN,
                Question(
                    f"{s} vs uniform" + (f" over {len(settings)} settings" if many else ""), (s,)
                ),
            )
        )
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
