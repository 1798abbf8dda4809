"""Power and error rates of the contrasts' words, on simulated studies with settings.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/contrasts.py [--reps 100] [--seed 0]
[--scenarios power,equiv_plus,equiv_minus,null] [--seeds 3] [--json OUT]`` (about 0.25 s a
study on one shared core at 3 seeds: the default 4 x 100 studies in about 2 minutes; ``--reps
1000`` in about 20).

Each study is drawn as a real one with one setting dimension (``train.lr``, 4 values) is: 5
early-heavy schedules (cosine, taper strength 0.2-1.0) and uniform at every LR on 3 seeds
(``--seeds``),

    y(c, lr, s) = 2.0 + effect_c + u_s + g_(lr, s) + e_(c, lr, s)

u_s the seed's level, g the seed x setting level (both shared by every schedule of the cell's
block), e ~ N(0, sd_e). Effects are in noise sds (sqrt(2) sd_e: one paired delta's sd). Every
study goes through ``Evidence.build`` (the effects per setting, Holm over the 20 comparisons at
their joint t; and the contrasts, one weighted family: the early-heavy family (40% of the
error rate), 5 main effects (30%), 6 interactions with ``train.lr`` (20%), 20 per-setting
contrasts (10%), 32 in all). Scenarios:

- ``power``: every early-heavy schedule 1 noise sd better than uniform at every LR. The goal:
  the early-heavy family's contrast ("better") separates in at least twice the studies where
  any single per-cell comparison with uniform (the effects table) separates;
- ``equiv_plus`` / ``equiv_minus``: every early-heavy schedule exactly +d / -d from uniform
  (d = ``MARGIN`` noise sds, the equivalence margin): a contrast whose truth is +-d called
  "equivalent" is false; the goal: at most 5% of the studies (within 2 MC standard errors);
- ``null``: every schedule equal to uniform: any "better" or "worse" is false (family-wise
  error, goal 5%), and "equivalent" is how often the study bounds the effects within +-d;
- ``null_u2`` / ``null_u3_one``: the same with uniform's residual sd 2x the others' at every
  LR / 3x at the highest LR only (every contrast rests on uniform's noise).

Monte-Carlo standard errors are sqrt(p (1 - p) / N), N the simulated studies.

Measured (0.9.0, the weighted family: ``--reps 1000 --scenarios S`` for power, null and
equiv_plus, seed 0, one process a scenario at the lowest priority beside a study on 2 cores,
about 0.4 s a study on one core; the table in docs/statistics.md, "Contrasts and
equivalence"): the early-heavy family "better" in 84.0% ± 1.2 of the ``power`` studies, any
per-cell comparison separated in 34.5% ± 1.5: a ratio of 2.4, the goal met; in the ``null``
studies false better / worse 2.4% ± 0.5 and false equivalent 0; with every taper exactly +d
(``equiv_plus``) false "equivalent" 0.8% ± 0.3 and false better / worse 0.5% ± 0.2. Then
(0.9.1, the same way): at -d false "equivalent" 0.3% ± 0.2; uniform's sd 2x at every LR
false better / worse 2.7% ± 0.5 (the effects table's per-setting family 7.4% ± 0.8: above its
5%), 3x at the highest LR 3.1% ± 0.5; the null at ``--seeds 10 --reps 500`` 3.0% ± 0.8 and at
``--seeds 20 --reps 300`` 3.0% ± 1.0. Under
plain Holm over the 32 (0.8.0, ``--reps 200``) the ``power`` row was 51.0% ± 3.5 against
34.0% ± 3.3 (1.5x), false "equivalent" 0 of 200 at +d and at -d, false better / worse 1.0% ±
0.7 (null), 4.0% ± 1.4 (uniform 2x), 3.5% ± 1.3 (uniform 3x at one LR).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from tlmsearch.evidence import Evidence

VALUE = "val_bpb"
GOAL = 0.05
LRS = (0.001, 0.002, 0.004, 0.008)
R_STARTS = (1.1, 1.2, 1.3, 1.4, 1.5)  # cosine r_start -> r_end = 2 - r_start: taper 2 r - 2
MARGIN = 0.5  # the equivalence margin in noise sds
FAMILY = f"early-heavy ({len(R_STARTS)} schedules) vs uniform over {len(LRS)} settings"
# scenario -> (every early-heavy schedule's effect in noise sds, uniform's residual sd over the
# others' at each LR)
SCENARIOS = {
    "power": (-1.0, (1.0,) * 4),
    "equiv_plus": (MARGIN, (1.0,) * 4),
    "equiv_minus": (-MARGIN, (1.0,) * 4),
    "null": (0.0, (1.0,) * 4),
    "null_u2": (0.0, (2.0,) * 4),  # uniform's sd 2x at every LR
    "null_u3_one": (0.0, (1.0, 1.0, 1.0, 3.0)),  # 3x at the highest LR only
}


def draw(
    rng: np.random.Generator,
    effect: float,
    seeds: int = 3,
    sd_u: float = 0.005,
    sd_g: float = 0.005,
    sd_e: float = 0.005,
    uniform_sd: Sequence[float] = (1.0,) * len(LRS),
) -> pd.DataFrame:
    """One complete study: every early-heavy schedule ``effect`` noise sds from uniform;
    ``uniform_sd``: uniform's residual sd over the others' at each LR."""
    noise = math.sqrt(2.0) * sd_e
    u = rng.normal(0.0, sd_u, seeds)
    rows = []
    for lr, k in zip(LRS, uniform_sd, strict=True):
        g = rng.normal(0.0, sd_g, seeds)
        for r in (None, *R_STARTS):
            params = {"shape": "uniform"} if r is None else {"shape": "cosine", "r_start": r}
            params["train.lr"] = lr
            label = "uniform" if r is None else f"cosine {r:g}->{2 - r:g}"
            shift = 0.0 if r is None else effect * noise
            for s in range(seeds):
                rows.append(
                    {
                        "candidate": f"{label} @ lr={lr:g}",
                        "schedule": label,
                        "setting": f"lr={lr!r}",
                        "params_json": json.dumps(params, sort_keys=True),
                        "taper": 0.0 if r is None else 2.0 * r - 2.0,
                        "is_baseline": r is None,
                        "seed": s,
                        "state": "COMPLETE",
                        VALUE: 2.0
                        + shift
                        + u[s]
                        + g[s]
                        + rng.normal(0.0, sd_e * (k if r is None else 1.0)),
                    }
                )
    return pd.DataFrame(rows)


def judge(
    trials: pd.DataFrame, effect: float, margin: float, variance: str = "rows"
) -> dict[str, int]:
    """One study's counts: the family contrast's word, any per-cell separation, and false
    claims among the contrasts (truth: ``effect`` x noise for every contrast of the early-heavy
    schedules vs uniform, 0 for the interactions)."""
    ev = Evidence.build(trials, VALUE, "minimize", margin=margin, variance=variance)
    c = ev.contrasts
    fam = c.set_index("name").loc[FAMILY, "word"]
    truth = np.where(c["kind"] == "interaction", 0.0, effect)
    false_eq = any(
        w == "equivalent" and abs(x) >= margin * (1 - 1e-9)
        for w, x in zip(c["word"], truth, strict=True)
    )
    false_dir = any(
        (w in ("better", "worse") and x == 0)
        or (w == "better" and x > 0)
        or (w == "worse" and x < 0)
        for w, x in zip(c["word"], truth, strict=True)
    )
    sep = ev.effects["separated"].fillna(False).astype(bool)
    right = (ev.effects["mean_delta"] < 0) if effect < 0 else (ev.effects["mean_delta"] > 0)
    return {
        "family_better": int(fam == "better"),
        "cell_separated": int(bool((sep & right).any())) if effect else int(bool(sep.any())),
        "false_equivalent": int(false_eq),
        "false_direction": int(false_dir),
        "any_equivalent": int(bool((c["word"] == "equivalent").any())),
    }


def _rate(hits: int, n: int) -> dict[str, float]:
    p = hits / n if n else math.nan
    return {"rate": p, "se": math.sqrt(p * (1 - p) / n) if n else math.nan, "n": n}


def run(
    reps: int = 100,
    seed: int = 0,
    which: Sequence[str] = tuple(SCENARIOS),
    variance: str = "rows",
    seeds: int = 3,
) -> dict[str, dict[str, Any]]:
    """scenario -> {count: rate}, over ``reps`` studies each (the draws depend on ``seed``,
    the scenario and ``seeds`` only); ``variance``: the Evidence's variance model (rows, as
    shipped, or pooled: each setting's one block-fit noise, for contrast); ``seeds``: each
    cell's seeds (one shared uniform per setting, as a real study has).

    >>> r = run(reps=2, which=["null"])
    >>> sorted(r["null"])[:3], r["null"]["studies"]
    (['any_equivalent', 'cell_separated', 'family_better'], 2)
    """
    if seeds < 2:
        raise ValueError(f"a cell needs at least 2 seeds to measure its noise, but got {seeds=}")
    noise = math.sqrt(2.0) * 0.005
    out = {}
    for k in which:
        rng = np.random.default_rng([seed, *k.encode(), *([seeds] if seeds != 3 else [])])
        effect, uniform_sd = SCENARIOS[k]
        counts = [
            judge(
                draw(rng, effect, seeds, uniform_sd=uniform_sd),
                effect * noise,
                MARGIN * noise,
                variance,
            )
            for _ in range(reps)
        ]
        out[k] = {name: _rate(sum(c[name] for c in counts), reps) for name in counts[0]}
        out[k]["studies"] = reps
    return out


def fmt(r: dict[str, float]) -> str:
    return f"{r['rate']:.3f} ± {r['se']:.3f}"


def within(r: dict[str, float], goal: float = GOAL) -> bool:
    return r["rate"] - 2.0 * r["se"] <= goal


def table(res: dict[str, dict[str, Any]]) -> str:
    """The goals, one row per scenario."""
    lines = [
        "| scenario | family contrast better | any per-cell separated | false "
        '"equivalent" | false better/worse | any equivalent | goal |',
        "|---|---|---|---|---|---|---|",
    ]
    for k, r in res.items():
        if k == "power":
            fam, cell = r["family_better"]["rate"], r["cell_separated"]["rate"]
            goal = "ok" if fam >= 2.0 * cell else "**FAILS**"
            goal += f" (ratio {fam / cell:.1f})" if cell else " (no cell separated)"
        elif k.startswith("equiv"):
            goal = "ok" if within(r["false_equivalent"]) else "**FAILS**"
        else:  # the nulls
            goal = "ok" if within(r["false_direction"]) else "**FAILS**"
        lines.append(
            f"| {k} | {fmt(r['family_better'])} | {fmt(r['cell_separated'])} | "
            f"{fmt(r['false_equivalent'])} | {fmt(r['false_direction'])} | "
            f"{fmt(r['any_equivalent'])} | {goal} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=100, help="simulated studies per scenario")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument(
        "--variance",
        default="rows",
        choices=["rows", "pooled"],
        help="the variance model (pooled: for contrast)",
    )
    p.add_argument("--seeds", type=int, default=3, help="seeds per cell (at least 2)")
    p.add_argument("--json", help="write the numbers here")
    a = p.parse_args(argv)
    if a.seeds < 2:
        p.error(f"--seeds: a cell needs at least 2 seeds to measure its noise, but got {a.seeds}")
    which = [s.strip() for s in a.scenarios.split(",") if s.strip()]
    print(
        f"## Contrasts: {a.reps} studies per scenario, seed {a.seed}; {len(R_STARTS)} "
        f"early-heavy schedules and uniform x {len(LRS)} LRs x {a.seeds} seeds; margin {MARGIN} "
        f"noise sds; variance model {a.variance}; rate ± one MC standard error\n",
        flush=True,
    )
    t0 = time.perf_counter()
    res = run(a.reps, a.seed, which, a.variance, a.seeds)
    print(table(res))
    print(f"\n{time.perf_counter() - t0:.0f} s")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"settings": vars(a), "results": res}, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
