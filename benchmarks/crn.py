"""Common random numbers: the seed-to-seed spread of a paired delta, legacy init vs keyed init.

Run: ``.venv/bin/python benchmarks/crn.py [--study studies/quickstart.yaml] [--seeds 0,1,2]
[--tokens N] [--compile off|on]``.

The paired delta of a candidate is its val_bpb minus that of the uniform model of the same
seed (docs/running.md, "Seeds are paired"); here the candidate is the quickstart's cosine taper
1.5 -> 0.5, trained with the study's model, data and training settings (``train_proxy``, one
thread per training). Each seed trains uniform and cosine twice, side by side in one run:
- ``legacy``: the old init, module-order draws from torch's global generator after
  ``torch.manual_seed(seed)`` (reproduced here bit for bit by swapping ``CausalLM.init_weights``),
  so the wider first MLP of the taper shifts every later draw: attention, head and the other
  MLPs start from different weights than the uniform model's;
- ``keyed``: the current init, every parameter keyed by (seed, name) and MLP units by index,
  so the two models share every weight they have in common.
Printed per seed: uniform, cosine, delta for each scheme; then per scheme the mean delta, the
sample sd of the deltas across seeds, the sd of the uniform model alone across seeds (the noise
a non-paired comparison would see), and the ratio sd_keyed / sd_legacy. With 3 seeds an sd has
2 degrees of freedom: a ratio of two such sds is a weak estimate (its 90% range spans ~x/4.4).
The data order is the same in both schemes (it depends on the seed alone).

Measured (2 shared CPU cores, other jobs running; torch 2.13, bf16 autocast, compiled, 1 thread;
``--tokens 400000`` trains 196 steps of 2048 = 401,408 tokens; val_bpb on the 32,768 val tokens):
``benchmarks/crn.py --tokens 400000`` (seeds 0,1,2; 22 min) and ``--seeds 3,4,5`` (45 min)::

    seed  init      uniform    cosine     delta
       0  legacy    2.26462   2.25556  -0.00906
       0  keyed     2.27412   2.25245  -0.02167
       1  legacy    2.24968   2.24480  -0.00488
       1  keyed     2.26244   2.25909  -0.00335
       2  legacy    2.27032   2.27069  +0.00037
       2  keyed     2.26756   2.26449  -0.00307
       3  legacy    2.27782   2.25273  -0.02509
       3  keyed     2.26091   2.25079  -0.01012
       4  legacy    2.26516   2.24943  -0.01573
       4  keyed     2.25584   2.24593  -0.00990
       5  legacy    2.27356   2.26453  -0.00903
       5  keyed     2.26602   2.25296  -0.01306

    seeds  init     mean delta  sd delta  sd uniform   sd_keyed / sd_legacy
    0-2    legacy     -0.00452   0.00472     0.01066
    0-2    keyed      -0.00936   0.01066     0.00586   2.258
    3-5    legacy     -0.01661   0.00806     0.00644
    3-5    keyed      -0.01103   0.00176     0.00509   0.219
    0-5    legacy     -0.01057   0.00888     0.00980   (pooled by hand from the two runs)
    0-5    keyed      -0.01020   0.00689     0.00627   0.776 (F test of equal variances: p 0.59)

The two 3-seed runs point opposite ways (2.26 and 0.22): each is noise. Pooled over 6 seeds
the keyed init's sd of the delta is 0.78x the legacy one, not distinguishable from 1 at this
sample size. At 400k tokens the paired delta's spread is about that of one model alone
(corr(uniform, cosine) over seeds 0.42 keyed, 0.58 legacy): sharing the initial weights does
not keep the two trainings close, so most of the delta's seed noise here is not init mismatch.
Both schemes agree on the effect: the taper beats uniform by ~0.010 bits per byte (6-seed mean,
standard error ~0.003).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
CANDIDATES = {
    "uniform": {"shape": "uniform"},
    "cosine": {"shape": "cosine", "r_start": 1.5, "r_end": 0.5},
}


def legacy_init_weights(self, std: float, seed: int) -> None:
    """``CausalLM.init_weights`` before keyed init (commit d112d84), verbatim but for the
    signature: ``seed`` is ignored, draws come from the global generator in module order
    (``train_proxy`` seeds it right before ``build_model``)."""
    import torch
    from torch import nn

    with torch.no_grad():
        branches = sum(len(b.mixers) + len(b.mlps) for b in self.blocks)
        for module in self.modules():
            if module is self.lm_head and self.lm_head.weight is self.wte.weight:
                continue
            if isinstance(module, (nn.Linear, nn.Embedding)):
                scale = 1 / math.sqrt(branches) if getattr(module, "residual_out", False) else 1
                nn.init.normal_(module.weight, mean=0.0, std=std * scale)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for module in self.modules():
            if hasattr(module, "init_extra"):
                module.init_extra(std, lambda p, s: nn.init.normal_(p, std=s))


@contextlib.contextmanager
def init_scheme(name: str) -> Iterator[None]:
    """Build models with the ``legacy`` or the ``keyed`` (current) init inside the context."""
    from tlmsearch.models.common import CausalLM

    if name == "keyed":
        yield
        return
    with mock.patch.object(CausalLM, "init_weights", legacy_init_weights):
        yield


def train_one(cfg, train, data, candidate: dict, seed: int, scheme: str) -> dict:
    import torch

    from tlmsearch.train.loop import train_proxy

    torch._dynamo.reset()  # every training compiles afresh, as in a fresh trial process
    widths = cfg.model.plan(candidate).widths
    with init_scheme(scheme):
        s = train_proxy(cfg.model, widths, data, train, seed=seed, threads=1)
    if s.status != "completed":
        raise SystemExit(f"crn: {scheme} {candidate} seed {seed}: {s.status} ({s.reason})")
    return {"val_bpb": s.metrics["val_bpb"], "wall_s": s.wall_s, "setup": s.setup}


def sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(ROOT / "studies/quickstart.yaml"))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a study override")
    ap.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    ap.add_argument("--tokens", type=int, default=None, help="training tokens (the study's)")
    # Measured at the quickstart size, 1 thread, bf16: compiled 4,400 tokens/s after a ~55 s
    # compile, eager 1,700 tokens/s; compiling pays from ~150k tokens per training.
    ap.add_argument(
        "--compile",
        choices=["study", "on", "off"],
        default="study",
        help="torch.compile per training (default: the study's); off is faster below ~150k tokens",
    )
    args = ap.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]

    from tlmsearch.config import load_study
    from tlmsearch.data import prepare_data

    cfg = load_study(args.study, args.sets)
    tokens = args.tokens or cfg.train.tokens
    update: dict = {"tokens": tokens, "warmup_tokens": min(cfg.train.warmup_tokens, tokens // 4)}
    update["eval_every_tokens"] = tokens  # only the final val_bpb is compared
    if args.compile != "study":
        update["compile"] = args.compile
    train = cfg.train.model_copy(update=update)
    data = prepare_data(cfg.data, progress=False)
    head = {
        "study": args.study,
        "overrides": args.sets,
        "tokens": tokens,
        "seeds": seeds,
        "compile": train.compile,
        "threads": 1,
        "widths": {k: list(cfg.model.plan(c).widths) for k, c in CANDIDATES.items()},
    }
    print(json.dumps(head), flush=True)

    schemes = ("legacy", "keyed")
    bpb: dict[tuple[str, str, int], float] = {}
    t0 = time.perf_counter()
    for seed in seeds:  # seed by seed, both schemes side by side
        for scheme in schemes:
            for name, cand in CANDIDATES.items():
                r = train_one(cfg, train, data, cand, seed, scheme)
                bpb[scheme, name, seed] = r["val_bpb"]
                row = {"seed": seed, "init": scheme, "candidate": name}
                row |= {"val_bpb": round(r["val_bpb"], 5), "wall_s": round(r["wall_s"], 1)}
                print(json.dumps(row), flush=True)
    setup = r["setup"]

    print(f"\n{'seed':>4}  {'init':<7} {'uniform':>9} {'cosine':>9} {'delta':>9}")
    deltas: dict[str, list[float]] = {s: [] for s in schemes}
    for seed in seeds:
        for scheme in schemes:
            u, c = bpb[scheme, "uniform", seed], bpb[scheme, "cosine", seed]
            deltas[scheme].append(c - u)
            print(f"{seed:>4}  {scheme:<7} {u:>9.5f} {c:>9.5f} {c - u:>+9.5f}")
    print(f"\n{'init':<7} {'mean delta':>11} {'sd delta':>9} {'sd uniform':>11}")
    for scheme in schemes:
        uni = [bpb[scheme, "uniform", s] for s in seeds]
        d = deltas[scheme]
        print(f"{scheme:<7} {statistics.fmean(d):>+11.5f} {sd(d):>9.5f} {sd(uni):>11.5f}")
    ratio = sd(deltas["keyed"]) / sd(deltas["legacy"])
    print(f"\nsd_keyed / sd_legacy of the paired delta: {ratio:.3f} ({len(seeds)} seeds)")
    print(
        f"tokens {tokens:,}, compile {setup['compile']}, dtype {setup['dtype']}, "
        f"threads {setup['threads']}, total {time.perf_counter() - t0:.0f} s"
    )


if __name__ == "__main__":
    main()
