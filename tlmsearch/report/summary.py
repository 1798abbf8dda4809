"""The report's summary: what the study was, how far it got, what won (with its effect from
the study's :class:`~tlmsearch.evidence.Evidence`), and with which versions."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from tlmsearch import stats
from tlmsearch.config import StudyConfig
from tlmsearch.evidence import Evidence
from tlmsearch.report.collect import evidence_of, parse_widths, ranked_candidates
from tlmsearch.widths.candidate import IDENTITY, Candidate


def target_widths(config: StudyConfig, params: Candidate) -> list[int]:
    """The candidate's widths at the study's target scale (empty without a valid target)."""
    plan = _target_plan(config, params)
    return [] if plan is None else list(plan.widths)


def target_heads(config: StudyConfig, params: Candidate) -> list[int]:
    """The candidate's attention heads per layer at the study's target scale (empty without a
    valid target or without a heads schedule: then every layer has the target's own)."""
    from tlmsearch.widths.heads import heads_schedule

    plan = _target_plan(config, params) if heads_schedule(params) is not None else None
    return [] if plan is None else list(plan.heads or ())


def _target_plan(config: StudyConfig, params: Candidate) -> Any:
    if config.target is None or not params:
        return None
    try:
        return config.target.plan(params)
    except Exception:  # a candidate without widths at the target only loses this line
        return None


def _candidate_summary(
    row: pd.Series, metric: str, config: StudyConfig, effect: pd.Series | None = None
) -> dict[str, Any]:
    """A ranked candidate as plain data: value on its ranked seeds, n of k, delta with CI.

    ``effect``: its :func:`tlmsearch.stats.effects` row (with the pooled noise for one seed);
    without it the interval is over its own seeds only.
    """

    def num(x: Any) -> float | None:
        return None if pd.isna(x) else float(x)

    from tlmsearch.widths.heads import heads_schedule

    params = Candidate.from_identity(row[IDENTITY])
    e = effect if effect is not None else row
    return {
        "candidate": row["candidate"],
        "metric": metric,
        "value": float(row["score"]),  # mean over ranked_seeds
        "ranked_seeds": [int(x) for x in row["ranked_seeds"]],
        "n_seeds": int(row["n"]),  # seeds completed
        "n_seeds_planned": int(row["k"]),
        "n_of_k": row["n_of_k"],
        "censored": bool(row["censored"]),
        "tier": stats.tier_name(row["tier"]),
        "flag": row["flag"],
        "trials": row["trial_ids"],
        "params": row[IDENTITY],
        "widths": parse_widths(row["widths_json"]),
        "realised": [num(row["realised_start"]), num(row["realised_end"])],
        "target_widths": target_widths(config, params),
        # attention heads per layer; empty without a heads schedule (n_head in every layer)
        "heads": parse_widths(row.get("heads_json")) if heads_schedule(params) else [],
        "heads_share": num(row.get("heads_share")) if heads_schedule(params) else None,
        "target_heads": target_heads(config, params),
        "delta_vs_uniform": num(row["mean_delta"]),
        "delta_ci95": None if pd.isna(e["lo"]) else [float(e["lo"]), float(e["hi"])],
        "delta_n_seeds": int(row["n_paired"]),
        "effect_noise": num(e["effect_noise"]),
        "noise": str(e.get("noise", "unknown")),
    }


def run_summary(
    config: StudyConfig,
    trials: pd.DataFrame,
    status: Mapping[str, Any],
    evidence: Evidence | None = None,
    written: Mapping[str, Any] | None = None,
    run_dir: str | None = None,
) -> dict[str, Any]:
    """What the study was, how far it got, what won, and with which versions; ``config``: the
    run's study (:attr:`tlmsearch.run_dir.tables.RunData.study`); ``evidence``: the study's of its
    first objective (else built here); ``written``: study.yaml as the run wrote it, shown."""
    from tlmsearch.metrics import objectives_of
    from tlmsearch.run_dir.driver import driver_gone

    objectives = objectives_of(config)
    metric, sense = objectives[0]
    counts = {s: int(n) for s, n in trials["state"].value_counts().items()}
    ev = evidence or evidence_of(trials, metric, sense, config)
    ranked = ranked_candidates(trials, metric, sense, ranking=ev.ranking)
    ranked = ranked[ranked["tier"] < 3]
    best: dict[str, Any] | None = None
    censored_better: list[dict[str, Any]] = []
    if len(ranked):
        eff = ev.effects.set_index("candidate")
        top = ranked.iloc[0]
        effect = eff.loc[top["candidate"]] if top["candidate"] in eff.index else None
        best = _candidate_summary(top, metric, config, effect)
        censored_better = [
            {
                "candidate": r.candidate,
                "n_of_k": r.n_of_k,
                "flag": r.flag,
                "value": float(r.score),
                "delta_best": float(r.delta_best),
                "n_best": int(r.n_best),
            }
            for r in ranked[ranked["better_than_best"]].itertuples()
        ]
    tokens = pd.to_numeric(trials["tokens"], errors="coerce")
    wall = pd.to_numeric(trials["wall_s"], errors="coerce")
    gone = driver_gone(status, run_dir or "RUN") if run_dir else None
    return {
        "name": config.name or "",
        "description": config.description,
        "status": "driver gone"
        if gone and status.get("status") == "running"
        else status.get("status", "unknown"),
        "driver": gone,  # run.json says running, but its driver is gone: what to do
        "started": status.get("started", ""),
        "updated": status.get("updated", ""),
        "objectives": objectives,
        "n_trials": len(trials),
        "n_trials_planned": status.get("n_trials_planned"),
        "counts": counts,
        "best": best,
        # censored (or still running) candidates that look better than the best on the seeds
        # both completed: not ranked above it, but said, since their missing seeds decide
        "censored_better": censored_better,
        "tokens_total": int(tokens.sum()) if len(tokens) else 0,
        "wall_s_total": float(wall.sum()) if len(wall) else 0.0,
        "versions": dict(status.get("versions") or {}),
        "git_sha": status.get("git_sha"),
        "proxy_model": _model_line(config),
        "config": dict(written or {}),
    }


def _model_line(config: StudyConfig) -> dict[str, Any]:
    """The proxy model's size, as the summary shows it ({} without a model)."""
    model = config.model
    keys = ("arch", "n_layer", "d_model", "n_head", "d_ff")
    return (
        {}
        if model is None
        else {k: getattr(model, k) for k in keys if getattr(model, k) is not None}
    )
