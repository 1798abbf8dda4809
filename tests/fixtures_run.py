"""A synthetic run-dir factory for report and dashboard tests (no training, no torch).

Metrics follow a made-up but smooth law (a mild taper helps, a strong one hurts, cosine a bit
better than linear) plus seed noise, so fronts, deltas and importances have something to find.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from tlmsearch.run_dir.tables import write_results, write_status
from tlmsearch.widths.schedules import plan_from_params

N_LAYER, D_FF, MULT = 4, 64, 8


def study_dict(
    name: str = "synthetic",
    shapes: Sequence[str] = ("cosine", "linear"),
    objectives: Sequence[dict[str, str]] = ({"metric": "val_bpb", "direction": "minimize"},),
    seeds: Sequence[int] = (0, 1),
) -> dict[str, Any]:
    return {
        "name": name,
        "description": "synthetic study for report tests",
        "space": {
            "name": "syn",
            "dimensions": {
                "shape": {"type": "categorical", "choices": list(shapes)},
                "r_start": {"type": "float", "low": 1.25, "high": 1.75, "step": 0.25},
            },
        },
        "model": {
            "arch": "transformer",
            "n_layer": N_LAYER,
            "d_model": 32,
            "n_head": 2,
            "d_ff": D_FF,
            "multiple_of": MULT,
        },
        "search": {"sampler": "grid", "pruner": "median", "seeds": list(seeds)},
        "objectives": [dict(o) for o in objectives],  # a copy: callers may edit it
    }


def bpb_law(shape: str, r_start: float, seed: int) -> float:
    """Synthetic val bits per byte: best near r_start 1.4, cosine slightly better."""
    if shape == "uniform":
        base = 1.50
    else:
        base = 1.50 - 0.06 + 0.2 * (r_start - 1.4) ** 2 - (0.01 if shape == "cosine" else 0.0)
    return base + 0.004 * math.sin(7.0 * seed + 3.0 * r_start)


def make_trials(
    shapes: Sequence[str] = ("cosine", "linear"),
    ratios: Sequence[float] = (1.25, 1.5, 1.75),
    seeds: Sequence[int] = (0, 1),
    baseline: bool = True,
    pruned: Sequence[int] = (),
    failed: Sequence[int] = (),
    tokens: int = 4000,
    evals: int = 4,
    unpruned: int = 2,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Trial and curve records as a search would hand them to ``write_results``.

    ``pruned`` / ``failed``: indices (in creation order) of trials to mark PRUNED / FAIL.
    ``unpruned``: how many candidates the pruner could not stop (``search.unpruned_candidates``:
    a search leaves its queue's first ones unpruned; here the first ones with no trial in
    ``pruned``), marked ``unpruned`` on every trial.
    """
    cands: list[dict[str, Any]] = [{"shape": "uniform"}] if baseline else []
    cands += [{"shape": s, "r_start": r} for s in shapes for r in ratios]
    n_cands = len(cands)
    cut = {json.dumps(cands[i % n_cands], sort_keys=True) for i in pruned}
    kept = [
        c for c in cands if c["shape"] != "uniform" and json.dumps(c, sort_keys=True) not in cut
    ][:unpruned]
    trials, curves = [], []
    i = 0
    for seed in seeds:
        for params in cands:
            plan = plan_from_params(params, n_layer=N_LAYER, d_ff=D_FF, multiple_of=MULT)
            final = bpb_law(params["shape"], params.get("r_start", 1.0), seed)
            tid = f"t{i:04d}"
            state = "PRUNED" if i in pruned else "FAIL" if i in failed else "COMPLETE"
            n_eval = 0 if state == "FAIL" else (evals // 2 if state == "PRUNED" else evals)
            points = []
            for k in range(1, n_eval + 1):
                tok = tokens * k // evals
                bpb = final + 1.5 * math.exp(-3.0 * k / evals) - 1.5 * math.exp(-3.0)
                loss = bpb * math.log(2) * 4.0  # ~4 bytes per token
                points.append(tok)
                curves.append(
                    {
                        "trial_id": tid,
                        "seed": seed,
                        "tokens": tok,
                        "val_bpb": bpb,
                        "val_loss": loss,
                        "val_ppl": math.exp(loss),
                        "train_loss": loss,
                        "lr": 1e-3,
                        "wall_s": 0.5 * k,
                    }
                )
            last = [c for c in curves if c["trial_id"] == tid]
            metrics = {k: last[-1][k] for k in ("val_bpb", "val_loss", "val_ppl")} if last else {}
            trials.append(
                {
                    "trial_id": tid,
                    "number": i,
                    "seed": seed,
                    "params": params,
                    "widths": list(plan.widths),
                    "state": state,
                    "reason": {
                        "PRUNED": "median pruner at 2000 tokens",
                        "FAIL": "RuntimeError: out of memory",
                    }.get(state, ""),
                    "tokens": points[-1] if points else 0,
                    **metrics,
                    "tokens_per_s": 5000.0 - 400.0 * abs(params.get("r_start", 1.0) - 1.0) + seed,
                    "n_params": 100_000,
                    "n_params_nonemb": 60_000,
                    "flops_per_token": 600_000,
                    "wall_s": 2.0 + 0.1 * i,
                    "node": "127.0.0.1",
                    **({"unpruned": True} if params in kept else {}),
                }
            )
            i += 1
    return trials, curves


def make_run(
    path: Path,
    study: dict[str, Any] | None = None,
    status: str = "finished",
    trials: list[dict[str, Any]] | None = None,
    curves: list[dict[str, Any]] | None = None,
    **kw: Any,
) -> Path:
    """Write a complete run dir (study.yaml, trials, curves, run.json) under ``path``."""
    path.mkdir(parents=True, exist_ok=True)
    study = study or study_dict(
        seeds=kw.get("seeds", (0, 1)), shapes=kw.get("shapes", ("cosine", "linear"))
    )
    (path / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    if trials is None:
        trials, curves = make_trials(**kw)
    write_results(path, trials, curves or [])
    write_status(
        path,
        status,
        versions={"tlmsearch": "0.1.0", "optuna": "5"},
        git_sha="abc1234",
        n_trials_planned=len(trials),
    )
    return path


def random_trials(n: int, seed: int = 0) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``n`` trials of a continuous space with random states: for scale tests."""
    rng = np.random.default_rng(seed)
    trials, curves = [], []
    shapes = ("cosine", "linear", "sigmoid")
    for i in range(n):
        shape = "uniform" if i < 2 else str(rng.choice(shapes))
        r = 1.0 if shape == "uniform" else float(np.round(rng.uniform(1.05, 1.9), 3))
        params = {"shape": shape} if shape == "uniform" else {"shape": shape, "r_start": r}
        plan = plan_from_params(params, n_layer=N_LAYER, d_ff=D_FF, multiple_of=MULT)
        state = (
            "COMPLETE"
            if i < 2
            else str(rng.choice(["COMPLETE", "PRUNED", "FAIL"], p=[0.6, 0.35, 0.05]))
        )
        tid = f"r{i:05d}"
        n_eval = {"COMPLETE": 8, "PRUNED": int(rng.integers(1, 8)), "FAIL": 0}[state]
        final = bpb_law(shape, r, i % 3) + float(rng.normal(0, 0.01))
        for k in range(1, n_eval + 1):
            curves.append(
                {
                    "trial_id": tid,
                    "seed": i % 3,
                    "tokens": 1000 * k,
                    "val_bpb": final + 0.5 * (8 - k) / 8,
                }
            )
        trials.append(
            {
                "trial_id": tid,
                "number": i,
                "seed": i % 3,
                "params": params,
                "widths": list(plan.widths),
                "state": state,
                "val_bpb": final if n_eval else None,
                "reason": "synthetic" if state != "COMPLETE" else "",
                "tokens_per_s": float(rng.uniform(4000, 6000)),
            }
        )
    return trials, curves


def lr_cells_frame(rows: Sequence[tuple], value: str = "v") -> pd.DataFrame:
    """(schedule, lr, seed, value[, state]) tuples -> a trials table of (schedule, lr) cells,
    each its own candidate at its ``train.lr`` setting (uniform's rows the baseline)."""
    return pd.DataFrame(
        {
            "schedule": [r[0] for r in rows],
            "setting": [f"lr={r[1]}" for r in rows],
            "candidate": [f"{r[0]} @ lr={r[1]}" for r in rows],
            "params_json": [json.dumps({"shape": r[0], "train.lr": r[1]}) for r in rows],
            "is_baseline": [r[0] == "uniform" for r in rows],
            "seed": [r[2] for r in rows],
            "state": [r[4] if len(r) > 4 else "COMPLETE" for r in rows],
            value: [r[3] for r in rows],
        }
    )
