"""The quickstart's three trials on this CPU: one trial array vs three processes, side by side.

Run: ``python benchmarks/trial_array.py`` (about 2 minutes on 2 cores; ``--quick``: tiny, for
the test; ``--compile``: both setups under torch.compile, as ``studies/quickstart.yaml`` runs,
minutes more of compiling).

The three candidates of ``studies/quickstart.yaml`` (uniform, the cosine taper 1.5 -> 0.5 and
its mirror 0.5 -> 1.5) at its proxy size (4 x 128, d_ff 512, seq 128, 2048-token steps, vocab
16384 untied, bf16 autocast where the CPU has it; the bytes of this repository's README and
docs as data, the vocabulary padded to 16384 as in ``benchmarks/gpu.py``), trained

- as three processes at once, one thread each (what the quickstart does: ``ray.cpus_per_trial:
  0.5``), each through ``train_proxy`` (``benchmarks/gpu.py --one``: they wait for each other
  after a warm-up window, then time ``--seconds`` of steps each);
- as one :class:`tlmsearch.train.trial_array.TrialArray` of the three in one process with every
  core's thread, timed the same way (the first eval window is the warm-up).

Both count only training steps (evals and the first step excluded: each member's eval rows'
tokens/s, as a trial reports them). Prints every member's tokens/s and the sum for both
setups, and the ratio of the sums (the goal: >= 1.3). ``--rounds`` alternates the
setups to average out a shared machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from gpu import CPU_SIZES, GPU_SIZES, _env, data_section, prepare, wait_all  # benchmarks/gpu.py

HERE = Path(__file__).resolve().parent

CANDIDATES = {
    "uniform": {"shape": "uniform"},
    "taper": {"shape": "cosine", "r_start": 1.5, "r_end": 0.5},
    "mirror": {"shape": "cosine", "r_start": 0.5, "r_end": 1.5},
}


def _train(size: dict[str, Any], compile_: bool) -> dict[str, Any]:
    return {
        "tokens": 10**12,  # a long run at the peak LR; the setups stop themselves
        "warmup_tokens": 2 * size["train"]["batch_tokens"],
        "eval_every_tokens": size["chunk"] * size["train"]["batch_tokens"],
        "compile": "on" if compile_ else "off",
        **size["train"],
    }


def array_one(spec: dict[str, Any]) -> dict[str, Any]:
    """The three as one array in this process, timed for ``spec["seconds"]`` after one
    warm-up eval window: each member's tokens/s from its eval rows."""
    from tlmsearch.config import DataConfig, ModelConfig, TrainConfig
    from tlmsearch.data import prepare_data
    from tlmsearch.train.trial_array import Member, TrialArray

    model = ModelConfig(**spec["model"])
    data = prepare_data(DataConfig(**spec["data"]), progress=False)
    train = TrainConfig(**{**spec["train"], "compile": "off"})
    members = [
        Member(model, tuple(model.plan(c).widths), train, seed=0)
        for c in spec["candidates"].values()
    ]
    arr = TrialArray(
        members,
        data,
        device="cpu",
        threads=spec["threads"],
        compile=spec["train"]["compile"] == "on",
    )
    timed = [{"tokens": 0, "time": 0.0} for _ in members]
    windows, last = 0, [0] * len(members)
    try:
        while not arr.done:
            arr.step()
            due = arr.evals_due()
            for i in due:
                row = arr.evaluate(i)
                assert row is not None, arr.trainers[i].reason
                window = row["tokens"] - last[i]
                last[i] = row["tokens"]
                if windows >= 1:  # the first window is the warm-up
                    timed[i]["tokens"] += window
                    timed[i]["time"] += window / row["tokens_per_s"]
            if due:
                windows += 1
                if min(t["time"] for t in timed) >= spec["seconds"]:
                    for i in arr.active:
                        arr.drop(i, "timed")
        first_step_s = max(t.setup["first_step_s"] for t in arr.trainers)
    finally:
        arr.close()
    return {
        "tokens_per_s": {
            name: t["tokens"] / t["time"]
            for name, t in zip(spec["candidates"], timed, strict=True)
        },
        "timed_s": min(t["time"] for t in timed),
        "first_step_s": first_step_s,
    }


def run_array(size: dict[str, Any], args: Any, tmp: Path) -> dict[str, Any]:
    spec = {
        "model": size["model"],
        "data": data_section(size, str(tmp / "cache")),
        "train": _train(size, args.compile),
        "candidates": CANDIDATES,
        "threads": args.threads,
        "seconds": args.seconds,
    }
    cmd = [sys.executable, __file__, "--array-one", json.dumps(spec)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=args.timeout)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-1500:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_processes(size: dict[str, Any], args: Any, tmp: Path) -> dict[str, Any]:
    """Three ``benchmarks/gpu.py --one`` processes at once, one candidate each."""
    sync = Path(tempfile.mkdtemp(dir=tmp))
    spec = {
        "model": size["model"],
        "data": data_section(size, str(tmp / "cache")),
        "train": _train(size, args.compile),
        "device": "cpu",
        "threads": 1,
        "seconds": args.seconds,
        "timeout": args.timeout,
        "sync": str(sync),
        "n": len(CANDIDATES),
    }
    children = []
    for i, cand in enumerate(CANDIDATES.values()):
        with open(sync / f"out.{i}", "w") as out, open(sync / f"err.{i}", "w") as err:
            argv = [
                sys.executable,
                str(HERE / "gpu.py"),
                "--one",
                json.dumps({**spec, "candidate": cand, "index": i}),
            ]
            children.append(subprocess.Popen(argv, stdout=out, stderr=err, env=_env()))
    outs, errors = wait_all(children, sync, time.perf_counter() + args.timeout)
    if errors:
        raise RuntimeError(errors[0])
    return {
        "tokens_per_s": {
            name: o["tokens_per_s"] for name, o in zip(CANDIDATES, outs, strict=True)
        },
        "timed_s": min(o["timed_s"] for o in outs),
        "first_step_s": max(o["first_step_s"] for o in outs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a tiny size (tests)")
    ap.add_argument("--compile", action="store_true", help="both setups under torch.compile")
    ap.add_argument("--seconds", type=float, default=None, help="timed seconds a setup")
    ap.add_argument("--rounds", type=int, default=1, help="alternating rounds of both setups")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="array threads")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds a setup at most")
    ap.add_argument("--out", type=Path, default=None, help="JSON (default: a temp dir)")
    ap.add_argument("--array-one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.array_one:
        print(json.dumps(array_one(json.loads(args.array_one))), flush=True)
        return
    size = CPU_SIZES["tiny-32"] if args.quick else GPU_SIZES["quickstart"]
    if not args.quick:
        size = {**size, "chunk": 4}  # 4 steps an eval window (~2-4 s here)
    args.seconds = args.seconds or (1.0 if args.quick else 30.0)
    t0 = time.perf_counter()
    results: dict[str, list[dict[str, Any]]] = {"array": [], "processes": []}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        prepare(size, tmp)
        for _ in range(args.rounds):
            results["array"].append(run_array(size, args, tmp))
            print(json.dumps({"array": results["array"][-1]}), flush=True)
            results["processes"].append(run_processes(size, args, tmp))
            print(json.dumps({"processes": results["processes"][-1]}), flush=True)
    mean = {
        setup: {c: sum(r["tokens_per_s"][c] for r in rs) / len(rs) for c in CANDIDATES}
        for setup, rs in results.items()
    }
    total = {setup: sum(m.values()) for setup, m in mean.items()}
    ratio = total["array"] / total["processes"]
    width = max(len(c) for c in CANDIDATES) + 2
    print(
        f"# {os.cpu_count()} CPUs, {'compiled' if args.compile else 'eager'}, "
        f"{args.seconds:g} s timed a setup, {args.rounds} round(s), "
        f"{time.perf_counter() - t0:.0f} s in all; tokens/s:"
    )
    print("setup".ljust(22) + "".join(c.rjust(width + 6) for c in CANDIDATES) + "all".rjust(12))
    for setup, label in (
        ("processes", "3 processes x 1 thread"),
        ("array", f"array x {args.threads} threads"),
    ):
        print(
            label.ljust(22)
            + "".join(f"{mean[setup][c]:>{width + 6},.0f}" for c in CANDIDATES)
            + f"{total[setup]:>12,.0f}"
        )
    print(f"array / processes: {ratio:.2f}x (goal >= 1.3)")
    out = args.out or Path(tempfile.gettempdir()) / "tlmsearch-trial-array-bench.json"
    out.write_text(
        json.dumps(
            {
                "rounds": results,
                "mean": mean,
                "total": total,
                "ratio": ratio,
                "compile": args.compile,
            },
            indent=1,
        )
    )
    print(f"# JSON: {out}")


if __name__ == "__main__":
    main()
