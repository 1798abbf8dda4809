"""Search orchestration: overhead of Ray Tune + Optuna, and what pruning saves.

Run: ``.venv/bin/python benchmarks/search.py [--tokens N] [--what overhead,pruning]``.

(a) Overhead: a grid study without pruning; the study's wall time (Ray started, data ready)
    against the sum of its trials' own wall times (model build + training + evals, measured in
    the trainable) divided by the concurrency. Goal: <= 1.10x, plus Ray's start.
(b) Pruning: the paper's space (linear / cosine / sigmoid x 5 ratio pairs + uniform, 16 trials)
    at a tiny size, grid order, once with the median pruner and once without: tokens trained in
    all, wall time, and the best candidate each finds.
Each run is one run (the machine may be shared: figures move by several percent).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from tlmsearch.config import study_from_mapping
from tlmsearch.search import run_study


def study(name: str, runs: Path, tokens: int, pruner: str, space: Any) -> dict[str, Any]:
    return {
        "name": name,
        "space": space,
        "model": {"n_layer": 4, "d_model": 64, "n_head": 2, "d_ff": 256, "multiple_of": 16},
        "data": {"sources": ["classics"], "tokenizer": {"kind": "bpe", "vocab_size": 4096},
                 "seq_len": 128, "val_tokens": 16384},
        "train": {"tokens": tokens, "batch_tokens": 2048, "micro_batch_size": 16,
                  "warmup_tokens": tokens // 10, "eval_every_tokens": tokens // 8,
                  "lr": 0.003, "compile": "off"},
        "search": {"sampler": "grid", "pruner": pruner, "concurrency": 2},
        "storage": {"runs_dir": str(runs)},
        "ray": {"num_cpus": 2, "cpus_per_trial": 1},
    }  # fmt: skip


def timed_run(cfg_dict: dict[str, Any]) -> tuple[pd.DataFrame, float, float]:
    """(trials, study wall s excluding Ray start and data, Ray start s)."""
    cfg = study_from_mapping(cfg_dict)
    marks: dict[str, float] = {}

    def echo(text: str) -> None:
        now = time.time()
        if text.startswith("ray:"):
            marks["ray"] = now
        elif "trial(s) to run" in text:
            marks["go"] = now

    t0 = time.time()
    res = run_study(cfg, echo=echo)
    wall = time.time() - marks["go"]  # from the first trial's launch to the tables written
    trials = pd.read_parquet(res.run_dir / "trials.parquet")
    return trials, wall, marks["go"] - t0


def overhead(runs: Path, tokens: int) -> dict[str, Any]:
    space = {"dimensions": {  # 9 cosine tapers + uniform: 10 trials, 5 rounds of 2
        "shape": {"type": "fixed", "value": "cosine"},
        "r_start": {"type": "float", "low": 1.25, "high": 1.75, "step": 0.0625}}}  # fmt: skip
    trials, wall, start = timed_run(study("overhead", runs, tokens, "none", space))
    ideal = trials["wall_s"].sum() / 2
    # The same trials packed on 2 slots in launch order with zero overhead: with an odd count
    # the last round leaves a slot idle, which no orchestrator can avoid.
    slots = [0.0, 0.0]
    for w in trials.sort_values("number")["wall_s"]:
        slots[slots.index(min(slots))] += float(w)
    return {
        "trials": len(trials),
        "tokens_per_trial": tokens,
        "study_wall_s": round(wall, 1),
        "sum_trial_wall_s": round(trials["wall_s"].sum(), 1),
        "ideal_s (sum / concurrency 2)": round(ideal, 1),
        "overhead_ratio": round(wall / ideal, 3),
        "packed_s (2 slots, launch order)": round(max(slots), 1),
        "ratio_vs_packed": round(wall / max(slots), 3),
        "data_and_ray_start_s": round(start, 1),
    }


def pruning(runs: Path, tokens: int, pruners: list[str]) -> list[dict[str, Any]]:
    out = []
    for pruner in pruners:
        trials, wall, _ = timed_run(study(f"prune-{pruner}", runs, tokens, pruner, "paper"))
        done = trials[trials["state"] == "COMPLETE"]
        best = done.sort_values("val_bpb").iloc[0]
        out.append(
            {
                "pruner": pruner,
                "trials": len(trials),
                "pruned": int((trials["state"] == "PRUNED").sum()),
                "tokens_trained": int(trials["tokens"].sum()),
                "study_wall_s": round(wall, 1),
                "best": best["candidate"],
                "best_val_bpb": round(float(best["val_bpb"]), 4),
                "uniform_val_bpb": round(
                    float(trials[trials["is_baseline"]]["val_bpb"].iloc[0]), 4
                ),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=131072, help="tokens per trial")
    ap.add_argument("--what", default="overhead,pruning")
    ap.add_argument("--pruners", default="none,median", help="pruning runs to compare")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if "overhead" in args.what:
            results["overhead"] = overhead(Path(tmp), args.tokens)
            print(json.dumps(results["overhead"], indent=1), flush=True)
        if "pruning" in args.what:
            results["pruning"] = pruning(Path(tmp), args.tokens, args.pruners.split(","))
            print(pd.DataFrame(results["pruning"]).to_string(index=False), flush=True)
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
