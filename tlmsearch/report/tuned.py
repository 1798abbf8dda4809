"""The tuned comparison's figure and table data: the metric against a setting (train.lr), one
line per schedule, each schedule's best value marked, and its effect vs uniform at their own best
settings. Every number is the study's :class:`tlmsearch.evidence.Evidence` ``tuned``
(:mod:`tlmsearch.evidence.tuned`); this module only arranges it. Pure pandas (no plotting)."""

from __future__ import annotations

import math
from typing import NamedTuple

import pandas as pd

from tlmsearch.config import StudyConfig
from tlmsearch.evidence import Evidence
from tlmsearch.widths.candidate import IDENTITY, Candidate


class SettingSweep(NamedTuple):
    metric: str
    sense: str
    axis: str  # the x axis: the first numeric setting's field name, e.g. "lr"
    # schedule, is_baseline, setting, x, mean, sd, n, best (this schedule's chosen setting), hover
    lines: pd.DataFrame
    # one row per schedule: schedule, is_baseline, setting, mean, n, edge, fully_measured, then
    # (not uniform) mean_delta, lo, hi, separated, censored, censored_seeds vs uniform at its
    # own best setting; shared_delta, shared_lo, shared_hi, shared_separated, shared_censored:
    # vs uniform with both at uniform's best setting (Tuned.shared)
    table: pd.DataFrame
    selection: str  # same seeds | held-out seeds
    caveat: str  # "" when the best settings were chosen on held-out seeds


def setting_sweep(
    trials: pd.DataFrame,
    metric: str,
    sense: str,
    config: StudyConfig | None = None,
    evidence: Evidence | None = None,
) -> SettingSweep | None:
    """The sweep of a study with setting dimensions; None for a study without them.
    ``evidence``: the study's of ``metric`` (else built here from ``config``)."""
    from tlmsearch.report.collect import evidence_of

    if trials.empty or "setting" not in trials or not (trials["setting"] != "").any():
        return None
    tu = (evidence or evidence_of(trials, metric, sense, config)).tuned
    if tu is None:
        return None
    chosen = dict(zip(tu.best["schedule"], tu.best["setting"], strict=True))
    lines = tu.curve.copy()
    lines["best"] = [
        chosen.get(s) == x for s, x in zip(lines["schedule"], lines["setting"], strict=True)
    ]
    lines["hover"] = [
        f"{r.schedule} @ {r.setting}<br>{metric} {r.mean:.4g}"
        + (f" ± {r.sd:.2g} (sd, {r.n} seeds)" if math.isfinite(r.sd) else f" ({r.n} seed)")
        + ("<br>its best setting" if r.best else "")
        for r in lines.itertuples()
    ]
    params = trials.drop_duplicates("setting")[IDENTITY]
    axis = _axis(params)
    table = tu.best.drop(columns=["settings", "candidate"]).copy()
    eff = tu.effects.set_index("schedule")
    for col in ("mean_delta", "lo", "hi", "separated", "censored", "censored_seeds"):
        table[col] = [eff.at[s, col] if s in eff.index else pd.NA for s in table["schedule"]]
    shared = (tu.shared if tu.shared is not None else tu.effects.iloc[0:0]).set_index("schedule")
    for col in ("mean_delta", "lo", "hi", "separated", "censored"):
        table[f"shared_{col.removeprefix('mean_')}"] = [
            shared.at[s, col] if s in shared.index else pd.NA for s in table["schedule"]
        ]
    return SettingSweep(metric, sense, axis, lines, table, tu.selection, tu.caveat)


def _axis(params: pd.Series) -> str:
    """The field name of the first numeric setting (the x axis), e.g. ``lr``."""

    for text in params:
        for name, value in sorted(Candidate.from_identity(text).settings.items()):
            if isinstance(value, int | float) and not isinstance(value, bool):
                return name.partition(".")[2]
    return "setting"
