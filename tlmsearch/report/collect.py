"""Pure collect functions: the run dir's DataFrames in, the small tables each figure draws out.

Each figure of the report is split, as in Optuna's plots, into a collect function here (no
plotting, unit-tested on DataFrames) and a thin plotly function in :mod:`.figures`. Only finished
(COMPLETE) trials with a finite metric count as results; pruned, failed and running ones are
shown, faded or listed, but never win.

>>> import pandas as pd
>>> from tlmsearch.run_dir.tables import trials_frame
>>> t = trials_frame([
...     {"trial_id": "u", "params": {"shape": "uniform"}, "val_ppl": 30.0, "seed": 0},
...     {"trial_id": "c", "params": {"shape": "cosine", "r_start": 0.5, "r_end": 0.25},
...      "widths": [88, 72, 56, 40], "val_ppl": 29.0, "seed": 0},
... ])
>>> front = ratio_front(t, metric="val_ppl")  # x: what trained, not the requested 0.5
>>> front.front[["shape", "x", "r_start", "value"]].values.tolist(), front.baseline.mean
([['cosine', 1.375, 0.5, 29.0]], 30.0)

Rankings, means over seeds and paired deltas come from :mod:`tlmsearch.stats`: a candidate
pruned or failed on some seed is *censored*, shown as "n of k seeds" and never placed above a
fully measured one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from itertools import combinations
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tlmsearch import stats
from tlmsearch.config import METRICS, PartialStudy, StudyConfig
from tlmsearch.evidence import Evidence
from tlmsearch.run_dir.tables import metric_column
from tlmsearch.widths.candidate import IDENTITY
from tlmsearch.widths.profiles import LAYERED, QUANTITIES

LABELS = {
    "val_ppl": "val perplexity",
    "val_bpb": "val bits per byte",
    "val_loss": "val loss (nats/token)",
    "train_loss": "train loss",
    "tokens_per_s": "tokens/s",
    "mfu": "MFU",
    "params": "parameters",
    "non_embedding_params": "non-embedding parameters",
    "flops_per_token": "FLOPs/token",
    "wall_s": "wall time (s)",
    # The ratio fronts' axes: what trained (widths over their mean), not the requested params;
    # every profile is renormalised to mean 1, so cosine 0.5 -> 0.25 trains at ~1.31 -> 0.69.
    "realised_start": "realised first-layer ratio (d_ff[0] / mean d_ff)",
    "realised_taper": "realised taper strength ((d_ff[0] - d_ff[-1]) / mean d_ff)",
    "r_start": "requested r_start (schedule parameter, before renormalising)",
    "taper": "requested taper (r_start - r_end, before renormalising)",
}
# ratio_front's x option -> the trials column it plots
FRONT_X = {"r_start": "realised_start", "taper": "realised_taper"}


def label(metric: str) -> str:
    """Axis label of a metric or column."""
    return LABELS.get(metric, metric)


def sense_of(metric: str, objectives: Sequence[tuple[str, str]] = ()) -> str:
    """'minimize' or 'maximize': the study's direction for the metric, else its default."""
    for m, sense in objectives:
        if m == metric:
            return sense
    return METRICS.get(metric, "minimize")


def _values(trials: pd.DataFrame, metric: str) -> pd.Series:
    col = metric_column(metric)
    if col not in trials:
        return pd.Series(np.nan, index=trials.index, dtype="float64")
    return pd.to_numeric(trials[col], errors="coerce").astype("float64")


def parse_widths(text: Any) -> list[int]:
    try:
        return [int(w) for w in json.loads(text)] if text else []
    except (TypeError, ValueError):
        return []


def parse_multipliers(text: Any) -> list[float]:
    """A depth profile's JSON (``lr_profile_json``) as floats; [] for none or unreadable."""
    try:
        return [float(x) for x in json.loads(text)] if isinstance(text, str) and text else []
    except (TypeError, ValueError):
        return []


def hover_text(trials: pd.DataFrame) -> pd.Series:
    """One hover label per trial: id, number, seed, state, candidate, params, widths and (with
    a heads schedule) heads."""

    def one(row: pd.Series) -> str:
        num = "" if pd.isna(row["number"]) else f" #{row['number']}"
        seed = "" if pd.isna(row["seed"]) else f", seed {row['seed']}"
        lines = [f"trial {row['trial_id']}{num}{seed} ({row['state']})", row["candidate"]]
        if row[IDENTITY]:
            lines.append(f"params {row[IDENTITY]}")
        if row["widths_json"]:
            lines.append(f"widths {row['widths_json']}")
        if row.get("heads_shape"):  # a heads schedule: the heads differ between candidates
            lines.append(f"heads {row.get('heads_json') or row['heads_shape']}")
        if row["reason"]:
            lines.append(f"reason: {row['reason']}")
        return "<br>".join(str(x) for x in lines if x)

    if trials.empty:
        return pd.Series([], dtype=object)
    return trials.apply(one, axis=1).astype(object)


def finished(trials: pd.DataFrame, metric: str) -> pd.DataFrame:
    """COMPLETE trials whose metric is finite, with that metric in column ``value``."""
    out = trials.assign(value=_values(trials, metric))
    keep = (out["state"] == "COMPLETE") & np.isfinite(out["value"])
    return out[keep]


_INFO = ("shape", "r_start", "r_end", "realised_start", "realised_end", "realised_taper")


def trained(start: float, end: float) -> str:
    """What a candidate trained at: first and last width over the mean (empty when unknown).

    >>> trained(1.375, 0.625)
    'trained 1.38->0.625'
    """
    if not (np.isfinite(start) and np.isfinite(end)):
        return ""
    return f"trained {start:.3g}->{end:.3g}"


def ranked_candidates(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    seeds: Sequence[int] | None = None,
    *,
    ranking: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Every candidate (uniform included), best first, by :func:`tlmsearch.stats.rank`.

    Columns of ``stats.rank`` (tier, n_of_k, score on the ranked seeds, mean_delta and its
    interval, flag...) plus shape, the requested r_start / r_end, the realised ratios
    (realised_start, realised_end, realised_taper), trial_ids (its completed trials),
    the identity, widths_json, heads_json, heads_share and ``label``: the candidate, what it
    trained at and, for a censored or running one, its "n of k seeds". ``seeds``: the study's
    seeds (``search.seeds``;
    None: every seed any trial ran on). ``ranking``: the study's
    :attr:`Evidence.ranking <tlmsearch.evidence.Evidence.ranking>` of ``metric``, when the
    report has one (a metric the study does not judge is ranked here).
    """
    sense = sense or sense_of(metric)
    r = (
        ranking
        if ranking is not None
        else stats.rank(trials, metric_column(metric), sense, seeds=seeds)
    )
    layers = [e.column for e in LAYERED.values()]  # widths_json, heads_json, the profiles
    extra = [*_INFO, "trial_ids", IDENTITY, *layers, "heads_share", "label"]
    if r.empty:
        return r.assign(**{c: pd.Series(dtype=object) for c in extra})
    g = trials.groupby("candidate", sort=False)
    info = g[list(_INFO)].first()  # first non-missing: a candidate's trials share their widths
    for col in (IDENTITY, *layers):
        if col in trials:  # heads_json, the profiles: not in tables built before them
            info[col] = g[col].agg(lambda v: next((x for x in v if x), ""))
    if "heads_share" in trials:
        info["heads_share"] = g["heads_share"].first()
    out = r.join(info, on="candidate")
    done = finished(trials, metric)
    ids = done.groupby("candidate", sort=False)["trial_id"].agg(", ".join)
    out["trial_ids"] = [ids.get(c, "") for c in out["candidate"]]
    out["label"] = [
        " ".join(x for x in (c, f"[{trained(a, b)}]" if trained(a, b) else "") if x)
        + (f" ({flag})" if tier in (1, 2) else "")
        for c, a, b, tier, flag in zip(
            out["candidate"],
            out["realised_start"],
            out["realised_end"],
            out["tier"],
            out["flag"],
            strict=True,
        )
    ]
    return out


def _seeds_text(row: Any) -> str:
    """'mean of seed(s) 0, 1 (2 of 2 seeds completed)'."""
    seeds = ", ".join(str(x) for x in row.ranked_seeds)
    return f"mean of seed(s) {seeds} ({row.n_of_k} completed)"


# -------------------------------------------------------------------------------------------------
# 1. ratio-versus-perplexity fronts


class Band(NamedTuple):
    """The uniform baseline across seeds."""

    mean: float
    sd: float  # 0 with one seed
    lo: float
    hi: float
    n: int  # seeds completed
    k: int = 0  # seeds planned (pruned, failed, running or not run yet too)


class RatioFront(NamedTuple):
    metric: str
    x: str  # the plotted column: "realised_start" or "realised_taper"
    sense: str
    # every candidate with a completed seed, best first: shape, x, value (mean over its ranked
    # seeds), n (how many), k, n_of_k, tier, flag, the requested r_start / r_end, hover
    points: pd.DataFrame
    front: pd.DataFrame  # best-ranked candidate per (shape, x), sorted by shape then x
    baseline: Band | None
    unplaced: int = 0  # candidates with results but no realised ratio (no widths, no model)


def ratio_front(
    trials: pd.DataFrame,
    metric: str = "val_ppl",
    x: str = "r_start",
    sense: str | None = None,
    max_bins: int = 12,
    seeds: Sequence[int] | None = None,
    ranking: pd.DataFrame | None = None,
) -> RatioFront:
    """Per schedule shape, the best candidate at each realised start ratio (or taper), and uniform.

    ``x="r_start"`` plots the *realised* first-layer ratio d_ff[0] / mean d_ff and
    ``x="taper"`` the realised taper (d_ff[0] - d_ff[-1]) / mean d_ff: profiles are
    renormalised to mean 1, so the requested r_start is not what trained (it stays in the
    points' ``r_start`` column and hover). The best candidate at an x is the best-ranked by
    :func:`tlmsearch.stats.rank`: a candidate censored on some seed is shown with "n of k seeds"
    and never beats a fully measured one. A continuous space gives every candidate its own x:
    with more than ``max_bins`` distinct x in a shape, the front keeps the best candidate per
    bin of x (``max_bins`` equal bins).
    """
    if x not in FRONT_X:
        raise ValueError(f"x must be 'r_start' or 'taper', but got {x=}")
    col = FRONT_X[x]
    sense = sense or sense_of(metric)
    ranked = ranked_candidates(trials, metric, sense, seeds, ranking=ranking)
    done = finished(trials, metric)
    base = done[done["is_baseline"]]["value"]
    band = None
    if len(base):
        sd = float(base.std(ddof=1)) if len(base) > 1 else 0.0
        k = int(ranked.loc[ranked["is_baseline"], "k"].sum())
        band = Band(float(base.mean()), sd, float(base.min()), float(base.max()), len(base), k)
    cand = ranked[~ranked["is_baseline"].astype(bool) & (ranked["tier"] < 3)]
    xs = pd.to_numeric(cand[col], errors="coerce").astype("float64")
    placed = cand[np.isfinite(xs)]
    points = placed.assign(
        x=xs[np.isfinite(xs)],
        value=placed["score"],
        n=[len(s) for s in placed["ranked_seeds"]],
    ).reset_index(drop=True)
    if len(points):
        points["hover"] = [
            f"{r.candidate} (requested)<br>{trained(r.realised_start, r.realised_end)} "
            f"(first, last d_ff over mean d_ff)<br>{label(metric)} {r.value:.4g} "
            f"({_seeds_text(r)})"
            + (f"<br><b>{r.flag}</b>" if r.flag else "")
            + f"<br>trials {r.trial_ids}<br>params {getattr(r, IDENTITY)}"
            + f"<br>widths {r.widths_json}"
            for r in points.itertuples()
        ]
        key = points["x"]
        lo, hi = float(key.min()), float(key.max())
        if points.groupby("shape")["x"].nunique().max() > max_bins and hi > lo:
            key = np.minimum(((key - lo) / (hi - lo) * max_bins).astype(int), max_bins - 1)
        points["bin"] = key
        best = points.groupby(["shape", "bin"], sort=True)["rank"].idxmin()
        front = points.loc[best.values].sort_values(["shape", "x"]).reset_index(drop=True)
        points, front = points.drop(columns="bin"), front.drop(columns="bin")
    else:
        points = points.assign(hover=pd.Series(dtype=object))
        front = points.copy()
    return RatioFront(metric, col, sense, points, front, band, len(cand) - len(placed))


# -------------------------------------------------------------------------------------------------
# 2. Pareto fronts


def pareto_mask(values: np.ndarray, senses: Sequence[str]) -> np.ndarray:
    """True for rows no other row dominates (better or equal everywhere, better somewhere).

    >>> pareto_mask(np.array([[1.0, 1.0], [2.0, 2.0], [0.5, 3.0]]), ["minimize", "minimize"])
    array([ True, False,  True])
    """
    v = np.asarray(values, dtype=float).reshape(len(values), len(senses))
    sign = np.array([1.0 if s == "minimize" else -1.0 for s in senses])
    v = v * sign  # now everything is minimised
    le = (v[:, None, :] <= v[None, :, :]).all(axis=2)  # le[j, i]: j at least as good as i
    lt = (v[:, None, :] < v[None, :, :]).any(axis=2)
    dominated = (le & lt).any(axis=0)
    return ~dominated


class Pareto(NamedTuple):
    metrics: tuple[str, ...]
    senses: tuple[str, ...]
    # trial_id, candidate, state, one column per metric, feasible, on_front, hover; front rows
    # sorted along the first metric
    points: pd.DataFrame
    hidden: int  # trials without a finite value for every metric (not drawable)


def pareto_sets(objectives: Sequence[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    """Which objective sets to draw: every pair (and the triple where there are 3).

    With one objective, none: every candidate has the uniform model's parameters and FLOPs, so
    a front against throughput would rank tokens/s differences that are measurement noise.
    """
    objs = list(objectives)
    sets = [list(p) for p in combinations(objs, 2)]
    if len(objs) == 3:
        sets.append(objs)
    return sets


def pareto(trials: pd.DataFrame, objectives: Sequence[tuple[str, str]]) -> Pareto:
    """Each trial as a point in objective space; the front among feasible (COMPLETE) trials."""
    metrics = tuple(m for m, _ in objectives)
    senses = tuple(s for _, s in objectives)
    df = trials[["trial_id", "candidate", "state"]].copy()
    for m in metrics:
        df[m] = _values(trials, m)
    df["hover"] = hover_text(trials).values if len(trials) else []
    drawable = np.isfinite(df[list(metrics)].to_numpy(dtype=float)).all(axis=1)
    hidden = int((~drawable).sum())
    df = df[drawable].copy()
    df["feasible"] = df["state"] == "COMPLETE"
    df["on_front"] = False
    feas = df[df["feasible"]]
    if len(feas):
        mask = pareto_mask(feas[list(metrics)].to_numpy(dtype=float), senses)
        df.loc[feas.index[mask], "on_front"] = True
    df = df.sort_values(["on_front", metrics[0]], kind="stable").reset_index(drop=True)
    return Pareto(metrics, senses, df, hidden)


# -------------------------------------------------------------------------------------------------
# 3. width profiles


class Profiles(NamedTuple):
    metric: str
    # candidate, rank (1 = best), value, layer, width, lr (its LR profile's multiplier; NaN
    # without one), legend, hover
    profiles: pd.DataFrame
    uniform: list[int]  # the uniform baseline's widths (empty if unknown)


def width_profiles(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    k: int = 5,
    seeds: Sequence[int] | None = None,
    ranking: pd.DataFrame | None = None,
) -> Profiles:
    """d_ff per layer of the top-k candidates (by :func:`ranked_candidates`), and uniform's.

    ``legend`` names each profile with what it trained at, and "n of k seeds" when censored.
    """
    ranked = ranked_candidates(trials, metric, sense, seeds, ranking=ranking)
    cands = ranked[~ranked["is_baseline"].astype(bool) & (ranked["tier"] < 3)].head(k)
    rows = []
    for rank, c in enumerate(cands.itertuples(), start=1):
        legend = f"#{rank} {c.label}"
        hover = f"{legend}<br>{label(metric)} {c.score:.4g} ({_seeds_text(c)})"
        hover += f"<br>trials {c.trial_ids}"
        lrs = parse_multipliers(getattr(c, QUANTITIES["lr"].column, ""))
        for layer, w in enumerate(parse_widths(c.widths_json)):
            lr = lrs[layer] if layer < len(lrs) else math.nan
            text = f"<br>layer {layer}: {w}" + ("" if math.isnan(lr) else f", LR x{lr:.3g}")
            rows.append((c.candidate, rank, c.score, layer, w, lr, legend, hover + text))
    cols = ["candidate", "rank", "value", "layer", "width", "lr", "legend", "hover"]
    profiles = pd.DataFrame(rows, columns=cols)
    uniform: list[int] = []
    base = trials[trials["is_baseline"]]["widths_json"].map(parse_widths)
    base = [w for w in base if w]
    if base:
        uniform = base[0]
    else:  # every schedule keeps the uniform total, so any candidate gives it
        any_widths = [w for w in trials["widths_json"].map(parse_widths) if w]
        if any_widths:
            w = any_widths[0]
            uniform = [round(sum(w) / len(w))] * len(w)
    return Profiles(metric, profiles, uniform)


# -------------------------------------------------------------------------------------------------
# 4. learning curves


# Candidates whose curves get a colour and a legend entry of their own (the best-ranked ones);
# the rest share one grey trace, so a study of hundreds of trials stays a few traces.
CURVE_CANDIDATES = 7
OTHERS = "others"


class Curves(NamedTuple):
    metric: str
    # trial_id, candidate, state, tokens, value, hover, group (sorted by trial, tokens)
    lines: pd.DataFrame
    pruned_at: pd.DataFrame  # trial_id, group, tokens, value, hover: each pruned trial's last eval
    failed: pd.DataFrame  # trial_id, candidate, reason
    # the legend, in order: "uniform", then "#1 <label>", "#2 ..." (the ranking of the width
    # profiles), then unranked candidates, then OTHERS when more than ``k`` candidates ran
    groups: tuple[str, ...] = ()


def curve_groups(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    seeds: Sequence[int] | None = None,
    k: int = CURVE_CANDIDATES,
    ranking: pd.DataFrame | None = None,
) -> dict[str, str]:
    """Candidate -> its legend entry in the learning curves: uniform, the ``k`` best-ranked
    candidates numbered as in the width profiles (#1 best; "[n of k seeds]" when censored),
    candidates with no finished trial yet by name while slots remain, everyone else
    :data:`OTHERS`. Short, as the paired deltas' labels: the hover says what trained.

    >>> from tlmsearch.run_dir.tables import trials_frame
    >>> t = trials_frame([
    ...     {"trial_id": "u", "params": {"shape": "uniform"}, "val_bpb": 2.0, "seed": 0},
    ...     {"trial_id": "a", "params": {"shape": "cosine", "r_start": 1.5}, "val_bpb": 1.9,
    ...      "seed": 0, "widths": [96, 32]},
    ...     {"trial_id": "b", "params": {"shape": "linear", "r_start": 1.5}, "val_bpb": 2.1,
    ...      "seed": 0, "widths": [96, 32]},
    ... ])
    >>> list(curve_groups(t, k=1).values())
    ['uniform', '#1 cosine 1.5->0.5', 'others']
    """
    ranked = ranked_candidates(trials, metric, sense, seeds, ranking=ranking)
    groups: dict[str, str] = {}
    rank = 0
    for c in ranked.itertuples():
        if bool(c.is_baseline):
            groups[c.candidate] = "uniform"
        elif c.tier < 3 and rank < k:
            rank += 1
            censored = f" [{c.n_of_k}]" if c.tier > 0 else ""
            groups[c.candidate] = f"#{rank} {c.candidate}{censored}"
    shown = sum(g != "uniform" for g in groups.values())
    for cand, base in zip(trials["candidate"], trials["is_baseline"], strict=True):
        if cand in groups or pd.isna(cand):
            continue
        if bool(base):
            groups[cand] = "uniform"
        elif shown < k:  # running, or nothing finished: by name while slots remain
            groups[cand], shown = str(cand), shown + 1
        else:
            groups[cand] = OTHERS
    uniform = {c: g for c, g in groups.items() if g == "uniform"}
    return {**uniform, **groups}  # uniform first, the legend's reference


def learning_curves(
    trials: pd.DataFrame,
    curves: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    seeds: Sequence[int] | None = None,
    k: int = CURVE_CANDIDATES,
    ranking: pd.DataFrame | None = None,
) -> Curves:
    """Metric against tokens for every trial with evals, each in its candidate's legend group
    (:func:`curve_groups`); where pruned trials stopped; failures."""
    info = trials.set_index("trial_id")
    hover = pd.Series(hover_text(trials).values, index=trials["trial_id"].values, dtype=object)
    col = metric_column(metric)
    c = curves[["trial_id", "tokens"]].copy()
    c["value"] = pd.to_numeric(curves[col], errors="coerce") if col in curves else np.nan
    c = c[np.isfinite(c["value"].astype(float)) & c["tokens"].notna()]
    c["tokens"] = c["tokens"].astype("int64")
    c["state"] = c["trial_id"].map(info["state"]).fillna("RUNNING") if len(c) else []
    c["candidate"] = c["trial_id"].map(info["candidate"]) if len(c) else []
    group_of = curve_groups(trials, metric, sense, seeds, k, ranking) if len(trials) else {}
    c["group"] = [group_of.get(x, OTHERS) for x in c["candidate"]]
    c["hover"] = c["trial_id"].map(hover).fillna("") if len(c) else []
    c["hover"] = [
        f"{h or 'trial ' + t}<br>tokens {n:,}"
        for h, t, n in zip(c["hover"], c["trial_id"], c["tokens"], strict=True)
    ]
    cols = ["trial_id", "candidate", "state", "tokens", "value", "hover", "group"]
    lines = c[cols].sort_values(["trial_id", "tokens"], kind="stable").reset_index(drop=True)
    pruned_ids = set(trials.loc[trials["state"] == "PRUNED", "trial_id"])
    last = lines[lines["trial_id"].isin(pruned_ids)].groupby("trial_id").tail(1)
    last = last.assign(
        hover=[
            f"{h}<br>pruned at {n:,} tokens"
            for h, n in zip(last["hover"], last["tokens"], strict=True)
        ]
    )
    failed = trials.loc[trials["state"] == "FAIL", ["trial_id", "candidate", "reason"]]
    order = list(dict.fromkeys(group_of.values()))
    present = set(lines["group"])
    groups = tuple(g for g in [*order, OTHERS] if g in present)
    return Curves(
        metric,
        lines,
        last[["trial_id", "group", "tokens", "value", "hover"]].reset_index(drop=True),
        failed.reset_index(drop=True),
        tuple(dict.fromkeys(groups)),
    )


# -------------------------------------------------------------------------------------------------
# 6. paired deltas vs uniform


class Deltas(NamedTuple):
    metric: str
    sense: str
    per_seed: pd.DataFrame  # candidate, label, seed, delta, hover
    # candidate, label, mean, sd (own, NaN with 1 seed), n (paired seeds), half_width, lo, hi
    # (95% t interval), within_noise (not separated over the study's Holm family),
    # effect_noise, noise (model | unknown: the block-design noise of tlmsearch.stats.effects;
    # NaN interval and <NA> within_noise while it has no df), noise_sd, k, n_of_k, censored,
    # tier, flag, rank; best first (fully measured before censored)
    summary: pd.DataFrame


def evidence_of(
    trials: pd.DataFrame,
    metric: str,
    sense: str,
    config: StudyConfig | None = None,
    curves: pd.DataFrame | None = None,
) -> Evidence:
    """The study's :class:`tlmsearch.evidence.Evidence` of ``metric``: its race and ``stats``
    settings from ``config`` (the run's study), else its models' defaults. A report
    builds it once per objective (:func:`tlmsearch.report.html.build`) and hands it to every
    collect function that takes ``evidence``; called alone, each builds its own."""
    from tlmsearch.evidence import study_evidence

    study = config if config is not None else PartialStudy()
    return study_evidence(trials, study, metric, sense, curves=curves)


def paired_deltas(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    seeds: Sequence[int] | None = None,
    config: StudyConfig | None = None,
    evidence: Evidence | None = None,
) -> Deltas:
    """Each candidate's value minus uniform's on the same seed, with a 95% CI across seeds.

    A difference is *within noise* when the study's one decision (``evidence``, else
    :func:`evidence_of`: its race, or its family of comparisons with uniform) does not
    separate it; a candidate pruned or failed on some seed is censored, its ``label`` says
    "n of k seeds", and it is listed after the fully measured ones.
    """
    sense = sense or sense_of(metric)
    ev = evidence or evidence_of(trials, metric, sense, config)
    ranked = ranked_candidates(trials, metric, sense, seeds, ranking=ev.ranking)
    summary = ranked[~ranked["is_baseline"].astype(bool) & (ranked["n_paired"] > 0)]
    eff = ev.effects.set_index("candidate").reindex(summary["candidate"])
    summary = summary.assign(
        **{c: eff[c].to_numpy() for c in ("lo", "hi", "half_width", "effect_noise", "noise")},
        noise_sd=eff["noise_sd"].to_numpy(),
        within_noise=pd.array(~eff["separated"].astype("boolean"), dtype="boolean"),
    )
    summary = summary.assign(
        label=[
            c + (f" [{n_of_k}]" if tier > 0 else "")
            for c, n_of_k, tier in zip(
                summary["candidate"], summary["n_of_k"], summary["tier"], strict=True
            )
        ],
        mean=summary["mean_delta"],
        sd=summary["sd_delta"],
        n=summary["n_paired"],
    )
    cols = [
        "candidate",
        "label",
        "mean",
        "sd",
        "n",
        "half_width",
        "lo",
        "hi",
        "within_noise",
        "effect_noise",
        "noise",
        "noise_sd",
        "k",
        "n_of_k",
        "censored",
        "tier",
        "flag",
        "rank",
    ]
    summary = summary[cols].reset_index(drop=True)
    cells = stats.paired_deltas(trials, metric_column(metric))
    cells = cells[~cells["is_baseline"]]
    done = trials[trials["state"] == "COMPLETE"]
    hover = dict(
        zip(
            zip(done["candidate"], pd.to_numeric(done["seed"], errors="coerce"), strict=True),
            hover_text(done),
            strict=True,
        )
    )
    labels = dict(zip(summary["candidate"], summary["label"], strict=True))
    per_seed = pd.DataFrame(
        {
            "candidate": cells["candidate"].to_numpy(),
            "label": cells["candidate"].map(labels).to_numpy(),
            "seed": cells["seed"].to_numpy(),
            "delta": cells["delta"].to_numpy(),
            "hover": [
                hover.get((c, float(x)), "")
                for c, x in zip(cells["candidate"], cells["seed"], strict=True)
            ],
        }
    )
    return Deltas(metric, sense, per_seed, summary)
