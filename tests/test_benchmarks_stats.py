"""benchmarks/stats.py: simulated studies through Evidence, the verdict and the race (~15 s)."""

from __future__ import annotations

import pytest
from bench_module import load


def _bench():
    return load("stats")


def _rates(node):
    """Every {"rate": ...} dict under ``node``."""
    if isinstance(node, dict):
        if "rate" in node:
            yield node
        else:
            for v in node.values():
                yield from _rates(v)


@pytest.mark.slow  # benchmarks/stats.py's scenarios, end to end
def test_a_null_scenario_reports_every_rule_with_rates_in_0_1() -> None:
    # which rules a scenario reports and that each is a rate: 5 studies show it (every rule's
    # error rate is held by the rate tests below and measured on 300 studies by the benchmark)
    bench = _bench()
    res = bench.run(reps=5, which=["a"], seed=1)
    rules = res["a"]
    assert set(rules) == {
        "conclusions/holm",
        "conclusions/holm-pooled",
        "conclusions/none",
        "conclusions/holm-rows-bonferroni",
        "race/uniform",
        "race/best",
        "race/uniform-pooled",
        "pruner/paired",
    }
    for r in rules.values():
        assert r["studies"] == 5
        assert {"false_per_candidate", "fwer", "power"} <= set(r)
        assert r["power"]["rate"] is None  # nothing differs from uniform in (a)
    verdict = {"wrong_winner", "uniform_selected", "winner_selected"}
    assert verdict <= set(rules["conclusions/holm"])
    assert {"ever_strict", "winner_incumbent"} <= set(rules["race/best"])
    assert 0 < rules["race/uniform"]["trainings"] <= 1.0
    rates = [x for r in rules.values() for x in _rates(r) if x["rate"] is not None]
    assert rates and all(0.0 <= x["rate"] <= 1.0 and x["se"] >= 0.0 for x in rates)
    table = bench.tables(res, bench.scenarios())
    assert "### Conclusions vs uniform" in table and "### Racing, as it runs live" in table
    assert "### The paired pruner" in table
    # conclusions (4 rules), the verdict (2 noise models), racing (3), the pruner
    assert table.count("| a: 15 equal to uniform, 3 seeds |") == 4 + 2 + 3 + 1


@pytest.mark.slow  # a rate over many simulated studies
def test_holm_holds_the_family_wise_error_where_no_correction_does_not() -> None:
    # 40 null studies (15 candidates equal to uniform, a shared per-seed baseline, 3 seeds):
    # per comparison, about 5% of the candidates are separated, so most studies claim one;
    # Holm over the 15 keeps the family-wise error at 5% (<= 15% allows for MC noise)
    res = _bench().run(reps=40, which=["a"], seed=0, races=False)["a"]
    none, holm = res["conclusions/none"], res["conclusions/holm"]
    assert none["false_per_candidate"]["rate"] >= 0.02
    assert none["fwer"]["rate"] >= 0.25
    assert holm["fwer"]["rate"] <= 0.15
    assert holm["wrong_winner"]["rate"] <= 0.15  # "X is the best" among equals


def test_the_pruner_simulation_prunes_a_clearly_worse_candidate_and_counts_it() -> None:
    # a check that can fail: a candidate 20 noise sds worse than the best is pruned on every
    # seed (power 1), and none as good as the best is
    import numpy as np

    bench = _bench()
    sc = bench.Scenario("x", "one far worse", 3, (0.0, 0.0, 20.0))
    trials = bench.draw(sc, np.random.default_rng(0))
    out = bench.judge_pruner(trials, sc, np.random.default_rng(1))
    assert (out["real"], out["power"], out["null_sep"]) == (3, 3, 0)
    assert out["trainings"] == 1.0 - 3 / 9


@pytest.mark.slow  # a rate over many simulated studies
def test_a_noisy_uniform_fools_the_pooled_noise_not_the_rows_model() -> None:
    # at a small size: 40 null studies whose uniform scatters 3x the candidates; the
    # pooled noise (the old rule) separates some candidate in about a quarter of them, and its
    # per-comparison interval around the best excludes 0 about as often; the rows model with a
    # simultaneous interval holds both near the stated 5% (<= 15% allows for MC noise)
    bench = _bench()
    res = bench.run(reps=40, which=["u3"], seed=0, races=False)["u3"]
    old, new = res["conclusions/holm-pooled"], res["conclusions/holm"]
    assert old["fwer"]["rate"] > new["fwer"]["rate"] and old["fwer"]["rate"] >= 0.1
    assert new["fwer"]["rate"] <= 0.15 and new["best_excludes"]["rate"] <= 0.15
    assert old["best_excludes"]["rate"] > new["best_excludes"]["rate"]
    table = bench.tables({"u3": res}, bench.scenarios())
    assert "| u3: 15 equal, uniform's sd 3x, 3 seeds | holm-pooled |" in table


def test_the_scenarios_draw_the_noisy_row_they_name() -> None:
    import numpy as np

    bench = _bench()
    specs = bench.scenarios()
    rng = np.random.default_rng(0)
    for name, row in (("u3", "uniform"), ("n5", "c00")):
        t = bench.draw(specs[name], rng, sd_u=0.0, sd_e=0.01)
        sd = t.groupby("candidate")["val_bpb"].std()
        assert sd[row] > 1.5 * sd.drop(row).median()


@pytest.mark.slow  # benchmarks/stats.py's scenarios, end to end
def test_every_extra_scenario_reports_its_rules_at_tiny_reps_with_rates_in_0_1() -> None:
    # every extra row (a prior, arriving candidates, two pruners, the 60-candidate matrix) on 3
    # studies per base: the rules each reports, rates in [0, 1], the tables that print them
    bench = _bench()
    which = list(bench.EXTRAS)
    res = bench.run(reps=3, which=which, seed=2, extra_reps=3)
    expect = {
        "prior_half": {f"{b}/{r}" for b in ("a", "c3") for r in ("steers", "final")},
        "arrive": {f"{b}/{r}" for b in ("a", "c3") for r in ("planned", "counted")},
        "prune_median": {
            f"{b}/{r}"
            for b in ("a", "c3z")
            for r in ("rows", "rows-0", "survivors", "pooled", "unpruned")
        },
        "matrix60": {f"a60/{r}" for r in ("every-pair", "shown-rows", "shown-pooled")},
    }
    expect["prior_equal"] = expect["prior_double"] = expect["prior_half"]
    expect["prune_paired"] = {r for r in expect["prune_median"] if r.startswith("a/")}
    assert set(res) == set(which)
    for k, rules in expect.items():
        assert set(res[k]) == rules, k
        for r in res[k].values():
            assert r["studies"] == 3
    for r in (res["prior_half"]["a/final"], res["arrive"]["c3/counted"]):
        assert {"fwer", "ever_false", "held", "trainings"} <= set(r)
        assert 0 < r["trainings"] <= 1.0
    assert res["arrive"]["c3/planned"]["power"]["n"] == 3  # c3's one winner, in each study
    med = res["prune_median"]
    for rule in ("rows", "rows-0", "pooled"):
        assert med[f"a/{rule}"]["fwer"]["rate"] is not None
        assert med[f"a/{rule}"]["said_false"]["rate"] is not None
    assert med["a/survivors"]["fwer"]["rate"] is None  # an estimate only: nothing decided
    assert med["a/unpruned"]["noise_var_ratio"]["n"] == 3  # the complete study: always one
    # with 2 unpruned candidates a pruned study always has a noise; with none, never once
    # anything was pruned
    assert med["a/rows"]["noise_var_ratio"]["n"] == 3
    assert med["a/rows-0"]["noise_var_ratio"]["n"] == 0
    # c3z: the winner, queued last, is not unpruned; its power is counted pruned and unpruned
    assert med["c3z/rows"]["power"]["n"] == med["c3z/unpruned"]["power"]["n"] == 3
    assert 0.0 < med["a/rows"]["pruned"]["mean"] < 1.0
    assert res["matrix60"]["a60/every-pair"]["false_per_candidate"]["n"] == 3 * 15  # 6 shown
    rates = [
        x for v in res.values() for r in v.values() for x in _rates(r) if x["rate"] is not None
    ]
    assert rates and all(0.0 <= x["rate"] <= 1.0 and x["se"] >= 0.0 for x in rates)
    table = bench.tables(res, bench.scenarios())
    for head in (
        "### Racing with a prior",
        "### Arriving candidates",
        "### Pruners on a null",
        "### The separation matrix",
    ):
        assert head in table
    assert "### Conclusions vs uniform" not in table  # no drawn scenario asked for
    assert table.count("| prior final |") == 3 * 2


def test_a_prior_held_lane_reads_as_the_separation_it_stands_for() -> None:
    # the prior-final rule, emulated: a lane held on the prior (racing.PAUSED) is recorded
    # as the separation its reason names, and the claim parser reads it
    bench = _bench()
    from tlmsearch.evidence.racing import HELD, PAUSED, RACING, SEPARATED, Lane

    why = "better than uniform after 1 seed(s): -0.012 ± 0.011 (prior noise sd 0.0035)"
    held = Lane("c04", RACING, f"{PAUSED}: {why}; {HELD}", (0,), -0.012, 0.011, None)
    sep = bench._prior_separation(held)
    assert (sep.status, sep.reason, sep.next_seed) == (SEPARATED, why, None)
    assert bench._claim(sep) == ("c04", "better", "uniform")


def test_the_median_pruner_simulation_prunes_candidates_never_uniform_nor_the_last_eval() -> None:
    import numpy as np

    bench = _bench()
    sc = bench.scenarios()["a"]
    trials = bench.draw(sc, np.random.default_rng(0))
    blur = np.random.default_rng(1).normal(0.0, 0.005, size=(len(trials), bench.EVALS))
    out = bench.prune_study(trials, "median", blur)
    assert (out["state"][out["is_baseline"]] == "COMPLETE").all()
    # the first two candidates of the queue (search.unpruned_candidates) run on every seed
    assert sorted(out.loc[out["unpruned"], "candidate"].unique()) == ["c00", "c01"]
    assert (out["state"][out["unpruned"]] == "COMPLETE").all()
    assert not (out["state"][out["is_baseline"] | out["unpruned"]] == "PRUNED").any()
    cut = out["state"] == "PRUNED"
    assert 0 < cut.sum() < len(out) - sc.seeds and set(out["state"]) == {"COMPLETE", "PRUNED"}
    # a completed training ends on its drawn value; a pruned one stopped at an earlier eval
    assert np.allclose(out.loc[~cut, "val_bpb"], trials.loc[~cut, "val_bpb"])
    assert not np.isclose(out.loc[cut, "val_bpb"], trials.loc[cut, "val_bpb"]).any()


def test_the_gate_grid_counts_false_separations_per_seeds_and_ratio() -> None:
    bench = _bench()
    grid = bench.gate_grid(reps=3, seeds=(3, 20), ratios=(1.0, 3.0), m=4)
    assert sorted(grid) == ["20/1", "20/3", "3/1", "3/3"]
    for r in grid.values():
        assert r["studies"] == 3 and 0.0 <= r["fwer"]["rate"] <= 1.0
    table = bench.gate_table(grid)
    assert "| 20 |" in table and "uniform's sd 3x" in table
    # a study whose candidates all beat uniform by far is a false separation under the null's
    # bookkeeping: the judge counts any "separated"
    sc = bench.Scenario("x", "x", 3, (-20.0,) * 4)
    trials = bench.draw(sc, __import__("numpy").random.default_rng(0))
    assert bench.judge_gate(trials) == 1


def test_the_gate_runs_one_cell_from_the_command_line(tmp_path, capsys) -> None:
    bench = _bench()
    out = tmp_path / "gate.json"
    bench.main(["--gate", "2", "--gate-seeds", "3", "--gate-ratios", "2", "--json", str(out)])
    import json

    grid = json.loads(out.read_text())["gate"]
    assert list(grid) == ["3/2"] and grid["3/2"]["studies"] == 2
    # the same draws as the whole grid's cell
    assert grid["3/2"] == bench.gate_grid(reps=2, seeds=(3,), ratios=(2.0,))["3/2"]
    assert "| 3 |" in capsys.readouterr().out


def test_the_tuned_rows_draw_their_studies_and_count_false_separations() -> None:
    bench = _bench()
    t = bench.draw_tuned(__import__("numpy").random.default_rng(0), 4, 2.0, unpruned=2)
    assert set(t["state"]) == {"COMPLETE", "PRUNED"} and t["unpruned"].any()
    assert not t.loc[t["is_baseline"] | t["unpruned"], "state"].eq("PRUNED").any()
    grid = bench.tuned_grid(reps=2, rows=bench.TUNED_ROWS[:1])
    r = grid["4 seeds, equal rows"]
    assert all(0.0 <= r[k]["rate"] <= 1.0 for k in ("tuned", "shared", "either"))
    assert "| 4 seeds, equal rows |" in bench.tuned_table(grid)


def test_the_shrink_rows_measure_the_best_raw_and_adjusted() -> None:
    bench = _bench()
    grid = bench.shrink_grid(reps=4, m=5)
    r = grid["15 equal to uniform, 3 seeds"]
    assert r["raw"]["n"] == 4 and r["adjusted"]["n"] == 4
    assert "selection-adjusted" in bench.shrink_table(grid)


def test_the_confirm_rows_hold_the_rate_and_confirm_a_real_effect() -> None:
    """A stage of 3 equal candidates rarely confirms any (true rate ~2%: 5 of 20 has
    probability < 1e-3), and one 2 noise sds better on 5 fresh seeds is confirmed in most
    stages (true power ~95%)."""
    bench = _bench()
    rows = [bench.CONFIRM_ROWS[1], bench.CONFIRM_ROWS[-1]]
    grid = bench.confirm_grid(reps=20, rows=rows)
    null, power = grid[rows[0][0]], grid[rows[1][0]]
    assert null["false"]["mean"] <= 0.2 and null["power"]["n"] == 0
    assert power["power"]["mean"] >= 0.6
    assert "false confirmed" in bench.confirm_table(grid)
