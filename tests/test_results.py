"""Run-dir tables: normalising, deltas vs uniform, atomic writes, reading back."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.config import PartialStudy, frozen_study
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir.tables import (
    CURVE_COLUMNS,
    TRIAL_COLUMNS,
    add_deltas,
    add_effects,
    load_run,
    metric_column,
    objectives_of,
    trials_frame,
    write_results,
    write_status,
)


def _trial(tid: str, seed: int, params: dict, bpb: float, state: str = "COMPLETE") -> dict:
    return {
        "trial_id": tid,
        "seed": seed,
        "params": params,
        "widths": [96, 64, 32] if params["shape"] != "uniform" else [64, 64, 64],
        "val_bpb": bpb,
        "state": state,
        "tokens": 1000,
    }


def test_every_contract_column_present_and_typed(tmp_path):
    write_results(tmp_path, [{"trial_id": "a"}], [{"trial_id": "a", "tokens": 10}])
    run = load_run(tmp_path)
    for df, cols in ((run.trials, TRIAL_COLUMNS), (run.curves, CURVE_COLUMNS)):
        assert list(df.columns[: len(cols)]) == list(cols)
    row = run.trials.iloc[0]
    assert math.isnan(row["val_bpb"]) and row["reason"] == "" and row["number"] is pd.NA
    assert row["state"] == "COMPLETE"  # a record without state has finished
    assert not row["is_baseline"]
    assert run.trials["tokens"].dtype == "Int64"
    assert run.curves.loc[0, "tokens"] == 10
    for name in ("trials.parquet", "trials.csv", "curves.parquet", "curves.csv"):
        assert (tmp_path / name).exists()
    assert not list(tmp_path.glob("*.tmp")), "temp files must be renamed away"


def test_fields_derived_from_params_and_widths():
    df = trials_frame([_trial("c", 0, {"shape": "cosine", "r_start": 1.5}, 1.2)])
    row = df.iloc[0]
    assert row["candidate"] == "cosine 1.5->0.5"
    assert row["shape"] == "cosine" and row["r_start"] == 1.5 and row["r_end"] == 0.5
    assert row["taper"] == pytest.approx(1.0)
    assert json.loads(row["widths_json"]) == [96, 64, 32]
    assert row["realised_start"] == pytest.approx(1.5) and row["realised_end"] == 0.5
    assert json.loads(row["params_json"]) == {"shape": "cosine", "r_start": 1.5}
    base = trials_frame([_trial("u", 0, {"shape": "uniform"}, 1.3)]).iloc[0]
    assert base["is_baseline"] and base["taper"] == 0 and base["r_start"] == 1.0


def test_realised_ratios_are_what_trained_not_what_was_requested(tmp_path):
    # cosine 0.5 -> 0.25 renormalised to mean 1: 88, 72, 56, 40 over a mean of 64
    cos = {"shape": "cosine", "r_start": 0.5, "r_end": 0.25}
    row = trials_frame([dict(_trial("c", 0, cos, 1.2), widths=[88, 72, 56, 40])]).iloc[0]
    assert (row["r_start"], row["r_end"], row["taper"]) == (0.5, 0.25, 0.25)  # requested
    assert (row["realised_start"], row["realised_end"]) == (1.375, 0.625)
    assert row["realised_taper"] == pytest.approx(0.75)
    # Without widths: from the model's exact-budget plan, the same the trainer builds.
    model = {"n_layer": 4, "d_model": 32, "n_head": 2, "d_ff": 64, "multiple_of": 8}
    rec = {k: v for k, v in _trial("f", 0, cos, 1.2, state="FAIL").items() if k != "widths"}
    planned = trials_frame([rec], model).iloc[0]
    assert planned["widths_json"] == ""  # nothing recorded, nothing claimed
    assert (planned["realised_start"], planned["realised_taper"]) == (1.375, 0.75)
    assert math.isnan(trials_frame([rec]).loc[0, "realised_start"])  # no model: unknown
    # load_run fills them from study.yaml (older run dirs, trials without widths)
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"model": model}))
    write_results(tmp_path, [rec], [])
    assert load_run(tmp_path).trials.loc[0, "realised_start"] == 1.375
    bad = {"shape": "cosine", "r_start": 1.9, "r_end": 0.001}  # no widths exist for it
    rec = {k: v for k, v in _trial("b", 0, bad, 1.2, state="FAIL").items() if k != "widths"}
    assert math.isnan(trials_frame([rec], model).loc[0, "realised_start"])


ATTENTION_ONLY = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}


def test_an_attention_only_taper_is_a_candidate_with_its_heads(tmp_path):
    # MLP shape uniform, heads tapering: not the baseline, and never a delta's reference
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"objectives": [{"metric": "val_bpb"}]}))
    heads = {"heads": [3, 1], "heads_share": 1.0}
    trials = [
        dict(_trial("u0", 0, {"shape": "uniform"}, 1.30), heads=[2, 2], heads_share=1.0),
        dict(_trial("a0", 0, ATTENTION_ONLY, 1.20, state="PRUNED"), **heads),
        dict(_trial("a1", 1, ATTENTION_ONLY, 1.10), **heads),  # its seed has no uniform
    ]
    t = write_results(tmp_path, trials, [])[0].set_index("trial_id")
    assert t["is_baseline"].tolist() == [True, False, False]
    assert t.loc["a0", "candidate"] == "uniform | heads cosine 1.5->0.5"
    assert t.loc["a0", "shape"] == "uniform" and t.loc["a0", "heads_shape"] == "cosine"
    assert json.loads(t.loc["a0", "heads_json"]) == [3, 1]
    assert (t.loc["u0", "heads_shape"], json.loads(t.loc["u0", "heads_json"])) == ("", [2, 2])
    assert math.isnan(t.loc["a1", "delta_val_bpb"])  # it is no baseline of seed 1
    assert t["heads_share"].tolist() == [1.0, 1.0, 1.0]
    run = load_run(tmp_path).trials.set_index("trial_id")
    assert not run.loc["a1", "is_baseline"] and run.loc["a1", "heads_json"] == "[3, 1]"


def test_a_realised_heads_share_comes_from_the_plan_when_not_recorded():
    # 4 layers of 4 heads: share 0.5 asks for 8 of 16 heads; the nearest payable total trains
    model = {"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 128, "multiple_of": 16}
    moved = {"shape": "uniform", "heads.share": 0.5}
    recs = [
        {"trial_id": "m", "params": moved, "state": "FAIL"},
        {"trial_id": "u", "params": {"shape": "uniform"}, "state": "FAIL"},
    ]
    t = trials_frame(recs, model).set_index("trial_id")
    from tlmsearch.config import ModelConfig

    assert t.loc["m", "heads_share"] == ModelConfig(**model).plan(moved).heads_share != 1.0
    assert t.loc["u", "heads_share"] == 1.0 and t.loc["m", "heads_json"] == ""
    assert t.loc["m", "heads_shape"] == "uniform" and not t.loc["m", "is_baseline"]
    assert math.isnan(trials_frame(recs).loc[0, "heads_share"])  # no model: unknown


def test_given_columns_win_over_derived_ones():
    rec = _trial("c", 0, {"shape": "cosine", "r_start": 1.5}, 1.2)
    rec["candidate"] = "mine"
    assert trials_frame([rec]).loc[0, "candidate"] == "mine"


def test_deltas_are_paired_by_seed(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"objectives": [{"metric": "val_bpb"}]}))
    trials = [
        _trial("u0", 0, {"shape": "uniform"}, 1.30),
        _trial("u1", 1, {"shape": "uniform"}, 1.40),
        _trial("c0", 0, {"shape": "cosine", "r_start": 1.5}, 1.25),
        _trial("c1", 1, {"shape": "cosine", "r_start": 1.5}, 1.42),
        _trial("c2", 2, {"shape": "cosine", "r_start": 1.5}, 1.10),  # seed without baseline
    ]
    tdf, _ = write_results(tmp_path, trials, [])
    d = dict(zip(tdf["trial_id"], tdf["delta_val_bpb"], strict=True))
    assert d["u0"] == 0 and d["u1"] == 0
    assert d["c0"] == pytest.approx(-0.05) and d["c1"] == pytest.approx(0.02)
    assert math.isnan(d["c2"])
    assert (
        load_run(tmp_path).trials["delta_val_bpb"].tolist()[:4]
        == tdf["delta_val_bpb"][:4].tolist()
    )


def test_every_trial_carries_its_candidates_effect_in_units_of_noise(tmp_path):
    (tmp_path / "study.yaml").write_text(yaml.safe_dump({"objectives": [{"metric": "val_bpb"}]}))
    cos, lin = {"shape": "cosine", "r_start": 1.5}, {"shape": "linear", "r_start": 1.5}
    trials = [
        _trial("u0", 0, {"shape": "uniform"}, 1.30),
        _trial("u1", 1, {"shape": "uniform"}, 1.40),
        _trial("c0", 0, cos, 1.20),  # deltas -0.10, -0.12: own noise (2 seeds)
        _trial("c1", 1, cos, 1.28),
        _trial("l0", 0, lin, 1.35),  # one seed: the pooled noise (cosine's sd, 1 df)
        _trial("l1", 1, lin, 9.0, state="PRUNED"),
    ]
    for tr in trials[2:4]:  # search.unpruned_candidates: cosine, never at risk, measures it
        tr["unpruned"] = True
    write_results(tmp_path, trials, [])
    (tmp_path / "trials.parquet").unlink()  # the CSV keeps the kinds too
    t = load_run(tmp_path).trials.set_index("trial_id")
    assert t["unpruned"].tolist() == [False, False, True, True, False, False]
    from tlmsearch.stats import block_noise, effects

    noise = block_noise(t, "val_bpb")  # the study's one noise model: 5 cells, 3 + 2 - 1 -> 1 df
    assert noise is not None and noise.df == 1
    sd = noise.sd
    for tid in ("c0", "c1"):  # the same on every trial of the candidate
        c = t.loc[tid]
        assert c["effect_val_bpb"] == pytest.approx(-0.11)
        assert c["effect_noise_val_bpb"] == pytest.approx(-0.11 / sd)
        assert c["effect_seeds_val_bpb"] == 2 and c["effect_from_val_bpb"] == "model"
        # the interval is the engine's (stats.effects: its rows' noise, over the family)
        eff = effects(t, "val_bpb").set_index("candidate").loc[c["candidate"]]
        assert c["effect_lo_val_bpb"] == pytest.approx(eff["lo"])
        assert c["effect_hi_val_bpb"] == pytest.approx(eff["hi"])
        assert eff["lo"] < -0.11 < eff["hi"]
    lin0 = t.loc["l1"]  # a pruned trial still names its candidate's effect (seed 0)
    assert lin0["effect_val_bpb"] == pytest.approx(0.05) and lin0["effect_seeds_val_bpb"] == 1
    assert lin0["effect_from_val_bpb"] == "model"
    lin = effects(t, "val_bpb").set_index("candidate").loc[lin0["candidate"]]
    assert lin0["effect_hi_val_bpb"] == pytest.approx(lin["hi"]) and lin["hi"] > 0.05
    u = t.loc["u0"]
    assert math.isnan(u["effect_val_bpb"]) and u["effect_from_val_bpb"] == ""
    assert u["effect_seeds_val_bpb"] is pd.NA
    assert str(t["effect_seeds_val_bpb"].dtype) == "Int64"
    alone = add_effects(trials_frame([_trial("u0", 0, {"shape": "uniform"}, 1.3)]), ["val_bpb"])
    assert alone["effect_from_val_bpb"].tolist() == [""]


def test_only_complete_trials_get_a_delta():
    # A pruned trial's last value is at fewer tokens than the baseline's final one.
    df = trials_frame(
        [
            _trial("u0", 0, {"shape": "uniform"}, 2.0),
            _trial("p0", 0, {"shape": "linear", "r_start": 1.5}, 2.6, state="PRUNED"),
        ]
    )
    assert add_deltas(df, ["val_bpb"])["delta_val_bpb"].tolist()[0] == 0.0
    assert math.isnan(add_deltas(df, ["val_bpb"])["delta_val_bpb"].tolist()[1])


def test_unfinished_baseline_is_no_reference():
    df = trials_frame(
        [
            _trial("u0", 0, {"shape": "uniform"}, 9.0, state="RUNNING"),
            _trial("c0", 0, {"shape": "linear", "r_start": 1.5}, 1.0),
        ]
    )
    assert add_deltas(df, ["val_bpb"])["delta_val_bpb"].isna().all()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 3), st.booleans(), st.floats(0.5, 5.0)), min_size=1, max_size=20
    )
)
def test_delta_formula(rows):
    """delta = value - mean(finished baseline values of that seed), NaN where none."""
    recs = []
    for i, (seed, base, v) in enumerate(rows):
        params = {"shape": "uniform"} if base else {"shape": "cosine", "r_start": 1.5}
        recs.append(_trial(f"t{i}", seed, params, v))
    out = add_deltas(trials_frame(recs), ["val_bpb"])
    for (seed, _, v), delta in zip(rows, out["delta_val_bpb"], strict=True):
        refs = [bv for s, b, bv in rows if b and s == seed]
        if refs:
            assert delta == pytest.approx(v - sum(refs) / len(refs))
        else:
            assert math.isnan(delta)


def test_extra_columns_survive_and_containers_become_json(tmp_path):
    write_results(tmp_path, [{"trial_id": "a", "user_note": "x", "extra": [1, 2]}], [])
    row = load_run(tmp_path).trials.iloc[0]
    assert row["user_note"] == "x" and json.loads(row["extra"]) == [1, 2]


def test_csv_fallback_when_parquet_is_missing(tmp_path):
    write_results(tmp_path, [_trial("u0", 0, {"shape": "uniform"}, 1.3)], [])
    (tmp_path / "trials.parquet").unlink()
    row = load_run(tmp_path).trials.iloc[0]
    assert row["candidate"] == "uniform" and row["val_bpb"] == 1.3 and row["reason"] == ""


def test_load_run_reads_config_and_status(tmp_path):
    (tmp_path / "study.yaml").write_text(
        yaml.safe_dump({"name": "s", "objectives": [{"metric": "tokens_per_s"}]})
    )
    first = write_status(tmp_path, "running", n_trials_planned=4)
    second = write_status(tmp_path, "finished")
    assert second["started"] == first["started"] and second["n_trials_planned"] == 4
    run = load_run(tmp_path)
    assert run.status["status"] == "finished" and run.name == "s"
    assert run.objectives == [("tokens_per_s", "maximize")]
    assert run.trials.empty and list(run.trials.columns) == list(TRIAL_COLUMNS)


def test_load_run_bad_paths(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_run(tmp_path / "nope")
    with pytest.raises(ConfigError, match="not a run dir"):
        load_run(tmp_path)
    (tmp_path / "run.json").write_text("{oops")
    with pytest.raises(ConfigError, match=r"run\.json"):
        load_run(tmp_path)


def test_objectives_and_metric_columns():
    assert objectives_of(PartialStudy()) == [("val_bpb", "minimize")]  # the model's default
    cfg = {"objectives": [{"metric": "val_ppl"}, {"metric": "params", "direction": "maximize"}]}
    assert objectives_of(frozen_study(cfg)) == [("val_ppl", "minimize"), ("params", "maximize")]
    assert metric_column("params") == "n_params" and metric_column("val_bpb") == "val_bpb"


def test_written_tables_follow_the_umask_not_mkstemp(tmp_path):
    import os
    import stat

    old = os.umask(0o022)
    try:
        write_results(tmp_path, [{"trial_id": "a"}], [])
    finally:
        os.umask(old)
    for name in ("trials.parquet", "trials.csv", "curves.parquet"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o644, name


def test_two_candidates_one_label_stay_two_candidates():
    # describe() rounds what it prints, so two sampled ratios can share a
    # label; keyed by it, the statistics pooled their seeds as one candidate
    from tlmsearch.evidence import Evidence

    recs = [
        {"trial_id": f"u{s}", "seed": s, "params": {"shape": "uniform"}, "val_bpb": 2.0 + s}
        for s in range(2)
    ]
    for r, d in ((1.2500001, -0.1), (1.2500002, 0.1)):
        recs += [
            {
                "trial_id": f"{r}-{s}",
                "seed": s,
                "val_bpb": 2.0 + s + d,
                "params": {"shape": "cosine", "r_start": r},
            }
            for s in range(2)
        ]
    t = trials_frame(recs)
    labels = set(t.loc[~t["is_baseline"], "candidate"])
    assert len(labels) == 2 and all(x.startswith("cosine 1.25->0.75 {") for x in labels)
    eff = Evidence.build(t, "val_bpb").effects
    assert sorted(eff["mean_delta"].round(6)) == [-0.1, 0.1] and (eff["n"] == 2).all()
