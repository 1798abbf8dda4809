"""Evidence's answers on four seeded studies, against the numbers stored in
tests/golden/evidence.json: a change that only makes the statistics faster leaves every effect,
interval, p-value and decision where it was (to 1e-12).

The studies: a null study (15 candidates equal to uniform, 3 seeds); one with pruned, failed
(its own and the system's), running, unpruned and repeated cells and a trial without a seed; one
with two learning rates of different noise; one whose schedules have their best at different
learning rates. After a change that is meant to move a number, rewrite the file with
``python tests/test_evidence_golden.py`` and say why in the commit.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from fixtures_run import lr_cells_frame

from tlmsearch.evidence import Evidence
from tlmsearch.run_dir.tables import trials_frame

GOLDEN = Path(__file__).parent / "golden" / "evidence.json"

EFFECT_COLUMNS = (
    "n",
    "mean_delta",
    "noise_from",
    "noise_sd",
    "noise_df",
    "noise_shared",
    "lo",
    "hi",
    "ci_level",
    "p",
    "p_adj",
    "separated",
    "family_size",
    "censored",
)


def _frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["candidate", "seed", "state", "val_bpb"])
    df["is_baseline"] = df["candidate"] == "uniform"
    return df


def _null(rng: np.random.Generator) -> pd.DataFrame:
    level = rng.normal(0, 0.005, size=3)
    rows = []
    for cand in ["uniform", *(f"c{i}" for i in range(15))]:
        e = rng.normal(0, 0.005, size=3)
        rows += [(cand, s, "COMPLETE", 2.0 + level[s] + e[s]) for s in range(3)]
    return _frame(rows)


def _messy(rng: np.random.Generator) -> pd.DataFrame:
    level = rng.normal(0, 0.01, size=4)
    rows = []
    for cand in ["uniform", *(f"c{i}" for i in range(10))]:
        mu = 0.0 if cand == "uniform" else float(rng.choice([0.0, -0.01, 0.01, -0.03]))
        e = rng.normal(0, 0.004, size=4)
        rows += [(cand, s, "COMPLETE", 2.0 + mu + level[s] + e[s]) for s in range(4)]
    t = _frame(rows)
    cand, u = ~t["is_baseline"], rng.random(len(t))
    t.loc[cand & (u < 0.15), "state"] = "PRUNED"
    t.loc[cand & (u >= 0.15) & (u < 0.2), "state"] = "FAIL"
    t.loc[cand & (u >= 0.2) & (u < 0.23), "state"] = "RUNNING"
    t["reason"] = np.where(rng.random(len(t)) < 0.5, "worker died (node lost)", "diverged")
    t.loc[t["state"].isin(["FAIL", "RUNNING"]), "val_bpb"] = math.nan
    t["unpruned"] = t["candidate"].isin({f"c{i}" for i in range(10) if rng.random() < 0.4})
    again = t[t["state"] == "COMPLETE"].iloc[[1, 7, 20]]
    again = again.assign(val_bpb=again["val_bpb"] + rng.normal(0, 0.003, size=3))
    unknown = {"candidate": "c0", "seed": None, "state": "COMPLETE", "val_bpb": 2.0}
    unknown |= {"is_baseline": False, "reason": "", "unpruned": False}
    return pd.concat([t, again, pd.DataFrame([unknown])], ignore_index=True)


def _two_lrs(rng: np.random.Generator) -> pd.DataFrame:
    sd = {0.001: 0.002, 0.005: 0.05}
    rows = []
    for shape in ("uniform", "cosine", "linear", "sigmoid"):
        params = {"shape": shape} | ({"r_start": 1.5} if shape != "uniform" else {})
        for lr in sd:
            for seed in range(4):
                v = 2.0 + rng.normal(0, sd[lr]) + (0.01 if (shape, lr) == ("cosine", 0.001) else 0)
                rows.append(
                    {
                        "trial_id": f"{shape}{lr}{seed}",
                        "seed": seed,
                        "params": params | {"train.lr": lr},
                        "state": "COMPLETE",
                        "val_bpb": v,
                        "n_params": 1000,
                    }
                )
    return trials_frame(rows)


def _optima_differ(rng: np.random.Generator) -> pd.DataFrame:
    curve = {"uniform": {1: 0.0, 3: 0.02, 9: 0.04}, "cosine": {1: 0.04, 3: 0.02, 9: 0.0}}
    rows = []
    for seed in range(4):
        for lr in (1, 3, 9):
            level = rng.normal(0, 0.01)
            for s, at in curve.items():
                rows.append((s, lr, seed, 2.0 + at[lr] + level + rng.normal(0, 0.002)))
    return lr_cells_frame(rows, "val_bpb")


STUDIES = {"null": _null, "messy": _messy, "two_lrs": _two_lrs, "optima_differ": _optima_differ}


def _plain(x):
    """A JSON value: NaN and <NA> as None, numpy scalars as Python's."""
    if x is None or x is pd.NA:
        return None
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        return None if math.isnan(x) else float(x)
    return str(x)


def _rows(frame: pd.DataFrame | None, key: str, columns) -> dict:
    if frame is None:
        return {}
    cols = [c for c in columns if c in frame]
    return {str(r[key]): {c: _plain(r[c]) for c in cols} for _, r in frame.iterrows()}


def answers(name: str) -> dict:
    """The numbers Evidence gives for study ``name``: effects, ranking, MCB, tuned, contrasts."""
    ev = Evidence.build(STUDIES[name](np.random.default_rng(11)), "val_bpb")
    tu = ev.tuned
    return {
        "effects": _rows(ev.effects, "candidate", EFFECT_COLUMNS),
        "ranking": [str(c) for c in ev.ranking["candidate"]],
        "best": _rows(ev.best, "candidate", ("mean", "eliminated", "by", "selected", "critical")),
        "noise": None if ev.noise is None else [ev.noise.sd, ev.noise.df],
        "tuned": {} if tu is None else _rows(tu.effects, "schedule", EFFECT_COLUMNS),
        "contrasts": {}
        if ev.contrasts is None
        else {
            str(i): {c: _plain(v) for c, v in r.items() if c in ("estimate", "lo", "hi", "p_adj")}
            for i, r in ev.contrasts.reset_index(drop=True).iterrows()
        },
    }


def _same(got, want, where: str) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want), where
        for k in want:
            _same(got[k], want[k], f"{where}.{k}")
    elif isinstance(want, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _same(g, w, f"{where}[{i}]")
    elif isinstance(want, float) and not isinstance(want, bool):
        assert got == pytest.approx(want, rel=1e-12, abs=1e-14), where
    else:
        assert got == want, where


@pytest.mark.parametrize("name", list(STUDIES))
def test_evidence_gives_the_stored_numbers(name: str) -> None:
    want = json.loads(GOLDEN.read_text())[name]
    got = json.loads(json.dumps(answers(name)))  # as stored: tuples as lists
    _same(got, want, name)


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(json.dumps({n: answers(n) for n in STUDIES}, indent=1) + "\n")
    print(f"wrote {GOLDEN}")
