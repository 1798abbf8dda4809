"""The paper's experiments at a CPU proxy, as tables: what docs/results.md quotes.

Run the shipped studies, then print the tables from their run dirs (nothing is trained here):

    tlmsearch run studies/paper_blocks.yaml   # and paper_grid.yaml, paper_ladder.yaml
    tlmsearch analyze runs/paper_blocks       # per-layer diagnostics of the kept weights
    PYTHONPATH=. python benchmarks/paper.py runs/paper_blocks [runs/paper_grid ...]

For each run: every candidate's paired effect vs uniform (val_bpb, mean over its paired seeds,
95% interval, noise units, seeds, how its race ended) and the same as a perplexity ratio
(exp of the mean paired delta of val_loss: the paper reports perplexity), beside the paper's
440M numbers where it has one; for a run with ``analysis.parquet``, the ablation per layer;
for a ladder run (``fidelity.json``), the rank agreement between its rungs; for a run of the
taper grid, the paper's grid claims tested on paired seeds (:func:`grid_table`). Markdown on
stdout.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

# The paper's 440M perplexities (docs/results.md): uniform 16.28 and the others' ratio to it.
PAPER_440M = {
    "uniform": 16.28,
    "blocks wider_early": 15.96,
    "blocks wider_middle": 16.61,
    "blocks wider_late": 17.29,
    "cosine 1.5->0.5": 14.44,
}


def _paper(candidate: str) -> str:
    for name, ppl in PAPER_440M.items():
        if candidate.startswith(name) and name != "uniform":
            return f"{ppl:.2f} ({ppl / PAPER_440M['uniform'] - 1:+.1%})"
    return ""


def _evidence(trials: pd.DataFrame, study: Any, value: str) -> Any:
    """The run's :class:`tlmsearch.evidence.Evidence` for ``value`` (its study's stats settings,
    its race where it raced that metric): every decision below is the tool's own, re-derived
    from nothing here."""
    from tlmsearch.evidence import Evidence

    return Evidence.build(
        trials, value, level=study.stats.level, family=study.stats.family, config=study
    )


def effects_table(run: Path) -> str:
    from tlmsearch.evidence.conclusions import conclusions
    from tlmsearch.run_dir.tables import load_run

    data = load_run(run)
    t = data.trials
    ev = _evidence(t, data.study, "val_bpb")
    eff = ev.effects.set_index("candidate")
    loss = _evidence(t, data.study, "val_loss").effects.set_index("candidate")
    race = {}
    from tlmsearch.report.effects import race as race_table

    r = race_table(t, data.study)
    if r is not None:
        race = {row.candidate: f"{row.status}: {row.reason}" for row in r.lanes.itertuples()}
    base = t[t["is_baseline"].astype(bool) & (t["state"] == "COMPLETE")]
    lines = [
        f"uniform: val_bpb {base['val_bpb'].mean():.4f} over seeds "
        f"{sorted(int(s) for s in base['seed'])}; val_ppl {base['val_ppl'].mean():.2f}",
        "",
        "| candidate | seeds | effect on val_bpb (95% CI) | noise units | separated | "
        "ppl ratio (95% CI) | paper 440M ppl | race |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cand in ev.ranking["candidate"]:
        if cand not in eff.index:
            continue
        e, lo_ = eff.loc[cand], loss.loc[cand]
        ci = f"[{e['lo']:+.4f}, {e['hi']:+.4f}]" if math.isfinite(e["lo"]) else "[noise unknown]"
        ratio = f"{math.exp(lo_['mean_delta']) - 1:+.2%}"
        if math.isfinite(lo_["lo"]):
            ratio += f" [{math.exp(lo_['lo']) - 1:+.2%}, {math.exp(lo_['hi']) - 1:+.2%}]"
        units = f"{e['effect_noise']:+.1f}" if math.isfinite(e["effect_noise"]) else "-"
        lines.append(
            f"| {cand} | {int(e['n'])} | {e['mean_delta']:+.4f} {ci} | {units} | {_sep(e)} "
            f"| {ratio} | {_paper(str(cand))} | {race.get(cand, '')} |"
        )
    said = conclusions(t, label="val_bpb", evidence=ev)
    verdict = [x for x in said.supported + said.unsupported if "comparisons with the best" in x]
    noise = "unknown" if ev.noise is None else f"sd {ev.noise.sd:.4f} over {ev.noise.df} df"
    kept = int(ev.effects["separated"].fillna(False).astype(bool).sum())
    lines += [
        "",
        f"Noise of one paired delta (block design: value ~ candidate + seed): {noise}.",
        f"Separated from uniform: {kept} of {len(ev.effects)}, {ev.decision_words()}.",
    ]
    lines += [f"The best: {verdict[0]}."] if verdict else []
    return "\n".join(lines)


def _sep(e: pd.Series) -> str:
    """The effects row's one decision: 'yes (p 0.012)', 'no (p 0.3)', 'yes (race)'."""
    if pd.isna(e["separated"]):
        return "-"
    how = "race" if e["decided_by"] == "race" else f"adj. p {e['p_adj']:.2g}"
    return f"{'**yes**' if bool(e['separated']) else 'no'} ({how})"


GRID_SHAPES = ("cosine", "linear", "sigmoid")


def _grid_cells(trials: pd.DataFrame) -> dict[tuple[str, float], str] | None:
    """(shape, r_start) -> params_json, for the taper grid's candidates of a run; None when the
    run's tapers are not such a grid (an ``r_end`` of their own, a ``k`` that varies, two
    candidates in one cell): the grid's claims would misread them."""
    out: dict[tuple[str, float], str] = {}
    ks = set()
    for key in trials["params_json"].dropna().unique():
        p = json.loads(key)
        if p.get("shape") == "uniform":
            continue
        if p.get("shape") not in GRID_SHAPES or not set(p) <= {"shape", "r_start", "k"}:
            return None
        if "r_start" not in p or (p["shape"], float(p["r_start"])) in out:
            return None
        cell = (p["shape"], float(p["r_start"]))
        ks.add(p.get("k"))
        out[cell] = key
    return out if len(ks - {None}) <= 1 else None


def _ratio_trend(trials: pd.DataFrame, cells: dict[tuple[str, float], str]) -> str:
    """Per seed, the least-squares slope of the paired delta (val_bpb) on r_start within shape
    (both centred per shape, so shapes' levels do not leak in), over the cells every counted
    seed completed (a cell one seed lacks, pruned or stopped by racing, is left out for all:
    the seeds stay replicates of one quantity); its mean over seeds with a 95% t interval.
    Within a seed every delta shares that seed's uniform, so the slope is free of it."""
    from tlmsearch import stats

    where = {key: cell for cell, key in cells.items()}
    d = stats.paired_deltas(trials, "val_bpb", key="params_json")
    d = d[d["params_json"].isin(where) & np.isfinite(d["delta"])]
    seeds = sorted(d["seed"].unique())
    full = [k for k, g in d.groupby("params_json") if set(g["seed"]) == set(seeds)]
    d = d[d["params_json"].isin(full)].assign(
        shape=lambda x: x["params_json"].map(lambda k: where[k][0]),
        r=lambda x: x["params_json"].map(lambda k: where[k][1]),
    )
    slopes = []
    for _, g in d.groupby("seed"):
        xc = g["r"] - g.groupby("shape")["r"].transform("mean")
        yc = g["delta"] - g.groupby("shape")["delta"].transform("mean")
        if (xc**2).sum() > 0:
            slopes.append(float((xc * yc).sum() / (xc**2).sum()))
    iv = stats.mean_interval(slopes)
    used = f"the {len(full)} of {len(cells)} tapers complete on all {len(seeds)} seeds"
    if iv.n < 2:
        return f"Trend in the ratio: {iv.n} seed(s) with a slope over {used}; no interval."
    sep = " **sep**" if not iv.lo <= 0.0 <= iv.hi else ""
    return (
        f"Trend in the ratio: slope of the paired delta on r_start within shape, per seed over "
        f"{used}: {iv.mean:+.4f} bpb per unit of r_start [{iv.lo:+.4f}, {iv.hi:+.4f}] over "
        f"{iv.n} seeds{sep} (negative: the wider the first layer, the better)."
    )


LEVEL = 0.95  # the grid claims' family-wise level


def _family(pairs: pd.DataFrame, asked: list[tuple[str | None, str | None]]) -> dict:
    """(a, b) -> Holm-adjusted p over the pairs one claim asks about (one table: a family)."""
    from tlmsearch import stats

    p = {}
    for a, b in asked:
        row = pairs[(pairs["a"] == a) & (pairs["b"] == b)]
        if len(row) and math.isfinite(row["p"].iloc[0]):
            p[(a, b)] = float(row["p"].iloc[0])
    return dict(zip(p, stats.adjust(list(p.values()), "holm"), strict=True))


def _pair(pairs: pd.DataFrame, a: str | None, b: str | None, adjusted: dict) -> str:
    row = pairs[(pairs["a"] == a) & (pairs["b"] == b)]
    if row.empty or int(row["n"].iloc[0]) == 0:
        return "-"
    r = row.iloc[0]
    if math.isfinite(r["lo"]):
        mark = " **sep**" if adjusted.get((a, b), 1.0) < 1.0 - LEVEL else ""
        return f"{r['mean']:+.4f} [{r['lo']:+.4f}, {r['hi']:+.4f}] ({int(r['n'])}){mark}"
    return f"{r['mean']:+.4f} ({int(r['n'])} seed, no interval)"


def grid_table(run: Path) -> str:
    """The paper's grid claims, tested on the run's paired seeds: the shape x ratio matrix of
    effects vs uniform, "cosine is best at every ratio" (cosine minus linear and minus sigmoid
    at each ratio) and "U-shaped in the ratio, best at 1.5/0.5" (1.5 minus its neighbours, per
    shape): each a mean paired difference of val_bpb over the seeds both ran, with its 95% t
    interval (**sep**: the interval excludes 0), and the number of those seeds."""
    from tlmsearch import stats
    from tlmsearch.run_dir.tables import load_run

    data = load_run(run)
    t = data.trials
    cells = _grid_cells(t)
    if cells is None:
        return ""
    ratios = sorted({r for _, r in cells})
    if len(ratios) < 2 or len({s for s, _ in cells}) < 2:
        return ""
    ev = _evidence(t, data.study, "val_bpb")
    key_of = dict(zip(t["candidate"], t["params_json"], strict=True))
    eff = ev.effects.assign(params_json=ev.effects["candidate"].map(key_of))
    eff = eff.set_index("params_json")
    # the grid's claims as one family: every pair the tables below show, Holm over them
    pairs = stats.pairwise(
        t, "val_bpb", list(cells.values()), key="params_json", noise=ev.noise, family="none"
    )
    head = " | ".join(f"{r:g}->{2 - r:g}" for r in ratios)
    lines = [
        "Effect on val_bpb vs uniform (mean paired delta, seeds):",
        "",
        f"| shape | {head} |",
        "|---" * (1 + len(ratios)) + "|",
    ]
    for shape in GRID_SHAPES:
        row = []
        for r in ratios:
            key = cells.get((shape, r))
            if key is None or key not in eff.index:
                row.append("-")
                continue
            e = eff.loc[key]
            sep = "*" if pd.notna(e["separated"]) and bool(e["separated"]) else ""
            row.append(f"{e['mean_delta']:+.4f}{sep} ({int(e['n'])})")
        lines.append(f"| {shape} | " + " | ".join(row) + " |")
    lines += [
        "",
        f"(* separated from uniform: {ev.decision_words()})",
        "",
        "Cosine best at every ratio? cosine minus the other shape (negative: cosine "
        "better), 95% CI per pair (common seeds; **sep**: Holm over this table's pairs):",
        "",
        "| ratio | cosine - linear | cosine - sigmoid |",
        "|---|---|---|",
    ]
    asked = [
        (cells.get(("cosine", r)), cells.get((o, r)))
        for r in ratios
        for o in ("linear", "sigmoid")
    ]
    adj = _family(pairs, asked)
    for r in ratios:
        cos = cells.get(("cosine", r))
        lines.append(
            f"| {r:g}->{2 - r:g} | {_pair(pairs, cos, cells.get(('linear', r)), adj)} "
            f"| {_pair(pairs, cos, cells.get(('sigmoid', r)), adj)} |"
        )
    lower = max((r for r in ratios if r < 1.5), default=None)
    upper = min((r for r in ratios if r > 1.5), default=None)
    if 1.5 in ratios and lower is not None and upper is not None:
        lines += [
            "",
            "Best at 1.5/0.5 (a U in the ratio)? 1.5->0.5 minus its neighbours "
            "(negative: 1.5 better; **sep**: Holm over this table's pairs):",
            "",
            f"| shape | 1.5 - {lower:g} | 1.5 - {upper:g} |",
            "|---|---|---|",
        ]
        asked = [
            (cells.get((sh, 1.5)), cells.get((sh, x)))
            for sh in GRID_SHAPES
            for x in (lower, upper)
        ]
        adj = _family(pairs, asked)
        for shape in GRID_SHAPES:
            mid = cells.get((shape, 1.5))
            lines.append(
                f"| {shape} | {_pair(pairs, mid, cells.get((shape, lower)), adj)} "
                f"| {_pair(pairs, mid, cells.get((shape, upper)), adj)} |"
            )
    lines += ["", _ratio_trend(t, cells)]
    return "\n".join(lines)


def ablation_table(run: Path) -> str:
    path = run / "analysis.parquet"
    if not path.exists():
        return f"(no analysis.parquet: run `tlmsearch analyze {run}`)"
    a = pd.read_parquet(path)
    g = a.groupby(["candidate", "layer"])
    table = g[["ablation_nats", "cosine", "rel_norm"]].mean().reset_index()
    seeds = a.groupby("candidate")["seed"].nunique()
    lines = [
        "| candidate (seeds) | " + " | ".join(f"L{i}" for i in sorted(a["layer"].unique())) + " |",
        "|---" * (1 + a["layer"].nunique()) + "|",
    ]
    for what in ("ablation_nats", "cosine"):
        lines.append(f"| **{what}** |" + " |" * a["layer"].nunique())
        for cand, rows in table.groupby("candidate"):
            vals = " | ".join(f"{v:.3f}" for v in rows.sort_values("layer")[what])
            lines.append(f"| {cand} ({seeds[cand]}) | {vals} |")
    return "\n".join(lines)


def fidelity_table(run: Path) -> str:
    path = run / "fidelity.json"
    if not path.exists():
        return ""
    doc = json.loads(path.read_text())
    head = "| rungs | candidates | seeds | Kendall tau [95%] | Spearman rho [95%] | decision acc |"
    lines = [head, "|---|---|---|---|---|---|"]
    for p in doc.get("pairs", []):

        def iv(name: str, ci: str, p: dict = p) -> str:
            v, lo_hi = p.get(name), p.get(ci) or [None, None]
            if v is None:
                return "-"
            return (
                f"{v:+.2f} [{lo_hi[0]:+.2f}, {lo_hi[1]:+.2f}]"
                if lo_hi[0] is not None
                else (f"{v:+.2f}")
            )

        acc = p.get("decision_accuracy")
        lines.append(
            f"| rung {p['lower']} vs rung {p['upper']} | {p.get('n_candidates')} "
            f"| {p.get('n_seeds')} | {iv('kendall_tau', 'tau_ci95')} "
            f"| {iv('spearman_rho', 'rho_ci95')} | {'-' if acc is None else f'{acc:.0%}'} |"
        )
    if doc.get("trust"):
        lines += ["", str(doc["trust"])]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="run dirs of the paper studies")
    args = ap.parse_args()
    for run in args.runs:
        print(f"## {run.name}\n")
        fid = fidelity_table(run)
        if fid:
            print(fid + "\n")
            rungs = sorted(run.glob("rung-*"))
            for rung in rungs:
                print(f"### {run.name}/{rung.name}\n\n{effects_table(rung)}\n")
            continue
        print(effects_table(run) + "\n")
        grid = grid_table(run)
        if grid:
            print(grid + "\n")
        print("Per-layer diagnostics (mean over kept models):\n\n" + ablation_table(run) + "\n")


if __name__ == "__main__":
    main()
