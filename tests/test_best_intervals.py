"""best.yaml's interval for the best: 95% whatever the family decides with, none on 1-2 df, a
note where the test and the interval disagree, and the families' combined error stated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from search_helpers import tiny_config

from tlmsearch.evidence import Evidence
from tlmsearch.search.best import _best_interval, best_candidates, error_rates, evidences


def _study(seed: int = 0, n_seeds: int = 4, m: int = 15, winners: int = 3) -> pd.DataFrame:
    """m candidates and uniform on n_seeds seeds; the first ``winners`` far better."""
    rng = np.random.default_rng(seed)
    rows = []
    for s in range(n_seeds):
        level = rng.normal(0, 0.01)
        for i in range(m + 1):
            name = "uniform" if i == 0 else f"c{i:02d}"
            v = 2.0 + level + rng.normal(0, 0.005) - (0.05 if 1 <= i <= winners else 0.0)
            rows.append((name, s, v))
    return pd.DataFrame(
        {
            "candidate": [r[0] for r in rows],
            "seed": [r[1] for r in rows],
            "is_baseline": [r[0] == "uniform" for r in rows],
            "state": "COMPLETE",
            "v": [r[2] for r in rows],
        }
    )


def test_under_bh_the_best_gets_the_simultaneous_interval_not_the_false_coverage_one():
    """Benjamini-Yekutieli's false-coverage interval (bh's lo/hi, at 1 - 0.05 R / m) covered
    the best's true effect 90.7% of the time; the joint-t simultaneous one holds 95% for
    whichever the data rank first."""
    t = _study()
    bh = Evidence.build(t, "v", family="bh").effects.set_index("candidate")
    holm = Evidence.build(t, "v", family="holm").effects.set_index("candidate")
    row = bh.loc["c01"]
    assert row["sim_lo"] == pytest.approx(holm.at["c01", "lo"])
    assert row["sim_hi"] == pytest.approx(holm.at["c01", "hi"])
    assert row["hi"] - row["lo"] < row["sim_hi"] - row["sim_lo"]  # BY's is narrower
    ci, note = _best_interval(row)
    assert ci == [pytest.approx(holm.at["c01", "lo"]), pytest.approx(holm.at["c01", "hi"])]
    assert note == ""


def test_best_yaml_prints_the_simultaneous_interval_under_bh(tmp_path):
    cfg = tiny_config(tmp_path, stats={"family": "bh"})
    from tlmsearch.run_dir.tables import trials_frame

    rows = []
    for i, (name, s, v) in enumerate(
        _study(n_seeds=3, m=3, winners=1)[["candidate", "seed", "v"]].itertuples(index=False)
    ):
        params = (
            {"shape": "uniform"}
            if name == "uniform"
            else {"shape": "linear", "r_start": 1.0 + 0.25 * int(name[1:])}
        )
        rows.append(
            {
                "trial_id": f"t{i}",
                "seed": int(s),
                "params": params,
                "state": "COMPLETE",
                "val_bpb": float(v),
            }
        )
    frame = trials_frame(rows)
    (best,) = best_candidates(frame, cfg)
    ev = evidences(frame, cfg)["val_bpb"]
    key = frame.loc[frame["candidate"] == best["candidate"], "params_json"].iloc[0]
    e = ev.effects.set_index("params_json").loc[key]
    assert ev.family == "bh" and e["lo"] != pytest.approx(e["sim_lo"])
    assert best["delta_ci95"]["val_bpb"] == [
        pytest.approx(e["sim_lo"]),
        pytest.approx(e["sim_hi"]),
    ]


def _row(**kw) -> pd.Series:
    base = dict(
        noise_df=10,
        noise_sd=0.02,
        lo=-0.1,
        hi=0.01,
        sim_lo=-0.1,
        sim_hi=0.01,
        separated=True,
        decided_by="family",
    )
    return pd.Series({**base, **kw})


@pytest.mark.parametrize("df", [1, 2])
def test_on_one_or_two_df_the_best_has_no_interval_but_says_it_cannot_be_bounded(df):
    ci, note = _best_interval(_row(noise_df=df, sim_lo=-2.5683, sim_hi=2.4672, separated=False))
    assert ci is None and note.startswith(f"cannot be bounded yet: its noise has {df} df")
    assert "tlmsearch plan" in note
    decided = _row(noise_df=df, sim_lo=-0.2, sim_hi=-0.1, separated=True)  # it bounds enough
    assert _best_interval(decided) == ([-0.2, -0.1], "")


def test_the_note_says_which_decides_when_the_step_down_and_the_interval_disagree():
    ci, note = _best_interval(_row())  # separated, interval touches 0
    assert ci == [-0.1, 0.01] and note.startswith("separated by the family's step-down")
    ci, note = _best_interval(_row(separated=False, sim_hi=-0.01))
    assert note.startswith("not separated: the family's test decides")
    assert _best_interval(_row(sim_hi=-0.01))[1] == ""  # they agree: nothing to say
    race = _row(decided_by="race", lo=-0.2, hi=-0.1)  # the race's own interval
    assert _best_interval(race) == ([-0.2, -0.1], "")


def test_best_yaml_states_the_families_combined_error():
    doc = {
        "best": [{}],
        "tuned": {"schedules": [{"at_shared_setting": {"separated_from_uniform": False}}]},
        "contrasts": {"x": 1},
    }
    r = error_rates(doc, 0.95)
    assert r["families"] == [
        "effects vs uniform",
        "tuned (each at its best setting)",
        "at uniform's best setting",
        "contrasts",
    ]
    assert r["combined"] == pytest.approx(0.2) and "80%" in r["note"]
    one = error_rates({"best": [{}]}, 0.95)
    assert one["combined"] == pytest.approx(0.05) and one["note"].startswith("one family")


def test_a_sentence_on_one_df_says_it_cannot_be_bounded_instead_of_a_huge_interval():
    """A stored 2-seed race re-judged printed "-0.0505 [95% CI -2.5683, +2.4672]"."""
    from tlmsearch.evidence.conclusions import _Diff, _numbers

    d = _Diff(2, 2, -0.0505, 2.518, "model", -2.7, 0.4, "family", False, "", "", 1)
    text = _numbers(d, "val_bpb", 0.95)
    assert "±" not in text and "cannot be bounded yet (its noise has 1 df" in text
    assert text.startswith("-0.05") and "tlmsearch plan" in text
    ok = _numbers(
        d._replace(df=3)
        if hasattr(d, "_replace")
        else _Diff(2, 2, -0.0505, 0.02, "model", -2.7, 0.01, "family", True, "", "", 3),
        "val_bpb",
        0.95,
    )
    assert "±" in ok
