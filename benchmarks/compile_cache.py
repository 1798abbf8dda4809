"""torch.compile's cost per trial on this CPU, cold and from a warm cache, side by side.

Run: ``python benchmarks/compile_cache.py`` (5-8 minutes on 2 quiet cores; ``--quick``: a tiny
model, solo rows only, for the test; ``--no-array``: without the trial-array rows;
``--dynamic``: two more rows with every MLP's hidden width marked dynamic, the experiment
docs/benchmarks.md reports; ``--rounds N``: every row N times).

Every row is a fresh process that trains the quickstart's proxy (4 x 128, d_ff 512, seq 128,
2048-token steps, vocab 16384 untied; bf16 autocast where the CPU has it; one thread, as a
quickstart trial; the bytes of this repository's README and docs as data) under
``torch.compile`` with its compile cache set as a trial's is (``runtime.use_compile_cache``):

- **cold**: an empty cache (a study's first trial);
- **warm, same widths**: the cache the cold row filled, the same width vector (another seed of
  the candidate, a retry, a resume, a trial on another node that mounts the run dir);
- **warm, other widths**: that cache, another candidate (the cosine taper 1.5 -> 0.5): the
  compiled graph is per width vector;
- with arrays (``trial_array.TrialArray``, compiled), the quickstart's three candidates as one
  array: cold, warm, and warm with another member set (its padded widths differ).

compile_s is the first step's wall time (the trainer's ``first_step_s``: compile included);
step_s the median of the next ``--steps`` steps. "of a trial" is compile_s over compile_s plus
the steps of a quickstart trial (2M tokens, 977 steps) at step_s: the compile's share of a
trial's training time, evals excluded. hit / miss count inductor's FX-graph cache look-ups.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from gpu import CPU_SIZES, GPU_SIZES, _env, data_section, prepare  # benchmarks/gpu.py

UNIFORM = {"shape": "uniform"}
TAPER = {"shape": "cosine", "r_start": 1.5, "r_end": 0.5}
MIRROR = {"shape": "cosine", "r_start": 0.5, "r_end": 1.5}
TAPER_125 = {"shape": "cosine", "r_start": 1.25, "r_end": 0.75}
QUICKSTART_TOKENS = 2_000_000


def one(spec: dict[str, Any]) -> dict[str, Any]:
    """One process: build the training (a Trainer, or a TrialArray of several candidates),
    time its first step and ``spec["steps"]`` more."""
    import torch
    from torch._dynamo.utils import counters

    from tlmsearch.config import DataConfig, ModelConfig, TrainConfig
    from tlmsearch.data import prepare_data
    from tlmsearch.train.runtime import use_compile_cache
    from tlmsearch.train.trainer import Trainer
    from tlmsearch.train.trial_array import Member, TrialArray

    use_compile_cache(spec["cache"])  # as a trial process of a run does
    if spec.get("dynamic"):  # the experiment: d_ff dims symbolic, so one graph for all widths
        import torch._dynamo.config as dynamo_config
        import torch.fx.experimental._config as fx_config

        dynamo_config.force_parameter_static_shapes = False
        dynamo_config.force_nn_module_property_static_shapes = False
        fx_config.use_duck_shape = False  # equal widths must not share a symbol
    model = ModelConfig(**spec["model"])
    data = prepare_data(DataConfig(**spec["data"]), progress=False)
    train = TrainConfig(**spec["train"])
    widths = [tuple(model.plan(c).widths) for c in spec["candidates"]]
    if len(widths) == 1:
        run: Any = Trainer(model, widths[0], data, train, seed=0, threads=1, device="cpu")
        if spec.get("dynamic"):
            for mod in run.model.modules():  # SwiGLU's w1, w3 (dim 0) and w2 (dim 1)
                if hasattr(mod, "unit_dim") and hasattr(mod, "weight"):
                    torch._dynamo.mark_dynamic(mod.weight, mod.unit_dim)
    else:
        members = [Member(model, w, train, seed=0) for w in widths]
        run = TrialArray(members, data, device="cpu", threads=1, compile=True)
    t0 = time.perf_counter()
    run.step()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(spec["steps"]):
        t0 = time.perf_counter()
        run.step()
        times.append(time.perf_counter() - t0)
    run.close()
    inductor = counters["inductor"]
    return {
        "widths": [list(w) for w in widths],
        "compile_s": compile_s,
        "step_s": sorted(times)[len(times) // 2],
        "hit": inductor.get("fxgraph_cache_hit", 0),
        "miss": inductor.get("fxgraph_cache_miss", 0),
        "step_tokens": train.batch_tokens,
    }


def rows_to_run(args: Any) -> list[tuple[str, str, list[dict[str, Any]], bool]]:
    """(label, cache, candidates, dynamic) in order: each warm row after the row that filled
    its cache."""
    rows = [
        ("solo, cold", "solo", [UNIFORM], False),
        ("solo, warm, same widths", "solo", [UNIFORM], False),
        ("solo, warm, other widths", "solo", [TAPER], False),
    ]
    if args.dynamic:
        rows += [
            ("solo dynamic d_ff, cold", "dynamic", [UNIFORM], True),
            ("solo dynamic d_ff, warm, other widths", "dynamic", [TAPER], True),
        ]
    if not args.quick and args.array:
        rows += [
            ("array of 3, cold", "array", [UNIFORM, TAPER, MIRROR], False),
            ("array of 3, warm, same widths", "array", [UNIFORM, TAPER, MIRROR], False),
            ("array of 3, warm, other widths", "array", [UNIFORM, TAPER_125, MIRROR], False),
        ]
    return rows


def run_row(spec: dict[str, Any], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--one", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["exit"])[-1][:200]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def share(r: dict[str, Any], steps: int) -> float:
    """The compile's share of a quickstart trial's training time at this row's speed."""
    train = steps * r["step_s"]
    return r["compile_s"] / (r["compile_s"] + train) if train > 0 else math.nan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tiny model, solo rows (tests)")
    ap.add_argument("--no-array", dest="array", action="store_false", help="no array rows")
    ap.add_argument("--dynamic", action="store_true", help="also the dynamic-d_ff experiment")
    ap.add_argument("--steps", type=int, default=None, help="timed steps after the first")
    ap.add_argument("--rounds", type=int, default=1, help="every row this many times")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a row at most")
    ap.add_argument("--out", type=Path, default=None, help="JSON (default: a temp dir)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(json.loads(args.one))), flush=True)
        return
    size = CPU_SIZES["tiny-32"] if args.quick else GPU_SIZES["quickstart"]
    args.steps = args.steps or (2 if args.quick else 20)
    trial_steps = math.ceil(QUICKSTART_TOKENS / size["train"]["batch_tokens"])
    train = {
        "tokens": 10**12,
        "warmup_tokens": 2 * size["train"]["batch_tokens"],
        "compile": "on",
        **size["train"],
    }
    t0 = time.perf_counter()
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        prepare(size, tmp)
        for r in range(args.rounds):
            for label, cache, candidates, dynamic in rows_to_run(args):
                folder = str(tmp / f"compile-{cache}-{r}")  # a cache per group and round
                spec = {
                    "model": size["model"],
                    "data": data_section(size, str(tmp / "cache")),
                    "train": train,
                    "candidates": candidates,
                    "steps": args.steps,
                    "cache": folder,
                    "dynamic": dynamic,
                }
                row = {"row": label, "round": r, **run_row(spec, args.timeout)}
                if "error" not in row:
                    row["of_trial"] = share(row, trial_steps)
                results.append(row)
                print(json.dumps(row), flush=True)
    print(
        f"# {os.cpu_count()} CPUs, one thread a process, {args.rounds} round(s), "
        f"{time.perf_counter() - t0:.0f} s in all; a quickstart trial: {trial_steps} steps"
    )
    print(f"{'row':40}{'compile_s':>11}{'step_s':>9}{'of a trial':>12}{'hit':>5}{'miss':>6}")
    for row in results:
        if "error" in row:
            print(f"{row['row']:40}  {row['error']}")
            continue
        print(
            f"{row['row']:40}{row['compile_s']:>11.1f}{row['step_s']:>9.3f}"
            f"{row['of_trial']:>12.1%}{row['hit']:>5}{row['miss']:>6}"
        )
    out = args.out or Path(tempfile.gettempdir()) / "tlmsearch-compile-cache-bench.json"
    out.write_text(json.dumps({"rows": results, "trial_steps": trial_steps}, indent=1))
    print(f"# JSON: {out}")


if __name__ == "__main__":
    main()
