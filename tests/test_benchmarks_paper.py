"""benchmarks/paper.py prints the effect table of a run dir, beside the paper's 440M numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
from fixtures_run import make_run, make_trials

ROOT = Path(__file__).resolve().parent.parent


def test_the_paper_tables_come_from_the_run_dir(tmp_path: Path) -> None:
    run = make_run(tmp_path / "syn", seeds=(0, 1, 2))
    res = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks/paper.py"), str(run)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert out.startswith("## syn") and "uniform: val_bpb 1.49" in out
    effects = out.split("Effect on val_bpb vs uniform")[0]  # the grid's claims come after
    rows = [ln for ln in effects.splitlines() if ln.startswith(("| cosine", "| linear"))]
    assert len(rows) == 6  # 2 shapes x 3 ratios, each with its seeds, interval and ppl ratio
    assert all("| 3 |" in r and "adj. p" in r for r in rows)  # the Evidence's one decision
    assert "Cosine best at every ratio?" in out and "Best at 1.5/0.5" in out
    assert "Noise of one paired delta (block design: value ~ candidate + seed): sd " in out
    assert "Holm over 6 comparisons with uniform" in out
    assert "The best: " in out and "multiple comparisons with the best" in out
    assert "no analysis.parquet" in out


def test_the_grid_claims_are_paired_differences_with_known_answers(tmp_path: Path) -> None:
    """cosine - linear at 1.5 is -0.02 on every seed up to +-0.001: separated; cosine - sigmoid
    at 1.5 is -0.02 +- 0.01: its t interval (2 df) holds 0. Values are final val_bpb."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import paper

    effect = {("cosine", 1.5): -0.05, ("linear", 1.5): -0.03, ("sigmoid", 1.5): -0.03}
    jitter = {("cosine", 1.5): (0.001, 0.0, -0.001), ("sigmoid", 1.5): (-0.009, 0.0, 0.009)}
    trials, curves = make_trials(shapes=("cosine", "linear", "sigmoid"), seeds=(0, 1, 2))
    for t in trials:
        cell = (t["params"]["shape"], t["params"].get("r_start"))
        t["val_bpb"] = 2.0 + 0.1 * t["seed"] + effect.get(cell, -0.01 * (cell[0] != "uniform"))
        t["val_bpb"] += jitter.get(cell, (0.0, 0.0, 0.0))[t["seed"]]
    out = paper.grid_table(make_run(tmp_path / "grid", trials=trials, curves=curves))
    row = next(ln for ln in out.splitlines() if ln.startswith("| 1.5->0.5 |"))
    linear, sigmoid = row.split(" | ")[1:3]
    # a - b over seeds: [-0.021, -0.020, -0.019] and [-0.030, -0.020, -0.010] (sd 0.001, 0.01)
    half = 4.302653 * 0.001 / 3**0.5  # t(0.975, 2 df) sd / sqrt(3)
    # the interval's sd is the study's block-design noise now, not the pair's own
    assert linear.startswith("-0.0200 [") and linear.endswith("(3) **sep**") and half
    # one noise for both pairs: the same interval, however each pair's own seeds scatter
    assert sigmoid.split(" (3)")[0] == linear.split(" (3)")[0]
    assert "| cosine | -0.0100* (3) | -0.0500* (3) | -0.0100* (3) |" in out  # sd 0: separated
    assert "| linear | -0.0200 [" in out  # 1.5 - 1.25 for linear: -0.03 - (-0.01), every seed
    assert "all 3 seeds: +0.0000 bpb per unit of r_start [+0.0000, +0.0000] over 3 seeds" in out


def _grid_run(tmp_path: Path, ratios, value, extra=None, pruned=()) -> Path:
    trials, curves = make_trials(
        shapes=("cosine", "linear"), ratios=ratios, seeds=(0, 1, 2), pruned=pruned
    )
    for t in trials:
        if t["params"]["shape"] == "cosine":
            t["params"].update(extra or {})
        r = t["params"].get("r_start")
        t["val_bpb"] = 2.0 + 0.1 * t["seed"] + (0.0 if r is None else value(r, t["seed"]))
    return make_run(tmp_path / "g", trials=trials, curves=curves)


def test_the_grid_trend_and_cells_that_are_no_grid(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import paper

    # -0.02 bpb per unit of r_start on every seed: the slope, with no spread
    out = paper.grid_table(_grid_run(tmp_path / "a", (1.25, 1.5, 1.75), lambda r, s: -0.02 * r))
    assert "-0.0200 bpb per unit of r_start [-0.0200, -0.0200] over 3 seeds **sep**" in out
    # no ratio effect, linear 0.03 better than cosine, linear 1.25 pruned on seed 0: pooling
    # the shapes would read their gap as a slope; within shape, on the cells every seed has,
    # the slope is 0
    shapes = _grid_run(
        tmp_path / "p", (1.25, 1.5, 1.75), lambda r, s: 0.0, pruned=[4]
    )  # trial 4: linear 1.25->0.75, seed 0
    trials = pd.read_parquet(shapes / "trials.parquet")
    trials.loc[trials["candidate"].str.startswith("linear"), "val_bpb"] -= 0.03
    trials.to_parquet(shapes / "trials.parquet")
    out = paper.grid_table(shapes)
    assert "the 5 of 6 tapers complete on all 3 seeds: +0.0000 bpb" in out, out
    # 1.5 without a neighbour above it: no U table, no crash
    out = paper.grid_table(_grid_run(tmp_path / "b", (1.25, 1.5), lambda r, s: -0.01))
    assert "Cosine best at every ratio?" in out and "Best at 1.5/0.5" not in out
    # tapers with an r_end of their own are no (shape, r_start) grid: nothing is claimed
    no_grid = _grid_run(tmp_path / "c", (1.25, 1.5), lambda r, s: -0.01, {"r_end": 0.5})
    assert paper.grid_table(no_grid) == ""
