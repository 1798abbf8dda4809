"""End to end: a 2-shape x 2-LR grid with 2 seeds, trained in a real local Ray (slow, runs in
CI): every trial trains at its candidate's LR, and best.yaml holds the tuned comparison."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml
from search_helpers import tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app

pytestmark = pytest.mark.slow

LRS = [0.002, 0.02]


def test_an_lr_grid_runs_crossed_with_uniform_and_writes_the_tuned_comparison(local_ray, tmp_path):
    data = tiny_study(
        tmp_path,
        space={
            "dimensions": {
                "shape": {"type": "fixed", "value": "cosine"},
                "r_start": {"type": "categorical", "choices": [1.5]},
                "train.lr": {"type": "categorical", "choices": LRS},
            }
        },
        search={"seeds": [0, 1]},
        train={"tokens": 4096, "eval_every_tokens": 2048},
    )
    data["name"] = "lrgrid"
    path = tmp_path / "lrgrid.yaml"
    path.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "lrgrid"
    t = pd.read_parquet(run / "trials.parquet")
    assert len(t) == 8 and (t["state"] == "COMPLETE").all()
    assert sorted(t["setting"].unique()) == ["lr=0.002", "lr=0.02"]
    # every trial trained at its own LR: the LR the trainer reported at the end of warm-up
    curves = pd.read_parquet(run / "curves.parquet")
    for row in t.itertuples():
        lr = json.loads(row.params_json)["train.lr"]
        peak = curves.loc[curves["trial_id"] == row.trial_id, "lr"].max()
        assert lr * 0.05 < peak <= lr * (1 + 1e-9), (row.candidate, peak)
    best = yaml.safe_load((run / "best.yaml").read_text())
    tuned = best["tuned"]
    assert tuned["selection"] == "same seeds" and "optimistic" in tuned["caveat"]
    by = {s["schedule"]: s for s in tuned["schedules"]}
    assert set(by) == {"uniform", "cosine 1.5->0.5"}
    # each schedule's best LR is its lowest mean over the two seeds, and two LRs are both edges
    for schedule, s in by.items():
        rows = t[t["schedule"] == schedule]
        means = rows.groupby("setting")["val_bpb"].mean()
        assert s["label"].endswith(means.idxmin())
        assert s["best_at_edge"] and "end of the values tried" in s["best_at_edge"]
    assert len(tuned["best_at_edge"]) == 2
    cos = by["cosine 1.5->0.5"]
    at = t[t["candidate"] == cos["label"]].set_index("seed")["val_bpb"]
    ref = t[t["candidate"] == by["uniform"]["label"]].set_index("seed")["val_bpb"]
    assert cos["delta_vs_uniform"] == pytest.approx(float((at - ref).mean()))
    assert (run / "report.html").read_text().count("tuned-box") == 1
