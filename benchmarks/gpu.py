"""The GPU path: tokens/s and MFU of uniform vs tapered models, 1 vs 4 trials a device, a search.

Run: ``python benchmarks/gpu.py`` on a machine with a CUDA GPU (one GPU, under 8 minutes), or
``python benchmarks/gpu.py --cpu`` anywhere (tiny sizes, 1-2 minutes on 2 cores; ``--quick``:
shorter still, for the test: 1 and 2 trials at once instead of 1 and 4).

1. Throughput. Two sizes: on a GPU the quickstart's proxy (4 x 128, seq 128, 2048-token steps,
   vocab 16384) and a ~125M model (12 x 768, d_ff 2048, seq 1024, vocab 50304 tied: GPT-2
   small's size); with ``--cpu`` two tiny ones. At each, the uniform model and the paper's
   cosine 1.5 -> 0.5 taper (the same parameters and FLOPs), each as 1 trial and as 4 trials at
   once on the one device (4 processes). Every process trains through ``train_proxy``, as a
   trial does (bf16 autocast where the device has it, ``torch.compile`` on a GPU, fused AdamW,
   pinned batches, flash attention), on this repository's README and docs as bytes (the model's
   vocabulary padded to the size's, so the output layer costs what it would). The first step
   (the compile) is reported as compile_s; the processes of a row warm up, wait for each other,
   then are timed for ``--seconds`` of training steps each (evals excluded). tokens/s per trial
   is their mean, "all" their sum; MFU is the sum x FLOPs per token (``tlmsearch.widths.budget``)
   against the device's peak: the GPU's data-sheet peak for the precision that ran
   (``tlmsearch.train.mfu``), or the CPU's matmul peak of all cores (``trainer.machine_peak``: the
   cached calibration, the highest so far; ``python -m tlmsearch.train.mfu`` measures it again).
   "vs uniform" is a taper row's tokens/s over the uniform row's.
2. Search: a 2-trial study (uniform and the taper at the first size) through ``tlmsearch run``
   in a temporary directory, end to end: Ray's start, the data, both trials at once (on a GPU
   each gets half of it, ``ray.gpus_per_trial: 0.5``), the report. Its wall time, and the
   trials' own tokens/s and MFU.

3. Trial arrays (``--array``: only these rows, ``benchmarks/gpu_array.py``, which needs neither
   Ray nor Optuna): K = 1, 4, 16, 64 quickstart-size members in one process.

Prints one table and writes every number as JSON (``--out``). A row that fails shows its error
and the rest still run. Time: the throughput rows share ``--budget-s`` (a row that would start
after it is skipped and says so), the search has ``--search-timeout``: on a GPU 340 + 110 s, so
the whole run stays under 8 minutes.
The goals: >= 40% MFU at 125M on an H200, and no measurable gap between uniform and
tapered. GPU numbers are open until this runs on one (none are quoted here).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CORPUS = [str(ROOT / "README.md"), str(ROOT / "docs")]
TAPER = {"shape": "cosine", "r_start": 1.5, "r_end": 0.5}
CANDIDATES = {"uniform": {"shape": "uniform"}, "taper": TAPER}

# name -> model, data and train sections; chunk: steps between timing points (evals)
GPU_SIZES: dict[str, dict[str, Any]] = {
    "quickstart": {
        "model": {
            "n_layer": 4,
            "d_model": 128,
            "n_head": 4,
            "d_ff": 512,
            "multiple_of": 32,
            "tie_embeddings": False,
            "vocab_size": 16384,
        },
        "seq_len": 128,
        "train": {"batch_tokens": 2048, "micro_batch_size": 16, "lr": 0.0025},
        "chunk": 50,
    },
    "125m": {
        "model": {
            "n_layer": 12,
            "d_model": 768,
            "n_head": 12,
            "d_ff": 2048,
            "multiple_of": 64,
            "tie_embeddings": True,
            "vocab_size": 50304,
        },
        "seq_len": 1024,
        "train": {"batch_tokens": 16384, "micro_batch_size": 16, "lr": 0.0006},
        "chunk": 10,
    },
}
CPU_SIZES: dict[str, dict[str, Any]] = {
    "tiny-32": {
        "model": {
            "n_layer": 2,
            "d_model": 32,
            "n_head": 2,
            "d_ff": 64,
            "multiple_of": 16,
            "vocab_size": 1024,
        },
        "seq_len": 64,
        "train": {"batch_tokens": 1024, "micro_batch_size": 16, "lr": 0.003},
        "chunk": 4,
    },
    "tiny-64": {
        "model": {
            "n_layer": 4,
            "d_model": 64,
            "n_head": 4,
            "d_ff": 256,
            "multiple_of": 16,
            "vocab_size": 4096,
        },
        "seq_len": 128,
        "train": {"batch_tokens": 2048, "micro_batch_size": 16, "lr": 0.003},
        "chunk": 4,
    },
}


# -------------------------------------------------------------------------------------------------
# One trial's process (--one)


def data_section(size: dict[str, Any], cache: str) -> dict[str, Any]:
    seq = size["seq_len"]
    return {
        "sources": CORPUS,
        "tokenizer": {"kind": "bytes"},
        "seq_len": seq,
        "val_tokens": 1 + 2 * seq,  # evals are timing points here: keep them short
        "cache_dir": cache,
    }


def one(spec: dict[str, Any]) -> dict[str, Any]:
    """Train one trial until it has been timed for ``spec["seconds"]`` alongside the others.

    Each eval is a timing point. The process writes ``ready.<i>`` after its warm-up window,
    times only windows that start once all ``n`` processes are ready, writes ``done.<i>``
    after ``seconds`` of them and trains on (so the others keep their contention) until all
    are done.
    """
    import torch

    from tlmsearch.config import DataConfig, ModelConfig, TrainConfig
    from tlmsearch.data import prepare_data
    from tlmsearch.train.loop import train_proxy

    model = ModelConfig(**spec["model"])
    data = prepare_data(DataConfig(**spec["data"]), progress=False)
    train = TrainConfig(**spec["train"])
    sync, n, i = Path(spec["sync"]), spec["n"], spec["index"]
    deadline = time.monotonic() + 0.9 * spec["timeout"]
    state = {"timing": False, "tokens": 0, "time": 0.0, "last": 0, "done": False}

    def all_there(kind: str) -> bool:
        return len(list(sync.glob(f"{kind}.*"))) >= n

    def on_eval(row: dict[str, Any]) -> str | None:
        window = row["tokens"] - state["last"]
        state["last"] = row["tokens"]
        if time.monotonic() > deadline:
            return "stop"
        if not state["timing"]:
            (sync / f"ready.{i}").touch()
            state["timing"] = all_there("ready")  # from the next window on
            return None
        if not state["done"]:
            state["tokens"] += window
            state["time"] += window / row["tokens_per_s"]
            if state["time"] >= spec["seconds"]:
                state["done"] = True
                (sync / f"done.{i}").touch()
        return "stop" if state["done"] and all_there("done") else None

    widths = model.plan(spec["candidate"]).widths
    s = train_proxy(
        model,
        widths,
        data,
        train,
        seed=0,
        threads=spec.get("threads"),
        on_eval=on_eval,
        device=spec["device"],
    )
    cuda = s.setup["device"].startswith("cuda")
    return {
        "status": s.status,
        "reason": s.reason,
        "tokens_per_s": state["tokens"] / state["time"] if state["time"] else math.nan,
        "timed_s": state["time"],
        "flops_per_token": s.flops_per_token,
        "n_params": s.n_params,
        "peak_flops": s.setup["peak_flops"],
        "first_step_s": s.setup["first_step_s"],
        "dtype": s.setup["dtype"],
        "compile": s.setup["compile"],
        "mem_gb": torch.cuda.max_memory_allocated() / 1e9 if cuda else None,
    }


# -------------------------------------------------------------------------------------------------
# Rows


def prepare(size: dict[str, Any], tmp: Path) -> None:
    from tlmsearch.config import DataConfig
    from tlmsearch.data import prepare_data

    prepare_data(DataConfig(**data_section(size, str(tmp / "cache"))), progress=False)


def _env() -> dict[str, str]:
    from tlmsearch.config import TrainConfig

    return {**os.environ, "PYTHONPATH": str(ROOT), **TrainConfig().process_env()}


def _error(proc: Any, err: str) -> str:
    """The exception of a traceback with the two lines after it (pydantic puts the field and
    the reason there), else the last line."""
    lines = [x.strip() for x in (err or "").splitlines() if x.strip()]
    heads = [i for i, x in enumerate(lines) if re.match(r"[\w.]+(Error|Exception|Exit)\b", x)]
    text = " | ".join(lines[heads[-1] : heads[-1] + 3]) if heads else (lines or [""])[-1]
    return text[:200] or f"exit {proc.returncode}"


def wait_all(
    children: list[subprocess.Popen], sync: Path, deadline: float
) -> tuple[list[dict], list[str]]:
    """Each child's JSON line (``sync/out.<i>``), or the errors (``sync/err.<i>``); the first
    failure (or the deadline) ends all: the others would wait for it at their barrier."""
    failed = False
    while any(c.poll() is None for c in children):
        failed = any(c.returncode not in (None, 0) for c in children)
        if failed or time.perf_counter() > deadline:
            for c in children:
                if c.poll() is None:
                    c.kill()
            break
        time.sleep(0.2)
    outs, errors = [], []
    for i, c in enumerate(children):
        c.wait()
        if c.returncode == 0:
            outs.append(json.loads((sync / f"out.{i}").read_text().strip().splitlines()[-1]))
        elif c.returncode < 0 and not errors:
            errors.append("stopped: " + ("another trial failed" if failed else "timed out"))
        elif c.returncode > 0:  # a real error goes before the kills it caused
            errors.insert(0, _error(c, (sync / f"err.{i}").read_text()))
    return outs, errors


def throughput_row(
    name: str, size: dict[str, Any], kind: str, procs: int, args: Any, tmp: Path, timeout: float
) -> dict[str, Any]:
    """``procs`` processes of one candidate at once on the device: tokens/s and MFU."""
    sync = Path(tempfile.mkdtemp(dir=tmp))
    train = {
        "tokens": 10**12,  # a long run (constant peak LR); the processes stop themselves
        "warmup_tokens": 2 * size["train"]["batch_tokens"],
        "eval_every_tokens": size["chunk"] * size["train"]["batch_tokens"],
        "compile": "off" if args.cpu else "on",
        **size["train"],
    }
    spec = {
        "model": size["model"],
        "data": data_section(size, str(tmp / "cache")),
        "train": train,
        "candidate": CANDIDATES[kind],
        "device": "cpu" if args.cpu else "cuda",
        "threads": 1 if args.cpu else None,  # on a CPU, one thread a trial (as the quickstart's)
        "seconds": args.seconds,
        "timeout": timeout,
        "sync": str(sync),
        "n": procs,
    }
    row: dict[str, Any] = {"size": name, "model": kind, "trials": procs}
    t0 = time.perf_counter()
    cmd = [sys.executable, __file__, "--one"]
    children = []
    for i in range(procs):  # output to files: a full pipe nobody reads would stall a child
        with open(sync / f"out.{i}", "w") as out, open(sync / f"err.{i}", "w") as err:
            argv = [*cmd, json.dumps({**spec, "index": i})]
            children.append(subprocess.Popen(argv, stdout=out, stderr=err, env=_env()))
    outs, errors = wait_all(children, sync, t0 + timeout)
    row["wall_s"] = time.perf_counter() - t0
    bad = [o["reason"] for o in outs if o["status"] == "diverged"]
    bad += [f"not timed ({o['reason']})" for o in outs if not o["tokens_per_s"] > 0]
    if errors or bad:
        row["error"] = (errors + bad)[0]
        return row
    short = min(o["timed_s"] for o in outs)
    if short < args.seconds:  # stopped by the row's deadline: numbers from a shorter window
        row["error"] = f"timed {short:.1f} of {args.seconds:g} s (row deadline)"
    tps = [o["tokens_per_s"] for o in outs]
    first = outs[0]
    row.update(
        params=first["n_params"],
        flops_per_token=first["flops_per_token"],
        tokens_per_s_trial=sum(tps) / len(tps),
        tokens_per_s_all=sum(tps),
        peak_flops=first["peak_flops"],
        compile_s=max(o["first_step_s"] for o in outs),
        timed_s=min(o["timed_s"] for o in outs),
        dtype=first["dtype"],
        compiled=first["compile"],
        mem_gb=max((o["mem_gb"] or 0.0) for o in outs) or None,
    )
    return row


def search_row(name: str, size: dict[str, Any], args: Any, tmp: Path, timeout: float) -> dict:
    """A 2-trial study (uniform, the taper) through ``tlmsearch run``, end to end."""
    import yaml

    study = {
        "name": "gpu-bench",
        "space": {
            "dimensions": {
                "shape": {"type": "fixed", "value": "cosine"},
                "r_start": {"type": "fixed", "value": 1.5},
            }
        },
        "model": size["model"],
        "data": data_section(size, str(tmp / "cache")),
        "train": {
            **size["train"],
            "tokens": args.search_tokens,
            "warmup_tokens": args.search_tokens // 10,
            "eval_every_tokens": args.search_tokens // 4,
        },
        "search": {"sampler": "grid", "pruner": "none", "concurrency": 2, "seeds": [0]},
        "storage": {"runs_dir": str(tmp / "runs")},
        "ray": {"cpus_per_trial": 1} if args.cpu else {"cpus_per_trial": 1, "gpus_per_trial": 0.5},
    }
    path = tmp / "gpu-bench.yaml"
    path.write_text(yaml.safe_dump(study, sort_keys=False))
    row: dict[str, Any] = {"size": name, "model": "uniform + taper", "trials": "2 (search)"}
    cmd = [sys.executable, "-c", "from tlmsearch.cli import main; main()", "run", str(path)]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout)
    except subprocess.TimeoutExpired:
        return {
            **row,
            "wall_s": time.perf_counter() - t0,
            "error": f"timed out after {timeout:.0f} s",
        }
    row["wall_s"] = time.perf_counter() - t0
    if proc.returncode != 0:
        return {**row, "error": _error(proc, proc.stderr or proc.stdout)}
    with open(tmp / "runs" / "gpu-bench" / "trials.csv", newline="") as f:
        trials = list(csv.DictReader(f))
    done = [t for t in trials if t["state"] == "COMPLETE"]
    if len(done) != 2:
        return {**row, "error": f"{len(done)} of {len(trials)} trials completed"}
    tps = [float(t["tokens_per_s"]) for t in done]
    row.update(
        params=int(float(done[0]["n_params"])),
        flops_per_token=float(done[0]["flops_per_token"]),
        tokens_per_s_trial=sum(tps) / 2,
        tokens_per_s_all=sum(tps),
        trial_wall_s=max(float(t["wall_s"]) for t in done),
    )
    return row


# -------------------------------------------------------------------------------------------------
# The table


def _fmt(v: Any, spec: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "-"
    return format(v, spec) if spec else str(v)


def print_table(rows: list[dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    cols = [
        "size",
        "model",
        "trials",
        "params",
        "tok/s trial",
        "tok/s all",
        "MFU all",
        "vs uniform",
        "compile_s",
        "mem GB",
        "wall_s",
        "status",
    ]
    for c in cols:
        table.add_column(c, justify="left" if c in ("size", "model", "status") else "right")
    for r in rows:
        table.add_row(
            r["size"],
            r["model"],
            str(r["trials"]),
            f"{r['params'] / 1e6:.2f}M" if r.get("params") else "-",
            _fmt(r.get("tokens_per_s_trial"), ",.0f"),
            _fmt(r.get("tokens_per_s_all"), ",.0f"),
            _fmt(r.get("mfu"), ".1%"),
            _fmt(r.get("vs_uniform"), ".3f"),
            _fmt(r.get("compile_s"), ".1f"),
            _fmt(r.get("mem_gb"), ".1f"),
            _fmt(r.get("wall_s"), ".0f"),
            r.get("error") or "ok",
        )
    Console(width=200).print(table)


def add_ratios(rows: list[dict[str, Any]], peak: float | None) -> None:
    """MFU of every row against the device's peak; a taper row's tokens/s over uniform's."""
    for r in rows:
        if r.get("tokens_per_s_all") and peak:
            r["mfu"] = r["tokens_per_s_all"] * r["flops_per_token"] / peak
    uniform = {(r["size"], r["trials"]): r for r in rows if r["model"] == "uniform"}
    for r in rows:
        base = uniform.get((r["size"], r["trials"]))
        if r["model"] == "taper" and base and base.get("tokens_per_s_all") and "error" not in r:
            r["vs_uniform"] = r["tokens_per_s_all"] / base["tokens_per_s_all"]


def main() -> None:
    if "--array" in sys.argv:  # the trial-array rows only: no Ray, no Optuna, no rich
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from gpu_array import main as array_main

        array_main([a for a in sys.argv[1:] if a != "--array"])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny sizes on this CPU")
    ap.add_argument("--quick", action="store_true", help="with --cpu: the smallest run (tests)")
    ap.add_argument("--seconds", type=float, default=None, help="timed seconds a row")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for throughput rows")
    ap.add_argument("--search-timeout", type=float, default=None, help="seconds for the search")
    ap.add_argument("--search-tokens", type=int, default=None, help="tokens a search trial")
    ap.add_argument("--out", type=Path, default=None, help="JSON (default: a temp dir)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(json.loads(args.one))), flush=True)
        return
    if args.quick:
        args.cpu = True
    gpu = not args.cpu
    sizes = GPU_SIZES if gpu else CPU_SIZES
    if args.quick:
        sizes = {"tiny-32": CPU_SIZES["tiny-32"]}
    args.seconds = args.seconds or (5.0 if gpu else 0.5 if args.quick else 2.0)
    args.budget_s = args.budget_s or (340.0 if gpu else 600.0)
    args.search_timeout = args.search_timeout or (110.0 if gpu else 300.0)
    args.search_tokens = args.search_tokens or (2_000_000 if gpu else 8192)
    t_start = time.perf_counter()

    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        device, peak = describe_device(gpu)
        print(f"# {device}", flush=True)
        rows: list[dict[str, Any]] = []
        together = (1, 2) if args.quick else (1, 4)  # --quick: two processes on the test's cores
        for name, size in sizes.items():
            prepare(size, tmp)  # once, before processes that would race to write it
            for procs in together:
                for kind in CANDIDATES:
                    left = args.budget_s - (time.perf_counter() - t_start)
                    if left < (60 if gpu else 10):
                        rows.append(
                            {
                                "size": name,
                                "model": kind,
                                "trials": procs,
                                "error": "skipped: time budget spent",
                            }
                        )
                        continue
                    try:
                        row = throughput_row(name, size, kind, procs, args, tmp, min(left, 300))
                    except Exception as err:  # the table still comes out
                        row = {
                            "size": name,
                            "model": kind,
                            "trials": procs,
                            "error": f"{type(err).__name__}: {err}"[:160],
                        }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        peak = peak or next((r["peak_flops"] for r in rows if r.get("peak_flops")), None)
        first = next(iter(sizes))
        try:
            row = search_row(first, sizes[first], args, tmp, args.search_timeout)
        except Exception as err:
            row = {
                "size": first,
                "model": "uniform + taper",
                "trials": "2 (search)",
                "error": f"{type(err).__name__}: {err}"[:160],
            }
        rows.append(row)
        print(json.dumps(row), flush=True)
        add_ratios(rows, peak)
        total = time.perf_counter() - t_start
        print_table(
            rows,
            f"{device}; peak {_fmt(peak and peak / 1e12, '.1f')} TFLOP/s; "
            f"{args.seconds:g} s timed a row; {total:.0f} s in all",
        )
        out = args.out or Path(tempfile.gettempdir()) / "tlmsearch-gpu-bench.json"
        result = {
            "device": device,
            "peak_flops": peak,
            "seconds": args.seconds,
            "total_s": total,
            "rows": rows,
        }
        out.write_text(json.dumps(result, indent=1))
        print(f"# JSON: {out}")


def describe_device(gpu: bool) -> tuple[str, float | None]:
    """The device in words, and its peak for the rows' MFU (None on a GPU: the trials' own,
    the data-sheet peak of the precision they ran)."""
    import torch

    if gpu:
        if not torch.cuda.is_available():
            sys.exit("no CUDA device: run with --cpu (tiny sizes on this CPU)")
        name = torch.cuda.get_device_name(0)
        return f"{name}, torch {torch.__version__}, CUDA {torch.version.cuda}", None
    from trainer import machine_peak  # benchmarks/trainer.py: the CPU peak of all cores

    from tlmsearch.train.mfu import cpu_name

    return f"{cpu_name()}, {os.cpu_count()} CPUs, torch {torch.__version__}", machine_peak()


if __name__ == "__main__":
    main()
