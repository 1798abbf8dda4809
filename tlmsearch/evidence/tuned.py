"""The tuned comparison: each schedule at its own best setting (e.g. its best learning rate).

A study whose space has setting dimensions (``train.lr``, docs/search_dimensions.md) trains every
schedule, uniform included, at every setting value. One global LR can favour one width profile
over another (a wider layer's update moves its output more), so besides the
comparisons within a setting (:class:`tlmsearch.evidence.Evidence`'s effects) the question is:
*does the taper still win when each side gets its own best LR?*

:func:`tuned` picks each schedule's best setting by its mean over the *selection seeds*
(settings completed on every selection seed first, then on the most, so a value that diverged
or was pruned on a seed cannot win by its missing seed; when no setting of a schedule completed
every selection seed its best is flagged ``fully_measured`` False), then compares every
schedule at its best setting with uniform at *its* best, paired by seed, with
:func:`tlmsearch.stats.effects` (block-design noise, the study's family-wise correction).

Choosing the best of several settings on the same seeds that then measure the effect is
optimistic: the minimum of noisy means is biased low, and the interval ignores the choice. With
4 or more seeds the choice is made on the first half of the study's seeds and the effect
measured on the rest (held out, unbiased); with fewer, on the same seeds, and the result says it
is optimistic. A best value at the smallest or largest value tried is flagged: the optimum may
lie outside the grid. Pure pandas (no torch, ray or plotting).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from tlmsearch import stats
from tlmsearch.constants import FAMILY, LEVEL
from tlmsearch.stats.deltas import pruner_selected, trial_cells
from tlmsearch.widths.candidate import IDENTITY, Candidate

# Seeds from which the best setting is chosen on half and measured on the other half.
HOLDOUT_MIN_SEEDS = 4
SAME_SEEDS, HELD_OUT = "same seeds", "held-out seeds"
# Settings that say *which* comparison rather than a knob to tune: each value is a comparison of
# its own (each parametrization tunes its own LR, against its own uniform), never tuned across.
STRATA = ("train.parametrization",)
BEST_COLUMNS = [
    "schedule",
    "stratum",
    "is_baseline",
    "candidate",
    "setting",
    "settings",
    "mean",
    "n",
    "edge",
    "fully_measured",
]
OPTIMISTIC = (
    "each schedule's best setting was chosen on the same seeds that measure its effect: the "
    "tuned effects and intervals are optimistic, and the effects at uniform's best setting lean "
    "toward uniform, so those are shown but not judged (run 4 or more seeds to measure on "
    "held-out ones)"
)
# at the shared setting, below HOLDOUT_MIN_SEEDS: uniform's best setting is the one where its
# own noise happened to be lowest on the very seeds that measure the effect, so every schedule
# looks worse there (7.6% false "loses to uniform" in null studies of 7 schedules, 4 LRs and 3
# seeds, a bias of +0.41 noise sd): the numbers are shown, the decision is not made
NOT_JUDGED = (
    "not judged: uniform's best setting was chosen on the seeds that measure this "
    "effect, which leans it toward uniform (4 or more seeds measure it on held-out "
    "ones)"
)


@dataclass(frozen=True)
class Tuned:
    best: pd.DataFrame  # one row per schedule: schedule (with its stratum: "cosine (mup)"),
    # stratum ("parametrization=mup" or ""), is_baseline, candidate, setting, settings (dict),
    # mean (over the selection seeds), n, edge (e.g. "lr at the low end"), fully_measured (its
    # best completed every selection seed; False: no setting of it did)
    effects: pd.DataFrame  # stats.effects keyed by schedule: each at its best vs uniform at its
    curve: pd.DataFrame  # one row per (schedule, setting): its mean and sd over every seed
    selection: str  # same seeds | held-out seeds
    selection_seeds: tuple[int, ...]
    measure_seeds: tuple[int, ...]
    caveat: str  # OPTIMISTIC with the same seeds, else ""
    # stats.effects keyed by schedule at the *shared* setting, uniform's best (per stratum), on
    # the measure seeds: the effect a study at one (well-chosen) LR reports, beside the tuned one
    shared: pd.DataFrame | None = None
    shared_setting: dict[str, str] | None = None  # stratum -> uniform's best setting

    def as_dict(self) -> dict:
        """The comparison as plain data (best.yaml's ``tuned``): per schedule its best setting,
        mean, edge flag and, for all but uniform, its effect vs uniform at uniform's best."""
        eff = self.effects.set_index("schedule")
        shared = (self.shared if self.shared is not None else self.effects.iloc[0:0]).set_index(
            "schedule"
        )
        rows = []
        for r in self.best.itertuples():
            row: dict = {
                "schedule": r.schedule,
                "best_setting": dict(r.settings),
                "label": r.candidate,
                "mean": r.mean,
                "n_seeds": r.n,
                "best_at_edge": r.edge or None,
                "fully_measured": bool(r.fully_measured),
            }
            if not r.fully_measured:
                row["note"] = (
                    f"no setting of {r.schedule} completed every selection seed: "
                    "its best is chosen among partly measured ones"
                )
            if not r.is_baseline and r.schedule in eff.index:
                e = eff.loc[r.schedule]
                sep = e["separated"]
                row["delta_vs_uniform"] = float(e["mean_delta"])
                ci = [float(e["lo"]), float(e["hi"])]
                row["delta_ci"] = None if math.isnan(ci[0]) else ci
                row["delta_n_seeds"] = int(e["n"])
                # censored (pruned or failed on a measure seed): its completed seeds flatter
                # it, so the effect is not judged
                row["censored"] = bool(e["censored"])
                row["censored_seeds"] = [int(x) for x in e["censored_seeds"]]
                row["separated_from_uniform"] = (
                    None if pd.isna(sep) or row["censored"] else bool(sep)
                )
                if bool(e.get("conditional", False)):
                    row["conditional_on_surviving_the_pruner"] = True
            if r.stratum:
                row["stratum"] = r.stratum
            if not r.is_baseline and r.schedule in shared.index:
                e = shared.loc[r.schedule]
                sep = e["separated"]
                censored = bool(e["censored"])
                row["at_shared_setting"] = {
                    "setting": (self.shared_setting or {}).get(r.stratum, ""),
                    "delta_vs_uniform": float(e["mean_delta"]),
                    "delta_ci": None if math.isnan(e["lo"]) else [float(e["lo"]), float(e["hi"])],
                    "delta_n_seeds": int(e["n"]),
                    "censored": censored,
                    "separated_from_uniform": (None if pd.isna(sep) or censored else bool(sep)),
                }
                if self.selection == SAME_SEEDS:
                    row["at_shared_setting"]["note"] = NOT_JUDGED
            rows.append(row)
        return {
            "what": "each schedule at its own best setting, uniform at its own, paired by seed; "
            "at_shared_setting: each at uniform's best setting instead (one shared LR)",
            "selection": self.selection,
            "selection_seeds": list(self.selection_seeds),
            "measure_seeds": list(self.measure_seeds),
            "caveat": self.caveat or None,
            "schedules": rows,
            "best_at_edge": self.edges,
        }

    @property
    def edges(self) -> list[str]:
        """``"cosine 1.5->0.5: lr at the high end (0.01)"`` for every flagged schedule."""
        return [f"{r.schedule}: {r.edge}" for r in self.best.itertuples() if r.edge]


def _settings(identity: str) -> dict:
    try:
        return Candidate.from_identity(identity).settings
    except (TypeError, ValueError):
        return {}


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _edge(best: dict, tried: Sequence[dict]) -> str:
    """Which numeric setting of ``best`` is the smallest or largest value ``tried``, in words."""
    out = []
    for name, value in sorted(best.items()):
        x = _number(value)
        values = {v for v in (_number(t.get(name)) for t in tried) if v is not None}
        if x is None or len(values) < 2:
            continue
        field = name.partition(".")[2]
        if x == min(values):
            out.append(f"{field} at the low end of the values tried ({value:g})")
        elif x == max(values):
            out.append(f"{field} at the high end of the values tried ({value:g})")
    return "; ".join(out)


def tuned(
    trials: pd.DataFrame,
    value: str,
    sense: str = "minimize",
    *,
    level: float = LEVEL,
    family: str = FAMILY,
    seeds: Sequence[int] | None = None,
) -> Tuned | None:
    """The tuned comparison of a trials table with a ``setting`` column (None without settings
    to tune: none at all, or only :data:`STRATA`).

    ``seeds``: the study's seeds in order (default: the seeds in ``trials``, sorted). With a
    stratum setting (``train.parametrization``) each of its values is its own comparison: the
    schedules are tuned and compared within it, and named ``"cosine 1.5->0.5 (mup)"``.

    >>> import json
    >>> rows = [(s, lr, seed, v) for s, lr, seed, v in [
    ...     ("uniform", 1, 0, 2.0), ("uniform", 1, 1, 2.1), ("uniform", 3, 0, 1.9),
    ...     ("uniform", 3, 1, 2.0), ("cosine", 1, 0, 1.8), ("cosine", 1, 1, 1.9),
    ...     ("cosine", 3, 0, 1.85), ("cosine", 3, 1, 1.97)]]
    >>> t = pd.DataFrame({"schedule": [r[0] for r in rows],
    ...     "setting": [f"lr={r[1]}" for r in rows],
    ...     "candidate": [f"{r[0]} @ lr={r[1]}" for r in rows],
    ...     IDENTITY: [json.dumps({"shape": r[0], "train.lr": r[1]}) for r in rows],
    ...     "is_baseline": [r[0] == "uniform" for r in rows], "seed": [r[2] for r in rows],
    ...     "state": "COMPLETE", "v": [r[3] for r in rows]})
    >>> tu = tuned(t, "v")
    >>> tu.best[["schedule", "setting"]].values.tolist()
    [['uniform', 'lr=3'], ['cosine', 'lr=1']]
    >>> for line in tu.edges:
    ...     print(line)
    uniform: lr at the high end of the values tried (3)
    cosine: lr at the low end of the values tried (1)
    >>> round(float(tu.effects.iloc[0]["mean_delta"]), 3), tu.selection
    (-0.1, 'same seeds')

    At uniform's best LR (3, the one a study would share) cosine leads by 0.04, not 0.1.

    >>> round(float(tu.shared.iloc[0]["mean_delta"]), 3), tu.shared_setting
    (-0.04, {'': 'lr=3'})
    """
    if "setting" not in trials or not (trials["setting"].astype(str) != "").any():
        return None
    t = trials.copy()
    t["seed"] = pd.to_numeric(t["seed"], errors="coerce")
    split = [_split(_settings(p)) for p in t[IDENTITY]]
    if not any(tunable for tunable, _ in split):
        return None  # only strata (train.parametrization): nothing is tuned
    t["stratum"] = [stratum for _, stratum in split]
    known = sorted(int(s) for s in t["seed"].dropna().unique())
    order = [int(s) for s in seeds] if seeds is not None else known
    if len(order) >= HOLDOUT_MIN_SEEDS:
        half = len(order) // 2
        select, measure, how = tuple(order[:half]), tuple(order[half:]), HELD_OUT
    else:
        select, measure, how = tuple(order), tuple(order), SAME_SEEDS
    parts, lines = [], []
    pruned = stats.any_pruned(t)  # the study's pruner judged every trial, every stratum's
    for stratum, sub in t.groupby("stratum", sort=True):
        parts.append(_within(sub, value, sense, level, family, select, measure, stratum, pruned))
        c = curve(sub, value)
        c["schedule"] = [_name(s, stratum) for s in c["schedule"]]
        lines.append(c)
    best, eff, shared = (pd.concat([p[i] for p in parts], ignore_index=True) for i in range(3))
    if how == SAME_SEEDS and len(shared):  # NOT_JUDGED: biased toward uniform, shown only
        shared["separated"] = pd.array([pd.NA] * len(shared), dtype="boolean")

    shared_setting = {stratum: setting for _, _, _, stratum, setting in parts if setting}
    return Tuned(
        best,
        eff,
        pd.concat(lines, ignore_index=True),
        how,
        select,
        measure,
        OPTIMISTIC if how == SAME_SEEDS else "",
        shared,
        shared_setting,
    )


def _conditional(eff: pd.DataFrame, cell_of: dict, selected: set) -> pd.DataFrame:
    """``eff`` with a column ``conditional``: the schedule's compared cell (``cell_of``:
    schedule -> candidate) is one the pruner could have stopped and let run (``selected``,
    :func:`tlmsearch.stats.deltas.pruner_selected`): its mean is conditional on surviving the
    pruner, selected for looking good on its early evals, so it is never called separated (its
    ``separated`` <NA>)."""
    eff = eff.copy()
    at = [cell_of.get(s) in selected for s in eff["schedule"]]
    eff["conditional"] = at
    if any(at):
        sep = eff["separated"].astype("boolean").copy()
        sep[pd.Series(at, index=eff.index)] = pd.NA
        eff["separated"] = sep
    return eff


def _split(settings: dict) -> tuple[dict, str]:
    """A candidate's settings as (the ones to tune, its stratum's label: ``parametrization=mup``
    or "")."""
    tunable = {k: v for k, v in settings.items() if k not in STRATA}
    stratum = ", ".join(
        f"{k.partition('.')[2]}={settings[k]}" for k in sorted(settings) if k in STRATA
    )
    return tunable, stratum


def _name(schedule: str, stratum: str) -> str:
    """``cosine 1.5->0.5 (mup)``: a schedule within a stratum (itself without one)."""
    return f"{schedule} ({stratum.partition('=')[2] or stratum})" if stratum else schedule


def _within(
    t: pd.DataFrame,
    value: str,
    sense: str,
    level: float,
    family: str,
    select: tuple[int, ...],
    measure: tuple[int, ...],
    stratum: str,
    pruned: bool,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, str, str]:
    """One stratum's (best, tuned effects, effects at uniform's best setting, stratum, uniform's
    best setting)."""
    best = _best_per_schedule(t, value, sense, level, select, stratum)
    named = t.assign(schedule=[_name(str(s), stratum) for s in t["schedule"]])
    base = best[best["is_baseline"]]
    shared_setting = str(base["setting"].iloc[0]) if len(base) else ""
    # The noise of each comparison is the rows model the effects use (stats.row_noise: each
    # row, uniform or a candidate, on its own variance where its seeds show it noisier), fitted
    # per setting on every schedule's cells there, on the measure seeds (the chosen cells alone
    # leave (schedules - 1)(seeds - 1) df, 1 for two schedules on 2 measuring seeds), never from
    # other settings: a high LR's seeds can scatter several times more than a low one's. A
    # schedule at uniform's best setting is a delta within one setting; one at another setting
    # also carries how each LR treated the seed (stats.across_pair). The pruner's selected rows
    # are left out of every fit (``pruned``: the whole study's); where no row it could not stop
    # measures the noise, it is unknown, never measured on the survivors. One family decides.
    measured = named[named["seed"].isin(measure)]
    models = _models(measured, value, level, pruned)
    at_best = named[named["candidate"].isin(best["candidate"]) & named["seed"].isin(measure)]
    # keyed by schedule, no setting column: uniform at its best setting is every schedule's
    # baseline, paired by seed
    at_best = at_best.drop(columns=["setting"])
    base_row = base.iloc[0] if len(base) else None
    others = best[~best["is_baseline"]]
    noise = (
        _tuned_noise(measured, value, models, others, base_row, pruned)
        if base_row is not None
        else None
    )
    eff = stats.effects(
        at_best,
        value,
        sense,
        key="schedule",
        level=level,
        family=family,
        noise=noise,
        pruned=pruned,
    )
    eff = eff.sort_values("schedule", kind="stable").reset_index(drop=True)
    at_shared = named[
        (named["setting"].astype(str) == shared_setting) & named["seed"].isin(measure)
    ]
    shared = eff.iloc[0:0]
    if shared_setting:
        noise = _shared_noise(at_shared, models.get(shared_setting))
        shared = stats.effects(
            at_shared.drop(columns=["setting"]),
            value,
            sense,
            key="schedule",
            level=level,
            family=family,
            noise=noise,
            pruned=pruned,
        )
    # a cell the pruner could have stopped (not uniform, not unpruned) and let run survived by
    # looking good: its mean is conditional on surviving, never called separated
    selected = pruner_selected(trial_cells(named, value, "candidate"), pruned) if pruned else set()
    eff = _conditional(eff, dict(zip(best["schedule"], best["candidate"], strict=True)), selected)
    shared = _conditional(
        shared, dict(zip(at_shared["schedule"], at_shared["candidate"], strict=True)), selected
    )
    return best, eff, shared, stratum, shared_setting


def _best_per_schedule(
    t: pd.DataFrame, value: str, sense: str, level: float, select: tuple[int, ...], stratum: str
) -> pd.DataFrame:
    """Each schedule's best setting on the ``select`` seeds (uniform's first): the candidate
    with the most complete seeds, then the best mean (BEST_COLUMNS)."""
    sign = 1.0 if sense == "minimize" else -1.0
    summary = stats.summarise(t[t["seed"].isin(select)], value, level=level)
    by_cand = summary.set_index("candidate")
    first = t.drop_duplicates("candidate").set_index("candidate")
    rows = []
    for schedule, group in first.groupby("schedule", sort=False):
        tried = [_split(_settings(p))[0] for p in group[IDENTITY]]
        ranked = []
        for cand in group.index:
            if cand in by_cand.index and by_cand.at[cand, "n"] > 0:
                n = int(by_cand.at[cand, "n"])
                ranked.append((n < len(select), -n, sign * by_cand.at[cand, "mean"], cand))
        if not ranked:
            continue
        partial, _, _, cand = min(ranked)
        chosen = _settings(group.at[cand, IDENTITY])
        rows.append(
            {
                "schedule": _name(str(schedule), stratum),
                "stratum": stratum,
                "is_baseline": bool(group.at[cand, "is_baseline"]),
                "candidate": cand,
                "setting": str(group.at[cand, "setting"]),
                "settings": chosen,
                "mean": float(by_cand.at[cand, "mean"]),
                "n": int(by_cand.at[cand, "n"]),
                "edge": _edge(_split(chosen)[0], tried),
                "fully_measured": not partial,
            }
        )
    best = pd.DataFrame(rows, columns=BEST_COLUMNS)
    best = best.sort_values("is_baseline", ascending=False, kind="stable").reset_index(drop=True)
    return best


def _models(
    measured: pd.DataFrame, value: str, level: float, pruned: bool
) -> dict[str, stats.RowNoise | None]:
    """setting -> the rows model of its cells on the measure seeds (the effects' model)."""
    setting_of = measured["setting"].astype(str)
    return {
        str(s): stats.row_noise(sub, value, key="candidate", level=level, pruned=pruned)
        for s, sub in measured.groupby(setting_of, sort=True)
    }


def _tuned_noise(
    measured: pd.DataFrame,
    value: str,
    models: dict[str, stats.RowNoise | None],
    others: pd.DataFrame,
    base: Any,
    pruned: bool,
) -> stats.PairNoises:
    """Each schedule's comparison at its best setting with uniform at its own (``base``: the
    best table's uniform row), on the rows model: within one setting the model's pair, across
    two :func:`tlmsearch.stats.across_pair` (each row in its setting's model, plus the
    seed-by-setting interaction of the two settings' cells)."""
    setting_of = measured["setting"].astype(str)
    done = measured[measured["state"].astype(str).str.upper() == "COMPLETE"]
    cells: dict[Any, dict[Any, float]] = {}
    for c, s, v in zip(done["candidate"], done["seed"], done[value], strict=True):
        if pd.notna(v) and pd.notna(s):
            cells.setdefault(c, {})[int(s)] = float(v)
    u, at_u = base["candidate"], str(base["setting"])
    uname = str(base["schedule"])
    noises, sources, shares = {}, {}, {}
    for r in others.itertuples():
        at = str(r.setting)
        if at == at_u:
            model = models.get(at)
            n = model.pair(r.candidate, u) if model is not None else None
            src = model.source(r.candidate, u) if model is not None else "pooled"
            src = uname if src == str(u) else r.schedule if src == str(r.candidate) else src
            share = model.share(r.candidate, u) if model is not None else math.nan
        else:
            parts = stats.noise_interaction(
                measured[setting_of.isin([at, at_u])], value, key="candidate", pruned=pruned
            )
            n, src, share = stats.across_pair(
                r.candidate, models.get(at), u, models.get(at_u), parts, cells
            )
            src = uname if src == str(u) else r.schedule if src == str(r.candidate) else src
        noises[r.schedule], sources[r.schedule], shares[r.schedule] = n, src, share
    return stats.PairNoises(noises, sources, shares)


def _shared_noise(at_shared: pd.DataFrame, model: stats.RowNoise | None) -> stats.PairNoises:
    """Every schedule's comparison with uniform at uniform's best setting: that setting's rows
    model, by schedule."""
    first = at_shared.drop_duplicates("candidate")
    base = first["is_baseline"].astype(bool)
    u, uname = first.loc[base, "candidate"], first.loc[base, "schedule"]
    noises, sources, shares = {}, {}, {}
    for cand, schedule in zip(first["candidate"], first["schedule"], strict=True):
        if model is None or not len(u) or cand == u.iloc[0]:
            noises[schedule] = None
            continue
        ref = u.iloc[0]
        noises[schedule] = model.pair(cand, ref)
        src = model.source(cand, ref)
        mine = schedule if src == str(cand) else src
        sources[schedule] = str(uname.iloc[0]) if src == str(ref) else mine
        shares[schedule] = model.share(cand, ref)
    return stats.PairNoises(noises, sources, shares)


def curve(trials: pd.DataFrame, value: str) -> pd.DataFrame:
    """One row per (schedule, setting): x (the first numeric setting's value, NaN if none),
    setting, mean and sd over the completed seeds, n. The figure's data (metric vs setting)."""
    s = stats.summarise(trials, value).set_index("candidate")
    first = trials.drop_duplicates("candidate")
    rows = []
    for r in first.itertuples():
        settings = _settings(getattr(r, IDENTITY))
        xs = [x for x in (_number(v) for _, v in sorted(settings.items())) if x is not None]
        row = s.loc[r.candidate]
        rows.append(
            {
                "schedule": r.schedule,
                "is_baseline": bool(r.is_baseline),
                "setting": r.setting,
                "x": xs[0] if xs else math.nan,
                "mean": float(row["mean"]),
                "sd": float(row["sd"]),
                "n": int(row["n"]),
            }
        )
    out = pd.DataFrame(
        rows, columns=["schedule", "is_baseline", "setting", "x", "mean", "sd", "n"]
    )
    return out.sort_values(["schedule", "x", "setting"], kind="stable").reset_index(drop=True)
