"""tlmsearch.evidence.contrast_power: seeds for a study's contrasts and equivalence questions,
against a simulation of the test they size and of the study's own contrasts, and in
``tlmsearch plan``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from fixtures_run import make_run, study_dict
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import t as student_t
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import study_from_mapping
from tlmsearch.evidence import contrast_power as cp
from tlmsearch.evidence import power
from tlmsearch.run_dir.tables import load_run
from tlmsearch.stats.contrasts import first_weights
from tlmsearch.stats.questions import FAMILY_KIND, INTERACTION, MAIN, SETTING, planned_row


def _rows(schedules: dict[str, float], settings: tuple[float, ...] = (None,)) -> list:
    """Design rows: uniform and each schedule (label -> taper strength) at each train.lr."""
    out = []
    for lr in settings:
        here = {} if lr is None else {"train.lr": lr}
        label = "" if lr is None else f"lr={lr}"
        out.append(planned_row(f"uniform {label}", "uniform", label, here, 0.0, True))
        out += [
            planned_row(f"{s} {label}", s, label, here, t, False) for s, t in schedules.items()
        ]
    return out


def _weights(rows: list, plus: list[str], settings: int) -> dict:
    """Mean of ``plus`` minus uniform, each setting weighted equally."""
    w = {}
    for r in rows:
        if r.baseline:
            w[r.key] = -1.0 / settings
        elif r.schedule in plus:
            w[r.key] = 1.0 / (settings * len(plus))
    return w


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 40), m=st.integers(1, 30))
def test_one_comparison_is_the_plans_comparison(n: int, m: int) -> None:
    """One schedule against uniform has the se and df the per-comparison table sizes."""
    rows = _rows({f"s{i}": 1.0 for i in range(m)})
    sh = cp.shape(rows, {"uniform ": -1.0, "s0 ": 1.0})
    assert sh.factor == 1.0
    assert sh.df(n) == power.comparison_df(n, m)


def test_a_family_contrast_is_narrower_and_an_interaction_wider() -> None:
    lrs = (0.001, 0.002, 0.004, 0.008)
    rows = _rows({f"e{i}": 1.0 for i in range(5)}, lrs)
    family = cp.shape(rows, _weights(rows, [f"e{i}" for i in range(5)], 4))
    # each taper cell 1/20 (20 of them), each uniform cell 1/4 (4): (0.05 + 0.25) / 2
    assert family.factor == pytest.approx(0.15)
    lo_hi = {
        r.key: (1.0 if r.settings["train.lr"] == 0.008 else -1.0) * (1 if not r.baseline else -1)
        for r in rows
        if r.settings["train.lr"] in (0.001, 0.008) and r.schedule in ("uniform", "e0")
    }
    assert cp.shape(rows, lo_hi).factor == 2.0  # an effect minus an effect
    assert cp.shape(rows, {}) is None


def _simulated(
    parts: list,
    n: int,
    theta: float,
    sd: float,
    alpha: float,
    margin: float,
    reps: int,
    rng: np.random.Generator,
) -> tuple[float, float]:
    """The rates at which a contrast is separated and called equivalent, drawing its estimate
    and each variance part as the study measures them (a part's sum of squares a chi-square on
    its df), with Satterthwaite's df from the *estimated* parts, at Holm's first step."""
    unit = sd * sd / (2.0 * n)
    total = sum(c for c, _ in parts)
    est = theta + math.sqrt(total * unit) * rng.standard_normal(reps)
    comps = [c * unit * rng.chisquare(g * (n - 1), reps) / (g * (n - 1)) for c, g in parts]
    var = sum(comps)
    denom = sum(v**2 / (g * (n - 1)) for v, (_, g) in zip(comps, parts, strict=True))
    df = np.floor(var**2 / denom)
    df = np.maximum(df, 1.0)
    se = np.sqrt(var)
    separated = np.abs(est) / se > student_t.ppf(1.0 - alpha / 2.0, df)
    equivalent = np.abs(est) + student_t.ppf(1.0 - alpha, df) * se < margin
    return float(separated.mean()), float(equivalent.mean())


SCENARIOS = {  # name -> (schedules, settings, members of the contrast)
    "one comparison among 5": ({f"s{i}": 1.0 for i in range(5)}, (None,), ["s0"]),
    "5 early-heavy over 4 LRs": (
        {f"e{i}": 1.0 for i in range(5)},
        (1, 2, 3, 4),
        [f"e{i}" for i in range(5)],
    ),
    "2 of 3 over 2 LRs": ({"a": 1.0, "b": 1.0, "c": -1.0}, (1, 2), ["a", "b"]),
    "the one schedule over 3 LRs": ({"a": 1.0}, (1, 2, 3), ["a"]),
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_the_seeds_reach_the_power_in_a_simulation_of_the_test(name: str) -> None:
    """At the seeds the plan gives, the simulated test separates min_effect and calls a true
    0 equivalent at (about) the target rate, and one seed fewer falls short; a true effect of
    exactly d is called equivalent at most alpha of the time."""
    schedules, lrs, plus = SCENARIOS[name]
    rows = _rows(schedules, lrs)
    w = _weights(rows, plus, len(lrs))
    sh, got = cp.shape(rows, w), cp.parts(rows, w)
    sd, effect, margin, alpha, reps = 1.0, 0.8, 0.8, 0.05 / 12, 40_000
    rng = np.random.default_rng(0)
    tol = 4.0 * math.sqrt(0.25 / reps) + 0.01  # 4 MC se, and Satterthwaite's approximation
    n_sep = cp.smallest_seeds(lambda n: cp.separate_power(n, effect, sd, sh, alpha), 0.8)
    n_eq = cp.smallest_seeds(lambda n: cp.equivalent_power(n, margin, sd, sh, alpha), 0.8)
    for n in {n_sep, n_eq, max(2, n_sep - 1), max(2, n_eq - 1), 3}:
        sep, _ = _simulated(got, n, effect, sd, alpha, margin, reps, rng)
        _, eq = _simulated(got, n, 0.0, sd, alpha, margin, reps, rng)
        assert sep == pytest.approx(cp.separate_power(n, effect, sd, sh, alpha), abs=tol), n
        assert eq == pytest.approx(cp.equivalent_power(n, margin, sd, sh, alpha), abs=tol), n
        _, false_eq = _simulated(got, n, margin, sd, alpha, margin, reps, rng)
        assert false_eq <= alpha + tol
        # at most alpha, but for Satterthwaite's df estimated from the parts (and MC error)
        assert cp.equivalent_power(n, margin, sd, sh, alpha, theta=margin) <= 1.1 * alpha
    assert cp.separate_power(n_sep, effect, sd, sh, alpha) >= 0.8
    assert n_sep == 2 or cp.separate_power(n_sep - 1, effect, sd, sh, alpha) < 0.8
    assert cp.equivalent_power(n_eq, margin, sd, sh, alpha) >= 0.8
    assert n_eq == 2 or cp.equivalent_power(n_eq - 1, margin, sd, sh, alpha) < 0.8


@settings(max_examples=40, deadline=None)
@given(
    factor=st.floats(0.05, 4.0),
    rate=st.floats(0.5, 20.0),
    d=st.floats(0.1, 3.0),
    n=st.integers(2, 60),
)
def test_equivalence_power_grows_with_the_seeds_and_the_margin(factor, rate, d, n) -> None:
    sh = cp.Shape(factor, ((2.0 * factor, rate),))
    alpha = 0.01
    here = cp.equivalent_power(n, d, 1.0, sh, alpha)
    assert 0.0 <= here <= 1.0
    if here >= 0.2:  # at 1-2 df a tiny chance can shrink with a seed (chi2_1's mass near 0)
        assert cp.equivalent_power(n + 1, d, 1.0, sh, alpha) >= here - 1e-9
    assert cp.equivalent_power(n, d * 1.5, 1.0, sh, alpha) >= here - 1e-9
    assert cp.equivalent_power(n, d, 1.0, sh, alpha, theta=d) <= alpha + 1e-9


def test_smallest_seeds_gives_none_past_the_cap() -> None:
    assert cp.smallest_seeds(lambda n: 0.0, 0.8) is None
    assert cp.smallest_seeds(lambda n: float(n >= 37), 0.8) == 37


@pytest.mark.slow
def test_the_studys_own_contrasts_reach_about_the_planned_power() -> None:
    """The study's contrast_table (the rows model, the weighted step-down over 14 contrasts:
    the early-heavy family, the only one, at its first step's 0.05 x 0.4) on simulated studies
    at the plan's seeds: the early-heavy family contrast is "better" and a null one
    "equivalent" about as often as planned (later steps help; uniform judged on max(own, pool)
    costs some power)."""
    from test_stats_contrasts import draw, models, table

    from tlmsearch.stats.questions import asked, design_rows

    scheds = ["cosine 1.5->0.5", "linear 1.5->0.5", "linear 0.5->1.5"]
    rng = np.random.default_rng(1)
    rows = design_rows(draw(rng, scheds, (0.001, 0.01), seeds=3), "v")
    family = asked(rows)
    at = next(
        i for i, (k, q, *_) in enumerate(family) if k == FAMILY_KIND and q.name.startswith("early")
    )
    w, name = family[at][3], family[at][1].name
    weight = first_weights([k for k, *_ in family])[at]  # as `tlmsearch plan` sizes it (every
    # contrast here reads cells)
    assert weight == pytest.approx(0.4)  # the one family (late-heavy has 1 schedule) has 40%
    sh, alpha, sd = cp.shape(rows, w), 0.05 * weight, math.sqrt(2.0)  # cell sd 1
    n_sep = cp.smallest_seeds(lambda n: cp.separate_power(n, 1.0, sd, sh, alpha), 0.8)
    n_eq = cp.smallest_seeds(lambda n: cp.equivalent_power(n, 1.0, sd, sh, alpha), 0.8)
    reps, hits = 60, {"better": 0, "equivalent": 0}
    for word, n, eff in (("better", n_sep, -1.0), ("equivalent", n_eq, 0.0)):
        for _ in range(reps):
            t = draw(rng, scheds, (0.001, 0.01), seeds=n, effect={s: eff for s in scheds[:2]})
            c = table(t, margin=1.0, models=models(t)).set_index("name")
            hits[word] += c.loc[name, "word"] == word
    # 80% planned; 60 studies: one MC se 5 points, and the model's own cost
    assert hits["better"] / reps >= 0.65 and hits["equivalent"] / reps >= 0.6


# -------------------------------------------------------------------------------------------------
# In the plan


def _settings_study(tmp_path: Path, **stats_: object) -> dict:
    from search_helpers import tiny_study

    lr2 = {"type": "categorical", "choices": [0.001, 0.003]}
    space = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "cosine"},
            "r_start": {"type": "categorical", "choices": [1.5, 1.25, 0.5]},
            "train.lr": lr2,
        }
    }
    d = tiny_study(tmp_path, space=space)
    d["objectives"] = [{"metric": "val_bpb", "min_effect": 0.01}]
    d.setdefault("stats", {}).update(stats_)
    return d


def test_a_settings_plan_sizes_every_contrast_of_the_family(tmp_path: Path) -> None:
    cfg = study_from_mapping(_settings_study(tmp_path))
    pilot = load_run(make_run(tmp_path / "pilot", seeds=(0, 1, 2))).trials
    plan = power.build_plan(cfg, pilot=pilot, min_effect=0.003)  # about 1.2 noise sds
    c = plan.contrasts
    kinds = {r.kind for r in c.rows}
    assert kinds == {MAIN, FAMILY_KIND, SETTING, INTERACTION}
    assert c.m == len(c.rows)
    # the weighted Holm's first step: families 40%, schedules 30%, interactions 20%,
    # per-setting contrasts 10%, each split evenly in its group
    n = {k: sum(r.kind == k for r in c.rows) for k in kinds}
    want = {
        FAMILY_KIND: 0.4 / n[FAMILY_KIND],
        MAIN: 0.3 / n[MAIN],
        INTERACTION: 0.2 / n[INTERACTION],
        SETTING: 0.1 / n[SETTING],
    }
    assert all(r.alpha == pytest.approx(0.05 * want[r.kind]) for r in c.rows)
    assert c.alpha == pytest.approx(0.05 * want[c.rows[0].kind])
    assert c.margin == 0.003 and "smallest effect" in c.margin_from
    by = {r.name: r for r in c.rows}
    family = next(r for r in c.rows if r.kind == FAMILY_KIND)
    main = next(r for r in c.rows if r.kind == MAIN)
    inter = next(r for r in c.rows if r.kind == INTERACTION)
    at = next(r for r in c.rows if r.kind == SETTING)
    # a family over 2 settings reads more cells than one schedule there, an interaction
    # subtracts two effects: seeds in that order (same family level)
    assert family.separate <= main.separate <= at.separate < inter.separate
    assert family.equivalent <= main.equivalent <= at.equivalent < inter.equivalent
    assert family.separate < at.separate
    for r in by.values():  # each answer reaches the target and one seed fewer does not
        sep = cp.separate_power(r.separate, 0.003, plan.sd, r.shape, r.alpha)
        assert sep >= 0.8 > cp.separate_power(r.separate - 1, 0.003, plan.sd, r.shape, r.alpha)
        now = plan.rows[2].seeds
        got = cp.separate_power(now, 0.003, plan.sd, r.shape, r.alpha)
        assert r.power_now == pytest.approx(got)
    text = "\n".join(power.plan_lines(plan))
    assert f"contrasts: weighted Holm over {c.m} contrasts at 95% (" in text
    assert "equivalence within +-0.003, the smallest effect (--min-effect)" in text
    line = next(x for x in text.splitlines() if x.startswith(family.name))
    per_seed = plan.m + plan.baselines
    assert line.split()[-6:-3] == [
        str(family.separate),
        str(per_seed * family.separate),
        power.percent(family.power_now),
    ]
    assert line.split()[-3:-1] == [str(family.equivalent), str(per_seed * family.equivalent)]
    assert f"each schedule at one setting ({sum(r.kind == SETTING for r in c.rows)}" in text


def test_named_contrasts_are_the_family_and_stats_equivalence_is_the_margin(tmp_path) -> None:
    d = _settings_study(
        tmp_path,
        equivalence=0.02,
        contrasts=[
            {"name": "tapers", "schedules": ["early-heavy"]},
            {"name": "tapers x lr", "schedules": ["early-heavy"], "by": "train.lr"},
        ],
    )
    cfg = study_from_mapping(d)
    pilot = load_run(make_run(tmp_path / "pilot", seeds=(0, 1, 2))).trials
    c = power.build_plan(cfg, pilot=pilot).contrasts
    assert [r.name for r in c.rows] == ["tapers", "tapers x lr"]
    assert (c.m, c.margin, c.margin_from) == (2, 0.02, "stats.equivalence")
    # a smaller family: the same question needs no more seeds than in the default family
    d0 = _settings_study(tmp_path, equivalence=0.02)
    default = power.build_plan(study_from_mapping(d0), pilot=pilot).contrasts
    fam = next(r for r in default.rows if r.kind == FAMILY_KIND and r.name.startswith("early"))
    assert c.rows[0].separate <= fam.separate and c.rows[0].equivalent <= fam.equivalent


def test_a_sampler_plan_says_its_contrasts_are_not_known_up_front() -> None:
    d = study_dict(seeds=(0, 1, 2))
    d["objectives"][0]["min_effect"] = 0.01
    d["search"].update({"sampler": "tpe", "n_trials": 4, "racing": {"prior_sd": 0.006}})
    text = "\n".join(power.plan_lines(power.build_plan(study_from_mapping(d))))
    assert "contrasts: a sampler's schedules are drawn as it runs" in text


def test_plan_prints_the_contrasts_table(tmp_path: Path) -> None:
    d = study_dict(seeds=(0, 1, 2))
    d["objectives"][0]["min_effect"] = 0.005
    d["search"]["racing"] = {"prior_sd": 0.006}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(d))
    result = CliRunner().invoke(app, ["plan", str(path)])
    assert result.exit_code == 0, result.output
    out = result.output.splitlines()
    head = next(i for i, x in enumerate(out) if x.startswith("contrasts: ") and "Holm over" in x)
    assert out[head + 2].split()[:2] == ["contrast", "se/sd"]
    assert "equivalent: seeds" in out[head + 2]
    body = out[head + 3 :]
    assert any(" vs uniform" in x for x in body)
    assert body[-1].startswith("se/sd: the contrast's standard error")


def test_the_plan_header_counts_what_can_be_estimated_and_splits_over_it(tmp_path) -> None:
    """A contrast that reads no cell of the design asks nothing: the header says how many of
    the family can be estimated, and a group left with none is not named with its share."""
    import dataclasses

    cfg = study_from_mapping(_settings_study(tmp_path))
    pilot = load_run(make_run(tmp_path / "pilot", seeds=(0, 1, 2))).trials
    c = power.build_plan(cfg, pilot=pilot, min_effect=0.003).contrasts
    rows = tuple(
        dataclasses.replace(r, shape=None, alpha=math.nan) if r.kind == INTERACTION else r
        for r in c.rows
    )
    groups = tuple(g for g in c.groups if g[0] != "interactions")
    lost = sum(r.kind == INTERACTION for r in c.rows)
    plan = dataclasses.replace(c, rows=rows, groups=groups)
    head = cp.contrast_plan_lines(plan, 0.003, 0.95, 4, 3, lambda x: f"{x:.0%}")[1]
    assert f"weighted Holm over {c.m} contrasts ({c.m - lost} estimable) at 95%" in head
    assert "interactions" not in head and "families (1) 50%" in head, head
