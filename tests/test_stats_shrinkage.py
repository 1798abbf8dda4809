"""The best's selection-adjusted estimate (stats/shrinkage.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch import stats
from tlmsearch.evidence import Evidence


@settings(max_examples=80, deadline=None)
@given(
    d=st.lists(st.floats(-5, 5), min_size=3, max_size=20),
    sd=st.floats(0.01, 5.0),
    share=st.floats(0.0, 0.9),
    n=st.integers(1, 10),
)
def test_each_estimate_moves_toward_the_mean_and_keeps_the_order(d, sd, share, n):
    e = pd.DataFrame(
        {"mean_delta": d, "noise_sd": sd, "n": n, "noise_shared": share, "noise_group": 0}
    )
    s = stats.shrunk(e).to_numpy()
    mu = float(np.mean(d))
    for x, raw in zip(s, d, strict=True):
        assert min(mu, raw) - 1e-9 <= x <= max(mu, raw) + 1e-9
    order = np.argsort(d, kind="stable")
    assert np.all(np.diff(s[order]) >= -1e-9)  # the ranking is unchanged


def _null(rng, m=15, seeds=3):
    rows = []
    for s in range(seeds):
        level = rng.normal(0, 0.01)
        for i in range(m + 1):
            rows.append(
                ("uniform" if i == 0 else f"c{i:02d}", s, 2.0 + level + rng.normal(0, 0.005))
            )
    return pd.DataFrame(
        {
            "candidate": [r[0] for r in rows],
            "seed": [r[1] for r in rows],
            "is_baseline": [r[0] == "uniform" for r in rows],
            "state": "COMPLETE",
            "v": [r[2] for r in rows],
        }
    )


@pytest.mark.slow  # a rate over many simulated studies
def test_the_best_of_equal_candidates_is_adjusted_toward_no_curse():
    """Over 40 null studies the best-ranked candidate's raw mean delta lies well below 0 (the
    winner's curse, about -0.7 noise sd); the adjusted one's mean is near 0."""
    rng = np.random.default_rng(0)
    raw, adj = [], []
    for _ in range(40):
        eff = Evidence.build(_null(rng), "v").effects.set_index("candidate")
        best = eff["mean_delta"].idxmin()
        unit = float(eff.at[best, "noise_sd"])
        raw.append(eff.at[best, "mean_delta"] / unit)
        adj.append(eff.at[best, "shrunk"] / unit)
    assert np.mean(raw) < -0.5
    assert abs(np.mean(adj)) < 0.25 and abs(np.mean(adj)) < abs(np.mean(raw)) / 3


def test_best_yaml_and_status_give_the_adjusted_estimate_beside_the_raw_mean():
    from tlmsearch.search.cli import best_line

    best = {
        "candidate": "c",
        "values": {"val_bpb": 2.0},
        "ranked_seeds": [0, 1, 2],
        "n_of_k": "3 of 3 seeds",
        "delta_vs_uniform": {"val_bpb": -0.02},
        "delta_ci95": {"val_bpb": [-0.04, 0.0]},
        "effect_noise": {"val_bpb": -1.5},
        "separated_from_uniform": {"val_bpb": False},
        "delta_selection_adjusted": {"val_bpb": -0.004},
    }
    assert "(selection-adjusted -0.0040)" in best_line(best)


def test_best_candidates_store_the_adjusted_estimate(tmp_path):
    from search_helpers import tiny_config

    from tlmsearch.run_dir.tables import trials_frame
    from tlmsearch.search.best import best_candidates

    rng = np.random.default_rng(1)
    rows = []
    for i, (name, s, _, _, v) in enumerate(_null(rng, m=4).itertuples(index=False, name=None)):
        params = (
            {"shape": "uniform"}
            if name == "uniform"
            else {"shape": "linear", "r_start": 1.0 + 0.25 * int(name[1:])}
        )
        rows.append(
            {"trial_id": f"t{i}", "seed": s, "params": params, "state": "COMPLETE", "val_bpb": v}
        )
    (best,) = best_candidates(trials_frame(rows), tiny_config(tmp_path))
    adj = best["delta_selection_adjusted"]["val_bpb"]
    raw = best["delta_vs_uniform"]["val_bpb"]
    assert adj == pytest.approx(adj) and adj >= raw - 1e-12
