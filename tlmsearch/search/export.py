"""The Optuna storage of a run -> trials / curves tables, best.yaml, status; CSV/parquet/YAML.

The storage is the source of truth (the driver writes every eval and end state there as it
happens), so these work while a run is going and after a crash.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tlmsearch.config import EVAL_KEYS, StudyConfig, load_study
from tlmsearch.errors import ConfigError
from tlmsearch.search.samplers import CANDIDATE, SAME_AS, SEED, STANDS_FOR
from tlmsearch.search.storage import open_storage, storage_url
from tlmsearch.space import describe

# A trial's final metrics: its last eval, less the bookkeeping keys.
METRIC_KEYS = tuple(k for k in EVAL_KEYS if k not in ("tokens", "lr", "wall_s"))
# What a trial is, recorded by the pruning scheduler (it adds the widths).
STATIC_KEYS = ("n_params", "n_params_nonemb", "flops_per_token", "node")
INTERRUPTED = "interrupted"  # user attr: a trial whose driver died; it was queued again


def run_info(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "run.json"
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def open_run(run_dir: str | Path) -> tuple[StudyConfig, Any]:
    """The run's frozen config and its Optuna study (loaded, not created)."""
    import optuna

    run = Path(run_dir)
    if not (run / "study.yaml").is_file():
        raise ConfigError(
            f"{str(run)!r} is not a run dir (no study.yaml); give the folder a run wrote, "
            "e.g. runs/quickstart"
        )
    cfg = load_study(run / "study.yaml")
    name = run_info(run).get("optuna_study") or cfg.name
    storage = open_storage(storage_url(cfg.storage, run.resolve()))
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise ConfigError(
            f"{run}: the storage has no study {name!r}; did the run start?"
        ) from None
    return cfg, study


def trial_records(study: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(trial rows, curve rows) in the columns of docs/run_dir.md (results.py fills the rest)."""
    trials, curves = [], []
    for ft in study.get_trials(deepcopy=False):
        state = ft.state.name
        attrs = ft.user_attrs
        if state == "WAITING" or attrs.get(INTERRUPTED) or CANDIDATE not in attrs:
            continue
        trial_id = attrs.get("ray_trial_id") or f"optuna-{ft.number}"
        seed = attrs.get(SEED)
        last = attrs.get("metrics") or {}
        row: dict[str, Any] = {
            "trial_id": trial_id,
            "number": ft.number,
            "seed": seed,
            "params": json.loads(attrs[CANDIDATE]),
            "state": state,
            "reason": attrs.get("reason", "") if state != "COMPLETE" else "",
            "tokens": last.get("tokens"),
            "wall_s": last.get("wall_s"),
        }
        if attrs.get("widths"):
            row["widths"] = attrs["widths"]
        if attrs.get(SAME_AS) is not None:  # replayed a finished twin's curve (same widths, seed)
            row["same_as"] = attrs[SAME_AS]
        if attrs.get(STANDS_FOR):  # grid candidates with the same proxy widths, trained once
            row["stands_for"] = json.dumps([describe(c) for c in json.loads(attrs[STANDS_FOR])])
        for k in METRIC_KEYS:
            row[k] = _num(last.get(k))
        for k in STATIC_KEYS:
            if k in attrs:
                row[k] = attrs[k]
        trials.append(row)
        for ev in attrs.get("curve") or []:
            curves.append({"trial_id": trial_id, "seed": seed, **ev})
    return trials, curves


def _num(x: Any) -> float:
    return float("nan") if x is None else float(x)


def write_tables(run_dir: str | Path, study: Any, cfg: StudyConfig) -> Any:
    """Write trials/curves parquet + CSV (results.write_results); return the trials frame."""
    from tlmsearch.results import write_results

    trials, curves = trial_records(study)
    tdf, _ = write_results(run_dir, trials, curves, metrics=[o.metric for o in cfg.objectives])
    return tdf


# -------------------------------------------------------------------------------------------------
# Best candidate


def _metric_col(metric: str) -> str:
    return {"params": "n_params", "non_embedding_params": "n_params_nonemb"}.get(metric, metric)


def best_candidates(trials: Any, cfg: StudyConfig) -> list[dict[str, Any]]:
    """Per-candidate means over seeds of COMPLETE trials; the best one (or the Pareto front).

    Each entry: params, candidate, values {metric: mean}, per_seed, n_seeds, deltas vs uniform.
    """
    done = trials[trials["state"] == "COMPLETE"]
    if done.empty:
        return []
    groups = []
    for key, g in done.groupby("params_json", sort=False):
        entry: dict[str, Any] = {
            "candidate": str(g["candidate"].iloc[0]),
            "params": json.loads(key),
            "n_seeds": len(g),
            "values": {},
            "per_seed": {},
            "delta_vs_uniform": {},
        }
        for obj in cfg.objectives:
            col = _metric_col(obj.metric)
            entry["values"][obj.metric] = float(g[col].mean())
            pairs = zip(g["seed"], g[col], strict=True)
            entry["per_seed"][obj.metric] = {
                int(s): float(v) for s, v in pairs if not math.isnan(float(v))
            }
            dcol = f"delta_{obj.metric}"
            if dcol in g and g[dcol].notna().any():
                entry["delta_vs_uniform"][obj.metric] = float(g[dcol].mean())
        groups.append(entry)
    objs = [(o.metric, 1.0 if o.sense == "minimize" else -1.0) for o in cfg.objectives]
    groups = [g for g in groups if all(not math.isnan(g["values"][m]) for m, _ in objs)]
    if len(objs) == 1:
        metric, sign = objs[0]
        return sorted(groups, key=lambda g: sign * g["values"][metric])[:1]
    return pareto_front(groups, objs)


def pareto_front(
    groups: list[dict[str, Any]], objs: list[tuple[str, float]]
) -> list[dict[str, Any]]:
    """Entries no other entry dominates (sign 1 minimises, -1 maximises)."""

    def vec(g: Mapping[str, Any]) -> list[float]:
        return [s * g["values"][m] for m, s in objs]

    front = []
    for g in groups:
        a = vec(g)
        dominated = any(
            all(x <= y for x, y in zip(vec(h), a, strict=True))
            and any(x < y for x, y in zip(vec(h), a, strict=True))
            for h in groups
            if h is not g
        )
        if not dominated:
            front.append(g)
    return front


def best_document(trials: Any, cfg: StudyConfig) -> dict[str, Any]:
    """best.yaml: the best candidate's params, proxy widths, and its widths at target scale."""
    best = best_candidates(trials, cfg)
    doc: dict[str, Any] = {
        "study": cfg.name,
        "objectives": [{"metric": o.metric, "direction": o.sense} for o in cfg.objectives],
        "best": [],
    }
    base = trials[(trials["is_baseline"]) & (trials["state"] == "COMPLETE")]
    if not base.empty:
        doc["uniform_baseline"] = {
            o.metric: float(base[_metric_col(o.metric)].mean()) for o in cfg.objectives
        }
    for entry in best:
        params = entry["params"]
        item = dict(entry)
        item["proxy"] = _model_widths(cfg, cfg.model, params)
        if cfg.target is not None:
            item["target"] = _model_widths(cfg, cfg.target, params)
            item["target"]["config"] = cfg.target.model_dump(mode="json", exclude_none=True)
        doc["best"].append(item)
    return doc


def _model_widths(cfg: StudyConfig, model: Any, params: Mapping[str, Any]) -> dict[str, Any]:
    plan = model.plan(params)
    return {
        "n_layer": model.n_layer,
        "d_ff_uniform": model.d_ff_uniform,
        "multiple_of": model.multiple_of,
        "widths": list(plan.widths),
        "realised": [round(plan.realised_start, 4), round(plan.realised_end, 4)],
    }


def write_best(run_dir: str | Path, trials: Any, cfg: StudyConfig) -> dict[str, Any]:
    doc = best_document(trials, cfg)
    path = Path(run_dir) / "best.yaml"
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(doc, sort_keys=False))
    tmp.replace(path)
    return doc


# -------------------------------------------------------------------------------------------------
# Status and export


def counts(study: Any) -> dict[str, int]:
    """Trials by state; ``interrupted`` counts runs lost to a dead driver (queued again)."""
    out = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0, "RUNNING": 0, "WAITING": 0, INTERRUPTED: 0}
    for ft in study.get_trials(deepcopy=False):
        if ft.user_attrs.get(INTERRUPTED):
            out[INTERRUPTED] += 1
        else:
            out[ft.state.name] = out.get(ft.state.name, 0) + 1
    return out


def status_report(run_dir: str | Path) -> dict[str, Any]:
    """What ``tlmsearch status`` prints: run.json, counts, best so far (safe while running)."""
    from tlmsearch.results import trials_frame

    cfg, study = open_run(run_dir)
    info = run_info(run_dir)
    trials, _ = trial_records(study)
    from tlmsearch.results import add_deltas

    frame = add_deltas(trials_frame(trials), [o.metric for o in cfg.objectives])
    best = best_candidates(frame, cfg)
    return {
        "run": str(run_dir),
        "status": info.get("status", "unknown"),
        "planned": info.get("n_trials_planned"),
        "counts": counts(study),
        "best": best,
        "updated": info.get("updated"),
        "objectives": [(o.metric, o.sense) for o in cfg.objectives],
        "label": {r["number"]: describe(r["params"]) for r in trials},
    }


def export_run(run_dir: str | Path, fmt: str, out: str | Path | None = None) -> list[Path]:
    """Refresh the tables from storage and write them as csv, parquet or yaml (best.yaml)."""
    if fmt not in ("csv", "parquet", "yaml"):
        raise ConfigError(f"--format: {fmt!r} is not one of csv, parquet, yaml")
    cfg, study = open_run(run_dir)
    run = Path(run_dir)
    tdf = write_tables(run, study, cfg)
    if fmt == "yaml":
        write_best(run, tdf, cfg)
        files = [run / "best.yaml"]
    else:
        files = [run / f"trials.{fmt}", run / f"curves.{fmt}"]
    if out is not None:
        import shutil

        dest = Path(out)
        dest.mkdir(parents=True, exist_ok=True)
        files = [Path(shutil.copy2(f, dest / f.name)) for f in files]
    return files
