"""tlmsearch.evidence: one decision per question, from one object per study."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from tlmsearch.config import PartialStudy
from tlmsearch.evidence import FAMILY, RACE, Evidence
from tlmsearch.evidence.conclusions import conclusions
from tlmsearch.evidence.racing import race_family_size


def frame(rows: list[tuple]) -> pd.DataFrame:
    """(candidate, seed, val_bpb, val_loss) rows, all COMPLETE; "uniform" is the baseline."""
    df = pd.DataFrame(rows, columns=["candidate", "seed", "val_bpb", "val_loss"])
    df["state"] = "COMPLETE"
    df["is_baseline"] = df["candidate"] == "uniform"
    return df


def racing_config(against: str = "uniform", **racing) -> PartialStudy:
    return PartialStudy.model_validate(
        {
            "search": {
                "seeds": [0, 1, 2],
                "racing": {"max_seeds": 3, "against": against, **racing},
            },
            "objectives": [{"metric": "val_bpb"}, {"metric": "val_loss"}],
        }
    )


ROWS = [("uniform", s, 2.0 + 0.1 * s, 3.0 + 0.1 * s) for s in range(3)]
ROWS += [
    ("a", s, 2.0 + 0.1 * s + d, 3.0 + 0.1 * s + d) for s, d in enumerate((-0.30, -0.31, -0.29))
]
ROWS += [
    ("b", s, 2.0 + 0.1 * s + d, 3.0 + 0.1 * s + d) for s, d in enumerate((0.01, -0.012, 0.002))
]


def test_the_race_decides_only_the_metric_it_raced():
    # the driver races the first objective; a second one is decided by the family, never by a
    # race the driver did not run (a reviewer's find)
    t = frame(ROWS)
    first = Evidence.build(t, "val_bpb", config=racing_config())
    second = Evidence.build(t, "val_loss", config=racing_config())
    assert set(first.effects["decided_by"]) == {RACE} and first.lanes is not None
    assert set(second.effects["decided_by"]) == {FAMILY} and second.lanes is None
    # both rank on the seeds the first objective's race planned
    assert list(first.ranking["ranked_seeds"]) == list(second.ranking["ranked_seeds"])


def test_a_raced_row_has_one_decision_and_the_race_interval():
    t = frame(ROWS)
    ev = Evidence.build(t, "val_bpb", config=racing_config())
    e = ev.effects.set_index("candidate")
    lanes = {ln.candidate: ln for ln in ev.lanes}
    a = e.loc["a"]
    assert bool(a["separated"]) == (lanes["a"].status == "separated")
    assert a["half_width"] == lanes["a"].half_width and pd.isna(a["p_adj"])
    said = conclusions(t, label="val_bpb", evidence=ev)
    text = " ".join(said.supported + said.unsupported)
    assert "decided by the race against uniform" in text and "adjusted p" not in text


def test_the_race_corrects_over_the_planned_candidates_from_the_first_look(tmp_path):
    # a grid's candidates, not those started so far: the early looks test at the same level
    from search_helpers import tiny_config

    dims = {
        "shape": {"type": "categorical", "choices": ["linear", "cosine", "sigmoid"]},
        "r_start": {"type": "categorical", "choices": [1.25, 1.5, 1.75]},
    }
    study = tiny_config(
        tmp_path,
        space={"dimensions": dims},
        search={"seeds": [0, 1, 2], "racing": {"max_seeds": 3}},
    )
    assert race_family_size(study) == len(study.candidates()) - 1 >= 6
    t = frame(ROWS)  # two candidates have started
    ev = Evidence.build(t, "val_bpb", config=study)
    m = race_family_size(study)
    assert ev.race_size == m and f"Bonferroni over {m} candidate(s)" in ev.decision_words()


def test_mcb_never_calls_a_censored_candidate_the_best():
    rows = list(ROWS) + [("c", s, 1.0 + 0.1 * s, 2.0) for s in range(2)]  # far ahead on 2 seeds
    t = frame(rows)
    t = pd.concat(
        [
            t,
            pd.DataFrame(
                [
                    {
                        "candidate": "c",
                        "seed": 2,
                        "val_bpb": float("nan"),
                        "val_loss": float("nan"),
                        "state": "PRUNED",
                        "is_baseline": False,
                    }
                ]
            ),
        ],
        ignore_index=True,
    )
    said = conclusions(t, "val_bpb")
    assert said.top_group["best"] != "c"
    assert not any(x.startswith("c is the best") for x in said.supported)


def _recorded(t: pd.DataFrame, decided: dict[str, dict]) -> pd.DataFrame:
    import json

    return t.assign(
        race_decision=[json.dumps(decided[c]) if c in decided else "" for c in t["candidate"]]
    )


def test_in_a_run_that_records_decisions_only_the_recorded_ones_decide():
    # the driver may keep a lane racing (its next seed queued, which the trials table does not
    # show); the report must not decide it from the table alone (a reviewer's find)
    t = frame(ROWS)
    tied = {
        "status": "tied",
        "reason": "not separated from uniform after 3 of 3 seeds",
        "seeds": [0, 1, 2],
        "mean_delta": 0.0,
        "half_width": 0.05,
    }
    ev = Evidence.build(_recorded(t, {"b": tied}), "val_bpb", config=racing_config())
    e = ev.effects.set_index("candidate")
    assert bool(e.loc["b", "separated"]) is False and e.loc["b", "decided_by"] == RACE
    assert pd.isna(e.loc["a", "separated"])  # not recorded: still racing for the driver


def test_an_unreadable_record_leaves_the_decision_to_the_family():
    t = frame(ROWS).assign(
        race_decision=lambda x: ["{not json" if c == "a" else "" for c in x["candidate"]]
    )
    ev = Evidence.build(t, "val_bpb", config=racing_config())
    assert set(ev.effects["decided_by"]) == {FAMILY} and ev.lanes is None
    assert "race not computable (race_decision of a: not a decision" in ev.decision_words()


def test_evidence_carries_the_studys_signal_to_noise_with_its_checkpoint_noise():
    t = frame(ROWS)
    t["trial_id"] = [f"t{i}" for i in range(len(t))]
    t.loc[len(t)] = ["c", 0, 1.0, 1.0, "PRUNED", False, "t9"]  # pruned: its curve stops early
    t["unpruned"] = t["candidate"] != "c"  # search.unpruned_candidates: a and b measure the noise
    curves = pd.DataFrame(
        [
            {"trial_id": tid, "tokens": 100 * k, "val_bpb": v + 0.1 * (5 - k) + 0.002 * (k % 2)}
            for tid, v in zip(t["trial_id"], t["val_bpb"], strict=True)
            for k in range(1, 6)
        ]
    )
    ev = Evidence.build(t, "val_bpb", curves=curves)
    snr = ev.snr
    assert snr.n_candidates == 3  # uniform, a, b: c has no completed seed
    assert snr.dispersion == pytest.approx(0.30)  # a: -0.30 on average, b: 0.0, uniform 0
    assert snr.seed_sd == ev.noise.sd and snr.seed_snr == pytest.approx(0.30 / ev.noise.sd)
    assert snr.checkpoint.n_trials == 9  # the complete trials only
    assert snr.checkpoint.sd == pytest.approx(0.002 * math.sqrt(1.6) / 2)
    assert ev.snr.checkpoint_snr == pytest.approx(
        snr.signal / (snr.checkpoint.sd / snr.checkpoint.mean)
    )
    alone = Evidence.build(t, "val_bpb")
    assert alone.snr.seed_snr == snr.seed_snr and alone.snr.checkpoint_snr is None
    assert alone.snr.why_checkpoint == "no learning curves given"
    other = Evidence.build(t, "val_loss", curves=curves)
    assert other.snr.why_checkpoint == "the learning curves have no val_loss"


def test_without_a_uniform_baseline_the_snr_says_so():
    t = frame([r for r in ROWS if r[0] != "uniform"])  # search.baseline: false
    assert Evidence.build(t, "val_bpb").snr.why_signal == (
        "no uniform baseline (search.baseline: false): the means pair with uniform"
    )


def test_pairs_are_the_evidences_pairwise_decisions():
    t = frame(ROWS)
    ev = Evidence.build(t, "val_bpb")
    p = ev.pairs(t, ["uniform", "a", "b"]).set_index(["a", "b"])
    assert bool(p.loc[("a", "uniform"), "separated"]) and not p.loc[("b", "uniform"), "separated"]
    # each pair on the Evidence's model: here uniform's own seeds scatter more than the pool
    assert p.loc[("a", "uniform"), "noise_sd"] == ev.model.pair("a", "uniform").sd
    assert ev.model.rows["uniform"].source == "own"
    assert p.loc[("a", "b"), "noise_sd"] == ev.noise.sd  # two quiet rows: the pooled noise


def test_the_race_judges_each_candidate_on_the_same_model_as_the_effects():
    # one variance model for every decision; here uniform's seeds scatter more than
    # the pool, so the race's interval (and the effects') rests on uniform's own noise
    from tlmsearch.evidence.racing import critical

    t = frame(ROWS)
    ev = Evidence.build(t, "val_bpb", config=racing_config())
    assert ev.model.rows["uniform"].source == "own"
    lanes = {ln.candidate: ln for ln in ev.lanes}
    for cand in ("a", "b"):
        n = ev.model.pair(cand, "uniform")
        ln = lanes[cand]
        half = critical(n, 0.95, 3, 2, "uniform") * n.sd / math.sqrt(len(ln.seeds))
        assert ln.half_width == pytest.approx(half)
    old = Evidence.build(t, "val_bpb", config=racing_config(), variance="pooled")
    assert old.model == old.noise and set(old.effects["noise_from"]) == {"pooled"}
    with pytest.raises(ValueError, match="variance must be one of rows, pooled"):
        Evidence.build(t, "val_bpb", variance="welch")


def test_a_pooled_evidence_is_the_block_fit_for_every_comparison():
    t = frame(ROWS)
    ev = Evidence.build(t, "val_bpb", variance="pooled")
    assert (ev.effects["noise_sd"] == ev.noise.sd).all()
    assert (ev.effects["noise_df"] == ev.noise.df).all()


def test_a_prune_in_one_setting_leaves_every_settings_survivors_out():
    # the study's pruner judges trials across settings (Optuna's median
    # compares every trial at a step), so once it stopped a candidate at lr 1, the candidates
    # it let run at lr 2 survived it too: each setting's own fit keeps uniform and its unpruned
    # candidate only, whichever setting the prune was in
    import numpy as np

    rng = np.random.default_rng(4)
    rows = []
    for lr in (1, 2):
        for c in ("uniform", "c1", "c2", "c3"):
            for s in range(3):
                rows.append(
                    {
                        "candidate": f"{c} @ lr={lr}",
                        "setting": f"lr={lr}",
                        "seed": s,
                        "is_baseline": c == "uniform",
                        "unpruned": c == "c1",
                        "state": "COMPLETE",
                        "val_bpb": 2.0 + rng.normal(0, 0.01),
                    }
                )
    t = pd.DataFrame(rows)
    cut = (t["candidate"] == "c3 @ lr=1") & (t["seed"] == 2)
    t.loc[cut, "state"] = "PRUNED"
    eff = Evidence.build(t, "val_bpb").effects.set_index("candidate")
    # lr 2: uniform and c1 on 3 seeds, (2 - 1)(3 - 1) df; with its survivors in, 6
    assert eff.loc["c2 @ lr=2", "noise_df"] <= 2
    assert eff.loc["c1 @ lr=2", "noise_df"] <= 2
    whole = Evidence.build(t.assign(state="COMPLETE"), "val_bpb").effects.set_index("candidate")
    assert whole.loc["c2 @ lr=2", "noise_df"] >= 6  # nothing pruned: every row measures it
