"""The learning-rate confound: does a taper's effect survive LR tuning and muP?

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/lr_confound.py [--study
studies/paper_blocks.yaml] [--seeds 0,1] [--tokens 200000] [--lr-factors 0.5,1,2]
[--workers 2] [--json OUT]``; ``--rows LOG`` summarises the printed rows of an earlier run
(one cut short too: on its whole seeds only) without training.

On the paper_blocks proxy, uniform, wider-early (1.5/1/0.5 by thirds) and wider-late (0.5/1/1.5)
train at each LR of ``--lr-factors`` x the study's ``train.lr``, under ``train.parametrization``
standard and mup, with paired seeds (the same data order and keyed initial weights per seed).
Uniform is trained once per (seed, LR): at the base shape muP *is* standard, bit for bit
(tests/test_parametrization.py, tests/test_train.py), so both parametrizations share its runs.
Printed per parametrization: each candidate's mean final val_bpb at each LR; its effect vs
uniform at each LR (the mean paired delta over seeds, with the deltas' sd); each candidate's best
LR (the lowest mean val_bpb; ``edge`` when it is the grid's lowest or highest LR, so the true
optimum may lie outside); and the tuned effect: the candidate at its own best LR minus uniform
at its own best LR, per seed, then averaged. Trainings run ``--workers`` at once, one thread
each, as benchmarks/noise.py.

Measured (Dec 2026, 2 shared cores under a load of 10-45, torch 2.13, paper_blocks at
``--tokens 100000`` (a fifth of the study's 500k; warm-up 25k), seeds 0-1, ``--workers 2``:
30 trainings in 2,563 s; at the brief's 200k the load would have taken ~1.5 h)::

    [standard]  val_bpb, mean over seeds [0, 1]
    candidate         0.5x=0.00125         1x=0.0025          2x=0.005  best LR
    uniform                 3.2212            3.1589            3.2045  1x
    wider_early             3.2094            3.1242            3.1358  1x
    wider_late              3.2402            3.1744            3.2212  1x
    effect         vs uniform (sd)   vs uniform (sd)   vs uniform (sd)  tuned (sd)
    wider_early   -0.0118 (0.0008)  -0.0347 (0.0108)  -0.0687 (0.0152)  -0.0347 (0.0108)
    wider_late    +0.0191 (0.0060)  +0.0155 (0.0451)  +0.0167 (0.0009)  +0.0155 (0.0451)

    [mup]  val_bpb, mean over seeds [0, 1]
    candidate         0.5x=0.00125         1x=0.0025          2x=0.005  best LR
    uniform                 3.2212            3.1589            3.2045  1x
    wider_early             3.2233            3.1732            3.2012  1x
    wider_late              3.2252            3.1528            3.1937  1x
    effect         vs uniform (sd)   vs uniform (sd)   vs uniform (sd)  tuned (sd)
    wider_early   +0.0022 (0.0026)  +0.0143 (0.0040)  -0.0033 (0.0159)  +0.0143 (0.0040)
    wider_late    +0.0040 (0.0060)  -0.0061 (0.0069)  -0.0108 (0.0285)  -0.0061 (0.0069)

Noise: the pooled sd of a paired delta over these 12 cells is 0.017 bpb (0.020 standard,
0.014 mup; 6 cells of 1 df each), like paper_blocks' ~0.015 at 500k (docs/results.md), so a
2-seed mean has an SE of ~0.012. Under standard, wider-early beats uniform at every LR and by
more at a higher LR (-0.012, -0.035, -0.069; both seeds agree at each), wider-late loses at
every LR (+0.016 to +0.019); every candidate's best LR is the study's own (1x, inside the grid), so
tuning the global LR leaves the effects as they were. Under mup the wider-early advantage is
gone (+0.002; +0.014, worse on both seeds; -0.003) and wider-late is level with uniform
(+0.004, -0.006, -0.011), all within ~1.2 SE of zero. Per seed, mup minus standard for
wider-early at 1x is +0.039 and +0.059: at this short proxy the taper's win under one global
LR comes from its wide early MLPs taking larger effective steps, which no choice of one global
LR undoes. A check at ``--tokens 200000 --lr-factors 1`` (seeds 0-1, 456 s once the load had
dropped): standard wider-early -0.0209 (sd 0.0008), wider-late +0.0303 (0.0098); mup
wider-early +0.0053 (0.0053), wider-late -0.0110 (0.0141; better on both seeds).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIRDS = {"b1": 1 / 3, "b2": 2 / 3}
CANDIDATES = {
    "uniform": {"shape": "uniform"},
    "wider_early": {"shape": "blocks", "preset": "wider_early", **THIRDS},
    "wider_late": {"shape": "blocks", "preset": "wider_late", **THIRDS},
}
PARAMETRIZATIONS = ("standard", "mup")


def _setup(study: str, sets: list[str], tokens: int | None):
    from tlmsearch.config import load_study

    cfg = load_study(study, sets)
    tokens = tokens or cfg.train.tokens
    update = {
        "tokens": tokens,
        "warmup_tokens": min(cfg.train.warmup_tokens, tokens // 4),
        "eval_every_tokens": tokens,  # only the final eval is compared
    }
    return cfg, cfg.train.model_copy(update=update)


def jobs_for(study: str, sets: list[str], tokens: int, seeds: list[int], factors: list[float]):
    """Every training: uniform once per (seed, LR), each taper under each parametrization."""
    out = []
    for seed in seeds:
        for f in factors:
            for name in CANDIDATES:
                pars = ("standard",) if name == "uniform" else PARAMETRIZATIONS
                out += [(study, sets, tokens, name, par, f, seed) for par in pars]
    return out


def train_one(job: tuple) -> dict:
    """One training in a fresh process; its final val_bpb."""
    study, sets, tokens, name, par, factor, seed = job
    from tlmsearch.data import prepare_data
    from tlmsearch.train.loop import train_proxy

    cfg, train = _setup(study, sets, tokens)
    train = train.model_copy(update={"lr": train.lr * factor, "parametrization": par})
    data = prepare_data(cfg.data, progress=False)
    widths = cfg.model.plan(CANDIDATES[name]).widths
    s = train_proxy(cfg.model, widths, data, train, seed=seed, threads=1)
    bpb = s.metrics.get("val_bpb", float("nan")) if s.status == "completed" else float("nan")
    return {
        "candidate": name,
        "parametrization": par,
        "lr_factor": factor,
        "seed": seed,
        "val_bpb": bpb,
        "status": s.status,
        "wall_s": s.wall_s,
    }


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else float("nan")


def summarise(rows: list[dict]) -> dict:
    """Per parametrization and candidate: mean val_bpb per LR factor, the paired effect vs
    uniform per LR (mean and sd over seeds), the best LR factor (lowest mean; ``edge`` when it
    is the grid's lowest or highest) and the tuned effect (each at its own best LR, paired by
    seed). Uniform's rows (parametrization ``standard``) serve both parametrizations."""
    factors = sorted({r["lr_factor"] for r in rows})
    seeds = sorted({r["seed"] for r in rows})
    uni = {(r["seed"], r["lr_factor"]): r["val_bpb"] for r in rows if r["candidate"] == "uniform"}
    names = [n for n in CANDIDATES if any(r["candidate"] == n for r in rows)]
    out: dict = {"factors": factors, "seeds": seeds}
    for par in PARAMETRIZATIONS:
        table: dict = {}
        for name in names:
            if name == "uniform":
                bpb = uni
            else:
                bpb = {
                    (r["seed"], r["lr_factor"]): r["val_bpb"]
                    for r in rows
                    if r["candidate"] == name and r["parametrization"] == par
                }
            means = {f: _mean([bpb[s, f] for s in seeds if (s, f) in bpb]) for f in factors}
            deltas = {
                f: [bpb[s, f] - uni[s, f] for s in seeds if (s, f) in bpb and (s, f) in uni]
                for f in factors
            }
            # a diverged run (nan) is never the best
            best = min(factors, key=lambda f: means[f] if not math.isnan(means[f]) else math.inf)
            table[name] = {
                "mean": means,
                "effect": {f: _mean(d) for f, d in deltas.items()},
                "effect_sd": {f: _sd(d) for f, d in deltas.items()},
                "best": best,
                "edge": len(factors) > 1 and best in (factors[0], factors[-1]),
            }
        ub = table["uniform"]["best"] if "uniform" in table else None
        for name in names:
            b = table[name]["best"]
            bpb = {
                (r["seed"], r["lr_factor"]): r["val_bpb"]
                for r in rows
                if r["candidate"] == name and (name == "uniform" or r["parametrization"] == par)
            }
            tuned = [bpb[s, b] - uni[s, ub] for s in seeds if (s, b) in bpb and (s, ub) in uni]
            table[name]["tuned_effect"] = _mean(tuned)
            table[name]["tuned_sd"] = _sd(tuned)
        out[par] = table
    return out


def complete_seeds(rows: list[dict]) -> tuple[list[dict], list[int]]:
    """The rows of the seeds that have every (candidate, parametrization, LR) training any seed
    has, and the seeds left out: a run cut short is summarised on whole seeds only, so every
    mean and best LR is over the same seeds."""
    runs = {(r["candidate"], r["parametrization"], r["lr_factor"]) for r in rows}
    seeds = sorted({r["seed"] for r in rows})
    have = {
        s: {(r["candidate"], r["parametrization"], r["lr_factor"]) for r in rows if r["seed"] == s}
        for s in seeds
    }
    whole = [s for s in seeds if have[s] == runs]
    return [r for r in rows if r["seed"] in whole], [s for s in seeds if s not in whole]


def read_rows(path: Path) -> tuple[list[dict], float]:
    """The training rows and the study's LR from a previous run's printed output."""
    rows, lr = [], float("nan")
    for line in path.read_text().splitlines():
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        if "candidate" in doc:
            rows.append(doc)
        elif "train" in doc:
            lr = doc["train"]["lr"]
    return rows, lr


def report(s: dict, lr: float) -> str:
    """The printed tables of :func:`summarise`'s result (``lr``: the study's LR, for labels)."""
    lines = []
    factors = s["factors"]
    head = "".join(f"{f'{f:g}x={f * lr:.3g}':>18}" for f in factors)
    for par in PARAMETRIZATIONS:
        t = s[par]
        lines.append(f"\n[{par}]  val_bpb, mean over seeds {s['seeds']}")
        lines.append(f"{'candidate':<12}{head}  best LR")
        for name, row in t.items():
            cells = "".join(f"{row['mean'][f]:>18.4f}" for f in factors)
            edge = " (edge of grid)" if row["edge"] else ""
            lines.append(f"{name:<12}{cells}  {row['best']:g}x{edge}")
        lines.append(
            f"{'effect':<12}" + f"{'vs uniform (sd)':>18}" * len(factors) + "  tuned (sd)"
        )
        for name, row in t.items():
            if name == "uniform":
                continue
            cells = "".join(
                f"{row['effect'][f]:>+9.4f} ({row['effect_sd'][f]:.4f})" for f in factors
            )
            lines.append(f"{name:<12}{cells}  {row['tuned_effect']:+.4f} ({row['tuned_sd']:.4f})")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(ROOT / "studies/paper_blocks.yaml"))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a study override")
    ap.add_argument("--seeds", default="0,1", help="comma-separated seeds")
    ap.add_argument("--tokens", type=int, default=200_000, help="training tokens")
    ap.add_argument("--lr-factors", default="0.5,1,2", help="multiples of the study's train.lr")
    ap.add_argument("--workers", type=int, default=2, help="trainings at once")
    ap.add_argument("--json", type=Path, default=None, help="write the numbers here")
    ap.add_argument("--rows", type=Path, default=None, help="summarise a previous run's output")
    args = ap.parse_args()
    if args.rows:  # no training: the whole seeds of a (possibly cut short) run's printed rows
        rows, lr = read_rows(args.rows)
        rows, dropped = complete_seeds(rows)
        print(report(summarise(rows), lr))
        print(f"\n{len(rows)} trainings; seeds left out as incomplete: {dropped or 'none'}")
        return
    seeds = [int(x) for x in args.seeds.split(",")]
    factors = [float(x) for x in args.lr_factors.split(",")]

    from tlmsearch.data import prepare_data

    cfg, train = _setup(args.study, args.sets, args.tokens)
    prepare_data(cfg.data, progress=False)  # once, before the workers read the cache
    print(
        json.dumps(
            {
                "study": args.study,
                "tokens": train.tokens,
                "seeds": seeds,
                "lr_factors": factors,
                "train": train.model_dump(mode="json"),
            }
        ),
        flush=True,
    )
    jobs = jobs_for(args.study, args.sets, train.tokens, seeds, factors)
    t0 = time.perf_counter()
    rows = []
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        for r in pool.map(train_one, jobs):
            rows.append(r)
            print(
                json.dumps({k: round(v, 5) if isinstance(v, float) else v for k, v in r.items()}),
                flush=True,
            )
    rows, dropped = complete_seeds(rows)
    s = summarise(rows)
    print(report(s, train.lr))
    print(
        f"\n{len(rows)} trainings, {time.perf_counter() - t0:.0f} s; incomplete seeds: "
        f"{dropped or 'none'}"
    )
    if args.json:
        args.json.write_text(json.dumps({"rows": rows, "summary": s}, indent=2, default=str))


if __name__ == "__main__":
    main()
