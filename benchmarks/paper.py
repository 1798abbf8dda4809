"""The paper's experiments at a CPU proxy, as tables: what docs/results.md quotes.

Run the shipped studies, then print the tables from their run dirs (nothing is trained here):

    tlmsearch run studies/paper_blocks.yaml   # and paper_grid.yaml, paper_ladder.yaml
    tlmsearch analyze runs/paper_blocks       # per-layer diagnostics of the kept weights
    PYTHONPATH=. python benchmarks/paper.py runs/paper_blocks [runs/paper_grid ...]

For each run: every candidate's paired effect vs uniform (val_bpb, mean over its paired seeds,
95% interval, noise units, seeds, how its race ended) and the same as a perplexity ratio
(exp of the mean paired delta of val_loss: the paper reports perplexity), beside the paper's
440M numbers where it has one; for a run with ``analysis.parquet``, the ablation per layer;
for a ladder run (``fidelity.json``), the rank agreement between its rungs. Markdown on stdout.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd

# The paper's 440M perplexities (PAPER.md): uniform 16.28 and the others' ratio to it.
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


def effects_table(run: Path) -> str:
    from tlmsearch import stats
    from tlmsearch.conclusions import study_effects, study_noise
    from tlmsearch.report.collect import study_seeds
    from tlmsearch.results import load_run

    data = load_run(run)
    t = data.trials
    eff = study_effects(t, "val_bpb").set_index("candidate")
    ranked = stats.rank(t, "val_bpb", seeds=study_seeds(data.config, t))
    loss = stats.effects(t, "val_loss", noise=study_noise(t, "val_loss")).set_index("candidate")
    race = {}
    from tlmsearch.report.effects import race as race_table

    r = race_table(t, data.config)
    if r is not None:
        race = {row.candidate: f"{row.status}: {row.reason}" for row in r.lanes.itertuples()}
    base = t[t["is_baseline"].astype(bool) & (t["state"] == "COMPLETE")]
    lines = [
        f"uniform: val_bpb {base['val_bpb'].mean():.4f} over seeds "
        f"{sorted(int(s) for s in base['seed'])}; val_ppl {base['val_ppl'].mean():.2f}",
        "",
        "| candidate | seeds | effect on val_bpb (95% CI) | noise units | ppl ratio (95% CI) "
        "| paper 440M ppl | race |",
        "|---|---|---|---|---|---|---|",
    ]
    for cand in ranked["candidate"]:
        if cand not in eff.index:
            continue
        e, lo_ = eff.loc[cand], loss.loc[cand]
        ci = f"[{e['lo']:+.4f}, {e['hi']:+.4f}]" if math.isfinite(e["lo"]) else "[noise unknown]"
        ratio = f"{math.exp(lo_['mean_delta']) - 1:+.2%}"
        if math.isfinite(lo_["lo"]):
            ratio += f" [{math.exp(lo_['lo']) - 1:+.2%}, {math.exp(lo_['hi']) - 1:+.2%}]"
        units = (
            f"{e['effect_noise']:+.1f} ({e['noise']})" if math.isfinite(e["effect_noise"]) else "-"
        )
        lines.append(
            f"| {cand} | {int(e['n'])} | {e['mean_delta']:+.4f} {ci} | {units} | {ratio} "
            f"| {_paper(str(cand))} | {race.get(cand, '')} |"
        )
    return "\n".join(lines)


def ablation_table(run: Path) -> str:
    path = run / "analysis.parquet"
    if not path.exists():
        return f"(no analysis.parquet: run `tlmsearch analyze {run}`)"
    a = pd.read_parquet(path)
    g = a.groupby(["candidate", "layer"])
    table = g[["ablation_nats", "cosine", "rel_norm"]].mean().reset_index()
    seeds = a.groupby("candidate")["seed"].nunique()
    lines = ["| candidate (seeds) | " + " | ".join(f"L{i}" for i in sorted(a["layer"].unique()))
             + " |", "|---" * (1 + a["layer"].nunique()) + "|"]  # fmt: skip
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
        print("Per-layer diagnostics (mean over kept models):\n\n" + ablation_table(run) + "\n")


if __name__ == "__main__":
    main()
