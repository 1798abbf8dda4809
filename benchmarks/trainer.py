"""Trainer speed: ``train_proxy`` vs a minimal hand-written loop, and the best CPU setup.

Run: ``.venv/bin/python benchmarks/trainer.py [--study studies/quickstart.yaml] [--tokens N]``.

0. Step ratio (``--step-ratio``; also the first line of a full run): ``Trainer.step`` against a
   hand-written step (full logits, ``F.cross_entropy``) on the same model, weights and batches,
   alternating step by step in one process, median hand time / median Trainer time (goal
   >= 1.0). Quickstart size (vocab 16384, d 128, 2048 tokens per step), bf16, 1 thread, on
   this 2-core machine shared with 7 other processes: 1.068 (30 steps, load ~25), 1.047 (40
   steps, load ~7: 549 vs 575 ms a step), 1.029 (40 steps, load ~5: 794 vs 817 ms), 1.429
   (30 steps, beside main's overhead run) and 1.029 (40 steps, load ~3: 350 vs 360 ms). The
   chunked loss (tlmsearch/train/loss.py) is most of the gain: the head's forward and backward at
   2048 x 16384 took 1079 ms, the fp32-logits path 1242 ms (load ~7). Main has no Trainer
   object, so no step ratio before: its overhead ratio below is the before.
1. Overhead: tokens/s of ``train_proxy`` and of a plain PyTorch loop over the same model, data,
   dtype and batch, interleaved rounds, median (goal: ratio >= 0.98), with huge pages. On the
   loaded machine whole runs swing 2-4x between rounds: before the Trainer (main at
   1003008) 0.885 (3 rounds, load ~25), 0.793 (7 rounds), 0.973 (5 rounds, load ~5:
   4342 vs 4462 tokens/s) and 0.989 (5 rounds, load ~4: 3207 vs 3242); after, 0.796, 1.466,
   1.53 (4897 vs 3200, a noisy round, beside main's) and 1.187 (5 rounds, load ~3: 5804 vs
   4891, every round above 1); the step ratio above is the measurement to trust.
   ``..._of_bf16_peak`` is the share of the 1-thread bf16 matmul peak (the calibration cached
   on the machine, 1546 GFLOP/s; 19.7 MFLOP a token): after, 0.074 for train_proxy and 0.062
   for the hand loop (load ~3); before, 0.041 (main's 3207 tokens/s, load ~4).
2. Setup: at the study's proxy size, fp32 vs bf16 autocast, eager vs ``torch.compile``, 1 vs 2
   threads, one process vs one 1-thread process per core (and one more than cores) side by
   side. Each setup runs in its own process; throughput excludes the first (compiling) step
   and evals. Achieved FLOP/s is quoted against the bf16 matmul peak measured for the whole
   machine (all threads). Rows use the trainer's ``attention: auto`` (the math kernel at
   seq_len <= 256 on a CPU) except the one that names ``attention: default`` (torch's flash
   kernel), measured for comparison; ``thp`` rows run with PyTorch's huge pages, as trials do.
3. Checkpoints (``--checkpoint``): at the study's proxy size, the seconds to write one trial
   checkpoint (``tlmsearch.train.checkpoints.write_checkpoint``: torch.save, fsync, sha256,
   renames) and to load and verify it, its bytes and bytes per parameter (weights + AdamW moments +
   the rest); at 440M (studies/paper_440m.yaml) the bytes estimated as bytes per parameter x its
   parameters and the seconds from the write bandwidth measured here.
The machine may be shared: trust ratios measured side by side more than absolute numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _load(study: str, tokens: int) -> tuple:
    from tlmsearch.config import load_study

    cfg = load_study(study)
    train = cfg.train.model_copy(
        update={"tokens": tokens, "warmup_tokens": min(cfg.train.warmup_tokens, tokens // 4)}
    )
    train = train.model_copy(update={"eval_every_tokens": tokens})
    return cfg, train


def hand_loop(model_cfg, widths, data, train_cfg, seed: int, dtype) -> float:
    """The minimal loop: tokens/s over all steps but the first."""
    import contextlib

    import torch
    import torch.nn.functional as F

    from tlmsearch.data.batches import Batches
    from tlmsearch.models import build_model
    from tlmsearch.train.runtime import attention_context, attention_kernel, batch_shape

    torch.manual_seed(seed)
    model = build_model(model_cfg, widths, data.vocab_size, seed=seed)  # as train_proxy
    opt = torch.optim.AdamW(
        model.param_groups(train_cfg.weight_decay),
        lr=train_cfg.lr,
        betas=train_cfg.betas,
        fused=True,  # as train_proxy: the comparison measures its overhead, not the optimizer
    )
    batches = Batches(data.train_tokens(), data.seq_len, seed=seed)
    micro, accum = batch_shape(train_cfg, data.seq_len)
    step_tokens = micro * accum * data.seq_len
    steps = max(2, train_cfg.tokens // step_tokens)
    amp = (
        torch.autocast("cpu", dtype=torch.bfloat16)
        if dtype == torch.bfloat16
        else contextlib.nullcontext()
    )
    kernel = attention_kernel(train_cfg, torch.device("cpu"), data.seq_len)  # as train_proxy
    t0 = 0.0
    for step in range(steps):
        if step == 1:
            t0 = time.perf_counter()
        for _ in range(accum):
            x, y = batches.next(micro)
            with amp, attention_context(kernel):
                logits = model(x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            (loss / accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        model.before_optimizer_step(step)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return (steps - 1) * step_tokens / (time.perf_counter() - t0)


def overhead(study: str, tokens: int, rounds: int, threads: int) -> dict:
    import torch

    from tlmsearch.data import prepare_data
    from tlmsearch.train.loop import train_proxy
    from tlmsearch.train.mfu import cpu_peak
    from tlmsearch.train.runtime import resolve_dtype

    torch.set_num_threads(threads)
    cfg, train = _load(study, tokens)
    train = train.model_copy(update={"compile": "off"})
    data = prepare_data(cfg.data, progress=False)
    widths = [cfg.model.d_ff_uniform] * cfg.model.n_layer
    dtype = resolve_dtype(train, torch.device("cpu"))
    ours, hand = [], []
    fpt = 0.0
    for _ in range(rounds):
        s = train_proxy(cfg.model, widths, data, train, seed=0, threads=threads)
        ours.append(s.metrics["tokens_per_s"])
        fpt = s.flops_per_token
        hand.append(hand_loop(cfg.model, widths, data, train, 0, dtype))
    o, h = statistics.median(ours), statistics.median(hand)
    peak = threads * cpu_peak(1)  # the bf16 matmul peak of the threads that ran
    return {
        "train_proxy_tokens_per_s": round(o),
        "hand_loop_tokens_per_s": round(h),
        "ratio": round(o / h, 3),
        "train_proxy_of_bf16_peak": round(o * fpt / peak, 4),
        "hand_loop_of_bf16_peak": round(h * fpt / peak, 4),
        "rounds": rounds,
        "dtype": str(dtype),
        "threads": threads,
        "raw": {"train_proxy": [round(v) for v in ours], "hand": [round(v) for v in hand]},
    }


def step_ratio(study: str, steps: int, threads: int) -> dict:
    """The Trainer's step time against a hand-written step on the same model and batches,
    interleaved step by step in this process (load on a shared machine hits both alike):
    median hand step time / median Trainer step time (>= 1: the Trainer is not slower)."""
    import copy

    import torch
    import torch.nn.functional as F

    from tlmsearch.data import prepare_data
    from tlmsearch.data.batches import Batches
    from tlmsearch.train.runtime import attention_context, autocast_context
    from tlmsearch.train.trainer import Trainer

    torch.set_num_threads(threads)
    cfg, train = _load(study, 10**9)
    train = train.model_copy(update={"compile": "off"})
    data = prepare_data(cfg.data, progress=False)
    widths = [cfg.model.d_ff_uniform] * cfg.model.n_layer
    t = Trainer(cfg.model, widths, data, train, seed=0, threads=threads)
    model = copy.deepcopy(t.model)  # the same weights, its own optimizer and batches
    opt = torch.optim.AdamW(
        model.param_groups(train.weight_decay), lr=train.lr, betas=train.betas, fused=True
    )
    batches = Batches(data.train_tokens(), data.seq_len, seed=0)
    kernel = t.setup["attention"]

    def hand_step(step: int) -> None:
        for _ in range(t.accum):
            x, y = batches.next(t.micro)
            with autocast_context(t.device, t.dtype), attention_context(kernel):
                logits = model(x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten())
            (loss / t.accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train.grad_clip)
        model.before_optimizer_step(step)
        opt.step()
        opt.zero_grad(set_to_none=True)

    ours, hand = [], []
    try:
        for step in range(steps + 1):  # the first of each: warm-up, not timed
            t0 = time.perf_counter()
            t.step()
            t1 = time.perf_counter()
            hand_step(step)
            t2 = time.perf_counter()
            if step:
                ours.append(t1 - t0)
                hand.append(t2 - t1)
    finally:
        t.close()
    o, h = statistics.median(ours), statistics.median(hand)
    return {
        "trainer_step_ms": round(o * 1e3, 1),
        "hand_step_ms": round(h * 1e3, 1),
        "ratio": round(h / o, 3),
        "steps": steps,
        "step_tokens": t.step_tokens,
        "dtype": str(t.dtype),
        "threads": threads,
    }


def one(study: str, tokens: int, setup: dict) -> dict:
    """One setup in this process: train_proxy's tokens/s and its FLOPs per token."""
    from tlmsearch.data import prepare_data
    from tlmsearch.train.loop import train_proxy

    cfg, train = _load(study, tokens)
    train = train.model_copy(
        update={k: setup[k] for k in ("dtype", "compile", "attention") if k in setup}
    )
    data = prepare_data(cfg.data, progress=False)
    widths = [cfg.model.d_ff_uniform] * cfg.model.n_layer
    t0 = time.perf_counter()
    s = train_proxy(cfg.model, widths, data, train, seed=0, threads=setup["threads"])
    return {
        "tokens_per_s": s.metrics["tokens_per_s"],
        "flops_per_token": s.flops_per_token,
        "wall_s": time.perf_counter() - t0,
        "val_bpb": s.metrics["val_bpb"],
    }


def machine_peak() -> float:
    """bf16 matmul peak of all cores: the all-thread calibration, or cores x the 1-thread one
    when that is higher (a calibration taken while another process used a core reads low)."""
    from tlmsearch.train.mfu import cpu_peak

    ncpu = os.cpu_count() or 1
    return max(cpu_peak(ncpu), ncpu * cpu_peak(1))


def _spawn(study: str, tokens: int, setup: dict, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--study", study, "--tokens", str(tokens)]
    cmd += ["--one", json.dumps(setup)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env)


def setups(study: str, tokens: int, full: bool) -> list[dict]:
    from tlmsearch.train.mfu import cpu_has_bf16

    ncpu = os.cpu_count() or 1
    peak = machine_peak()
    bf16 = "bf16" if cpu_has_bf16() else "fp32"
    grid = [
        {"dtype": "fp32", "compile": "off", "threads": 1, "procs": 1},
        {"dtype": bf16, "compile": "off", "threads": 1, "procs": 1},
        {"dtype": "fp32", "compile": "on", "threads": 1, "procs": 1},
        {"dtype": bf16, "compile": "on", "threads": 1, "procs": 1},
        {"dtype": bf16, "compile": "on", "threads": ncpu, "procs": 1},
        {"dtype": bf16, "compile": "on", "threads": 1, "procs": ncpu},
        {"dtype": bf16, "compile": "on", "threads": 1, "procs": 1, "thp": True},
        {"dtype": bf16, "compile": "on", "threads": 1, "procs": 1, "attention": "default"},
        {"dtype": bf16, "compile": "on", "threads": 1, "procs": ncpu, "thp": True},
        # One more process than cores: the quickstart runs its 3 trials at once on 2 cores.
        {"dtype": bf16, "compile": "on", "threads": 1, "procs": ncpu + 1, "thp": True},
    ]
    if full:
        grid += [
            {"dtype": bf16, "compile": "off", "threads": ncpu, "procs": 1},
            {"dtype": bf16, "compile": "off", "threads": 1, "procs": ncpu},
        ]
    rows = []
    for s in grid:
        env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
        if s.get("thp"):
            env["THP_MEM_ALLOC_ENABLE"] = "1"  # PyTorch's huge pages for CPU tensors
        setup = {k: s.get(k, "auto") for k in ("dtype", "compile", "threads", "attention")}
        procs = [_spawn(study, tokens, setup, env) for _ in range(s["procs"])]
        outs = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]
        total = sum(o["tokens_per_s"] for o in outs)
        fpt = outs[0]["flops_per_token"]
        row = {
            **s,
            "tokens_per_s": round(total),
            "achieved_gflops": round(total * fpt / 1e9, 1),
            "of_bf16_peak": round(total * fpt / peak, 3),
            "wall_s": round(max(o["wall_s"] for o in outs), 1),
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    return rows


def checkpoint_cost(study: str, tokens: int, big: str) -> dict:
    """Seconds and bytes per checkpoint at ``study``'s size, estimated at ``big``'s."""
    import tempfile

    from tlmsearch.config import load_study
    from tlmsearch.data import prepare_data
    from tlmsearch.train import checkpoints
    from tlmsearch.train.loop import train_proxy
    from tlmsearch.widths.budget import trial_counts

    cfg, train = _load(study, tokens)
    every = tokens // 4
    train = train.model_copy(
        update={"compile": "off", "eval_every_tokens": every, "checkpoint_every_tokens": every}
    )
    data = prepare_data(cfg.data, progress=False)
    widths = [cfg.model.d_ff_uniform] * cfg.model.n_layer
    states: list[dict] = []
    s = train_proxy(cfg.model, widths, data, train, seed=0, threads=1, on_checkpoint=states.append)
    writes, loads, sizes = [], [], []
    with tempfile.TemporaryDirectory(dir=ROOT) as tmp:  # the disk runs dirs live on
        for i, state in enumerate(states):
            t0 = time.perf_counter()
            folder = checkpoints.write_checkpoint(
                Path(tmp) / f"checkpoint_{i:06d}",
                state,
                {
                    "number": 0,
                    "candidate": {},
                    "seed": 0,
                    "widths": widths,
                    "tokens": state["tokens"],
                    "model": {},
                    "arch": cfg.model.arch,
                },
            )
            writes.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            assert checkpoints.load_checkpoint(folder) is not None
            loads.append(time.perf_counter() - t0)
            sizes.append((folder / checkpoints.STATE).stat().st_size)
    write_s, size = statistics.median(writes), statistics.median(sizes)
    per_param = size / s.n_params
    big_cfg = load_study(big)
    big_model = big_cfg.model
    big_params = trial_counts(
        big_model,
        [big_model.d_ff_uniform] * big_model.n_layer,
        big_model.vocab_size or 128_256,
        big_cfg.data.seq_len,
    )["n_params"]
    bandwidth = size / write_s
    return {
        "n_params": s.n_params,
        "checkpoints": len(states),
        "bytes": int(size),
        "bytes_per_param": round(per_param, 2),
        "write_s": round(write_s, 4),
        "load_verify_s": round(statistics.median(loads), 4),
        "write_MB_per_s": round(bandwidth / 1e6, 1),
        "at_440m": {
            "n_params": big_params,
            "bytes_est": int(per_param * big_params),
            "GB_est": round(per_param * big_params / 1e9, 2),
            "write_s_est": round(per_param * big_params / bandwidth, 1),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(ROOT / "studies/quickstart.yaml"))
    ap.add_argument("--tokens", type=int, default=150_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40, help="interleaved steps of --step-ratio")
    ap.add_argument("--step-ratio", action="store_true", help="only the interleaved step ratio")
    ap.add_argument("--full", action="store_true", help="also eager at 2 threads / 2 procs")
    ap.add_argument("--skip-overhead", action="store_true")
    ap.add_argument("--skip-setups", action="store_true")
    ap.add_argument("--checkpoint", action="store_true", help="only the checkpoint cost")
    ap.add_argument("--big", default=str(ROOT / "studies/paper_440m.yaml"))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.step_ratio:
        print(json.dumps({"step_ratio": step_ratio(args.study, args.steps, 1)}))
        return
    if args.checkpoint:
        print(json.dumps({"checkpoint": checkpoint_cost(args.study, 40_000, args.big)}))
        return
    if not args.one:
        # The overhead rounds run in this process as trials do: with PyTorch's huge pages
        # (train.thp, read at the first allocation). Setups choose theirs per row.
        os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    if args.one:
        print(json.dumps(one(args.study, args.tokens, json.loads(args.one))))
        return
    from tlmsearch.train.mfu import cpu_name, cpu_peak

    ncpu = os.cpu_count() or 1
    # Calibrate again in this run, beside the rows it divides: a cached peak taken on a busy
    # machine reads low and would inflate every ratio (the cache keeps the higher value).
    all_threads, one_thread = cpu_peak(ncpu, recalibrate=True), cpu_peak(1, recalibrate=True)
    print(
        f"# {cpu_name()}, {ncpu} CPUs; bf16 matmul peak {all_threads / 1e9:.0f} GFLOP/s "
        f"({ncpu} threads), {one_thread / 1e9:.0f} GFLOP/s (1 thread); machine peak used "
        f"{machine_peak() / 1e9:.0f} GFLOP/s",
        flush=True,
    )
    if not args.skip_overhead:
        print(json.dumps({"step_ratio": step_ratio(args.study, args.steps, 1)}), flush=True)
        print(
            json.dumps({"overhead": overhead(args.study, args.tokens // 2, args.rounds, 1)}),
            flush=True,
        )
    if not args.skip_setups:
        rows = setups(args.study, args.tokens, args.full)
        best = max(rows, key=lambda r: r["tokens_per_s"])
        print(json.dumps({"best": best}))


if __name__ == "__main__":
    main()
