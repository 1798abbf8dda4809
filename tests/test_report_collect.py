"""The report's pure collect functions, on DataFrames (no plotting, no browser, no training)."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from fixtures_run import bpb_law, make_trials, random_trials
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch import stats
from tlmsearch.config import PartialStudy, frozen_study
from tlmsearch.report import collect as C
from tlmsearch.report import figures as F
from tlmsearch.report import params as P
from tlmsearch.report import summary as S
from tlmsearch.run_dir.tables import curves_frame, trials_frame
from tlmsearch.widths.schedules import plan_from_params
from tlmsearch.widths.space import SearchSpace


def frames(**kw):
    trials, curves = make_trials(**kw)
    return trials_frame(trials), curves_frame(curves)


def one_trial() -> pd.DataFrame:
    return trials_frame(
        [
            {
                "trial_id": "a",
                "seed": 0,
                "params": {"shape": "cosine", "r_start": 1.5},
                "widths": [96, 80, 48, 32],
                "val_bpb": 1.4,
                "val_ppl": 30.0,
            }
        ]
    )


# -------------------------------------------------------------------------------------------------
# ratio fronts


def test_front_is_best_mean_over_seeds_per_shape_and_ratio():
    t, _ = frames(seeds=(0, 1, 2))
    rf = C.ratio_front(t, metric="val_bpb")
    assert set(rf.front["shape"]) == {"cosine", "linear"}
    for row in rf.front.itertuples():
        expect = np.mean([bpb_law(row.shape, row.r_start, s) for s in (0, 1, 2)])
        assert row.value == pytest.approx(expect, abs=1e-9)  # curves end at the law's value
        assert row.n == 3
    b = rf.baseline
    base = [bpb_law("uniform", 1.0, s) for s in (0, 1, 2)]
    assert b.mean == pytest.approx(np.mean(base)) and b.n == 3
    assert b.sd == pytest.approx(np.std(base, ddof=1)) and b.lo == pytest.approx(min(base))


def _rec(tid, params, value, seed=0, state="COMPLETE", widths=True):
    plan = plan_from_params(params, n_layer=8, d_ff=128, multiple_of=8)
    rec = {"trial_id": tid, "seed": seed, "params": params, "val_bpb": value, "state": state}
    return {**rec, "widths": list(plan.widths)} if widths else rec


def test_front_plots_the_realised_ratios_not_the_requested_ones():
    # Renormalised to mean 1, cosine 0.5 -> 0.25 trains as a taper, 1.31 -> 0.69; plotted at
    # the requested 0.5 it would read as wider-late.
    params = {"shape": "cosine", "r_start": 0.5, "r_end": 0.25}
    t = trials_frame([_rec("u", {"shape": "uniform"}, 1.5), _rec("c", params, 1.4)])
    widths = plan_from_params(params, n_layer=8, d_ff=128, multiple_of=8).widths
    mean = sum(widths) / len(widths)
    rf = C.ratio_front(t, metric="val_bpb")
    (row,) = rf.front.itertuples()
    assert rf.x == "realised_start" and "realised first-layer ratio" in C.label(rf.x)
    assert row.x == pytest.approx(widths[0] / mean) == pytest.approx(1.3125)
    assert (row.r_start, row.r_end) == (0.5, 0.25)  # the request stays, as a parameter
    assert "trained 1.31->0.688" in row.hover and "requested" in row.hover
    taper = C.ratio_front(t, metric="val_bpb", x="taper")
    assert taper.x == "realised_taper" and "realised taper" in C.label(taper.x)
    assert taper.front["x"].item() == pytest.approx((widths[0] - widths[-1]) / mean)
    assert taper.front["x"].item() > 0
    assert t.loc[1, "taper"] == pytest.approx(0.25)  # requested; realised is 0.625
    assert t.loc[1, "realised_taper"] == pytest.approx(0.625)


def test_identical_widths_land_at_the_same_x_and_the_better_one_is_kept():
    # linear 2.0 -> 1.5 and 1.333 -> 1.0 are the same profile after renormalising
    a = {"shape": "linear", "r_start": 2.0, "r_end": 1.5}
    b = {"shape": "linear", "r_start": 1.333, "r_end": 1.0}
    t = trials_frame([_rec("a", a, 1.3), _rec("b", b, 1.2)])
    assert t.loc[0, "widths_json"] == t.loc[1, "widths_json"]
    rf = C.ratio_front(t, metric="val_bpb")
    assert rf.points["x"].nunique() == 1 and rf.points["x"].iloc[0] == pytest.approx(1.125)
    assert rf.front["candidate"].tolist() == ["linear 1.333->1"]
    rf = C.ratio_front(t, metric="val_bpb", sense="maximize")
    assert rf.front["candidate"].tolist() == ["linear 2->1.5"]
    taper = C.ratio_front(t, metric="val_bpb", x="taper")
    assert taper.points["x"].nunique() == 1


def test_trials_without_widths_use_the_model_plan_or_are_counted_out():
    params = {"shape": "cosine", "r_start": 0.5, "r_end": 0.25}
    recs = [_rec("c", params, 1.4, widths=False)]
    model = {"n_layer": 8, "d_model": 32, "n_head": 2, "d_ff": 128, "multiple_of": 8}
    with_model = C.ratio_front(trials_frame(recs, model), metric="val_bpb")
    assert with_model.front["x"].item() == pytest.approx(1.3125) and with_model.unplaced == 0
    without = C.ratio_front(trials_frame(recs), metric="val_bpb")
    assert without.points.empty and without.unplaced == 1


def test_a_censored_candidate_is_not_the_best_and_says_n_of_k():
    # A: good on seed 0, pruned on seed 1 (it looked bad). B: middling on both seeds.
    a = {"shape": "linear", "r_start": 2.0, "r_end": 1.5}
    b = {"shape": "linear", "r_start": 1.333, "r_end": 1.0}  # the same widths: the same x
    t = trials_frame(
        [
            _rec("u0", {"shape": "uniform"}, 2.0, seed=0),
            _rec("u1", {"shape": "uniform"}, 2.2, seed=1),
            _rec("a0", a, 1.7, seed=0),
            _rec("a1", a, 2.6, seed=1, state="PRUNED"),
            _rec("b0", b, 1.9, seed=0),
            _rec("b1", b, 2.1, seed=1),
        ]
    )
    s = S.run_summary(frozen_study({"objectives": [{"metric": "val_bpb"}]}), t, {})
    assert s["best"]["candidate"] == "linear 1.333->1" and not s["best"]["censored"]
    assert s["best"]["value"] == pytest.approx(2.0) and s["best"]["n_of_k"] == "2 of 2 seeds"
    (cens,) = s["censored_better"]
    assert cens["candidate"] == "linear 2->1.5" and cens["n_of_k"] == "1 of 2 seeds"
    assert cens["delta_best"] == pytest.approx(-0.2) and cens["n_best"] == 1
    d = C.paired_deltas(t, "val_bpb").summary
    assert d["label"].tolist() == ["linear 1.333->1", "linear 2->1.5 [1 of 2 seeds]"]
    assert d["censored"].tolist() == [False, True]
    rf = C.ratio_front(t, "val_bpb")
    assert rf.front["candidate"].tolist() == ["linear 1.333->1"]  # not A's lone good seed
    pr = C.width_profiles(t, "val_bpb")
    legends = pr.profiles.drop_duplicates("rank")["legend"].tolist()
    assert legends[0].startswith("#1 linear 1.333->1 [trained 1.12->0.875]")
    assert legends[1].endswith("(censored: 1 of 2 seeds (pruned on seed 1))")


def test_front_single_seed_single_shape_and_taper_axis():
    t, _ = frames(seeds=(0,), shapes=("cosine",))
    rf = C.ratio_front(t, metric="val_bpb", x="taper")
    assert rf.baseline.n == 1 and rf.baseline.sd == 0.0
    assert rf.front["x"].tolist() == pytest.approx([0.5, 1.0, 1.5])  # taper = 2 r_start - 2
    assert rf.front["shape"].unique().tolist() == ["cosine"]


def test_front_ignores_pruned_failed_and_nan():
    t, _ = frames(pruned=(1,), failed=(2,))
    t.loc[3, "val_bpb"] = np.nan
    rf = C.ratio_front(t, metric="val_bpb")
    used = {tid for ids in rf.points["trial_ids"] for tid in ids.split(", ")}
    assert not used & {"t0001", "t0002", "t0003"}


def test_front_all_pruned_and_one_trial():
    t, _ = frames(pruned=range(100))
    rf = C.ratio_front(t, metric="val_bpb")
    assert rf.front.empty and rf.points.empty and rf.baseline is None
    rf = C.ratio_front(one_trial(), metric="val_ppl")
    assert rf.front["value"].tolist() == [30.0] and rf.baseline is None


def test_front_bins_a_continuous_space():
    trials, _ = random_trials(300)
    rf = C.ratio_front(trials_frame(trials), metric="val_bpb", max_bins=10)
    assert rf.front.groupby("shape").size().max() <= 10
    # nothing in the same shape beats the front's best overall
    for shape, pts in rf.points.groupby("shape"):
        assert rf.front[rf.front["shape"] == shape]["value"].min() == pts["value"].min()


def test_front_rejects_unknown_axis():
    with pytest.raises(ValueError, match="x must be"):
        C.ratio_front(one_trial(), x="depth")


# -------------------------------------------------------------------------------------------------
# Pareto


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=25
    ),
    st.lists(st.sampled_from(["minimize", "maximize"]), min_size=3, max_size=3),
)
def test_pareto_mask_is_the_nondominated_set(points, senses):
    v = np.array(points, dtype=float)
    mask = C.pareto_mask(v, senses)
    s = np.array([1 if x == "minimize" else -1 for x in senses]) * v

    def dominates(a, b):
        return (s[a] <= s[b]).all() and (s[a] < s[b]).any()

    for i in range(len(v)):
        dominated = any(dominates(j, i) for j in range(len(v)))
        assert mask[i] == (not dominated)
    assert mask.any()  # a finite set always has a non-dominated point


def test_pareto_infeasible_never_on_front_and_hidden_counted():
    t, _ = frames(pruned=(1,), failed=(2,))
    objs = [("val_bpb", "minimize"), ("tokens_per_s", "maximize")]
    p = C.pareto(t, objs)
    assert p.hidden == 1  # the failed trial has no val_bpb
    assert not p.points.loc[~p.points["feasible"], "on_front"].any()
    assert p.points["on_front"].any()
    front = p.points[p.points["on_front"]]
    for row in p.points[p.points["feasible"] & ~p.points["on_front"]].itertuples():
        assert (
            (front["val_bpb"] <= row.val_bpb) & (front["tokens_per_s"] >= row.tokens_per_s)
        ).any()


def test_pareto_sets_per_number_of_objectives():
    assert C.pareto_sets([("val_bpb", "minimize")]) == []  # no front against tokens/s
    two = [("val_bpb", "minimize"), ("tokens_per_s", "maximize")]
    assert C.pareto_sets(two) == [two]
    three = [("val_bpb", "minimize"), ("tokens_per_s", "maximize"), ("params", "minimize")]
    sets = C.pareto_sets(three)
    assert len(sets) == 4 and sets[-1] == three and all(len(s) == 2 for s in sets[:3])
    assert C.pareto_sets([("tokens_per_s", "maximize")]) == []


def test_pareto_multi_objective_with_params_column():
    t, _ = frames()
    t["n_params"] = np.arange(len(t)) * 10  # a study that varies the budget
    p = C.pareto(t, [("val_bpb", "minimize"), ("params", "minimize")])
    assert "params" in p.points and p.points["on_front"].sum() >= 1
    assert C.pareto(t.iloc[:0], [("val_bpb", "minimize"), ("mfu", "maximize")]).points.empty


# -------------------------------------------------------------------------------------------------
# width profiles


def test_width_profiles_top_k_in_order_and_uniform():
    t, _ = frames()
    pr = C.width_profiles(t, "val_bpb", k=3)
    ranks = pr.profiles.drop_duplicates("rank")
    assert ranks["rank"].tolist() == [1, 2, 3]
    assert ranks["value"].is_monotonic_increasing
    assert pr.uniform == [64, 64, 64, 64]
    for _, g in pr.profiles.groupby("rank"):
        assert g["width"].sum() == sum(pr.uniform)  # exact budget survives the round trip
        assert g["layer"].tolist() == [0, 1, 2, 3]


def test_width_profiles_carry_an_lr_profile_and_the_figure_draws_it_on_its_own_axis():
    t, _ = frames()
    best = t.loc[~t["is_baseline"]].sort_values("val_bpb")["candidate"].iloc[0]
    t["lr_profile_json"] = ""
    t.loc[t["candidate"] == best, "lr_profile_json"] = json.dumps([1.5, 1.2, 0.8, 0.5])
    pr = C.width_profiles(t, "val_bpb", k=3)
    first = pr.profiles[pr.profiles["rank"] == 1]
    assert first["lr"].tolist() == [1.5, 1.2, 0.8, 0.5] and "LR x1.5" in first["hover"].iloc[0]
    assert pr.profiles[pr.profiles["rank"] > 1]["lr"].isna().all()
    fig = F.width_profiles(pr)
    dotted = [tr for tr in fig.data if tr.yaxis == "y2"]
    assert len(dotted) == 1 and list(dotted[0].y) == [1.5, 1.2, 0.8, 0.5]
    assert fig.layout.yaxis2.title.text == "LR multiplier (x train.lr)"
    t["lr_profile_json"] = ""
    assert not [
        tr for tr in F.width_profiles(C.width_profiles(t, "val_bpb")).data if tr.yaxis == "y2"
    ]


def test_width_profiles_without_baseline_uses_the_budget():
    pr = C.width_profiles(one_trial(), "val_bpb")
    assert pr.uniform == [64] * 4 and len(pr.profiles) == 4
    t, _ = frames(failed=range(100))
    assert C.width_profiles(t, "val_bpb").profiles.empty


# -------------------------------------------------------------------------------------------------
# learning curves


def test_learning_curves_pruned_points_and_failures():
    t, c = frames(pruned=(1, 4), failed=(2,))
    lc = C.learning_curves(t, c, "val_bpb")
    assert set(lc.pruned_at["trial_id"]) == {"t0001", "t0004"}
    for row in lc.pruned_at.itertuples():
        assert row.tokens == c[c["trial_id"] == row.trial_id]["tokens"].max()
    assert lc.failed["trial_id"].tolist() == ["t0002"]
    assert "out of memory" in lc.failed["reason"].iloc[0]
    assert (
        lc.lines.groupby("trial_id")["tokens"].apply(lambda s: s.is_monotonic_increasing)
    ).all()
    assert set(lc.lines.loc[lc.lines["trial_id"] == "t0001", "state"]) == {"PRUNED"}


def test_learning_curves_one_group_per_candidate_in_rank_order():
    t, c = frames(seeds=(0, 1), pruned=(3,))
    lc = C.learning_curves(t, c, "val_bpb")
    ranked = C.ranked_candidates(t, "val_bpb")
    ranked = ranked[~ranked["is_baseline"].astype(bool) & (ranked["tier"] < 3)]
    assert lc.groups[0] == "uniform"
    numbered = [g for g in lc.groups if g.startswith("#")]
    expected = [f"#{i} {c}" for i, c in enumerate(ranked["candidate"], start=1)]
    assert [g.split(" [")[0] for g in numbered] == expected[: len(numbered)]
    assert any(g.endswith(" of 2 seeds]") for g in numbered)  # the pruned one, censored
    # every trial of a candidate (all its seeds) is in that candidate's one group
    per_candidate = lc.lines.groupby("candidate")["group"].nunique()
    assert (per_candidate == 1).all()
    per_group = lc.lines.groupby("group")["candidate"].nunique()
    assert per_group.drop(C.OTHERS, errors="ignore").max() == 1
    assert set(lc.pruned_at["group"]) <= set(lc.groups)
    # the same numbers as the width profiles' legend
    profiles = C.width_profiles(t, "val_bpb", k=3).profiles.drop_duplicates("rank")
    assert [g.split(" [")[0] for g in numbered[:3]] == [
        f"#{r} {c}" for r, c in zip(profiles["rank"], profiles["candidate"], strict=True)
    ]


def test_learning_curves_beyond_k_candidates_share_one_group():
    t, c = frames()
    n = t.loc[~t["is_baseline"], "candidate"].nunique()
    lc = C.learning_curves(t, c, "val_bpb", k=2)
    assert len(lc.groups) == 4 and lc.groups[-1] == C.OTHERS  # uniform, #1, #2, others
    others = lc.lines.loc[lc.lines["group"] == C.OTHERS, "candidate"].nunique()
    assert others == n - 2
    assert C.learning_curves(t, c, "val_bpb", k=n).groups[-1] != C.OTHERS


def test_learning_curves_figure_colours_each_candidate_with_a_legend():
    t, c = frames(seeds=(0, 1), pruned=(3,))
    lc = C.learning_curves(t, c, "val_bpb")
    fig = F.learning_curves(lc)
    lines = [tr for tr in fig.data if tr.mode == "lines" and not tr.name.startswith("pruned")]
    assert [tr.legendgroup for tr in lines] == [
        g for g in lc.groups if (lc.lines.loc[lc.lines["state"] != "PRUNED", "group"] == g).any()
    ]
    colors = [tr.line.color for tr in lines]
    assert len(set(colors)) == len(colors)  # no two candidates share a colour
    assert all(tr.showlegend is not False for tr in lines)
    marks = next(tr for tr in fig.data if tr.name.startswith("pruned here"))
    colour_of = F.curve_colors(lc.groups)
    assert list(marks.marker.color) == [colour_of[g] for g in lc.pruned_at["group"]]


def test_learning_curves_nan_and_unknown_trials():
    t, c = frames(seeds=(0,))
    c.loc[0, "val_bpb"] = np.nan
    extra = curves_frame([{"trial_id": "new", "tokens": 10, "val_bpb": 2.0}])
    lc = C.learning_curves(t, pd.concat([c, extra], ignore_index=True), "val_bpb")
    assert len(lc.lines) == len(c)  # one NaN dropped, one row added
    assert lc.lines.loc[lc.lines["trial_id"] == "new", "state"].item() == "RUNNING"
    empty = C.learning_curves(t, curves_frame([]), "val_bpb")
    assert empty.lines.empty and empty.pruned_at.empty


# -------------------------------------------------------------------------------------------------
# parallel coordinates, importances


def test_parallel_coords_encodes_categoricals_and_drops_constants():
    t, _ = frames(shapes=("cosine", "linear"))
    par = P.parallel_coords(t, "val_bpb", ["shape", "r_start", "k"])
    assert list(par.table.columns) == ["shape", "r_start", "value"]  # k never varies
    assert par.categories == {"shape": ["cosine", "linear"]}
    assert set(par.table["shape"]) == {0.0, 1.0}
    assert len(par.table) == 12  # 2 shapes x 3 ratios x 2 seeds; the baseline is not searched


def test_importances_find_the_parameter_that_matters():
    recs = [
        {"trial_id": f"t{i}", "params": {"shape": s, "r_start": r}, "val_bpb": 1 + (r - 1.5) ** 2}
        for i, (s, r) in enumerate(
            (s, r) for s in ("cosine", "linear") for r in (1.1, 1.3, 1.5, 1.7, 1.9)
        )
    ]
    imp = P.param_importances(trials_frame(recs), "val_bpb")
    assert imp.values["param"].iloc[0] == "r_start"
    assert imp.values["importance"].sum() == pytest.approx(1.0)


def test_importances_with_numeric_categorical_choices():
    # blocks.yaml searches its boundaries as categorical numbers
    recs = [
        {
            "trial_id": f"t{i}",
            "params": {"shape": "blocks", "preset": p, "b1": b1},
            "val_bpb": 1 + b1 + (0.01 if p == "wider_late" else 0),
        }
        for i, (p, b1) in enumerate(
            (p, b1) for p in ("wider_early", "wider_late") for b1 in (0.25, 1 / 3)
        )
    ]
    space = {
        "dimensions": {  # a study's space: its shape dimension too
            "shape": {"type": "fixed", "value": "blocks"},
            "preset": {"type": "categorical", "choices": ["wider_early", "wider_late"]},
            "b1": {"type": "categorical", "choices": [0.25, 1 / 3]},
        }
    }
    imp = P.param_importances(trials_frame(recs), "val_bpb", space=SearchSpace(**space))
    assert not imp.values.empty, imp.note
    assert set(imp.values["param"]) == {"preset", "b1"}


def test_importances_degrade_gracefully():
    assert "needs 3" in P.param_importances(one_trial(), "val_bpb").note
    t, _ = frames(shapes=("cosine",), ratios=(1.5,), seeds=(0, 1, 2))
    imp = P.param_importances(t, "val_bpb")
    assert imp.values.empty and "varies" in imp.note
    t, _ = frames(pruned=range(100))
    assert P.param_importances(t, "val_bpb").values.empty


def test_no_importances_draw_their_reason_without_axes():
    t, _ = frames(shapes=("cosine",), ratios=(1.5,), seeds=(0, 1, 2))
    fig = F.importances(P.param_importances(t, "val_bpb"))
    assert fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False
    assert fig.layout.annotations[0].text.startswith("no importances: ")
    # with importances the bars keep their axes
    shown = F.importances(
        P.Importances(
            "val_bpb",
            pd.DataFrame({"param": ["r_start", "shape"], "importance": [0.7, 0.3]}),
            "fANOVA",
        )
    )
    assert shown.layout.xaxis.visible is not False and not shown.layout.annotations


# -------------------------------------------------------------------------------------------------
# paired deltas


def _paired(deltas: dict[str, list[float]]) -> pd.DataFrame:
    recs = []
    for seed in range(max(len(v) for v in deltas.values())):
        recs.append(
            {
                "trial_id": f"u{seed}",
                "seed": seed,
                "params": {"shape": "uniform"},
                "val_bpb": 1.0 + seed,
            }
        )
    for r, (_name, ds) in zip((1.25, 1.5, 1.75), deltas.items(), strict=False):
        for seed, d in enumerate(ds):
            recs.append(
                {
                    "trial_id": f"c{r}-{seed}",
                    "seed": seed,
                    "params": {"shape": "cosine", "r_start": r},
                    "val_bpb": 1.0 + seed + d,
                }
            )
    return trials_frame(recs)


def test_paired_deltas_ci_and_noise_marks():
    t = _paired({"clear": [-0.10, -0.11, -0.09], "noisy": [0.05, -0.06, 0.02], "one": [0.3]})
    d = C.paired_deltas(t, "val_bpb")
    s = d.summary.set_index("candidate")
    clear, noisy, one = "cosine 1.25->0.75", "cosine 1.5->0.5", "cosine 1.75->0.25"
    assert s.loc[clear, "mean"] == pytest.approx(-0.10)
    # the engine's numbers (stats.effects: each comparison on its rows' variances, the interval
    # over the family), not a second derivation
    eff = stats.effects(t, "val_bpb").set_index("candidate")
    for name in (clear, noisy, one):
        assert s.loc[name, "half_width"] == pytest.approx(eff.loc[name, "half_width"])
        assert s.loc[name, "noise_sd"] == pytest.approx(eff.loc[name, "noise_sd"])
    assert bool(s.loc[clear, "within_noise"]) is False
    assert bool(s.loc[noisy, "within_noise"]) is True
    assert s.loc[clear, "noise"] == s.loc[noisy, "noise"] == s.loc[one, "noise"] == "model"
    assert bool(s.loc[one, "within_noise"]) is False  # +0.3, separated after Holm
    assert math.isnan(s.loc[one, "sd"])  # its own sd: none
    assert d.summary["candidate"].iloc[0] == clear  # best (most negative) first
    assert len(d.per_seed) == 7
    alone = C.paired_deltas(_paired({"one": [0.3]}), "val_bpb").summary.iloc[0]
    assert pd.isna(alone["within_noise"]) and math.isnan(alone["half_width"])
    assert alone["noise"] == "unknown"


def test_paired_deltas_need_a_same_seed_baseline():
    t = trials_frame(
        [
            {"trial_id": "u", "seed": 0, "params": {"shape": "uniform"}, "val_bpb": 1.0},
            {
                "trial_id": "c",
                "seed": 1,
                "params": {"shape": "linear", "r_start": 1.5},
                "val_bpb": 0.9,
            },
        ]
    )
    assert C.paired_deltas(t, "val_bpb").summary.empty
    t, _ = frames(pruned=range(100))
    assert C.paired_deltas(t, "val_bpb").per_seed.empty


# -------------------------------------------------------------------------------------------------
# summary and hover


def test_run_summary():
    t, _ = frames(pruned=(1,), failed=(2,))
    cfg = {"name": "s", "objectives": [{"metric": "val_bpb"}]}
    s = S.run_summary(frozen_study(cfg), t, {"status": "running", "versions": {"torch": "2.13"}})
    assert s["counts"] == {"COMPLETE": 12, "PRUNED": 1, "FAIL": 1}
    best = s["best"]
    # The law's optimum is cosine near r_start 1.4, but cosine 1.25 was pruned and cosine 1.5
    # failed on seed 0: the best fully measured candidate wins, and they are named as censored.
    assert best["candidate"] == "linear 1.5->0.5" and best["n_of_k"] == "2 of 2 seeds"
    assert not best["censored"] and best["flag"] == "" and best["ranked_seeds"] == [0, 1]
    assert sum(best["widths"]) == 4 * 64 and best["delta_vs_uniform"] < 0
    assert best["realised"] == [1.5, 0.5] and best["delta_n_seeds"] == 2
    lo, hi = best["delta_ci95"]
    assert lo < best["delta_vs_uniform"] < hi
    assert best["noise"] == "model" and best["effect_noise"] < 0
    better = {c["candidate"]: c for c in s["censored_better"]}
    assert set(better) == {"cosine 1.25->0.75", "cosine 1.5->0.5"}
    assert better["cosine 1.5->0.5"]["flag"] == "censored: 1 of 2 seeds (fail on seed 0)"
    assert better["cosine 1.5->0.5"]["delta_best"] == pytest.approx(-0.01)
    assert best["target_widths"] == []  # no target in this study
    cfg["target"] = {"n_layer": 6, "d_model": 64, "n_head": 2, "d_ff": 128, "multiple_of": 16}
    tw = S.run_summary(frozen_study(cfg), t, {})["best"]["target_widths"]
    assert len(tw) == 6 and sum(tw) == 6 * 128 and tw[0] > tw[-1]
    assert s["tokens_total"] == int(t["tokens"].sum()) and s["versions"] == {"torch": "2.13"}
    empty = S.run_summary(PartialStudy(), t.iloc[:0], {})
    assert empty["best"] is None and empty["status"] == "unknown" and empty["counts"] == {}


def test_hover_has_trial_params_and_widths():
    text = C.hover_text(one_trial()).iloc[0]
    assert "trial a" in text and json.dumps([96, 80, 48, 32]) in text and '"r_start": 1.5' in text


def test_blocks_use_the_realised_first_ratio():
    from tlmsearch.widths.schedules import plan_from_params

    recs = []
    for i, preset in enumerate(("wider_early", "wider_late")):
        params = {"shape": "blocks", "preset": preset}
        plan = plan_from_params(params, n_layer=6, d_ff=64, multiple_of=8)
        recs.append(
            {
                "trial_id": f"b{i}",
                "params": params,
                "widths": list(plan.widths),
                "val_bpb": 1.0 + i,
            }
        )
    rf = C.ratio_front(trials_frame(recs), metric="val_bpb")
    assert rf.front["x"].tolist() == pytest.approx([0.5, 1.5])  # wider_late first, by x
    assert rf.front["candidate"].str.startswith("blocks").all()
    taper = C.ratio_front(trials_frame(recs), metric="val_bpb", x="taper")
    assert sorted(taper.front["x"]) == pytest.approx([-1.0, 1.0])


def _nan_metrics():
    t, c = frames()
    t.loc[t.index[::2], ["val_bpb", "val_ppl", "tokens_per_s"]] = np.nan
    c.loc[c.index[::3], "val_bpb"] = np.nan
    return t, c


EDGE = {
    "one_trial": lambda: (one_trial(), curves_frame([])),
    "all_pruned": lambda: frames(pruned=range(100)),
    "failed": lambda: frames(failed=(0, 2, 5)),
    "nan_metrics": _nan_metrics,
    "single_schedule": lambda: frames(shapes=("cosine",), ratios=(1.5,)),
    "single_seed": lambda: frames(seeds=(0,)),
    "empty": lambda: (trials_frame([]), curves_frame([])),
}


@pytest.mark.parametrize("case", list(EDGE))
@pytest.mark.parametrize(
    "objectives",
    [
        [("val_bpb", "minimize")],
        [("val_bpb", "minimize"), ("tokens_per_s", "maximize"), ("params", "minimize")],
    ],
    ids=["single-objective", "multi-objective"],
)
def test_every_collect_function_on_edge_cases(case, objectives):
    t, c = EDGE[case]()
    metric, sense = objectives[0]
    done = C.finished(t, metric)
    rf = C.ratio_front(t, "val_bpb")
    assert len(rf.front) <= len(rf.points) <= len(done)
    for objs in C.pareto_sets(objectives):
        p = C.pareto(t, objs)
        assert len(p.points) + p.hidden == len(t)
        assert not p.points.loc[~p.points["feasible"], "on_front"].any()
        assert p.points["on_front"].any() == bool(p.points["feasible"].any())
    pr = C.width_profiles(t, metric, sense)
    assert pr.profiles["rank"].nunique() <= 5
    lc = C.learning_curves(t, c, "val_bpb")
    assert np.isfinite(lc.lines["value"].astype(float)).all()
    assert set(lc.failed["trial_id"]) == set(t.loc[t["state"] == "FAIL", "trial_id"])
    par = P.parallel_coords(t, metric)
    assert len(par.table) == int((~done["is_baseline"]).sum())
    imp = P.param_importances(t, metric, sense)
    assert imp.values.empty or imp.values["importance"].sum() == pytest.approx(1.0)
    d = C.paired_deltas(t, metric, sense)
    assert d.summary["n"].sum() == len(d.per_seed) if len(d.summary) else d.per_seed.empty
    s = S.run_summary(frozen_study({"objectives": [{"metric": m} for m, _ in objectives]}), t, {})
    assert sum(s["counts"].values()) == len(t)
    assert (s["best"] is None) == done.empty


def test_the_best_attention_only_taper_shows_its_heads():
    attention = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}
    rows = [
        {
            "trial_id": f"{name}{seed}",
            "seed": seed,
            "params": params,
            "widths": [64, 64],
            "heads": heads,
            "heads_share": 1.0,
            "val_bpb": value + 0.01 * seed,
        }
        for name, params, heads, value in (
            ("u", {"shape": "uniform"}, [2, 2], 2.0),
            ("a", attention, [3, 1], 1.9),
        )
        for seed in (0, 1)
    ]
    t = trials_frame(rows)
    target = {"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 128}
    cfg = frozen_study({"name": "s", "objectives": [{"metric": "val_bpb"}], "target": target})
    best = S.run_summary(cfg, t, {})["best"]
    assert best["candidate"] == "uniform | heads cosine 1.5->0.5" and best["delta_vs_uniform"] < 0
    assert (best["heads"], best["heads_share"]) == ([3, 1], 1.0)
    assert best["target_heads"] == [6, 5, 3, 2] and best["target_widths"] == [128] * 4
    from tlmsearch.report.html import summary_html

    html = summary_html(S.run_summary(cfg, t, {}))
    assert "attention heads (proxy, per layer)</th><td><code>[3, 1]</code> (heads share" in html
    assert "its heads at target scale</th><td><code>[6, 5, 3, 2]</code>" in html
    assert "heads [3, 1]" in C.hover_text(t).iloc[2]
    assert "heads" not in C.hover_text(t).iloc[0]  # uniform: no heads schedule
    plain = S.run_summary(cfg, t[t["candidate"] == "uniform"], {})["best"]
    assert (plain["heads"], plain["heads_share"], plain["target_heads"]) == ([], None, [])


def test_learning_curves_of_thousands_of_trials_are_drawn_by_webgl(monkeypatch):
    t, c = frames(seeds=(0, 1), pruned=(3,))
    lc = C.learning_curves(t, c, "val_bpb", k=1)
    small = F.learning_curves(lc)
    assert {tr.type for tr in small.data} == {"scatter"}  # SVG: what a small study draws
    monkeypatch.setattr(F, "GL_POINTS", 0)  # every trace is now "thousands of points"
    big = F.learning_curves(lc)
    assert {tr.type for tr in big.data} == {"scattergl"}
    assert [tr.name for tr in big.data] == [tr.name for tr in small.data]
    assert [list(tr.y) for tr in big.data] == [list(tr.y) for tr in small.data]
