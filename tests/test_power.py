"""tlmsearch.evidence.power: seeds per candidate on known answers, against statsmodels and a
simulation of the block design, plus invariants (hypothesis); a study's plan from a synthetic
pilot."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from fixtures_run import make_run, make_trials, study_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch import stats
from tlmsearch.config import study_from_mapping
from tlmsearch.errors import ConfigError
from tlmsearch.evidence import power
from tlmsearch.run_dir.tables import load_run, write_results


def test_the_notes_example_needs_about_7_seeds_by_the_normal_formula() -> None:
    # docs/contributing.md: sd_d 0.015, a 0.02 effect over m = 5 comparisons, 80% power -> ~7
    alpha = power.comparison_alpha(0.95, "holm", 5)
    assert alpha == pytest.approx(0.01)
    assert power.normal_seeds(0.02, 0.015, alpha, 0.8) == 7  # ((2.5758 + 0.8416) * 0.75)^2 = 6.57


def test_the_t_refinement_of_the_notes_example() -> None:
    alpha = power.comparison_alpha(0.95, "holm", 5)
    n = power.t_seeds(0.02, 0.015, alpha, m=5, power=0.8)
    assert n == 8  # one more than the normal formula: df 5 x 7 = 35, not infinity
    assert (
        power.t_power(n, 0.02, 0.015, alpha, 5)
        >= 0.8
        > power.t_power(n - 1, 0.02, 0.015, alpha, 5)
    )


def test_families() -> None:
    assert power.comparison_alpha(0.95, "holm", 4) == pytest.approx(0.0125)
    assert power.comparison_alpha(0.95, "bh", 4) == pytest.approx(0.0125)  # Bonferroni bound
    assert power.comparison_alpha(0.95, "none", 4) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="family must be one of"):
        power.comparison_alpha(0.95, "tukey", 4)


@pytest.mark.parametrize(
    ("n", "effect", "sd", "alpha", "m"),
    [
        (8, 0.02, 0.015, 0.01, 5),
        (2, 2.0, 1.0, 0.05, 1),
        (3, 0.01, 0.006, 0.05 / 15, 15),
        (40, 0.005, 0.007, 0.0125, 4),
    ],
)
def test_t_power_equals_statsmodels_at_the_comparison_df(n, effect, sd, alpha, m) -> None:
    from statsmodels.stats.power import TTestPower

    df = power.comparison_df(n, m)  # uniform's own n - 1 beside the pool
    assert df == (m * (n - 1) if m < 2 else math.floor(4 / (1 / (m * (n - 1)) + 1 / (n - 1))))
    want = TTestPower().power(effect / sd, n, alpha, df=df, alternative="two-sided")
    assert power.t_power(n, effect, sd, alpha, m) == pytest.approx(want, rel=1e-9)


def test_one_seed_has_no_power() -> None:
    assert power.t_power(1, 1.0, 0.001, 0.05, 10) == 0.0


def test_t_power_is_the_rejection_rate_of_the_block_design_test() -> None:
    # y(c, s) = tau_c + u_s + e_cs with C = m + 1 candidates (uniform first) on n seeds; the
    # pooled model's test of candidate 1: its mean paired delta over the block fit's
    # noise, sd = sqrt(2) sigma_e with (C - 1)(n - 1) df (stats.block_noise), at alpha
    # two-sided; t_power at that df predicts its rate. (The rows model's test: below.)
    from scipy.stats import t as student_t
    from statsmodels.stats.power import TTestPower

    m, n, sd, effect, alpha, reps = 4, 5, 0.01, 0.014, 0.05 / 4, 4000
    rng = np.random.default_rng(0)
    tau = np.zeros(m + 1)
    tau[1] = effect
    seed_level = rng.normal(0, 1, (reps, 1, n))  # u_s: cancels in every paired delta
    y = tau[None, :, None] + seed_level + rng.normal(0, sd / math.sqrt(2), (reps, m + 1, n))
    grand = y.mean((1, 2), keepdims=True)
    resid = y - y.mean(2, keepdims=True) - y.mean(1, keepdims=True) + grand
    df = m * (n - 1)
    rss = (resid**2).sum((1, 2))
    cands = [c for c in range(m + 1) for _ in range(n)]
    assert stats.block_fit(cands, list(range(n)) * (m + 1), y[0].ravel().tolist()) == (
        pytest.approx(rss[0]),
        df,
    )
    noise = np.sqrt(2 * rss / df)
    t = (y[:, 1] - y[:, 0]).mean(1) / (noise / math.sqrt(n))
    rate = float((np.abs(t) > student_t.ppf(1 - alpha / 2, df)).mean())
    want = TTestPower().power(effect / sd, n, alpha, df=df, alternative="two-sided")
    assert abs(rate - want) < 4 * math.sqrt(want * (1 - want) / reps), (rate, want)


def test_t_power_predicts_the_rows_models_rejection_rate() -> None:
    # the test a study runs: uniform on its own variance, candidate 1 on the pool,
    # Satterthwaite's df (stats.row_noise); t_power at comparison_df predicts its rate
    from scipy.stats import t as student_t

    m, n, sd, effect, alpha, reps = 4, 5, 0.01, 0.014, 0.05 / 4, 600
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(reps):
        y = rng.normal(0, sd / math.sqrt(2), (m + 1, n)) + rng.normal(0, 1, (1, n))
        y[1] += effect
        frame = pd.DataFrame(
            {
                "candidate": np.repeat(["u"] + [f"c{i}" for i in range(1, m + 1)], n),
                "seed": np.tile(np.arange(n), m + 1),
                "state": "COMPLETE",
                "is_baseline": np.repeat([True] + [False] * m, n),
                "v": y.ravel(),
            }
        )
        pair = stats.row_noise(frame, "v").pair("c1", "u")
        t = (y[1] - y[0]).mean() / (pair.sd / math.sqrt(n))
        hits += abs(t) > student_t.ppf(1 - alpha / 2, pair.df)
    rate, want = hits / reps, power.t_power(n, effect, sd, alpha, m)
    assert abs(rate - want) < 4 * math.sqrt(want * (1 - want) / reps) + 0.02, (rate, want)


def test_a_larger_family_can_need_fewer_seeds_at_a_large_effect() -> None:
    # The candidates' pool grows with the family: at 2 seeds one candidate leaves 1 df (the
    # paired test, t_0.975 = 12.7), two leave Satterthwaite's 2 (uniform's own 1 df beside a
    # pool of 2; t_0.9875 = 6.2), which outweighs the halved alpha. The normal formula cannot
    # see it.
    one, two = (power.comparison_alpha(0.95, "holm", m) for m in (1, 2))
    assert power.t_seeds(2.0, 1.0, one, m=1) == 5
    assert power.t_seeds(2.0, 1.0, two, m=2) == 4
    assert power.normal_seeds(2.0, 1.0, one) <= power.normal_seeds(2.0, 1.0, two)


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="effect must be a finite number > 0"):
        power.t_seeds(0.0, 1.0, 0.05, 1)
    with pytest.raises(ValueError, match="sd must be"):
        power.normal_seeds(0.1, -1.0, 0.05)
    with pytest.raises(ValueError, match="more than 1,000,000,000 seeds"):
        power.normal_seeds(1e-300, 1.0, 0.05)


def test_extreme_ratios_give_numbers_not_nan() -> None:
    # scipy's nct is NaN at a noncentrality ~1e12 (nct.cdf(-crit) already at ~9): found by
    # fuzzing validate with min_effect 1.5 and racing.prior_sd 1e-300
    assert power.t_power(3, 1.5, 1e-300, 0.01, 2) == 1.0
    assert power.t_power(3, 1.5, 5e-324, 0.01, 2) == 1.0
    assert power.t_power(11, 0.005, 0.001, 0.01, 1) == pytest.approx(0.99999, abs=1e-5)
    cfg = study_from_mapping(_study(min_effect=5e-324, racing={"prior_sd": 1.0}))
    assert "80% needs more than 1,000,000,000 seeds" in power.seed_notes(cfg)[0]
    with pytest.raises(ConfigError, match="is too small to separate at noise sd 1"):
        power.build_plan(cfg)


def test_percent_never_rounds_up_to_the_target() -> None:
    assert power.percent(0.7996) == "79%" and power.percent(0.8) == "80%"


# -------------------------------------------------------------------------------------------------
# Invariants

effects_ = st.floats(0.02, 5.0)
families = st.integers(1, 40)
levels = st.sampled_from([0.9, 0.95, 0.99])
targets = st.sampled_from([0.5, 0.8, 0.9])


@settings(max_examples=60, deadline=None)
@given(effects_, families, levels, targets)
def test_t_seeds_is_the_smallest_n_reaching_the_target(effect, m, level, target) -> None:
    alpha = power.comparison_alpha(level, "holm", m)
    n = power.t_seeds(effect, 1.0, alpha, m, target)
    assert power.t_power(n, effect, 1.0, alpha, m) >= target
    assert n == 2 or power.t_power(n - 1, effect, 1.0, alpha, m) < target
    if target >= 0.8:  # at 50% the normal formula can ask 0.1% more (below)
        assert n >= power.normal_seeds(effect, 1.0, alpha, target)  # t never needs fewer


def test_at_50_percent_power_the_normal_formula_can_ask_more_than_t() -> None:
    # n = (z_{1-a/2} sd / delta)^2 puts the normal mean on the critical value and ignores the
    # lower tail P(T < -crit) (~0.05% power here), which the t power counts: at df ~2800,
    # where t is all but normal, that tail is worth 3 seeds. At 80% and 90% power it is worth
    # less than the t's wider critical value (a scan of the hypothesis domain: 0 of 14,400).
    assert power.normal_seeds(0.03125, 1.0, 0.1, 0.5) == 2771
    assert power.t_seeds(0.03125, 1.0, 0.1, 1, 0.5) == 2768


@settings(max_examples=60, deadline=None)
@given(effects_, effects_, families, levels)
def test_seeds_do_not_grow_with_the_effect(a, b, m, level) -> None:
    small, large = sorted((a, b))
    alpha = power.comparison_alpha(level, "holm", m)
    assert power.t_seeds(large, 1.0, alpha, m) <= power.t_seeds(small, 1.0, alpha, m)
    assert power.normal_seeds(large, 1.0, alpha) <= power.normal_seeds(small, 1.0, alpha)


@settings(max_examples=60, deadline=None)
@given(effects_, families, families, levels)
def test_seeds_do_not_shrink_as_the_family_grows(effect, a, b, level) -> None:
    # by the normal formula; the t refinement pools df over the family, and at a few seeds a
    # larger family can need fewer (test_a_larger_family_can_need_fewer_seeds_at_a_large_effect)
    # but never fewer than the smaller family's normal answer
    small, large = sorted((a, b))
    n_small = power.normal_seeds(effect, 1.0, power.comparison_alpha(level, "holm", small))
    n_large = power.normal_seeds(effect, 1.0, power.comparison_alpha(level, "holm", large))
    assert n_small <= n_large
    assert power.t_seeds(effect, 1.0, power.comparison_alpha(level, "holm", large), large) >= (
        n_small
    )


# -------------------------------------------------------------------------------------------------
# A study's plan


def _study(seeds=(0, 1, 2), min_effect: float | None = 0.005, **search) -> dict:
    d = study_dict(seeds=seeds)
    if min_effect is not None:
        d["objectives"][0]["min_effect"] = min_effect
    d["search"].update(search)
    return d


def test_a_plan_from_a_pilot_uses_its_block_noise_and_tokens_per_s(tmp_path: Path) -> None:
    pilot = load_run(make_run(tmp_path / "pilot", seeds=(0, 1, 2))).trials
    cfg = study_from_mapping(_study(concurrency=2))
    plan = power.build_plan(cfg, pilot=pilot, pilot_name="runs/pilot")
    noise = stats.block_noise(pilot, "val_bpb")
    m = len(cfg.trainings()) - 1  # 6 candidates, two pairs share proxy widths: 5 trainings
    assert (plan.sd, plan.df, plan.m) == (noise.sd, noise.df, m) and m == 5
    alpha = power.comparison_alpha(0.95, "holm", m)
    n = power.t_seeds(0.005, noise.sd, alpha, m)
    assert [r.seeds for r in plan.rows] == [power.normal_seeds(0.005, noise.sd, alpha), n, 3]
    assert [r.trainings for r in plan.rows] == [(m + 1) * r.seeds for r in plan.rows]
    tps = float(pilot.loc[pilot["state"] == "COMPLETE", "tokens_per_s"].median())
    assert plan.tokens_per_s == tps
    assert plan.hours(plan.needed.trainings) == pytest.approx((m + 1) * n * 1_000_000 / tps / 3600)
    text = "\n".join(power.plan_lines(plan))
    assert "from the pilot runs/pilot (block-design fit on 3 seeds x 7 candidates" in text
    assert "2 trial(s) at once (search.concurrency)" in text


def test_a_plan_without_a_pilot_says_the_noise_is_assumed() -> None:
    cfg = study_from_mapping(_study(racing={"prior_sd": 0.006}))
    lines = power.plan_lines(power.build_plan(cfg))
    text = "\n".join(lines)
    assert "search.racing.prior_sd: an assumption, not a measurement" in text
    assert "cost: no pilot: cost unknown" in text and "trial-hours" not in text


def test_min_effect_override_and_metric_choice() -> None:
    cfg = study_from_mapping(_study(min_effect=None, racing={"prior_sd": 0.006}))
    plan = power.build_plan(cfg, min_effect=0.01)
    assert plan.effect == 0.01 and plan.effect_from == "--min-effect"
    with pytest.raises(ConfigError, match=r"objectives\[0\].min_effect: not set, and no"):
        power.build_plan(cfg)
    with pytest.raises(ConfigError, match=r"--min-effect: -0\.01 is not a positive number"):
        power.build_plan(cfg, min_effect=-0.01)
    with pytest.raises(ConfigError, match="--metric 'val_loss' is not an objective"):
        power.build_plan(cfg, metric="val_loss", min_effect=0.01)


@pytest.mark.parametrize(
    ("seeds", "needle"),
    [
        ((0,), "the pilot has one seed (1 seed(s) x 7 candidate(s) completed with val_bpb)"),
        ((0, 1), None),
    ],
)
def test_a_pilot_needs_two_seeds(tmp_path: Path, seeds, needle) -> None:
    pilot = load_run(make_run(tmp_path / "p", seeds=seeds)).trials
    cfg = study_from_mapping(_study())
    if needle is None:
        assert power.build_plan(cfg, pilot=pilot).df == 6 * 1  # (7 - 1)(2 - 1)
        return
    with pytest.raises(ConfigError, match=r"run 2\+ seeds of 2\+ candidates") as err:
        power.build_plan(cfg, pilot=pilot, pilot_name="p")
    assert needle in str(err.value)


def test_a_pruned_pilot_without_unpruned_candidates_says_why_it_cannot_size(tmp_path) -> None:
    # a pilot whose pruner stopped a candidate measures its noise on uniform
    # and the unpruned candidates only; with none unpruned the message names the pruning
    trials, curves = make_trials(seeds=(0, 1, 2), pruned=(8,), unpruned=0)
    write_results(tmp_path, trials, curves)
    pilot = load_run(tmp_path).trials
    with pytest.raises(
        ConfigError,
        match=r"the pilot's noise is unknown: a pruner stopped a "
        r"candidate.*search\.unpruned_candidates",
    ):
        power.build_plan(study_from_mapping(_study()), pilot=pilot, pilot_name="p")
    trials, curves = make_trials(seeds=(0, 1, 2), pruned=(8,))  # 2 unpruned: (3 - 1)(3 - 1) df
    write_results(tmp_path / "b", trials, curves)
    plan = power.build_plan(study_from_mapping(_study()), pilot=load_run(tmp_path / "b").trials)
    assert plan.df == 4


def test_no_baseline_or_no_noise_is_bad_input() -> None:
    with pytest.raises(ConfigError, match=r"search\.baseline: false"):
        power.build_plan(study_from_mapping(_study(baseline=False)))
    with pytest.raises(ConfigError, match=r"pass --from RUN .* or set search\.racing\.prior_sd"):
        power.build_plan(study_from_mapping(_study()))


@pytest.mark.parametrize(
    ("search", "warned"),
    [
        ({"racing": {"prior_sd": 0.006}}, True),  # 3 seeds: 6% power
        ({"racing": {"prior_sd": 0.001}}, False),  # 3 seeds: enough
        ({}, False),
    ],  # no prior, no pilot: nothing to say
)
def test_validate_seed_notes(search: dict, warned: bool) -> None:
    notes = power.seed_notes(study_from_mapping(_study(**search)))
    assert bool(notes) == warned
    if warned:
        assert notes[0].startswith(
            "warning: objectives[0].min_effect 0.005: 3 seed(s) per "
            "candidate (search.seeds) give 6% power"
        )
        assert "80% needs 18 seeds" in notes[0]


def test_min_effect_is_validated_naming_the_field() -> None:
    with pytest.raises(
        ConfigError,
        match=r"objectives\[0\].min_effect: -0.01 is invalid: must "
        r"be > 0: the smallest difference",
    ):
        study_from_mapping(_study(min_effect=-0.01))
    cfg = study_from_mapping(_study(min_effect=0.01))
    assert yaml.safe_load(cfg.to_yaml())["objectives"][0]["min_effect"] == 0.01


def test_a_settings_study_counts_each_settings_uniform_as_its_baseline(tmp_path: Path) -> None:
    from search_helpers import tiny_config

    lr2 = {"type": "categorical", "choices": [0.001, 0.003]}
    space = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "cosine"},
            "r_start": {"type": "categorical", "choices": [1.5]},
            "train.lr": lr2,
        }
    }
    cfg = tiny_config(tmp_path, space=space)
    assert len(cfg.trainings()) == 4  # {uniform, cosine} x 2 lrs
    assert power.family_size(cfg) == 2  # cosine vs uniform at each lr, not 3
    assert power.block_df(3, power.family_size(cfg)) == 4  # (2 - 1)(3 - 1) per setting


def test_a_settings_plan_counts_every_settings_uniform_in_its_trainings(tmp_path: Path) -> None:
    """lr_sweep's plan said 8 trainings for 2 seeds while the study trains 12: each
    train.lr value trains its own uniform, so a seed costs m + (settings) trainings."""
    from search_helpers import tiny_config

    lr3 = {"type": "categorical", "choices": [0.001, 0.002, 0.003]}
    space = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "cosine"},
            "r_start": {"type": "categorical", "choices": [1.5]},
            "train.lr": lr3,
        }
    }
    cfg = tiny_config(tmp_path, space=space)
    pilot = load_run(make_run(tmp_path / "pilot", seeds=(0, 1, 2))).trials
    plan = power.build_plan(cfg, pilot=pilot, min_effect=0.01)
    assert (plan.m, plan.baselines, plan.m_df) == (3, 3, 1)  # one schedule per setting
    # each setting is judged on its own fit: df (1 candidate)(n - 1), not 3 (n - 1)
    assert plan.needed.seeds == power.t_seeds(0.01, plan.sd, plan.alpha, 1)
    assert plan.rows[1].label == f"needed (t, df {plan.needed.seeds - 1})"
    per_seed = len(cfg.trainings())  # {uniform, cosine} x 3 lrs
    assert per_seed == 6
    assert [r.trainings for r in plan.rows] == [per_seed * r.seeds for r in plan.rows]
    text = "\n".join(power.plan_lines(plan))
    assert "trainings: 6 x seeds (3 candidate(s) and uniform at each of 3 settings)" in text
    # the tuned comparison measures on the held-out half of the seeds: twice the seeds
    n = plan.needed.seeds
    twice = max(2 * n, 4)
    assert f"{twice} seeds give it {twice // 2} measuring seeds" in text


def test_a_pilot_whose_settings_differ_in_noise_is_sized_per_setting(tmp_path: Path) -> None:
    """Each setting's effects are judged on its own noise (tlmsearch.evidence), so the plan
    says what its quietest and noisiest settings need beside the pooled answer."""
    from search_helpers import tiny_config
    from test_settings import _space, _two_noise_levels

    lr2 = {"type": "categorical", "choices": [0.001, 0.005]}
    cfg = tiny_config(tmp_path, space=_space(**{"train.lr": lr2}))
    pilot = _two_noise_levels(np.random.default_rng(0))
    by = power.setting_noises(pilot, "val_bpb")
    assert set(by) == {"lr=0.001", "lr=0.005"} and by["lr=0.005"] > 10 * by["lr=0.001"]
    plan = power.build_plan(cfg, pilot=pilot, min_effect=0.01)
    (note,) = [n for n in plan.notes if n.startswith("each setting's effects")]
    quiet = power.t_seeds(0.01, by["lr=0.001"], plan.alpha, plan.m_df)
    assert f"{quiet} seeds at lr=0.001 (sd {by['lr=0.001']:.3g})" in note
    assert "at lr=0.005" in note


def test_a_setting_with_only_uniform_does_not_shrink_the_df(tmp_path: Path) -> None:
    from search_helpers import tiny_config
    from test_settings import _space

    lr2 = {"type": "categorical", "choices": [0.001, 0.003]}
    cands = [{"shape": "cosine", "r_start": r, "train.lr": 0.001} for r in (1.5, 1.25, 0.5)]
    cands.append({"shape": "uniform", "train.lr": 0.003})
    cfg = tiny_config(tmp_path, space=_space(**{"train.lr": lr2}), search={"candidates": cands})
    assert len(cfg.trainings()) >= 4
    assert power.df_size(cfg, power.family_size(cfg)) == 3  # the lr=0.003 setting compares none


@pytest.mark.parametrize(
    ("hold", "differ"), [("params", "FLOPs per token"), ("flops", "parameters")]
)
def test_a_plan_says_when_candidates_move_capacity_to_or_from_attention(hold, differ) -> None:
    moved = {"shape": "uniform", "heads.share": 0.5}
    taper = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}  # share 1
    d = _study(racing={"prior_sd": 0.006}, candidates=[moved, taper])
    d["model"] = {**d["model"], "attention": {"hold": hold}}
    text = " ".join(power.plan_lines(power.build_plan(study_from_mapping(d))))
    assert "1 candidate(s) move capacity between attention and the MLPs" in text
    assert f"their {differ} differ" in text
    d["search"]["candidates"] = [taper]
    assert "move capacity" not in " ".join(
        power.plan_lines(power.build_plan(study_from_mapping(d)))
    )


@pytest.mark.parametrize("over", [[], ["search.sampler=tpe", "search.n_trials=4"]])
def test_a_plans_trainings_are_what_the_run_of_the_same_study_trains(over, tmp_path) -> None:
    """studies/lr_sweep.yaml: plan's "this study" row, and the hours it derives,
    count what `run` trains: every (candidate, seed) the grid enqueues, each setting's uniform
    included (12 at 2 seeds, where plan said 8), or a sampler's most (planned_trials)."""
    from tlmsearch.config import load_study
    from tlmsearch.search.sampling.samplers import initial_queue, planned_trials

    root = Path(__file__).resolve().parents[1]
    cfg = load_study(root / "studies" / "lr_sweep.yaml", over)
    pilot = load_run(make_run(tmp_path / "pilot", seeds=(0, 1, 2))).trials
    plan = power.build_plan(cfg, pilot=pilot, min_effect=0.01)
    now = plan.rows[2]
    assert now.seeds == len(cfg.search.seeds) == 2
    assert now.trainings == planned_trials(cfg)
    if not over:  # a grid enqueues every training up front
        assert now.trainings == len(initial_queue(cfg)) == 12
    assert plan.hours(now.trainings) == pytest.approx(
        planned_trials(cfg) * cfg.train.tokens / plan.tokens_per_s / 3600
    )
    per_seed = planned_trials(cfg) // 2
    assert [r.trainings for r in plan.rows] == [per_seed * r.seeds for r in plan.rows]
