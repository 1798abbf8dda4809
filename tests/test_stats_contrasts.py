"""tlmsearch.stats.contrasts and .words: contrasts from one fit of every cell, and their words."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch import stats
from tlmsearch.stats.contrasts import contrast_table, family_groups, first_weights
from tlmsearch.stats.questions import (
    EARLY,
    LATE,
    Question,
    default_questions,
    design_rows,
    members,
)
from tlmsearch.stats.words import (
    BETTER,
    EQUIVALENT,
    INCONCLUSIVE,
    WORDS,
    WORSE,
    decide_words,
    p_equivalent,
    step_down,
)

SCHEDULES = {  # label -> (params, taper strength)
    "uniform": ({"shape": "uniform"}, 0.0),
    "cosine 1.5->0.5": ({"shape": "cosine", "r_start": 1.5}, 1.0),
    "linear 1.5->0.5": ({"shape": "linear", "r_start": 1.5}, 1.0),
    "linear 0.5->1.5": ({"shape": "linear", "r_start": 0.5}, -1.0),
}


def grid(values: dict, lrs=(None,), seeds=(0, 1, 2), missing=frozenset()) -> pd.DataFrame:
    """A trials table: values[(schedule, lr)][seed] (lr None: no setting); ``missing``:
    (schedule, lr, seed) not run."""
    rows = []
    for (sched, lr), ys in values.items():
        params, taper = SCHEDULES[sched]
        p = dict(params) if lr is None else {**params, "train.lr": lr}
        for seed in seeds:
            if (sched, lr, seed) in missing:
                continue
            rows.append(
                {
                    "candidate": sched if lr is None else f"{sched} @ lr={lr}",
                    "schedule": sched,
                    "setting": "" if lr is None else f"lr={lr}",
                    "params_json": json.dumps(p, sort_keys=True),
                    "taper": taper,
                    "is_baseline": sched == "uniform",
                    "seed": seed,
                    "state": "COMPLETE",
                    "v": float(ys[seed]),
                }
            )
    return pd.DataFrame(rows)


def models(t: pd.DataFrame, pooled: bool = False) -> dict:
    """Each setting's noise model, as the Evidence builds them."""
    settings_ = stats.setting_column(t)
    if settings_ is None:
        return {"": stats.block_noise(t, "v") if pooled else stats.row_noise(t, "v")}
    return {
        str(s): (stats.block_noise(g, "v") if pooled else stats.row_noise(g, "v"))
        for s, g in t.groupby(settings_)
    }


def draw(rng, scheds, lrs=(None,), seeds=3, effect=None, sd=1.0) -> pd.DataFrame:
    """A random study: seed and (setting, seed) levels, cell noise ``sd``, effects per
    schedule (default 0)."""
    effect = effect or {}
    vals = {}
    block = {lr: rng.normal(0, 3.0, seeds) for lr in lrs}
    for s in ["uniform", *scheds]:
        for lr in lrs:
            vals[(s, lr)] = 2.0 + effect.get(s, 0.0) + block[lr] + rng.normal(0, sd, seeds)
    return grid(vals, lrs, range(seeds))


def table(t: pd.DataFrame, value: str = "v", **kw) -> pd.DataFrame:
    """contrast_table with each candidate's settings from its params, as the Evidence gives
    them."""
    from tlmsearch.widths.space import settings_of

    given = {
        c: settings_of(json.loads(p))
        for c, p in zip(t["candidate"], t["params_json"], strict=True)
    }
    return contrast_table(t, value, settings=given, **kw)


def by_name(c: pd.DataFrame) -> pd.DataFrame:
    return c.set_index("name")


def test_a_complete_balanced_design_estimates_the_mean_paired_delta() -> None:
    rng = np.random.default_rng(0)
    t = draw(rng, ["cosine 1.5->0.5", "linear 0.5->1.5"], seeds=4)
    c = by_name(table(t, "v", models=models(t, pooled=True)))
    d = stats.paired_deltas(t, "v")
    noise = stats.block_noise(t, "v")
    for s in ("cosine 1.5->0.5", "linear 0.5->1.5"):
        row = c.loc[f"{s} vs uniform"]
        deltas = d.loc[d["candidate"] == s, "delta"]
        assert row["estimate"] == pytest.approx(deltas.mean(), abs=1e-12)
        assert row["se"] == pytest.approx(noise.sd / math.sqrt(4), rel=1e-9)
        assert row["df"] == noise.df == 6


def test_the_main_effect_over_settings_is_the_mean_of_each_settings_effect() -> None:
    rng = np.random.default_rng(1)
    t = draw(rng, ["cosine 1.5->0.5"], lrs=(0.001, 0.003, 0.01), seeds=3)
    c = by_name(table(t, "v", models=models(t, pooled=True)))
    d = stats.paired_deltas(t, "v").merge(t[["candidate", "setting"]].drop_duplicates())
    d = d[~d["is_baseline"]]
    per = d.groupby("setting")["delta"].mean()
    main = c.loc["cosine 1.5->0.5 vs uniform over 3 settings"]
    assert main["estimate"] == pytest.approx(per.mean(), abs=1e-12)
    assert c.loc["cosine 1.5->0.5 vs uniform at lr=0.003", "estimate"] == pytest.approx(
        per["lr=0.003"], abs=1e-12
    )
    inter = c.loc["cosine 1.5->0.5 x train.lr: effect at 0.01 minus at 0.001"]
    assert inter["estimate"] == pytest.approx(per["lr=0.01"] - per["lr=0.001"], abs=1e-12)
    # three settings of 2 df each (one candidate and uniform on 3 seeds): the main effect's
    # variance is a third of each setting's mean-delta variance, summed over their components
    per_noise = [m for m in models(t, pooled=True).values()]
    var = sum(m.sd**2 / 3 for m in per_noise) / 9
    assert main["se"] == pytest.approx(math.sqrt(var), rel=1e-9)
    assert 2 <= main["df"] <= 6


def test_a_contrast_with_missing_cells_matches_statsmodels_ols() -> None:
    smf = pytest.importorskip("statsmodels.formula.api")
    rng = np.random.default_rng(2)
    t = draw(rng, ["cosine 1.5->0.5", "linear 1.5->0.5", "linear 0.5->1.5"], seeds=5)
    drop = [("cosine 1.5->0.5", 0), ("linear 1.5->0.5", 3), ("uniform", 4)]
    for sched, seed in drop:
        t = t[~((t["schedule"] == sched) & (t["seed"] == seed))]
    t = t.reset_index(drop=True)
    fit = smf.ols("v ~ C(schedule, Treatment('uniform')) + C(seed)", data=t).fit()
    noise = stats.block_noise(t, "v")
    assert noise.sd**2 / 2 == pytest.approx(fit.scale, rel=1e-9)
    c = by_name(table(t, "v", models={"": noise}))
    name = "C(schedule, Treatment('uniform'))[T.cosine 1.5->0.5]"
    row = c.loc["cosine 1.5->0.5 vs uniform"]
    assert row["estimate"] == pytest.approx(fit.params[name], abs=1e-12)
    assert row["se"] == pytest.approx(fit.bse[name], rel=1e-9)
    assert row["df"] == fit.df_resid
    # the early-heavy family: the mean of the two tapers' effects
    tt = fit.t_test(" + ".join(f"0.5 * {n}" for n in fit.params.index if "1.5->0.5" in n))
    fam = c.loc["early-heavy (2 schedules) vs uniform"]
    assert fam["estimate"] == pytest.approx(float(tt.effect[0]), abs=1e-12)
    assert fam["se"] == pytest.approx(float(tt.sd[0, 0]), rel=1e-9)


def test_the_families_follow_the_taper_strength() -> None:
    rng = np.random.default_rng(3)
    t = draw(rng, ["cosine 1.5->0.5", "linear 1.5->0.5", "linear 0.5->1.5"])
    rows = design_rows(t, "v")
    assert members(rows, [EARLY]) == ["cosine 1.5->0.5", "linear 1.5->0.5"]
    assert members(rows, [LATE]) == ["linear 0.5->1.5"]
    kinds = [k for k, _ in default_questions(rows)]
    assert kinds.count("family") == 1  # late-heavy has one schedule: its main effect says it


def test_a_named_question_restricts_settings_and_takes_another_reference() -> None:
    rng = np.random.default_rng(4)
    t = draw(rng, ["cosine 1.5->0.5", "linear 0.5->1.5"], lrs=(0.001, 0.01), seeds=3)
    q = Question(
        "cosine vs late at 0.01",
        ("cosine 1.5->0.5",),
        vs=("linear 0.5->1.5",),
        where={"train.lr": (0.01,)},
    )
    c = table(t, "v", models=models(t), questions=[q])
    assert list(c["name"]) == ["cosine vs late at 0.01"] and c.iloc[0]["settings"] == 1
    at = t[t["setting"] == "lr=0.01"].pivot_table(index="seed", columns="schedule", values="v")
    want = (at["cosine 1.5->0.5"] - at["linear 0.5->1.5"]).mean()
    assert c.iloc[0]["estimate"] == pytest.approx(want, abs=1e-12)


def test_two_df_cannot_be_bounded_and_unknown_noise_says_so() -> None:
    rng = np.random.default_rng(5)
    t = draw(rng, ["cosine 1.5->0.5"], seeds=3, sd=1.0)
    c = table(t, "v", models=models(t), margin=0.01)
    row = c.iloc[0]
    assert row["df"] == 2 and row["word"] == INCONCLUSIVE
    assert row["why"].startswith("cannot be bounded yet (2 df)")
    c = table(t, "v", models={"": None})
    assert c.iloc[0]["why"].startswith("noise unknown") and c.iloc[0]["word"] == INCONCLUSIVE


def test_a_censored_member_is_never_better_nor_equivalent() -> None:
    rng = np.random.default_rng(6)
    t = draw(
        rng,
        ["cosine 1.5->0.5", "linear 1.5->0.5"],
        seeds=6,
        sd=0.01,
        effect={"cosine 1.5->0.5": -1.0},
    )
    clean = by_name(table(t, "v", models=models(t)))
    assert clean.loc["cosine 1.5->0.5 vs uniform", "word"] == BETTER
    t.loc[(t["schedule"] == "cosine 1.5->0.5") & (t["seed"] == 5), "state"] = "PRUNED"
    cut = by_name(table(t, "v", models=models(t)))
    assert cut.loc["cosine 1.5->0.5 vs uniform", "word"] == INCONCLUSIVE
    assert "pruned or failed" in cut.loc["cosine 1.5->0.5 vs uniform", "why"]


def test_the_step_down_counts_each_contrast_once() -> None:
    # two contrasts, each with a difference and an equivalence question: the first step
    # divides by 2 (contrasts), not 4 (questions); a contrast fully answered leaves the count
    # (0.01 x 2, then 0.011 x 2; the first contrast is answered twice, so the second's
    # difference is judged alone: 0.02 x 1, below the running 0.022; then 0.5 x 1)
    adj_d, adj_e, t_d, t_e = step_down([0.01, 0.02], [0.011, 0.5], 0.05)
    assert adj_d == pytest.approx([0.02, 0.022]) and adj_e == pytest.approx([0.022, 0.5])
    assert t_d == [2, 1] and t_e == [2, 1]
    # Holm over the 4 questions would have needed 0.01 x 4 first


def test_worse_when_clearly_worse_and_the_rule_names_the_family() -> None:
    w = decide_words([2.0], [0.1], [30], sign=1.0, margin=0.5, level=0.95)
    assert list(w["word"]) == [WORSE]
    w = decide_words([2.0], [0.1], [30], sign=-1.0, margin=0.5, level=0.95)  # maximize
    assert list(w["word"]) == [BETTER]
    assert stats.contrasts_rule(pd.DataFrame({"margin": [0.5, 0.5]}), 0.95).startswith(
        "Holm over 2 contrasts"
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.lists(st.floats(-5, 5), min_size=3, max_size=3))
def test_contrasts_do_not_move_with_a_constant_per_seed(seed, shift) -> None:
    rng = np.random.default_rng(seed)
    t = draw(rng, ["cosine 1.5->0.5", "linear 0.5->1.5"], lrs=(0.001, 0.01), seeds=3)
    a = table(t, "v", models=models(t), margin=0.3)
    t2 = t.assign(v=t["v"] + t["seed"].map(dict(enumerate(shift))))
    b = table(t2, "v", models=models(t2), margin=0.3)
    assert np.allclose(a["estimate"], b["estimate"], atol=1e-9)
    assert np.allclose(a["se"], b["se"], rtol=1e-6, atol=1e-12)
    assert list(a["word"]) == list(b["word"])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(-3, 3), st.floats(0.01, 2), st.integers(1, 40)), min_size=1, max_size=8
    ),
    st.floats(0.05, 3),
    st.sampled_from([0.9, 0.95]),
)
def test_tost_never_says_equivalent_when_its_interval_crosses_the_margin(rows, d, level):
    est, se, df = (list(x) for x in zip(*rows, strict=True))
    w = decide_words(est, se, df, 1.0, d, level)
    for i, word in enumerate(w["word"]):
        inside = w["eq_lo"][i] > -d and w["eq_hi"][i] < d
        if word == EQUIVALENT:
            assert inside
        # and the reverse: a question answered exactly where its interval says so
        assert bool(w["p_equiv_adj"][i] < 1 - level) == inside
        excludes = w["lo"][i] > 0 or w["hi"][i] < 0
        assert bool(w["p_adj"][i] < 1 - level) == excludes


def test_p_equivalent_is_the_larger_one_sided_p() -> None:
    from scipy.stats import t as student

    p = p_equivalent(0.2, 0.1, 12, 0.5)
    assert p == pytest.approx(max(student.sf(7.0, 12), student.sf(3.0, 12)))


def _false_claims(reps: int, effect: float, margin: float, seed: int) -> float:
    rng = np.random.default_rng(seed)
    scheds = ["cosine 1.5->0.5", "linear 1.5->0.5", "linear 0.5->1.5"]
    hits = 0
    for _ in range(reps):
        t = draw(rng, scheds, lrs=(0.001, 0.01), seeds=4, effect=dict.fromkeys(scheds, effect))
        c = table(t, "v", models=models(t), margin=margin)
        words = set(c["word"])
        if effect == 0:
            hits += bool(words & {BETTER, WORSE})
        else:  # every contrast's truth is 0 or +-margin: "equivalent" (or "better") is false
            truth = np.where(c["kind"] == "interaction", 0.0, effect)
            false = [
                (w == EQUIVALENT and abs(x) >= margin)
                or (w in (BETTER, WORSE) and x == 0)
                or (w == BETTER and x > 0)
                for w, x in zip(c["word"], truth, strict=True)
            ]
            hits += any(false)
    return hits / reps


@pytest.mark.slow  # a rate over many simulated studies
@pytest.mark.parametrize("effect", [0.0, 0.5])
def test_the_family_wise_false_claim_rate_holds_on_null_studies(effect) -> None:
    # 3 schedules x 2 LRs x 4 seeds, 150 studies: every schedule equal to uniform (a false
    # "better"/"worse"), or every one exactly the margin worse (a false "equivalent"); the
    # family (13 contrasts) holds 5%: 0.05 + 2 MC se (0.018) + slack for the few studies
    rate = _false_claims(150, effect, 0.5, seed=7)
    assert rate <= 0.10, rate


def test_without_settings_given_the_dimensions_come_from_the_setting_label() -> None:
    rng = np.random.default_rng(8)
    t = draw(rng, ["cosine 1.5->0.5"], lrs=(0.001, 0.01), seeds=3)
    c = contrast_table(t, "v", models=models(t))
    assert "cosine 1.5->0.5 x lr: effect at 0.01 minus at 0.001" in set(c["name"])


def test_uniforms_part_is_its_own_where_the_sum_over_settings_exceeds_the_pool() -> None:
    from tlmsearch.stats.contrasts import _uniform_part

    # two settings, each a^2 = 0.1 on uniform; own 3.0 and 0.5 vs pools 1.0 and 1.0: the sum
    # 0.35 exceeds 0.2, so both settings' own (2 df each) though one is below its pool
    terms = [("lr=1", 0.1, 3.0, 2, 1.0, 10), ("lr=2", 0.1, 0.5, 2, 1.0, 10)]
    got = _uniform_part(terms)
    assert got == [
        (("lr=1", "uniform own"), pytest.approx(0.3), 2),
        (("lr=2", "uniform own"), pytest.approx(0.05), 2),
    ]
    # below the pool in sum: the pooled parts, on the pool's df
    quiet = [("lr=1", 0.1, 1.2, 2, 1.0, 10), ("lr=2", 0.1, 0.5, 2, 1.0, 10)]
    assert _uniform_part(quiet) == [
        (("lr=1", "pooled"), pytest.approx(0.1), 10),
        (("lr=2", "pooled"), pytest.approx(0.1), 10),
    ]
    # an own estimate that cannot be made (one cell): the pool
    assert _uniform_part([("x", 0.1, math.nan, 0, 1.0, 10)])[0][0] == ("x", "pooled")


def test_a_noisier_uniform_widens_every_contrast_through_its_own_variance() -> None:
    rng = np.random.default_rng(9)
    t = draw(
        rng, ["cosine 1.5->0.5", "linear 1.5->0.5", "linear 0.5->1.5"], lrs=(0.001, 0.01), seeds=6
    )
    loud = t.copy()
    u = loud["is_baseline"]
    loud.loc[u, "v"] = loud.loc[u, "v"] + rng.normal(0, 4.0, int(u.sum()))
    quiet_c = by_name(table(t, models=models(t)))
    loud_c = by_name(table(loud, models=models(loud)))
    name = "early-heavy (2 schedules) vs uniform over 2 settings"
    assert loud_c.loc[name, "se"] > 2.0 * quiet_c.loc[name, "se"]
    assert loud_c.loc[name, "df"] <= 10  # uniform's own: 2 settings x 5 df


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.integers(1, 3),
    st.integers(1, 4),
    st.floats(0.0, 0.6),
    st.booleans(),
)
def test_any_table_gives_a_word_per_contrast_and_never_raises(
    seed, n_lrs, n_seeds, drop, prune
) -> None:
    rng = np.random.default_rng(seed)
    lrs = (0.001, 0.003, 0.01)[:n_lrs] if n_lrs > 1 else (None,)
    t = draw(
        rng, ["cosine 1.5->0.5", "linear 1.5->0.5", "linear 0.5->1.5"], lrs=lrs, seeds=n_seeds
    )
    t = t[rng.uniform(size=len(t)) >= drop].reset_index(drop=True)
    if prune and len(t):
        t.loc[rng.integers(len(t)), "state"] = "PRUNED"
    if t.empty:
        return
    c = table(t, models=models(t), margin=0.2)
    assert set(c["word"]) <= set(WORDS)
    known = c["df"] >= 1
    assert c.loc[~known, "word"].eq(INCONCLUSIVE).all()  # no noise, no claim


def test_a_noise_of_exactly_zero_decides_as_the_effects_do() -> None:
    # every schedule's seed-to-seed deltas identical: the fit leaves residuals of exactly 0
    vals = {
        ("uniform", None): [2.0, 2.1, 2.2],
        ("cosine 1.5->0.5", None): [1.9, 2.0, 2.1],
        ("linear 0.5->1.5", None): [2.0, 2.1, 2.2],
    }
    t = grid(vals)
    c = by_name(table(t, models=models(t), margin=0.05))
    assert c.loc["cosine 1.5->0.5 vs uniform", "se"] == 0.0
    assert c.loc["cosine 1.5->0.5 vs uniform", "word"] == BETTER
    assert c.loc["linear 0.5->1.5 vs uniform", "word"] == EQUIVALENT


def _pinv_weights(keys, seeds, weights):
    """A contrast's cell weights as they were: pinv(X)' l on the design's columns (intercept,
    row dummies past the first row, seed dummies), None where l pinv(X) X != l."""
    k_codes, k_names = pd.factorize(pd.Series(list(keys), dtype="object"))
    s_codes = pd.factorize(pd.Series([str(x) for x in seeds], dtype="object"))[0]
    cols = [np.ones(len(keys))]
    cols += [(k_codes == j).astype(float) for j in range(1, len(k_names))]
    cols += [(s_codes == j).astype(float) for j in range(1, s_codes.max() + 1)]
    x = np.column_stack(cols)
    pinv = np.linalg.pinv(x)
    column = {name: j for j, name in enumerate(k_names)}
    idx = [column[k] for k, w in weights.items() if w != 0.0 and column[k] > 0]
    lv = np.array([weights[k_names[j]] for j in idx])
    lvec = np.zeros(x.shape[1])
    lvec[idx] = lv
    if not np.allclose(lv @ (pinv @ x)[idx, :], lvec, atol=1e-8):
        return None
    return pinv[idx, :].T @ lv


@settings(max_examples=120, deadline=None)
@given(st.integers(2, 8), st.integers(1, 5), st.floats(0.0, 0.6), st.integers(0, 2**32 - 1))
def test_a_contrasts_cell_weights_are_the_pseudo_inverses(n_rows, n_seeds, drop, seed) -> None:
    # the structured fit (no cells x columns pseudo-inverse) gives the same weights and the same
    # estimability on any design: cells missing anywhere, rows in unconnected parts
    from tlmsearch.stats.contrasts import _Fit, _weights_on_cells
    from tlmsearch.stats.noise import two_way

    rng = np.random.default_rng(seed)
    cells = [(f"r{r}", s) for r in range(n_rows) for s in range(n_seeds) if rng.random() >= drop]
    names = sorted({r for r, _ in cells})
    if len(names) < 2:
        return
    keys, seeds = [r for r, _ in cells], [s for _, s in cells]
    y = rng.normal(size=len(cells))
    fit = _Fit(tuple(keys), two_way(keys, [str(s) for s in seeds], y), y)
    picked = rng.choice(names, size=min(len(names), int(rng.integers(2, 5))), replace=False)
    w = rng.normal(size=len(picked))
    weights = dict(zip(picked, w - w.mean(), strict=True))
    got, want = _weights_on_cells(fit, weights), _pinv_weights(keys, seeds, weights)
    assert (got is None) == (want is None)
    if want is not None:
        assert got == pytest.approx(want, abs=1e-9)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=12), st.floats(0.01, 0.2))
def test_one_group_is_holms_step_down(ps, alpha) -> None:
    # without equivalence questions and with one group, the weighted step-down is Holm's:
    # adjusted p_(j) = max over i <= j of (m - i + 1) p_(i)
    adj, _, div, _ = step_down(ps, [math.nan] * len(ps), alpha)
    order = np.argsort(ps, kind="stable")
    running, want = 0.0, [0.0] * len(ps)
    for j, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - j) * ps[i]))
        want[i] = running
    assert adj == pytest.approx(want)
    assert all(1.0 <= d <= len(ps) for d in div)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.floats(1e-6, 1.0), st.integers(0, 3)), min_size=1, max_size=15),
    st.floats(0.01, 0.2),
)
def test_a_weighted_family_never_spends_more_than_alpha_at_its_first_step(hyps, alpha) -> None:
    ps = [p for p, _ in hyps]
    kinds = [("family", "main", "interaction", "setting")[g] for _, g in hyps]
    groups, shares, _ = family_groups(kinds)
    adj, _, div, _ = step_down(ps, [math.nan] * len(ps), alpha, groups, shares)
    first = first_weights(kinds)
    assert sum(first) == pytest.approx(1.0)
    # each question is judged at a weight no smaller than its first one (weights only grow),
    # and it is answered exactly when its adjusted p is below alpha
    assert all(1.0 / d >= w * (1 - 1e-9) for d, w in zip(div, first, strict=True))
    for p, a, d in zip(ps, adj, div, strict=True):
        assert a >= p * (1 - 1e-12)
        if a < alpha:
            assert p <= alpha / d * (1 + 1e-9)


def test_the_main_questions_are_asked_at_their_share_and_pass_it_on() -> None:
    # 2 schedules' main effects, 4 per-setting: a main p of 0.012 is past Holm over 6 (0.05 /
    # 6 = 0.0083) but inside the schedules' 0.3 / 0.4 of 0.05, shared by 2 (0.0188)
    ps = [0.012, 0.6, 0.004, 0.3, 0.5, 0.7]
    kinds = ["main", "main", "setting", "setting", "setting", "setting"]
    group, shares, present = family_groups(kinds)
    adj, _, div, _ = step_down(ps, [math.nan] * 6, 0.05, group, shares)
    assert adj[0] < 0.05 and 6 * 0.012 > 0.05
    # per-setting 0.004 against 0.05 x 0.1 / 0.4 / 4 = 0.0031 first: it waits for the main
    # group; once its 0.012 is answered the main group has 1 left and keeps its share
    assert div[0] == pytest.approx(2 / (0.3 / 0.4))
    assert adj[2] == pytest.approx(max(adj[0], 0.004 / (0.1 / 0.4 / 4)))
    assert present == [("schedules", 2, 0.3), ("per-setting", 4, 0.1)]


def test_a_family_is_asked_first_at_the_largest_share() -> None:
    # 1 family, 5 schedules, 6 interactions, 20 per-setting (benchmarks/contrasts.py's study):
    # the family's question at alpha x 0.4, each schedule's at alpha x 0.3 / 5
    kinds = ["family"] + ["main"] * 5 + ["interaction"] * 6 + ["setting"] * 20
    w = first_weights(kinds)
    assert w[0] == pytest.approx(0.4) and w[1] == pytest.approx(0.06)
    assert w[6] == pytest.approx(0.2 / 6) and w[-1] == pytest.approx(0.1 / 20)
    # with named contrasts only, one group: plain Holm
    assert first_weights(["named"] * 4) == pytest.approx([0.25] * 4)


def test_a_group_done_passes_its_share_to_the_others() -> None:
    # the main group answers both its questions: the per-setting contrasts get all of alpha
    ps = [0.001, 0.002, 0.02, 0.5]
    group, shares, _ = family_groups(["main", "main", "setting", "setting"])
    adj, _, div, _ = step_down(ps, [math.nan] * 4, 0.05, group, shares)
    assert adj[2] == pytest.approx(0.04) and adj[2] < 0.05  # 0.02 x 2 (Holm's over 2)
    assert div[2] == pytest.approx(2.0)


def test_the_weighted_family_holds_its_error_on_independent_nulls() -> None:
    # every hypothesis true, p uniform: the share of families with any rejection stays at
    # alpha (5,000 families of 3 groups; MC se 0.003)
    rng = np.random.default_rng(3)
    kinds = ["main"] * 6 + ["interaction"] * 6 + ["setting"] * 20
    group, shares, _ = family_groups(kinds)
    hits = 0
    for _ in range(5000):
        adj, _, _, _ = step_down(list(rng.uniform(size=32)), [math.nan] * 32, 0.05, group, shares)
        hits += min(adj) < 0.05
    assert hits / 5000 <= 0.05 + 2 * 0.0031


def _decided_at(est, se, df, n, m, conf, conf_eq, margin) -> bool:
    from tlmsearch.stats.quantiles import t_quantile

    s, d = se * math.sqrt(n / m), max(1.0, df * (m - 1) / (n - 1))
    sep = abs(est) > t_quantile(d, conf) * s
    return sep or abs(est) + t_quantile(d, conf_eq) * s < margin


@settings(max_examples=80, deadline=None)
@given(
    st.floats(-0.05, 0.05),
    st.floats(1e-4, 0.05),
    st.integers(3, 40),
    st.integers(2, 10),
    st.floats(0.9, 0.999),
)
def test_seeds_to_decide_is_the_fewest_that_decide_at_this_estimate(est, se, df, n, conf) -> None:
    from tlmsearch.stats.words import MOST_SEEDS, seeds_to_decide

    conf_eq, margin = 1 - 2 * (1 - conf), 0.01
    if _decided_at(est, se, df, n, n, conf, conf_eq, margin):
        return  # decided already: never asked
    got = seeds_to_decide(est, se, df, n, conf, conf_eq, margin)
    assert got is not None  # it has noise and seeds: it can be said
    if got == math.inf:  # more than MOST_SEEDS
        assert not _decided_at(est, se, df, n, MOST_SEEDS, conf, conf_eq, margin)
        return
    assert got > n and _decided_at(est, se, df, n, got, conf, conf_eq, margin)
    assert got - 1 == n or not _decided_at(est, se, df, n, got - 1, conf, conf_eq, margin)


def test_an_inconclusive_contrast_says_its_seeds_and_the_seeds_that_would_decide_it() -> None:
    from tlmsearch.evidence.contrasts import contrast_line

    rng = np.random.default_rng(4)
    scheds = ["cosine 1.5->0.5", "linear 1.5->0.5"]
    t = draw(rng, scheds, lrs=(0.001, 0.01), seeds=4, effect=dict.fromkeys(scheds, 0.0))
    c = table(t, "v", models=models(t), margin=0.002)
    row = c[(c["word"] == INCONCLUSIVE) & (c["df"] >= 3)].iloc[0]
    assert row["seeds"] == 4 and row["seeds_to_decide"] > 4
    line = contrast_line(row, "v")
    assert "inconclusive (4 seeds): " in line
    assert f"about {int(row['seeds_to_decide'])} seeds would decide it" in line


def test_the_weighted_family_holds_its_error_with_equivalence_questions_too() -> None:
    # contrasts of four groups, each true value 0 (its difference null true) or exactly the
    # margin (its equivalence null true): any false "better"/"worse"/"equivalent" counts
    # (3,000 families, MC se 0.004)
    rng = np.random.default_rng(5)
    kinds = ["family"] * 2 + ["main"] * 5 + ["interaction"] * 7 + ["setting"] * 20
    group, shares, _ = family_groups(kinds)
    truth = rng.choice([0.0, 1.0], size=len(kinds))  # in margins
    hits = 0
    for _ in range(3000):
        est = truth + rng.normal(0.0, 0.4, size=len(kinds))
        w = decide_words(
            est, [0.4] * len(kinds), [30] * len(kinds), 1.0, 1.0, 0.95, groups=group, shares=shares
        )
        false = [
            (word in (BETTER, WORSE) and x == 0.0) or (word == EQUIVALENT and x == 1.0)
            for word, x in zip(w["word"], truth, strict=True)
        ]
        hits += any(false)
    assert hits / 3000 <= 0.05 + 2 * 0.004


def test_a_contrast_holds_its_weight_until_both_questions_are_answered() -> None:
    # the first contrast's difference is answered, its equivalence is not: the second contrast
    # is still judged at half the family, not the whole
    _, _, div, _ = step_down([0.001, 0.03], [0.9, 0.9], 0.05, [0, 1], [0.5, 0.5])
    assert div == pytest.approx([2.0, 2.0])


def test_seeds_to_decide_says_when_it_cannot_say_and_when_it_needs_more_than_it_looks() -> None:
    from tlmsearch.evidence.contrasts import contrast_line
    from tlmsearch.stats.words import seeds_to_decide

    assert seeds_to_decide(0.0, 0.01, 5, 1, 0.99, 0.98, 0.01) is None  # one seed: no scaling
    assert seeds_to_decide(0.0, 0.0, 5, 4, 0.99, 0.98, 0.01) is None  # no noise estimate
    assert seeds_to_decide(0.0, 1.0, 5, 4, 0.99, 0.98, 1e-6) == math.inf  # a tiny margin
    row = {
        "name": "x",
        "word": INCONCLUSIVE,
        "estimate": 0.001,
        "df": 5,
        "margin": 0.01,
        "lo": -0.1,
        "hi": 0.1,
        "ci_level": 0.99,
        "why": "",
        "seeds": 1,
        "seeds_to_decide": math.nan,
    }
    line = contrast_line(row, "v")
    assert "inconclusive (1 seed): " in line and "would" not in line
    line = contrast_line({**row, "seeds": 4, "seeds_to_decide": math.inf}, "v")
    assert "more than 1,000 seeds would" in line
