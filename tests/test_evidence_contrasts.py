"""The study's contrasts through the Evidence, ``tlmsearch status``, best.yaml and validate: a
run dir with two tapers each way at two learning rates on four seeds (no training, no Ray)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
from search_helpers import tiny_config
from typer.testing import CliRunner

from tlmsearch.cli import app

SPACE = {
    "dimensions": {
        "shape": {"type": "categorical", "choices": ["cosine", "linear"]},
        "r_start": {"type": "categorical", "choices": [1.5, 0.5]},
        "train.lr": {"type": "categorical", "choices": [0.001, 0.01]},
    }
}
SEEDS = [0, 1, 2, 3]
# a named contrast: the early-heavy family at the highest LR only
HIGH_LR_TAPERS = {
    "name": "tapers at the high LR",
    "schedules": ["early-heavy"],
    "where": {"train.lr": [0.01]},
}


def law(params: dict, seed: int) -> float:
    """val_bpb: early-heavy 0.03 better than uniform at lr 0.001, 0.06 at 0.01; late-heavy
    equal to uniform; a seed level and a little noise."""
    taper = params.get("r_start", 1.0) - (2.0 - params.get("r_start", 1.0))
    lr = params["train.lr"]
    effect = -(0.03 if lr == 0.001 else 0.06) if taper > 0 else 0.0
    noise = 0.0005 * math.sin(7.0 * seed + 13.0 * len(json.dumps(params)) + 1000 * lr)
    return 2.0 + 0.01 * seed + (0.02 if lr == 0.01 else 0.0) + effect + noise


def make_run(tmp_path: Path, stats: dict | None = None) -> tuple[Path, object]:
    import optuna

    from tlmsearch.search.attrs import CANDIDATE, SEED

    sections = {
        "space": SPACE,
        "search": {"sampler": "grid", "pruner": "none", "seeds": SEEDS},
        "objectives": [{"metric": "val_bpb", "min_effect": 0.01}],
    }
    if stats is not None:
        sections["stats"] = stats
    cfg = tiny_config(tmp_path, **sections)
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    (run / "study.yaml").write_text(cfg.to_yaml())
    (run / "run.json").write_text(json.dumps({"status": "finished", "n_trials_planned": 40}))
    study = optuna.create_study(study_name=cfg.name, storage=f"sqlite:///{run / 'optuna.db'}")
    for seed in SEEDS:
        for params in cfg.candidates():
            v = law(params, seed)
            study.add_trial(
                optuna.trial.create_trial(
                    state=optuna.trial.TrialState.COMPLETE,
                    value=v,
                    user_attrs={
                        CANDIDATE: json.dumps(params),
                        SEED: seed,
                        "metrics": {"val_bpb": v, "tokens": 8192},
                    },
                )
            )
    return run, cfg


def _status(run: Path) -> str:
    """``tlmsearch status RUN``'s output on one line (the console wraps long lines)."""
    res = CliRunner().invoke(app, ["status", str(run)], terminal_width=400)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.split())


def test_status_prints_each_familys_main_effect_the_interactions_and_a_word(tmp_path) -> None:
    run, _ = make_run(tmp_path)
    out = _status(run)
    assert (
        "contrasts (weighted Holm over 20 contrasts, family-wise error 5% shared: families (2) "
        "40%, schedules (4) 30%, interactions (6) 20%, per-setting (8) 10%; a group done passes "
        'its share on (Bretz et al. 2009); each asks "differs from 0?" and "within +-0.01?" '
        "(TOST), counted once (Shaffer)):"
    ) in out
    # the main effect of each family over both LRs, with its word
    assert (
        "early-heavy (2 schedules) vs uniform over 2 settings: better: -0.0450 val_bpb, "
        "99% interval ["
    ) in out
    # objectives[0].min_effect is the margin
    assert "late-heavy (2 schedules) vs uniform over 2 settings: equivalent within +-0.01: " in out
    # the interactions: the taper's gain grows with the LR; the late-heavy one's does not move
    assert "early-heavy x train.lr: effect at 0.01 minus at 0.001: better: -0.030" in out
    assert "late-heavy x train.lr: effect at 0.01 minus at 0.001: equivalent within +-0.01" in out
    assert "cosine 1.5->0.5 x train.lr: effect at 0.01 minus at 0.001: better" in out
    assert "(8 per-setting contrasts of the same family in best.yaml)" in out


def test_best_yaml_carries_every_contrast_with_its_word(tmp_path) -> None:
    from tlmsearch.config import load_study
    from tlmsearch.run_dir.tables import load_run
    from tlmsearch.search.best import write_best
    from tlmsearch.search.export import open_run, write_tables

    run, _ = make_run(tmp_path)
    cfg, study = open_run(run)
    write_tables(run, study, cfg)
    doc = write_best(run, load_run(run).trials, load_study(run / "study.yaml"))
    c = doc["contrasts"]
    assert c["metric"] == "val_bpb" and c["margin"] == 0.01 and len(c["contrasts"]) == 20
    by = {r["name"]: r for r in c["contrasts"]}
    at = by["cosine 1.5->0.5 vs uniform at lr=0.01"]
    assert at["kind"] == "setting" and at["word"] == "better"
    assert at["estimate"] == pytest.approx(-0.06, abs=0.002)
    assert at["ci"][0] < at["estimate"] < at["ci"][1]


def test_a_study_asks_its_own_contrasts_with_its_own_margin(tmp_path) -> None:
    stats = {
        "equivalence": 0.002,
        "contrasts": [
            HIGH_LR_TAPERS,
            {
                "name": "cosine vs linear taper",
                "schedules": ["cosine 1.5->0.5"],
                "vs": ["linear 1.5->0.5"],
            },
        ],
    }
    run, _ = make_run(tmp_path, stats)
    out = _status(run)
    assert "Holm over 2 contrasts" in out and "within +-0.002?" in out
    assert "tapers at the high LR: better: -0.060" in out
    assert "cosine vs linear taper: equivalent within +-0.002:" in out


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        (
            "[{name: a, schedules: [cosin]}]",
            "stats.contrasts[0].schedules[0]: 'cosin' is not a schedule of the space; give one of "
            "uniform, cosine 1.5->0.5",
        ),
        (
            "[{name: a, schedules: [early-heavy], by: train.lrr}]",
            "stats.contrasts[0].by: 'train.lrr' is not a setting dimension of the space",
        ),
        (
            "[{name: a, schedules: [early-heavy], by: lr}]",
            "stats.contrasts[0].by: 'lr' is invalid: 'lr' is not a setting dimension; "
            "name it with its section, e.g. train.lr",
        ),
        (
            "[{name: a, schedules: [all], wher: {}}]",
            "stats.contrasts[0].wher: unknown key; valid keys here: name, schedules, terms, vs, "
            "where, by",
        ),
    ],
)
def test_validate_names_the_bad_contrast_and_exits_2(tmp_path, value, needle) -> None:
    import yaml
    from search_helpers import tiny_study

    data = tiny_study(tmp_path, space=SPACE)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(
        app,
        ["validate", str(path), "--no-config", "--set", f"stats.contrasts={value}"],
        terminal_width=400,
    )
    assert res.exit_code == 2, res.output
    assert needle in " ".join(res.output.split())


def test_a_bad_candidate_beside_contrasts_is_named_not_a_crash(tmp_path) -> None:
    """The contrasts' schedule names are checked on the candidates' labels; a candidate whose
    profile value is not a number is named (exit 2), not labelled (a crash, found by a fuzzer)."""
    import yaml
    from search_helpers import tiny_study

    space = {
        "dimensions": {"shape": {"type": "fixed", "value": "uniform"}},
    }
    data = tiny_study(tmp_path, space=space)
    data["search"] = {
        "sampler": "grid",
        "candidates": [
            {"shape": "uniform"},
            {"shape": "uniform", "lr.shape": "cosine", "lr.r_start": "http://x/y.jsonl"},
        ],
    }
    data["stats"] = {"contrasts": [{"name": "a", "schedules": ["uniform | lr cos"]}]}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["validate", str(path), "--no-config"], terminal_width=400)
    assert res.exit_code == 2, res.output
    assert "lr.r_start: must be a finite number > 0" in " ".join(res.output.split())


def test_equivalence_must_be_positive(tmp_path) -> None:
    import yaml
    from search_helpers import tiny_study

    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(tiny_study(tmp_path)))
    res = CliRunner().invoke(
        app,
        ["validate", str(path), "--no-config", "--set", "stats.equivalence=0"],
        terminal_width=400,
    )
    assert res.exit_code == 2 and "stats.equivalence" in res.output


def test_a_contrast_of_explicit_terms_is_the_factorial_interaction() -> None:
    """(C - B) - (D - A) of a 2x2 on paired seeds: the per-seed interaction's mean, its word."""
    import pandas as pd

    from tlmsearch.stats import Question, contrast_table, row_noise

    rng = __import__("numpy").random.default_rng(0)
    seeds = range(6)
    effect = {"uniform": 0.0, "B": -0.02, "D": 0.0, "C": -0.02}  # additive: no interaction
    rows = []
    for s in seeds:
        level = rng.normal(0, 0.05)
        for name, tau in effect.items():
            rows.append(
                {
                    "candidate": name,
                    "schedule": name,
                    "seed": s,
                    "state": "COMPLETE",
                    "is_baseline": name == "uniform",
                    "v": 2.0 + level + tau + rng.normal(0, 0.002),
                }
            )
    t = pd.DataFrame(rows)
    q = Question("interaction", (), terms={"C": 1, "B": -1, "D": -1, "uniform": 1})
    table = contrast_table(t, "v", models={"": row_noise(t, "v")}, margin=0.01, questions=[q])
    r = table.iloc[0]
    wide = t.pivot(index="seed", columns="candidate", values="v")
    want = (wide["C"] - wide["B"] - wide["D"] + wide["uniform"]).mean()
    assert float(r["estimate"]) == pytest.approx(want, abs=1e-12)
    assert r["word"] == "equivalent" and r["members"] == ("C",)


def test_terms_must_sum_to_zero_and_stand_alone() -> None:
    from pydantic import ValidationError

    from tlmsearch.config.search import ContrastConfig

    ContrastConfig(name="x", terms={"a": 1, "uniform": -1})
    for bad in (
        {"terms": {"a": 1, "b": 1}},
        {"terms": {"a": 1}},
        {"terms": {"a": 1, "uniform": -1}, "schedules": ["a"]},
        {},
    ):
        with pytest.raises(ValidationError):
            ContrastConfig(name="x", **bad)


@pytest.mark.parametrize(
    ("steps", "capacity", "inter", "needle"),
    [
        ("better", "equivalent", "equivalent", "the effect is steps's; capacity adds less"),
        ("equivalent", "better", "equivalent", "the effect is capacity's, independent of steps"),
        ("better", "better", "equivalent", "additive"),
        ("better", "inconclusive", "worse", "the effect of capacity depends on steps"),
        ("better", "inconclusive", "equivalent", "inconclusive: capacity neither separated"),
        ("equivalent", "equivalent", "equivalent", "neither factor nor their interaction"),
    ],
)
def test_a_two_by_two_reads_as_one_of_its_sentences(steps, capacity, inter, needle) -> None:
    from tlmsearch.evidence.factorial import reading

    words = {"steps": steps, "capacity": capacity, "interaction": inter}
    assert needle in reading(words, "steps", "capacity", "interaction", margin=0.01)


def test_two_by_two_names_must_be_contrasts() -> None:
    from pydantic import ValidationError

    from tlmsearch.config.search import StatsConfig

    contrasts = [{"name": n, "schedules": ["a"]} for n in ("s", "c", "i")]
    StatsConfig(contrasts=contrasts, two_by_two={"first": "s", "second": "c", "interaction": "i"})
    with pytest.raises(ValidationError, match=r"two_by_two.second: 'x' is not a contrast"):
        StatsConfig(
            contrasts=contrasts, two_by_two={"first": "s", "second": "x", "interaction": "i"}
        )


def _factorial(seeds: int = 5, settings=(0.005, 0.01), drop=(), prune=()) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(1)
    effect = {"uniform": 0.0, "B": -0.02, "D": 0.0, "C": -0.02}
    rows = []
    for lr in settings:
        for s in range(seeds):
            level = rng.normal(0, 0.05)
            for name, tau in effect.items():
                if (name, lr, s) in drop:
                    continue
                state = "PRUNED" if (name, lr, s) in prune else "COMPLETE"
                rows.append(
                    {
                        "candidate": f"{name} @ lr={lr}",
                        "schedule": name,
                        "seed": s,
                        "setting": f"lr={lr}",
                        "state": state,
                        "is_baseline": name == "uniform",
                        "v": 2.0 + level + tau + rng.normal(0, 0.002),
                    }
                )
    return pd.DataFrame(rows)


def _interaction_table(t):
    from tlmsearch.stats import Question, contrast_table, row_noise

    models = {s: row_noise(g, "v") for s, g in t.groupby("setting")}
    q = Question("interaction", (), terms={"C": 1, "B": -1, "D": -1, "uniform": 1})
    return contrast_table(t, "v", models=models, margin=0.01, questions=[q]).iloc[0]


def test_terms_over_settings_average_each_settings_interaction_with_a_missing_cell() -> None:
    t = _factorial(drop={("D", 0.01, 3)})
    r = _interaction_table(t)
    want = []
    for _, g in t[t["state"] == "COMPLETE"].groupby("setting"):
        wide = g.pivot(index="seed", columns="schedule", values="v")
        full = wide.dropna()  # the block fit's estimate in a complete design; a missing D cell
        want.append((full["C"] - full["B"] - full["D"] + full["uniform"]).mean())
    assert float(r["estimate"]) == pytest.approx(sum(want) / 2, abs=2e-3)
    assert r["word"] in ("equivalent", "inconclusive")


def test_a_pruned_cell_on_the_negative_side_blocks_the_word() -> None:
    r = _interaction_table(_factorial(prune={("B", 0.005, 0)}))
    assert r["word"] == "inconclusive" and "pruned or failed" in r["why"]


def test_two_by_two_reads_a_table_and_says_when_it_has_no_margin() -> None:
    from types import SimpleNamespace

    from tlmsearch.evidence.factorial import two_by_two

    spec = SimpleNamespace(first="s", second="c", interaction="i")
    table = pd.DataFrame(
        {
            "name": ["s", "c", "i"],
            "word": ["better", "equivalent", "equivalent"],
            "margin": [0.01] * 3,
        }
    )
    assert "the effect is s's" in two_by_two(table, spec)
    table["margin"] = float("nan")
    table["word"] = ["better", "inconclusive", "inconclusive"]
    assert "no equivalence margin" in two_by_two(table, spec)
    assert two_by_two(None, spec) is None and two_by_two(table, None) is None


def _judged_by(run: Path, stats_file: Path) -> object:
    return CliRunner().invoke(
        app, ["status", str(run), "--stats-from", str(stats_file)], terminal_width=400
    )


def test_status_asks_a_stored_run_the_questions_of_another_stats_section(tmp_path) -> None:
    """New questions of stored trials: the run's own study asks the default contrasts; a
    study YAML's stats section asks its own, and the run dir is not changed."""
    import yaml

    run, _ = make_run(tmp_path)

    def files() -> dict[str, bytes]:  # the storage's own (SQLite's write-ahead log) aside
        return {
            p.name: p.read_bytes()
            for p in run.iterdir()
            if p.is_file() and not p.name.startswith("optuna.db")
        }

    before = files()
    assert "tapers at the high LR" not in _status(run)
    ask = tmp_path / "ask.yaml"
    stats = {
        "equivalence": 0.002,
        "contrasts": [HIGH_LR_TAPERS],
    }
    ask.write_text(yaml.safe_dump({"name": "other", "stats": stats}))
    res = _judged_by(run, ask)
    out = " ".join(res.output.split())
    assert res.exit_code == 0, res.output
    assert f"judged by the stats section of {ask}" in out
    assert "Holm over 1 contrast" in out and "within +-0.002?" in out
    assert "tapers at the high LR: better: -0.060" in out
    assert files() == before and "study.yaml" in before


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: x\n", "stats: missing; --stats-from reads the stats section of a study YAML"),
        (
            "stats: {contrasts: [{name: a, schedules: [cosin]}]}\n",
            "stats.contrasts[0].schedules[0]: 'cosin' is not a schedule of the space",
        ),
        ("stats: {levle: 0.9}\n", "stats.levle: unknown key; valid keys here:"),
        ("stats: {equivalence: -1}\n", "stats.equivalence: -1 is invalid"),
        ("- a list\n", "stats: missing"),
        ("", "stats: missing"),
        ("stats: 3\n", "stats: 3 is not a section; give a mapping"),
        ("stats: []\n", "stats: [] is not a section"),
        ("stats: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_bad_stats_from_exits_2_naming_the_field(tmp_path, text, needle) -> None:
    run, _ = make_run(tmp_path)
    ask = tmp_path / "ask.yaml"
    ask.write_text(text)
    res = _judged_by(run, ask)
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert needle in out and f"--stats-from {ask}" in out, res.output
    missing = _judged_by(run, tmp_path / "nowhere.yaml")
    assert missing.exit_code == 2 and "nowhere.yaml: file not found" in missing.output


def test_stats_from_fuzzed_sections_are_read_or_refused_never_a_crash(tmp_path) -> None:
    """Any stats section, valid or not: a judged study or a ConfigError naming it."""
    import yaml
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tlmsearch.config.load import load_frozen_study, with_stats_from
    from tlmsearch.errors import ConfigError

    run, _ = make_run(tmp_path)
    cfg = load_frozen_study(run / "study.yaml", whole=True)
    leaf = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-5, 5),
        st.floats(allow_nan=True),
        st.sampled_from(["early-heavy", "uniform", "train.lr", "holm", "cosine 1.5->0.5", ""]),
    )
    keys = st.sampled_from(
        [
            "contrasts",
            "equivalence",
            "level",
            "family",
            "name",
            "schedules",
            "vs",
            "where",
            "by",
            "terms",
            "train.lr",
            "two_by_two",
            "x",
        ]
    )
    values = st.recursive(
        leaf,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(keys, inner, max_size=4),
        max_leaves=12,
    )
    path = tmp_path / "ask.yaml"

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.dictionaries(keys, values, max_size=4))
    def judged(stats) -> None:
        path.write_text(yaml.safe_dump({"stats": stats}))
        try:
            with_stats_from(cfg, path)
        except ConfigError as err:
            assert err.problems and all(isinstance(p, str) and p for p in err.problems)

    judged()


def test_status_shows_a_samplers_thousands_of_schedules_as_the_decided_and_the_largest_t():
    """A sampler's study has one schedule-vs-uniform contrast per candidate (5,000 of them at
    5,000 trials): status keeps the decided ones, then the largest |t|, then (no t) the largest
    |estimate|, and says how many more best.yaml holds."""
    import numpy as np

    from tlmsearch import stats
    from tlmsearch.evidence.contrasts import contrast_lines

    rng = np.random.default_rng(0)
    rows = []
    effects = {f"c{i:02d}": (-0.2 if i < 3 else 0.0) for i in range(20)}
    for seed in range(4):
        base = rng.normal(0, 0.05)
        for c, e in {"uniform": 0.0, **effects}.items():
            value = 2 + base + e + rng.normal(0, 0.01)
            rows.append({"candidate": c, "is_baseline": c == "uniform", "seed": seed, "v": value})
    t = pd.DataFrame(rows).assign(state="COMPLETE")
    table = stats.contrast_table(t, "v", models={"": stats.row_noise(t, "v")}, margin=0.02)
    assert len(table) == 20 and set(table["word"]) == {"better", "inconclusive"}
    every = contrast_lines(table, "v", 0.95)
    assert len(every) == 21  # the rule and each contrast: no limit, no cut
    cut = contrast_lines(table, "v", 0.95, limit=5)
    shown = [ln.split(" vs ")[0] for ln in cut[1:-1]]
    t_abs = (table["estimate"] / table["se"]).abs()
    undecided = table[table["word"] == "inconclusive"]
    largest = list(undecided.loc[t_abs[undecided.index].nlargest(2).index, "name"])
    assert shown == sorted(["c00", "c01", "c02", *(n.split(" vs ")[0] for n in largest)])
    assert cut[-1].startswith("(15 more schedule-vs-uniform contrasts")
    assert contrast_lines(table, "v", 0.95, limit=25) == every  # fewer than the limit: all
    # a decided contrast is kept before an undecided one with a larger |t|
    small = t_abs[undecided.index].idxmin()
    decided = table.assign(word=table["word"].mask(table.index == small, "equivalent"))
    kept = [ln.split(" vs ")[0] for ln in contrast_lines(decided, "v", 0.95, limit=4)[1:-1]]
    assert table.loc[small, "name"].split(" vs ")[0] in kept and len(kept) == 4
    # no t at all (one seed: no noise): the largest |estimate|, not the table's first rows
    blind = table.assign(se=float("nan"), word="inconclusive")
    kept = [ln.split(" vs ")[0] for ln in contrast_lines(blind, "v", 0.95, limit=4)[1:-1]]
    biggest = table.loc[table["estimate"].abs().nlargest(4).index, "name"]
    assert kept == sorted(n.split(" vs ")[0] for n in biggest)
