"""report/effects.py: the effects table, the "can these be told apart" matrix and the race view,
on trials tables with hand-computed answers (no Ray, no Optuna)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from fixtures_run import make_trials

from tlmsearch import stats
from tlmsearch.config import PartialStudy, RacingConfig, frozen_study
from tlmsearch.report import effects as E
from tlmsearch.report import figures as F
from tlmsearch.run_dir.tables import trials_frame

BASE = [2.0, 2.1, 1.9]  # uniform on seeds 0, 1, 2
COS = {"shape": "cosine", "r_start": 1.5}  # cosine 1.5->0.5
LIN = {"shape": "linear", "r_start": 1.5}  # linear 1.5->0.5
SIG = {"shape": "sigmoid", "r_start": 1.5}  # sigmoid 1.5->0.5 k=10
UNI = {"shape": "uniform"}


def table(
    deltas: list[tuple[dict, list[float | None]]], states: dict | None = None, unpruned: int = 2
):
    """uniform on three seeds, each candidate ``BASE[seed] + delta`` (None: no trial); the
    first ``unpruned`` candidates the pruner could not stop (``search.unpruned_candidates``)."""
    recs = [
        {"trial_id": f"u{s}", "seed": s, "params": UNI, "val_bpb": v} for s, v in enumerate(BASE)
    ]
    for i, (params, ds) in enumerate(deltas):
        for s, d in enumerate(ds):
            if d is None:
                continue
            tid = f"c{i}-{s}"
            state = (states or {}).get(tid, "COMPLETE")
            recs.append(
                {
                    "trial_id": tid,
                    "seed": s,
                    "params": params,
                    "state": state,
                    "val_bpb": BASE[s] + d,
                    "unpruned": i < unpruned,
                }
            )
    return trials_frame(recs)


def study() -> pd.DataFrame:
    # cosine clearly better (deltas -0.10, -0.11, -0.09); linear within noise of uniform;
    # sigmoid on one seed only (+0.3): judged with the pooled seed noise
    return table([(COS, [-0.10, -0.11, -0.09]), (LIN, [0.05, -0.06, 0.02]), (SIG, [0.3])])


# -------------------------------------------------------------------------------------------------
# effects


def test_effects_table_in_rank_order_with_the_noise_said():
    e = E.effects(study(), "val_bpb", seeds=[0, 1, 2])
    t = e.table.set_index("candidate")
    assert list(e.table["candidate"]) == [
        "cosine 1.5->0.5",
        "linear 1.5->0.5",
        "sigmoid 1.5->0.5 k=10",
    ]
    cos = t.loc["cosine 1.5->0.5"]
    assert cos["rank"] == 1 and cos["noise"] == "model" and bool(cos["separated"])
    assert cos["mean_delta"] == pytest.approx(-0.10) and cos["n_better"] == 3
    # each comparison on its rows' noise (uniform's own variance), the engine's
    model = stats.row_noise(study(), "val_bpb")
    engine = stats.effects(study(), "val_bpb").set_index("candidate")
    assert cos["half_width"] == pytest.approx(engine.loc["cosine 1.5->0.5", "half_width"])
    assert cos["noise_sd"] == pytest.approx(model.pair("cosine 1.5->0.5", "uniform").sd)
    assert cos["decided_by"] == "family"
    assert not bool(t.loc["linear 1.5->0.5", "separated"])
    sig = t.loc["sigmoid 1.5->0.5 k=10"]  # 10 cells, 4 + 3 - 1 parameters: 4 df pooled
    assert sig["noise"] == "model" and e.noise.df == 4
    pair = model.pair("sigmoid 1.5->0.5 k=10", "uniform")
    assert (sig["noise_sd"], sig["noise_df"]) == (pytest.approx(pair.sd), pair.df)
    assert "2 running or not run yet" in sig["flag"]  # planned on seeds 0-2, ran on seed 0
    assert e.conclusions.supported[0].startswith("cosine 1.5->0.5 beats uniform on 3/3 seeds")
    assert any("linear 1.5->0.5 vs uniform: within noise" in x for x in e.conclusions.unsupported)


def test_effects_on_empty_and_baseline_only_tables():
    for t in (trials_frame([]), table([])):
        e = E.effects(t, "val_bpb")
        assert e.table.empty and e.noise is None and e.conclusions == ([], [], None)
        assert set(stats.EFFECT_COLUMNS) <= set(e.table.columns)


# -------------------------------------------------------------------------------------------------
# the matrix


def test_separation_matrix_cells_known_answers():
    m = E.separation(study(), "val_bpb", k=5)
    assert m.names == ["cosine 1.5->0.5", "linear 1.5->0.5", "sigmoid 1.5->0.5 k=10", "uniform"]
    assert len(m.cells) == 4 * 3  # every ordered pair
    c = m.cells.set_index(["a", "b"])
    cu = c.loc[("cosine 1.5->0.5", "uniform")]  # the paired effect vs uniform
    assert cu["mean"] == pytest.approx(-0.10) and cu["better"] == 1.0
    assert cu["text"].startswith("<b>-0.1 ± ") and "3 seeds" in cu["text"]
    assert c.loc[("uniform", "cosine 1.5->0.5"), "better"] == -1.0  # mirrored
    # cosine - linear on seeds 0-2: -0.15, -0.05, -0.11: sd 0.0503, half 0.125: within noise
    cl = c.loc[("cosine 1.5->0.5", "linear 1.5->0.5")]
    # (with the study's one noise, 4 df, it is separated after Holm over the 6 pairs)
    assert cl["mean"] == pytest.approx(-0.31 / 3) and cl["better"] == 1.0
    assert cl["text"].startswith("<b>") and cl["p_adj"] < 0.05
    # sigmoid shares seed 0 only: the same block-design noise, over one seed
    sc = c.loc[("sigmoid 1.5->0.5 k=10", "cosine 1.5->0.5")]
    assert sc["n"] == 1 and sc["noise"] == "model" and sc["text"].endswith("1 seed")
    assert "block-design noise" in sc["hover"] and "holm" in sc["hover"]
    top2 = E.separation(study(), "val_bpb", k=2)
    assert top2.names == ["cosine 1.5->0.5", "linear 1.5->0.5", "uniform"]


def test_separation_without_noise_or_common_seeds():
    one = E.separation(table([(COS, [-0.1]), (LIN, [None, 0.05])]), "val_bpb")
    c = one.cells.set_index(["a", "b"])
    assert c.loc[("cosine 1.5->0.5", "linear 1.5->0.5"), "text"] == "no common seed"
    assert math.isnan(c.loc[("cosine 1.5->0.5", "uniform"), "better"])  # one seed, no noise
    assert "noise ?" in c.loc[("cosine 1.5->0.5", "uniform"), "text"]
    alone = E.separation(table([]), "val_bpb")
    assert alone.names == ["uniform"] and alone.cells.empty
    fig = F.separation(alone)
    assert [a.text for a in fig.layout.annotations][-1].startswith("fewer than two")
    drawn = F.separation(E.separation(study(), "val_bpb"))
    assert len(drawn.data) == 1 and len(drawn.data[0].z) == 4


# -------------------------------------------------------------------------------------------------
# the race


def racing(max_seeds: int | None = 3, **kw) -> PartialStudy:
    race = {"max_seeds": max_seeds, "confidence": 0.95, "against": "uniform", **kw}
    return PartialStudy.model_validate(
        {"search": {"seeds": [0, 1, 2], "racing": race}, "objectives": [{"metric": "val_bpb"}]}
    )


def test_race_shows_seeds_per_candidate_and_why_it_stopped():
    # linear: within noise on 3 of 3 seeds (tied); cosine: -0.10 on 3 seeds, but at Bonferroni
    # over 4 candidates x 3 looks with linear's noisy deltas in the study's noise, tied too;
    # sigmoid: +0.3 on seed 0, separated at once; pruned one: stopped
    t = table(
        [
            (COS, [-0.10, -0.11, -0.09]),
            (LIN, [0.05, -0.06, 0.02]),
            (SIG, [0.3]),
            ({"shape": "linear", "r_start": 1.25}, [0.4]),
        ],
        states={"c3-0": "PRUNED"},
    )
    r = E.race(t, racing())
    assert r.settings == "up to 3 of seeds [0, 1, 2], 95% confidence, against uniform"
    lanes = r.lanes.set_index("candidate")
    assert lanes.loc["sigmoid 1.5->0.5 k=10", "status"] == "separated"
    assert lanes.loc["sigmoid 1.5->0.5 k=10", "seeds"] == (0,)
    assert "worse than uniform" in lanes.loc["sigmoid 1.5->0.5 k=10", "reason"]
    assert lanes.loc["linear 1.5->0.5", "status"] == "tied"
    assert lanes.loc["linear 1.5->0.5", "n_seeds"] == 3
    assert lanes.loc["linear 1.25->0.75", "status"] == "stopped"
    assert lanes.loc["cosine 1.5->0.5", "status"] == "tied"
    assert r.counts == {"separated": 1, "stopped": 1, "tied": 2}
    assert r.decided and r.uniform_seeds == [0, 1, 2] and r.note == ""
    assert r.lanes["candidate"].iloc[0] == "cosine 1.5->0.5"  # best mean delta first


def test_race_still_going_none_without_racing_and_a_bad_setting():
    t = table([(COS, [-0.1]), (LIN, [0.01])])  # no noise estimate yet: both race on
    r = E.race(t, racing())
    assert not r.decided and set(r.lanes["status"]) == {"racing"}
    assert "no noise estimate yet: seed 1 next" in r.lanes["reason"].iloc[0]
    assert E.race(t, PartialStudy.model_validate({"search": {"seeds": [0]}})) is None
    bad = E.race(t, racing(max_seeds=9))
    assert bad.lanes.empty and bad.note.startswith("race not computable (max_seeds")
    assert E.race(trials_frame([]), racing()).note == "no trial yet"
    assert "prior sd 0.01" in E.race(t, racing(prior_sd=0.01)).settings


def test_a_racing_section_of_defaults_races_with_the_models_defaults():
    # the race's settings are the study's RacingConfig, defaults and all, as the
    # driver reads them: `racing: {}` races (the report used to read the empty dict as no race)
    t = table([(COS, [-0.1]), (LIN, [0.01])])
    study = frozen_study({"search": {"seeds": [0, 1, 2], "racing": {}}})
    r = E.race(t, study)
    assert r is not None and r.settings == (
        f"up to 3 of seeds [0, 1, 2], {RacingConfig().confidence:.0%} confidence, against "
        f"{RacingConfig().against}"
    )
    assert r.lanes.equals(E.race(t, racing()).lanes)


def test_on_the_synthetic_fixture_run():
    trials, _ = make_trials(seeds=(0, 1, 2), pruned=(9,))
    t = trials_frame(trials)
    m = E.separation(t, "val_bpb", k=5)
    assert len(m.names) == 6 and m.names[-1] == "uniform"
    assert m.cells["separated"].notna().all()
