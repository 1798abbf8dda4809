"""Forward+backward throughput of every architecture: uniform vs tapered widths, fp32 vs bf16.

    python benchmarks/models.py                       # the table (6 layers, d_model 256)
    python benchmarks/models.py --multiples 16,32,64,128   # + transformer taper per multiple_of
    python benchmarks/models.py --compile --archs transformer

Runs in 1-5 minutes (rounds stop starting after ``--budget-s``). Tapered (cosine 1.5 -> 0.5)
and uniform models have exactly the same parameters and FLOPs
(tlmsearch.widths.budget); this measures whether the kernels agree. The archs with per-layer heads
(transformer, gated_attention) add ``heads cos`` (attention heads tapered 1.5 -> 0.5, MLP
uniform) and ``both cos`` (both halves tapered): what unequal heads per layer cost.
Configurations are interleaved over up to ``--rounds`` rounds and the median is reported,
because the machine is shared.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
import torch.nn.functional as F

from tlmsearch.config import ModelConfig
from tlmsearch.config.model import ARCH_SPECS
from tlmsearch.models import ARCHITECTURES, build_model
from tlmsearch.widths.budget import count_params, flops_per_token
from tlmsearch.widths.schedules import uniform_widths

COSINE = {"shape": "cosine", "r_start": 1.5, "r_end": 0.5}
# Rows of the archs that take per-layer heads: attention tapered alone, then both halves.
HEADS = {
    "heads cos": {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5},
    "both cos": {**COSINE, "heads.shape": "cosine", "heads.r_start": 1.5},
}


def _step_time(model, idx, targets, bf16: bool, vocab: int) -> float:
    t0 = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = F.cross_entropy(model(idx).view(-1, vocab), targets.view(-1))
    loss.backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - t0


def run(args: argparse.Namespace) -> None:
    torch.set_num_threads(args.threads)
    vocab, seq = args.vocab, args.seq_len
    idx = torch.randint(0, vocab, (args.batch, seq))
    targets = torch.randint(0, vocab, (args.batch, seq))
    cases = []  # (label, arch, widths label, dtype label, model, bf16)
    heads_of: dict[tuple[str, str], tuple[int, ...]] = {}  # the heads rows' heads per layer
    for arch in args.archs:
        multiples = args.multiples if arch == "transformer" else [args.multiple_of]
        for mult in multiples:
            cfg = ModelConfig(
                arch=arch,
                n_layer=args.layers,
                d_model=args.d_model,
                n_head=args.heads,
                d_ff=args.d_ff,
                multiple_of=mult,
                titans={"chunk_size": args.chunk},
            )
            plans = {"uniform": {"shape": "uniform"}, "cosine": COSINE}
            if ARCH_SPECS[arch].heads and mult == args.multiple_of:
                plans.update(HEADS)  # per-layer heads: the cost of unequal heads
            if mult != args.multiple_of:
                plans.pop("uniform")  # the uniform row does not depend on multiple_of
            base = count_params(cfg, uniform_widths(args.layers, args.d_ff), vocab)
            for name, cand in plans.items():
                widths, headed = cfg.plan(cand).widths, cfg.built_for(cand)
                assert count_params(headed, widths, vocab) == base, name
                torch.manual_seed(0)
                model = build_model(headed, widths, vocab)
                if args.compile:
                    model = torch.compile(model)
                flops = flops_per_token(headed, widths, vocab, seq).training
                label = name if mult == args.multiple_of else f"{name} x{mult}"
                if name in HEADS:
                    heads_of[(arch, label)] = headed.heads
                for dtype in args.dtypes:
                    cases.append([arch, label, dtype, model, widths, flops, []])
    start = time.perf_counter()
    for case in cases:  # warm-up (and compile)
        t0 = time.perf_counter()
        _step_time(case[3], idx, targets, case[2] == "bf16", vocab)
        case.append(time.perf_counter() - t0)
        print(f"warm-up {case[0]} {case[1]} {case[2]}: {case[-1]:.1f} s", file=sys.stderr)
    rounds = 0
    while rounds < args.rounds and (rounds == 0 or time.perf_counter() - start < args.budget_s):
        for case in cases:
            for _ in range(args.steps):
                case[6].append(_step_time(case[3], idx, targets, case[2] == "bf16", vocab))
        rounds += 1
        print(f"round {rounds}/{args.rounds} done", file=sys.stderr)

    tokens = args.batch * seq
    print(
        f"\n{args.layers} layers, d_model {args.d_model}, {args.heads} heads, d_ff {args.d_ff}, "
        f"vocab {vocab}, batch {args.batch} x seq {seq}, {args.threads} threads, "
        f"median of {rounds} x {args.steps} steps{', compiled' if args.compile else ''}; "
        f"benchmark wall time {time.perf_counter() - start:.0f} s\n"
    )
    head = (
        f"| {'arch':<16}| {'widths':<12}| dtype | tokens/s | vs uniform | GFLOP/s | first step s |"
    )
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    base = {(c[0], c[2]): tokens / statistics.median(c[6]) for c in cases if c[1] == "uniform"}
    for arch, label, dtype, _, _, flops, times, first in cases:
        tps = tokens / statistics.median(times)
        ref = base.get((arch, dtype))
        rel = f"{tps / ref - 1:+.1%}" if ref and label != "uniform" else ""
        print(
            f"| {arch:<16}| {label:<12}| {dtype:<6}| {tps:>8,.0f} | {rel:>10} | "
            f"{tps * flops / 1e9:>7.1f} | {first:>12.1f} |"
        )
    spread = [(max(c[6]) - min(c[6])) / statistics.median(c[6]) for c in cases if len(c[6]) > 1]
    if spread:
        print(
            f"\nnoise: median (max - min) / median of step times = {statistics.median(spread):.1%}"
        )
    for arch, label, _, _, widths, *_ in cases[:: len(args.dtypes)]:
        if label != "uniform":
            heads = heads_of.get((arch, label))
            print(
                f"{arch} {label}: widths {' '.join(map(str, widths))}"
                + (f"; heads {' '.join(map(str, heads))}" if heads else "")
            )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--archs", nargs="+", default=sorted(ARCHITECTURES))
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=256)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-ff", type=int, default=1024)
    p.add_argument("--multiple-of", type=int, default=64)
    p.add_argument("--multiples", type=lambda s: [int(x) for x in s.split(",")], default=None)
    p.add_argument("--vocab", type=int, default=4096)
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--chunk", type=int, default=64, help="Titans chunk size")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)  # a search trial gets 1 CPU
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=1)
    p.add_argument(
        "--budget-s", type=float, default=200, help="no new round after this many seconds"
    )
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    p.add_argument("--compile", action="store_true")
    args = p.parse_args()
    if args.multiples is None:
        args.multiples = [args.multiple_of]
    else:  # the default multiple first: its rows hold the uniform baseline
        args.multiples = [args.multiple_of, *(m for m in args.multiples if m != args.multiple_of)]
    run(args)


if __name__ == "__main__":
    main()
