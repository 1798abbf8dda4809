"""Collect functions for "Effects in units of noise": what the study supports, which of the top
candidates can be told apart, and (racing studies) how the race went.

Pure functions of the run dir's tables and study.yaml (no Ray, no Optuna), unit-tested on
DataFrames; every number and decision comes from the study's one
:class:`tlmsearch.evidence.Evidence` (the block-design noise, the family's decisions, the race
as the driver derives it from the trials table, multiple comparisons with the best).

>>> from tlmsearch.run_dir.tables import trials_frame
>>> t = trials_frame([
...     {"trial_id": f"{s}{seed}", "seed": seed, "params": p, "val_bpb": v + 0.1 * seed + d}
...     for seed, d in enumerate([0.0, 0.002, -0.001])
...     for s, p, v in [("u", {"shape": "uniform"}, 2.0),
...                     ("c", {"shape": "cosine", "r_start": 1.5}, 1.98)]
... ])
>>> m = separation(t, "val_bpb")
>>> m.names
['cosine 1.5->0.5', 'uniform']
>>> m.cells[["n", "separated", "better"]].values.tolist()  # cosine - uniform, uniform - cosine
[[3, True, 1.0], [3, True, -1.0]]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

import pandas as pd

from tlmsearch import stats
from tlmsearch.config import PartialStudy, StudyConfig
from tlmsearch.constants import LEVEL
from tlmsearch.evidence import Evidence
from tlmsearch.evidence.conclusions import Conclusions, conclusions
from tlmsearch.report.collect import evidence_of, ranked_candidates, sense_of


class Effects(NamedTuple):
    metric: str
    sense: str
    # one row per non-baseline candidate, in rank order (stats.rank): candidate, rank, n_of_k,
    # tier, flag, then stats.effects' columns (n, seeds, n_better, mean_delta, noise, noise_sd,
    # noise_df, lo, hi, half_width, effect_noise, p, p_adj, separated, censored...), decided_by
    table: pd.DataFrame
    noise: stats.Noise | None  # the block-design noise of one paired delta (None: no df yet)
    conclusions: Conclusions
    how: str = ""  # how "separated" was decided, in words (Evidence.decision_words)
    snr: stats.SignalToNoise | None = None  # the study's signal-to-noise (Evidence.snr)
    # best.yaml's learning_rate (tlmsearch.config.summary.learning_rate): compared at one LR or
    # tuned, and what the parametrization does to each schedule's layers; None: study.yaml
    # unreadable
    learning_rate: dict[str, Any] | None = None
    per_setting: bool = False  # setting dimensions: each setting's effects on its own noise
    noise_why: str = ""  # why ``noise`` is None, in words (Evidence.noise_why)
    # the study's questions as contrasts, each with its word over one family
    # (Evidence.contrasts: stats.CONTRAST_COLUMNS) and that family's rule in words; None: none
    contrasts: pd.DataFrame | None = None
    contrasts_rule: str = ""


def effects(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    seeds: Sequence[int] | None = None,
    config: StudyConfig | None = None,
    curves: pd.DataFrame | None = None,
    evidence: Evidence | None = None,
) -> Effects:
    """Every candidate's paired effect vs uniform (mean, 95% interval, effect / noise, the one
    decision), best first, and the sentences of :func:`tlmsearch.evidence.conclusions.conclusions`;
    ``config``: the study (the run's) whose race and ``stats`` settings decide;
    ``curves``: the learning curves, for the signal-to-noise's checkpoint noise;
    ``evidence``: the study's, when the caller built it (else built here from the above).
    """
    sense = sense or sense_of(metric)
    ev = evidence or evidence_of(trials, metric, sense, config, curves)
    ranked = ranked_candidates(trials, metric, sense, seeds, ranking=ev.ranking)
    eff = ev.effects
    if eff.empty:
        table = pd.DataFrame(
            columns=[
                "candidate",
                "rank",
                "n_of_k",
                "tier",
                "flag",
                *stats.EFFECT_COLUMNS,
                "decided_by",
            ]
        )
        return Effects(
            metric,
            sense,
            table,
            None,
            Conclusions([], []),
            snr=ev.snr,
            learning_rate=learning_rate_of(trials, config),
            per_setting=_per_setting(trials),
        )
    info = ranked.set_index("candidate")[["rank", "n_of_k", "tier", "flag"]]
    table = eff.join(info, on="candidate")
    order = {c: i for i, c in enumerate(ranked["candidate"])}
    table = table.assign(_o=table["candidate"].map(order)).sort_values("_o", kind="stable")
    table = table.drop(columns="_o").reset_index(drop=True)
    table = table[
        ["candidate", "rank", "n_of_k", "tier", "flag", *stats.EFFECT_COLUMNS, "decided_by"]
    ]
    said = conclusions(trials, label=metric, evidence=ev)
    rule = stats.contrasts_rule(ev.contrasts, ev.level) if ev.contrasts is not None else ""
    return Effects(
        metric,
        sense,
        table,
        ev.noise,
        said,
        ev.decision_words(),
        ev.snr,
        learning_rate_of(trials, config),
        _per_setting(trials),
        ev.noise_why,
        ev.contrasts,
        rule,
    )


def _per_setting(trials: pd.DataFrame) -> bool:
    """Whether the study has setting values, each judged on its own noise."""
    return stats.setting_column(trials) is not None


def learning_rate_of(trials: pd.DataFrame, config: StudyConfig | None) -> dict | None:
    """:func:`tlmsearch.config.summary.learning_rate` of a run's study; None without a whole one (a
    hand-edited study.yaml: :class:`~tlmsearch.config.PartialStudy`)."""
    from tlmsearch.config.summary import learning_rate

    if config is None or isinstance(config, PartialStudy):
        return None
    try:
        return learning_rate(trials, config)
    except (TypeError, ValueError, KeyError):  # a trial's params this study cannot plan
        return None


class Separation(NamedTuple):
    metric: str
    sense: str
    names: list[str]  # rows and columns, in order: the top candidates, then uniform
    # stats.pairwise rows (a - b on common seeds; separated: Holm over the matrix's pairs) plus
    # ``better``: 1 when a is separated and better, -1 separated and worse, 0 not separated,
    # NaN without a noise estimate or a common seed; ``text`` (the cell) and ``hover``
    cells: pd.DataFrame


def separation(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    seeds: Sequence[int] | None = None,
    k: int = 5,
    config: StudyConfig | None = None,
    evidence: Evidence | None = None,
) -> Separation:
    """Can these be told apart? The top ``k`` candidates of the study's ranking, and uniform,
    compared pairwise on their common seeds (:meth:`tlmsearch.evidence.Evidence.pairs`: its
    noise, level and family)."""
    sense = sense or sense_of(metric)
    ev = evidence or evidence_of(trials, metric, sense, config)
    ranked = ranked_candidates(trials, metric, sense, seeds, ranking=ev.ranking)
    measured = ranked[ranked["tier"] < 3]
    names = list(measured.loc[~measured["is_baseline"].astype(bool), "candidate"].head(k))
    names += list(measured.loc[measured["is_baseline"].astype(bool), "candidate"])
    empty = pd.DataFrame(columns=[*stats.PAIR_COLUMNS, "better", "text", "hover"])
    if len(names) < 2:
        return Separation(metric, sense, names, empty)
    # the block-design noise (with settings, the widest: Evidence.pair_noise), the family
    cells = ev.pairs(trials, names)
    cells["family"] = ev.family
    sign = 1.0 if sense == "minimize" else -1.0
    better = [
        math.nan if pd.isna(sep) else (0.0 if not sep else (1.0 if sign * m < 0 else -1.0))
        for sep, m in zip(cells["separated"], cells["mean"], strict=True)
    ]
    cells = cells.assign(
        better=pd.Series(better, dtype="float64"),
        text=[_cell_text(r) for r in cells.itertuples()],
        hover=[_cell_hover(r, metric, sense, ev.level) for r in cells.itertuples()],
    )
    return Separation(metric, sense, names, cells)


def _cell_text(r: Any) -> str:
    if r.n == 0:
        return "no common seed"
    if r.noise == stats.UNKNOWN:
        return f"{r.mean:+.3g}<br>1 seed, noise ?"
    mark = "<b>" if r.separated else ""
    end = "</b>" if r.separated else ""
    return f"{mark}{r.mean:+.3g} ± {r.half_width:.2g}{end}<br>{r.n} seed{'s' * (r.n != 1)}"


def _cell_hover(r: Any, metric: str, sense: str, level: float = LEVEL) -> str:
    head = f"{r.a}<br>minus {r.b}"
    if r.n == 0:
        return f"{head}<br>no seed both completed: not compared"
    seeds = ", ".join(str(s) for s in r.seeds)
    lines = [head, f"{metric} difference {r.mean:+.4g} on seed(s) {seeds}"]
    if r.noise == stats.UNKNOWN:
        lines.append("noise unknown: no residual df from the rows that measure it yet")
    else:
        lines.append(
            f"{level:.0%} CI {r.lo:+.4g} .. {r.hi:+.4g} (per pair; the block-design noise, "
            f"sd {r.noise_sd:.2g} over {r.noise_df} df)"
        )
        if math.isfinite(r.effect_noise):
            lines.append(f"{abs(r.effect_noise):.1f} noise units")
        verdict = "separated" if r.separated else "not separated"
        lines.append(f"{verdict}: adjusted p {r.p_adj:.2g} ({r.family} over the matrix's pairs)")
    better = "lower" if sense == "minimize" else "higher"
    lines.append(f"row better on {r.n_better}/{r.n} seeds ({better} is better)")
    return "<br>".join(lines)


class Race(NamedTuple):
    settings: str  # "up to 3 of seeds [0, 1, 2], 95% confidence, against uniform"
    # one row per candidate: candidate, status, n_seeds, seeds, mean_delta, half_width, reason
    lanes: pd.DataFrame
    counts: dict[str, int]  # status -> candidates
    uniform_seeds: list[int]  # the seeds the baseline completed
    decided: bool  # no candidate still racing
    note: str  # why there is no race table ("" when there is one)


def race(
    trials: pd.DataFrame,
    config: StudyConfig,
    metric: str | None = None,
    sense: str | None = None,
    evidence: Evidence | None = None,
) -> Race | None:
    """How a racing study's race stands, from the trials table and study.yaml alone.

    None for a study without ``search.racing``. The decisions are the study's
    :class:`~tlmsearch.evidence.Evidence` ``lanes`` (``evidence``, else built here): the race
    on the stored trials, as the driver made them (without the queue, which lives in the
    Optuna storage: a seed "next" may already be queued).
    """
    from tlmsearch.evidence.racing import race_settings
    from tlmsearch.metrics import objectives_of

    racing = race_settings(config)
    if racing is None:
        return None
    seeds, max_seeds = racing["seeds"], racing["max_seeds"]
    confidence, against = racing["confidence"], racing["against"]
    if metric is None or sense is None:
        metric, sense = objectives_of(config)[0]
    settings = (
        f"up to {max_seeds} of seeds {seeds}, {confidence:.0%} confidence, against {against}"
        + (f", prior sd {racing['prior_sd']}" if racing.get("prior_sd") else "")
        + (f", {racing['parallel_seeds']} seeds at once" if racing["parallel_seeds"] > 1 else "")
    )
    cols = ["candidate", "status", "n_seeds", "seeds", "mean_delta", "half_width", "reason"]
    empty = pd.DataFrame(columns=cols)
    if trials.empty:
        return Race(settings, empty, {}, [], False, "no trial yet")
    base = trials[trials["is_baseline"].astype(bool) & (trials["state"] == "COMPLETE")]
    uniform_seeds = sorted({int(s) for s in base["seed"].dropna()})
    ev = evidence or evidence_of(trials, metric, sense, config)
    lanes = ev.lanes
    if lanes is None:  # another metric, or a race a hand-edited study cannot run: say why
        note = ev.note or f"the race runs on the first objective, not {metric}"
        return Race(settings, empty, {}, uniform_seeds, False, note)
    rows = [
        (ln.candidate, ln.status, len(ln.seeds), ln.seeds, ln.mean_delta, ln.half_width, ln.reason)
        for ln in lanes
    ]
    table = pd.DataFrame(rows, columns=cols)
    sign = 1.0 if sense == "minimize" else -1.0  # best mean delta first, undecided last
    table = table.assign(_k=sign * table["mean_delta"].astype("float64"))
    table = table.sort_values("_k", kind="stable", na_position="last").drop(columns="_k")
    table = table.reset_index(drop=True)
    counts = {str(k): int(v) for k, v in table["status"].value_counts().sort_index().items()}
    decided = bool(len(table)) and not (table["status"] == "racing").any()
    return Race(settings, table, counts, uniform_seeds, decided, "")


class Interaction(NamedTuple):
    """Each schedule's effect vs uniform against a setting (the interaction plot)."""

    metric: str
    axis: str  # the setting dimension on x (train.lr)
    # one row per (line, setting): line (its name), kind (schedule | family), group (the
    # schedule or family, its color), other (the other dimensions' values, "" without), x,
    # estimate, lo, hi (the interval its word was decided at; NaN for a family's line),
    # word, hover
    lines: pd.DataFrame
    margin: float | None  # the equivalence margin d (None: none)
    rule: str  # the contrasts' family rule, in words


def _setting_values(trials: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Each setting label's settings ({"train.lr": 0.003}), read from the trials' params."""
    from tlmsearch.widths.candidate import IDENTITY, Candidate

    out: dict[str, dict[str, Any]] = {}
    if "setting" not in trials or IDENTITY not in trials:
        return out
    for label, p in zip(trials["setting"], trials[IDENTITY], strict=True):
        if isinstance(label, str) and label and label not in out and isinstance(p, str) and p:
            try:
                out[label] = Candidate.from_identity(p).settings
            except (TypeError, ValueError):
                continue
    return out


def _axis(values: dict[str, dict[str, Any]]) -> tuple[str, list[str]] | None:
    """(the x dimension, the others): the numeric dimension with the most values, else the one
    with the most values; None without a dimension of 2+ values."""
    dims: dict[str, set[str]] = {}
    for v in values.values():
        for d, x in v.items():
            dims.setdefault(d, set()).add(str(x))
    many = [d for d, xs in sorted(dims.items()) if len(xs) > 1]
    if not many:
        return None

    def numeric(d: str) -> bool:
        try:
            [float(x) for x in dims[d]]
        except ValueError:
            return False
        return True

    x = max(many, key=lambda d: (numeric(d), len(dims[d])))
    return x, [d for d in many if d != x]


def interaction(trials: pd.DataFrame, e: Effects) -> Interaction | None:
    """Every schedule's per-setting contrast against the setting dimension on x (the contrasts'
    estimates and the intervals their words were decided at, nothing re-derived), and each
    schedule family's line (early-heavy, late-heavy: the mean of its schedules' effects at each
    setting); None without settings or per-setting contrasts."""
    from tlmsearch.stats.questions import EARLY, FAMILY_KIND, LATE, SETTING

    c = e.contrasts
    if c is None or "at" not in c or not (c["kind"] == SETTING).any():
        return None
    values = _setting_values(trials)
    got = _axis(values)
    if got is None:
        return None
    axis, others = got
    recs = []
    for _, r in c[c["kind"] == SETTING].iterrows():
        at = values.get(r["at"]) if isinstance(r["at"], str) else None
        if at is None or axis not in at or len(r["members"]) != 1:
            continue
        other = ", ".join(f"{d.partition('.')[2] or d}={at.get(d)}" for d in others)
        recs.append(
            {
                "group": r["members"][0],
                "kind": "schedule",
                "other": other,
                "x": at[axis],
                "estimate": r["estimate"],
                "lo": r["lo"],
                "hi": r["hi"],
                "word": r["word"],
                "ci_level": r["ci_level"],
            }
        )
    lines = pd.DataFrame(recs)
    if lines.empty:
        return None
    fams = c[c["kind"] == FAMILY_KIND]
    for fam in (EARLY, LATE):
        row = fams[fams["name"].str.startswith(fam)]
        if row.empty:
            continue
        members = set(row["members"].iloc[0])
        sub = lines[(lines["kind"] == "schedule") & lines["group"].isin(members)]
        for (other, x), g in sub.groupby(["other", "x"], sort=False):
            recs.append(
                {
                    "group": fam,
                    "kind": "family",
                    "other": other,
                    "x": x,
                    "estimate": float(g["estimate"].mean()),
                    "lo": math.nan,
                    "hi": math.nan,
                    "word": "",
                    "ci_level": math.nan,
                }
            )
    lines = pd.DataFrame(recs)
    lines["line"] = [
        g if not o else f"{g} ({o})" for g, o in zip(lines["group"], lines["other"], strict=True)
    ]
    lines["hover"] = [_interaction_hover(r, e.metric, axis) for r in lines.itertuples()]
    try:
        lines["x"] = lines["x"].astype(float)
    except (TypeError, ValueError):
        lines["x"] = lines["x"].astype(str)
    lines = lines.sort_values(["kind", "line", "x"], ascending=[False, True, True], kind="stable")
    margin = float(c["margin"].iloc[0]) if math.isfinite(float(c["margin"].iloc[0])) else None
    return Interaction(e.metric, axis, lines.reset_index(drop=True), margin, e.contrasts_rule)


def _interaction_hover(r: Any, metric: str, axis: str) -> str:
    head = f"{r.line}<br>{axis} = {r.x}<br>{metric} vs uniform {r.estimate:+.4f}"
    if r.kind == "family":
        return head + "<br>the mean of its schedules' effects (no interval: not a contrast)"
    return head + f"<br>{r.ci_level:.2%} interval [{r.lo:+.4f}, {r.hi:+.4f}]: {r.word}"
