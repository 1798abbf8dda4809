"""Pure collect functions: the run dir's DataFrames in, the small tables each figure draws out.

Each figure of the report is split, as in Optuna's plots, into a collect function here (no
plotting, unit-tested on DataFrames) and a thin plotly function in :mod:`.figures`. Only finished
(COMPLETE) trials with a finite metric count as results; pruned, failed and running ones are
shown, faded or listed, but never win.

>>> import pandas as pd
>>> from tlmsearch.results import trials_frame
>>> t = trials_frame([
...     {"trial_id": "u", "params": {"shape": "uniform"}, "val_ppl": 30.0, "seed": 0},
...     {"trial_id": "c", "params": {"shape": "cosine", "r_start": 1.5}, "val_ppl": 29.0},
... ])
>>> front = ratio_front(t, metric="val_ppl")
>>> front.front[["shape", "x", "value"]].values.tolist(), front.baseline.mean
([['cosine', 1.5, 29.0]], 30.0)
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from tlmsearch.config import METRICS
from tlmsearch.results import add_deltas, metric_column

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
    "r_start": "start ratio r_start (first layer d_ff / uniform)",
    "taper": "taper strength (r_start - r_end)",
}
# Two-sided 95% Student t quantiles for 1..30 degrees of freedom (no scipy dependency).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
         2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
         2.060, 2.056, 2.052, 2.048, 2.045, 2.042)  # fmt: skip


def label(metric: str) -> str:
    """Axis label of a metric or column."""
    return LABELS.get(metric, metric)


def sense_of(metric: str, objectives: Sequence[tuple[str, str]] = ()) -> str:
    """'minimize' or 'maximize': the study's direction for the metric, else its default."""
    for m, sense in objectives:
        if m == metric:
            return sense
    return METRICS.get(metric, "minimize")


def t975(df: int) -> float:
    """Two-sided 95% t quantile (1.96 beyond 30 degrees of freedom)."""
    return _T975[df - 1] if 1 <= df <= len(_T975) else 1.96


def _values(trials: pd.DataFrame, metric: str) -> pd.Series:
    col = metric_column(metric)
    if col not in trials:
        return pd.Series(np.nan, index=trials.index, dtype="float64")
    return pd.to_numeric(trials[col], errors="coerce").astype("float64")


def _widths(text: Any) -> list[int]:
    try:
        return [int(w) for w in json.loads(text)] if text else []
    except (TypeError, ValueError):
        return []


def hover_text(trials: pd.DataFrame) -> pd.Series:
    """One hover label per trial: id, number, seed, state, candidate, params and widths."""

    def one(row: pd.Series) -> str:
        num = "" if pd.isna(row["number"]) else f" #{row['number']}"
        seed = "" if pd.isna(row["seed"]) else f", seed {row['seed']}"
        lines = [f"trial {row['trial_id']}{num}{seed} ({row['state']})", row["candidate"]]
        if row["params_json"]:
            lines.append(f"params {row['params_json']}")
        if row["widths_json"]:
            lines.append(f"widths {row['widths_json']}")
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


def _by_candidate(done: pd.DataFrame) -> pd.DataFrame:
    """Mean over seeds per candidate: candidate, shape, value, sd, n, trial_ids, widths_json."""
    if done.empty:
        cols = ["candidate", "shape", "value", "sd", "n", "trial_ids", "widths_json"]
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    g = done.groupby("candidate", sort=False)
    out = pd.DataFrame(
        {
            "shape": g["shape"].first(),
            "value": g["value"].mean(),
            "sd": g["value"].std(ddof=1),
            "n": g["value"].size(),
            "trial_ids": g["trial_id"].agg(lambda s: ", ".join(s)),
            "widths_json": g["widths_json"].first(),
            "params_json": g["params_json"].first(),
        }
    )
    return out.reset_index()


def _best(values: pd.Series, sense: str) -> Any:
    return values.idxmax() if sense == "maximize" else values.idxmin()


# -------------------------------------------------------------------------------------------------
# 1. ratio-versus-perplexity fronts


class Band(NamedTuple):
    """The uniform baseline across seeds."""

    mean: float
    sd: float  # 0 with one seed
    lo: float
    hi: float
    n: int


class RatioFront(NamedTuple):
    metric: str
    x: str  # "r_start" or "taper"
    sense: str
    points: pd.DataFrame  # every finished candidate (mean over seeds): shape, x, value, n, hover
    front: pd.DataFrame  # best candidate per (shape, x), sorted: shape, x, value, candidate, hover
    baseline: Band | None


def ratio_front(
    trials: pd.DataFrame,
    metric: str = "val_ppl",
    x: str = "r_start",
    sense: str | None = None,
    max_bins: int = 12,
) -> RatioFront:
    """Per schedule shape, the best value at each start ratio (or taper strength), and uniform.

    Values are means over seeds; blocks / custom shapes use the realised first-layer ratio.
    A continuous space gives every candidate its own x: with more than ``max_bins`` distinct x
    in a shape, the front keeps the best candidate per bin of x (``max_bins`` equal bins).
    """
    if x not in ("r_start", "taper"):
        raise ValueError(f"x must be 'r_start' or 'taper', but got {x=}")
    sense = sense or sense_of(metric)
    done = finished(trials, metric)
    if x == "r_start":
        xs = done["r_start"].where(np.isfinite(done["r_start"]), done["realised_start"])
    else:
        xs = done["taper"]
    done = done.assign(x=xs.astype("float64"))
    base = done[done["is_baseline"]]["value"]
    band = None
    if len(base):
        sd = float(base.std(ddof=1)) if len(base) > 1 else 0.0
        band = Band(float(base.mean()), sd, float(base.min()), float(base.max()), len(base))
    cand = done[~done["is_baseline"] & np.isfinite(done["x"])]
    points = _by_candidate(cand)
    if len(points):
        points["x"] = cand.groupby("candidate", sort=False)["x"].first().values
        points["hover"] = [
            f"{r.candidate}<br>{label(metric)} {r.value:.4g} (mean of {r.n} seed(s))"
            f"<br>trials {r.trial_ids}<br>params {r.params_json}<br>widths {r.widths_json}"
            for r in points.itertuples()
        ]
        key = points["x"]
        lo, hi = float(key.min()), float(key.max())
        if points.groupby("shape")["x"].nunique().max() > max_bins and hi > lo:
            key = np.minimum(((key - lo) / (hi - lo) * max_bins).astype(int), max_bins - 1)
        points["bin"] = key
        best = points.groupby(["shape", "bin"], sort=True)["value"].agg(lambda s: _best(s, sense))
        front = points.loc[best.values].sort_values(["shape", "x"]).reset_index(drop=True)
        points, front = points.drop(columns="bin"), front.drop(columns="bin")
    else:
        points = points.assign(x=pd.Series(dtype="float64"), hover=pd.Series(dtype=object))
        front = points.copy()
    return RatioFront(metric, x, sense, points, front, band)


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

    With one objective, pair it with throughput, the usual cost of a width schedule.
    """
    objs = list(objectives)
    if len(objs) == 1:
        other = ("tokens_per_s", "maximize")
        if objs[0][0] == "tokens_per_s":
            other = ("val_bpb", "minimize")
        return [[objs[0], other]]
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
    profiles: pd.DataFrame  # candidate, rank (1 = best), value, layer, width, hover
    uniform: list[int]  # the uniform baseline's widths (empty if unknown)


def width_profiles(
    trials: pd.DataFrame, metric: str = "val_bpb", sense: str | None = None, k: int = 5
) -> Profiles:
    """d_ff per layer of the top-k candidates (mean over seeds), and uniform's."""
    sense = sense or sense_of(metric)
    done = finished(trials, metric)
    cands = _by_candidate(done[~done["is_baseline"]])
    cands = cands.sort_values("value", ascending=sense == "minimize").head(k)
    rows = []
    for rank, c in enumerate(cands.itertuples(), start=1):
        for layer, w in enumerate(_widths(c.widths_json)):
            hover = (
                f"#{rank} {c.candidate}<br>{label(metric)} {c.value:.4g}<br>trials {c.trial_ids}"
            )
            rows.append((c.candidate, rank, c.value, layer, w, hover + f"<br>layer {layer}: {w}"))
    cols = ["candidate", "rank", "value", "layer", "width", "hover"]
    profiles = pd.DataFrame(rows, columns=cols)
    uniform: list[int] = []
    base = trials[trials["is_baseline"]]["widths_json"].map(_widths)
    base = [w for w in base if w]
    if base:
        uniform = base[0]
    else:  # every schedule keeps the uniform total, so any candidate gives it
        any_widths = [w for w in trials["widths_json"].map(_widths) if w]
        if any_widths:
            w = any_widths[0]
            uniform = [round(sum(w) / len(w))] * len(w)
    return Profiles(metric, profiles, uniform)


# -------------------------------------------------------------------------------------------------
# 4. learning curves


class Curves(NamedTuple):
    metric: str
    lines: pd.DataFrame  # trial_id, state, tokens, value, hover (sorted by trial, tokens)
    pruned_at: pd.DataFrame  # trial_id, tokens, value, hover: each pruned trial's last eval
    failed: pd.DataFrame  # trial_id, candidate, reason


def learning_curves(trials: pd.DataFrame, curves: pd.DataFrame, metric: str = "val_bpb") -> Curves:
    """Metric against tokens for every trial with evals; where pruned trials stopped; failures."""
    info = trials.set_index("trial_id")
    hover = pd.Series(hover_text(trials).values, index=trials["trial_id"].values, dtype=object)
    col = metric_column(metric)
    c = curves[["trial_id", "tokens"]].copy()
    c["value"] = pd.to_numeric(curves[col], errors="coerce") if col in curves else np.nan
    c = c[np.isfinite(c["value"].astype(float)) & c["tokens"].notna()]
    c["tokens"] = c["tokens"].astype("int64")
    c["state"] = c["trial_id"].map(info["state"]).fillna("RUNNING") if len(c) else []
    c["hover"] = c["trial_id"].map(hover).fillna("") if len(c) else []
    c["hover"] = [f"{h or 'trial ' + t}<br>tokens {n:,}" for h, t, n in
                  zip(c["hover"], c["trial_id"], c["tokens"], strict=True)]  # fmt: skip
    lines = c.sort_values(["trial_id", "tokens"], kind="stable").reset_index(drop=True)
    pruned_ids = set(trials.loc[trials["state"] == "PRUNED", "trial_id"])
    last = lines[lines["trial_id"].isin(pruned_ids)].groupby("trial_id").tail(1)
    last = last.assign(
        hover=[
            f"{h}<br>pruned at {n:,} tokens"
            for h, n in zip(last["hover"], last["tokens"], strict=True)
        ]
    )
    failed = trials.loc[trials["state"] == "FAIL", ["trial_id", "candidate", "reason"]]
    return Curves(
        metric,
        lines,
        last[["trial_id", "tokens", "value", "hover"]].reset_index(drop=True),
        failed.reset_index(drop=True),
    )


# -------------------------------------------------------------------------------------------------
# 5. parallel coordinates and parameter importances


def _params_table(trials: pd.DataFrame) -> pd.DataFrame:
    rows = [json.loads(p) if p else {} for p in trials["params_json"]]
    return pd.DataFrame(rows, index=trials.index)


class Parallel(NamedTuple):
    metric: str
    # one column per searched parameter (categoricals as codes) + the metric as "value"
    table: pd.DataFrame
    categories: dict[str, list[str]]  # parameter -> labels of codes 0..n-1


def parallel_coords(
    trials: pd.DataFrame, metric: str = "val_bpb", params: Sequence[str] | None = None
) -> Parallel:
    """Search parameters of finished trials, categoricals encoded, coloured by the metric.

    ``params``: the study's dimensions (default: every key seen in ``params_json`` that varies).
    """
    done = finished(trials, metric)
    done = done[~done["is_baseline"]]  # uniform lies outside the searched space
    table = _params_table(done)
    names = list(params) if params is not None else list(table.columns)
    names = [n for n in names if n in table and table[n].nunique(dropna=False) > 1]
    out = pd.DataFrame(index=done.index)
    cats: dict[str, list[str]] = {}
    for name in names:
        col = table[name]
        num = pd.to_numeric(col, errors="coerce")
        if num.notna().all():
            out[name] = num.astype(float)
        else:  # categorical or conditional: codes in order of first appearance
            text = col.map(lambda v: "-" if _missing(v) else str(v))
            labels = sorted(set(text))
            cats[name] = labels
            out[name] = text.map({lab: i for i, lab in enumerate(labels)}).astype(float)
    out["value"] = done["value"]
    return Parallel(metric, out.reset_index(drop=True), cats)


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


class Importances(NamedTuple):
    metric: str
    values: pd.DataFrame  # param, importance (sums to 1), most important first
    note: str  # why there are none, or which evaluator


def _distributions(params: pd.DataFrame, space: Mapping[str, Any] | None) -> dict[str, Any]:
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    dims = (space or {}).get("dimensions") or {}
    out: dict[str, Any] = {}
    for name in params.columns:
        seen = [v for v in params[name] if not _missing(v)]
        dim = dims.get(name) or {}
        kind = dim.get("type")
        if kind == "fixed" or len({json.dumps(v) for v in seen}) < 2:
            continue  # a constant explains nothing
        if kind == "categorical" or any(isinstance(v, (str, bool)) for v in seen):
            # Values are passed as strings below, so the choices must be strings too
            # (blocks.yaml's boundaries are numeric categorical choices).
            choices = list(
                dict.fromkeys(
                    str(c) for c in (dim.get("choices") or sorted({str(v) for v in seen}))
                )
            )
            out[name] = CategoricalDistribution(choices)
        elif kind == "int":
            out[name] = IntDistribution(
                int(dim["low"]), int(dim["high"]), step=dim.get("step") or 1
            )
        else:
            lo, hi = float(min(seen)), float(max(seen))
            if kind == "float":
                lo, hi = min(lo, float(dim["low"])), max(hi, float(dim["high"]))
            out[name] = FloatDistribution(lo, hi, log=bool(dim.get("log")) and lo > 0)
    return out


def param_importances(
    trials: pd.DataFrame,
    metric: str = "val_bpb",
    sense: str | None = None,
    space: Mapping[str, Any] | None = None,
) -> Importances:
    """Optuna's fANOVA importances, from an in-memory study rebuilt from the trials table.

    So the report needs only the run dir (not the Optuna storage). Empty, with a note, when
    fewer than 3 finished trials or no parameter varies.
    """
    empty = pd.DataFrame({"param": pd.Series(dtype=object), "importance": pd.Series(dtype=float)})
    done = finished(trials, metric)
    done = done[~done["is_baseline"]]  # the baseline lies outside the searched space
    if len(done) < 3:
        return Importances(metric, empty, f"needs 3 or more finished trials (has {len(done)})")
    params = _params_table(done)
    dists = _distributions(params, space)
    if not dists:
        return Importances(metric, empty, "no search parameter varies across finished trials")
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction=sense or sense_of(metric))
        for (_, p), v in zip(params.iterrows(), done["value"], strict=True):
            kept = {}
            for name, dist in dists.items():
                val = p.get(name)
                if _missing(val):
                    continue
                val = (
                    str(val)
                    if isinstance(dist, optuna.distributions.CategoricalDistribution)
                    else val
                )
                if dist._contains(dist.to_internal_repr(val)):
                    kept[name] = val
            used = {n: dists[n] for n in kept}
            study.add_trial(optuna.trial.create_trial(params=kept, distributions=used, value=v))
        imp = optuna.importance.get_param_importances(study)
    except Exception as err:  # importance needs variety: report why there is none
        return Importances(metric, empty, f"not computable: {type(err).__name__}: {err}")
    values = pd.DataFrame({"param": list(imp), "importance": [float(v) for v in imp.values()]})
    return Importances(metric, values, "Optuna fANOVA importance (arXiv 1404.1146)")


# -------------------------------------------------------------------------------------------------
# 6. paired deltas vs uniform


class Deltas(NamedTuple):
    metric: str
    sense: str
    per_seed: pd.DataFrame  # candidate, seed, delta, hover
    # candidate, mean, sd, n, half_width (95% CI of the mean; NaN with 1 seed),
    # within_noise (True/False; <NA> with one seed: noise unknown); best first
    summary: pd.DataFrame


def paired_deltas(
    trials: pd.DataFrame, metric: str = "val_bpb", sense: str | None = None
) -> Deltas:
    """Each candidate's value minus uniform's on the same seed, with a 95% CI across seeds.

    A difference is *within noise* when the t-interval of the mean paired delta contains 0.
    """
    sense = sense or sense_of(metric)
    withd = add_deltas(trials, [metric])
    withd = withd.assign(delta=withd[f"delta_{metric}"], hover=hover_text(withd).values)
    done = withd[
        (withd["state"] == "COMPLETE") & ~withd["is_baseline"] & np.isfinite(withd["delta"])
    ]
    per_seed = done[["candidate", "seed", "delta", "hover"]].reset_index(drop=True)
    rows = []
    for cand, d in per_seed.groupby("candidate", sort=False)["delta"]:
        n = len(d)
        mean = float(d.mean())
        sd = float(d.std(ddof=1)) if n > 1 else math.nan
        half = t975(n - 1) * sd / math.sqrt(n) if n > 1 else math.nan
        noise = pd.NA if n < 2 else bool(abs(mean) <= half)
        rows.append((cand, mean, sd, n, half, noise))
    summary = pd.DataFrame(
        rows, columns=["candidate", "mean", "sd", "n", "half_width", "within_noise"]
    )
    summary["within_noise"] = summary["within_noise"].astype("boolean")
    summary = summary.sort_values("mean", ascending=sense == "minimize").reset_index(drop=True)
    return Deltas(metric, sense, per_seed, summary)


# -------------------------------------------------------------------------------------------------
# 7. summary


def target_widths(config: Mapping[str, Any], params: Mapping[str, Any]) -> list[int]:
    """The candidate's widths at the study's target scale (empty without a valid target)."""
    from tlmsearch.config import ModelConfig

    if not config.get("target") or not params:
        return []
    try:
        target = ModelConfig(**config["target"])
        plan = target.plan(params)
    except Exception:  # a bad target only loses this line of the summary
        return []
    return list(plan.widths)


def run_summary(
    config: Mapping[str, Any], trials: pd.DataFrame, status: Mapping[str, Any]
) -> dict[str, Any]:
    """What the study was, how far it got, what won, and with which versions."""
    from tlmsearch.results import objectives_of

    objectives = objectives_of(config)
    metric, sense = objectives[0]
    counts = {s: int(n) for s, n in trials["state"].value_counts().items()}
    best: dict[str, Any] | None = None
    done = finished(trials, metric)
    cands = _by_candidate(done)
    if len(cands):
        b = cands.loc[_best(cands.set_index(cands.index)["value"], sense)]
        deltas = paired_deltas(trials, metric, sense).summary.set_index("candidate")
        best = {
            "candidate": b["candidate"],
            "metric": metric,
            "value": float(b["value"]),
            "n_seeds": int(b["n"]),
            "trials": b["trial_ids"],
            "params": b["params_json"],
            "widths": _widths(b["widths_json"]),
            "target_widths": target_widths(config, json.loads(b["params_json"] or "{}")),
            "delta_vs_uniform": float(deltas.loc[b["candidate"], "mean"])
            if b["candidate"] in deltas.index
            else None,
        }
    tokens = pd.to_numeric(trials["tokens"], errors="coerce")
    wall = pd.to_numeric(trials["wall_s"], errors="coerce")
    return {
        "name": config.get("name", ""),
        "description": config.get("description", ""),
        "status": status.get("status", "unknown"),
        "started": status.get("started", ""),
        "updated": status.get("updated", ""),
        "objectives": objectives,
        "n_trials": len(trials),
        "n_trials_planned": status.get("n_trials_planned"),
        "counts": counts,
        "best": best,
        "tokens_total": int(tokens.sum()) if len(tokens) else 0,
        "wall_s_total": float(wall.sum()) if len(wall) else 0.0,
        "versions": dict(status.get("versions") or {}),
        "git_sha": status.get("git_sha"),
        "config": dict(config),
    }
