"""The validate / widths commands: exit codes, one clear line per problem, no heavy imports."""

from __future__ import annotations

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fixtures_run import make_run, study_dict
from typer.testing import CliRunner

from tlmsearch.cli import app

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def test_validate_quickstart() -> None:
    result = runner.invoke(app, ["validate", str(ROOT / "studies/quickstart.yaml")])
    assert result.exit_code == 0, result.output
    assert "2 candidates; 3 trainings per seed (uniform baseline first)" in result.output
    assert "= 3 trials" in result.output
    assert "proxy model" in result.output and "target model" in result.output
    assert "equal" in result.output and "is valid" in result.output


@pytest.mark.parametrize(
    ("sets", "warned"),
    [
        ([], False),
        (["ray.workers_per_trial=2"], True),
        (["ray.workers_per_trial=2", "ray.gpus_per_worker=1"], False),
    ],
)
def test_validate_warns_of_multi_worker_trials_on_cpus(sets: list[str], warned: bool) -> None:
    args = ["validate", str(ROOT / "studies/quickstart.yaml"), "--no-config"]
    result = runner.invoke(app, args + [a for s in sets for a in ("--set", s)])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert ("note: ray.workers_per_trial 2 on CPUs: Ray Train starts" in out) == warned


def _validated(sets: list[str]) -> str:
    """``tlmsearch validate`` of the quickstart with ``--set``s: its output on one line."""
    args = ["validate", str(ROOT / "studies/quickstart.yaml"), "--no-config"]
    result = runner.invoke(app, args + [a for s in sets for a in ("--set", s)])
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


@pytest.mark.parametrize(
    ("sets", "line"),
    [
        ([], None),
        (["search.array={size: 3}"], "trial arrays: up to 3 trainings a Ray trial, fused in one"),
        (
            ["search.array={size: auto}"],
            "trial arrays: size auto (the trainings due over the "
            "trial slots, at most 4 a Ray trial on CPUs",
        ),
        (
            ["search.array={size: 3}", "model.arch=hope_attention"],
            "trial arrays: off, one process per trial: model.arch 'hope_attention' does not fuse",
        ),
        (
            ["search.array={size: 3}", "ray.workers_per_trial=2"],
            "trial arrays: off, one process per trial: ray.workers_per_trial > 1",
        ),
    ],
)
def test_validate_says_whether_the_trainings_fuse_into_arrays(sets: list[str], line) -> None:
    out = _validated(sets)
    assert ("trial arrays:" in out) == (line is not None)
    assert line is None or line in out, out


@pytest.mark.parametrize(
    ("sets", "line"),
    [
        (["search.pruner=none"], None),
        # the quickstart's 2 candidates, both unpruned (its median pruner is idle anyway)
        (
            [],
            "pruning: median stops nothing: search.unpruned_candidates (2) leaves every "
            "candidate of the grid unpruned",
        ),
        (
            ["space=paper"],
            "pruning: median; 2 candidates of each setting, drawn at random "
            "before the first trial (the run dir's unpruned.json), are never pruned "
            "(search.unpruned_candidates)",
        ),
        (
            ["search.pruner=paired", "search.sampler=tpe", "search.unpruned_candidates=1"],
            "pruning: paired; the first 1 candidate the sampler draws at each setting",
        ),
        # review: a continuous setting makes every draw its own setting: all of them unpruned
        (
            [
                "search.pruner=median",
                "search.sampler=tpe",
                "space.dimensions={train.lr: {type: float, low: 0.001, high: 0.01, log: true}, "
                "shape: {type: categorical, choices: [cosine, linear]}}",
            ],
            "pruning: median stops nothing: train.lr is continuous, so every draw is a setting of "
            "its own",
        ),
        (
            ["search.pruner=median", "search.unpruned_candidates=0"],
            "no candidate unpruned (search.unpruned_candidates: 0): once anything is pruned the "
            "study's noise is unknown and nothing is separated",
        ),
    ],
)
def test_validate_says_which_candidates_the_pruner_leaves_unpruned(sets: list[str], line) -> None:
    out = _validated(sets)
    assert ("pruning:" in out) == (line is not None)
    assert line is None or line in out, out


def test_validate_says_which_candidates_share_proxy_widths() -> None:
    result = runner.invoke(
        app,
        [
            "validate",
            str(ROOT / "studies/quickstart.yaml"),
            "--set",
            "space=blocks",
            "--no-config",
        ],
    )
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "13 candidates; 4 trainings per seed" in out and "= 4 trials" in out
    assert "blocks wider_early @0.25/0.667 trains once per seed and stands for" in out
    assert "this proxy cannot tell them apart" in out  # they differ at the 24-layer target
    # a sampler draws candidates itself: n_trials + baseline, and no grid grouping to report
    result = runner.invoke(
        app,
        [
            *("validate", str(ROOT / "studies/quickstart.yaml"), "--no-config"),
            *("--set", "space=blocks", "--set", "search.sampler=random"),
            *("--set", "search.n_trials=5"),
        ],
    )
    out = " ".join(result.output.split())
    assert result.exit_code == 0 and "6 trainings per seed" in out, out
    assert "stands for" not in out


@pytest.mark.parametrize(
    ("candidate", "needle"),
    [
        ('{"r_start": 1.5}', "shape: is required"),
        ('{"shape": "uniform", "r_start": 1.5}', "r_start: is not a parameter of shape"),
    ],
)
def test_train_refuses_a_candidate_that_would_train_something_else(candidate, needle) -> None:
    result = runner.invoke(
        app, ["train", str(ROOT / "studies/quickstart.yaml"), "--candidate", candidate]
    )
    assert result.exit_code == 2, result.output
    assert needle in " ".join(result.output.split())


@pytest.mark.parametrize(
    "options", ["{margin_sds: -1}", "{patience: 0}", "{patience: true}", "{margin_sds: x}"]
)
def test_validate_refuses_pruner_options_the_pruner_refuses(options) -> None:
    args = ["validate", str(ROOT / "studies/quickstart.yaml"), "--no-config"]
    args += ["--set", "search.pruner=paired", "--set", f"search.pruner_options={options}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "pruner_options" in result.output


def test_validate_continuous_space_reports_corners(tmp_path: Path) -> None:
    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    study.update(space="continuous", search={"sampler": "tpe"})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    result = runner.invoke(app, ["validate", str(path), "--no-config"])
    assert result.exit_code == 0, result.output
    assert "continuous; 24 corner candidates checked" in result.output


UNIFORM_ONLY = {"shape": {"type": "categorical", "choices": ["uniform"]}}


@pytest.mark.parametrize(
    ("r_start", "sampler"),
    [
        ({"type": "float", "low": 1.5, "high": 1.5}, "random"),  # a float range with low == high
        ({"type": "categorical", "choices": [1.5]}, "grid"),
    ],
)
def test_a_uniform_only_space_with_r_start_exits_2(tmp_path: Path, r_start, sampler) -> None:
    # it was taken for a copy of the baseline and dropped: "1 candidates", valid
    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    study["space"] = {"dimensions": {**UNIFORM_ONLY, "r_start": r_start}}
    study["search"] = {**study["search"], "sampler": sampler}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    result = runner.invoke(app, ["validate", str(path), "--no-config"])
    out = " ".join(result.output.split())
    assert result.exit_code == 2, out
    assert "r_start: is not a parameter of shape 'uniform' (it reads no parameters)" in out
    assert "remove it, or use a shape that reads it (linear, cosine, sigmoid)" in out


BROKEN = {
    "misspelt key": ("model:\n  n_layr: 2\n", "model.n_layr: unknown key"),
    "wrong type": ("model:\n  n_layer: two\n", "model.n_layer: 'two' is invalid"),
    "unknown shape": (
        "space:\n  dimensions:\n    shape: {type: categorical, choices: [zigzag]}\n",
        "space.dimensions",
    ),
    "impossible widths": ("model:\n  d_ff: 64\n  multiple_of: 64\n", "cannot be met for model"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_studies_exit_2_with_the_path(tmp_path: Path, case: str) -> None:
    base = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    patch, needle = BROKEN[case]
    for key, value in yaml.safe_load(patch).items():
        if isinstance(value, dict) and isinstance(base.get(key), dict) and key != "space":
            base[key].update(value)
        else:
            base[key] = value
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(base))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert needle in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("text", "needle"), [("", "the file is empty"), ("a: [b", "not valid YAML at line 1")]
)
def test_empty_and_non_yaml_files_exit_2(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2 and needle in result.output


def test_bad_override_exits_2() -> None:
    study = str(ROOT / "studies/quickstart.yaml")
    result = runner.invoke(app, ["validate", study, "--set", "search.pruner=mediam"])
    assert result.exit_code == 2
    assert "search.pruner: 'mediam' is invalid" in result.output


def test_widths_json_matches_the_issue_example() -> None:
    args = [
        "widths",
        "--shape",
        "cosine",
        "--start",
        "1.5",
        "--end",
        "0.5",
        "--layers",
        "24",
        "--d-ff",
        "4096",
        "--multiple-of",
        "16",
        "--json",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    w = out["widths"]
    assert len(w) == 24 and sum(w) == 98304
    assert all(x % 16 == 0 for x in w) and all(a >= b for a, b in itertools.pairwise(w))


def test_widths_previews_a_heads_schedule_too() -> None:
    args = ["widths", "--layers", "4", "--heads-shape", "linear", "--heads-start", "0.5"]
    result = runner.invoke(app, [*args, "--n-head", "4", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["heads"] == [2, 3, 5, 6]  # sums to 4 x 4
    result = runner.invoke(app, args)
    assert result.exit_code == 0 and "heads 4 7 9 12 (sum 32 = 4 x 8)" in result.output
    assert "heads" not in runner.invoke(app, ["widths", "--json"]).output
    for bad, needle in (
        (["--heads-start", "0.01"], "heads.r_start: layer 0 would get no head"),
        (["--heads-shape", "custom"], "heads.shape: 'custom' needs parameters"),
    ):
        result = runner.invoke(app, [*args, *bad])
        assert result.exit_code == 2 and needle in result.output, result.output


def test_widths_bad_request_exits_2() -> None:
    result = runner.invoke(app, ["widths", "--d-ff", "100", "--multiple-of", "16"])
    assert result.exit_code == 2 and "d_ff:" in result.output


def test_fast_commands_import_neither_torch_nor_ray() -> None:
    code = (
        "import sys\n"
        "import tlmsearch, tlmsearch.cli, tlmsearch.config\n"
        "import tlmsearch.widths.schedules, tlmsearch.widths.space\n"
        "import tlmsearch.widths.budget, tlmsearch.config.summary\n"
        "from typer.testing import CliRunner\n"
        f"study = {str(ROOT / 'studies/quickstart.yaml')!r}\n"
        "r = CliRunner().invoke(tlmsearch.cli.app, ['validate', study])\n"
        "assert r.exit_code == 0, r.output\n"
        # with a min_effect and a prior, validate computes the power (scipy, not torch or ray)
        "sets = ['--set', 'search.racing={prior_sd: 0.006}',\n"
        "        '--set', 'objectives=[{metric: val_bpb, min_effect: 0.005}]']\n"
        "r = CliRunner().invoke(tlmsearch.cli.app, ['validate', study, *sets])\n"
        "assert r.exit_code == 0 and 'warning: objectives[0].min_effect' in r.output, r.output\n"
        "r = CliRunner().invoke(tlmsearch.cli.app, ['plan', study, *sets])\n"
        "assert r.exit_code == 0 and 'needed (t, df ' in r.output, r.output\n"
        "r = CliRunner().invoke(tlmsearch.cli.app, ['schema', '--markdown'])\n"
        "assert r.exit_code == 0 and '### SearchConfig' in r.output, r.output\n"
        "heavy = sorted(m for m in ('torch', 'ray', 'optuna', 'plotly') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def _r_start(*choices: object) -> dict:
    cosine = {"type": "fixed", "value": "cosine"}
    r_start = {"type": "categorical", "choices": list(choices)}
    return {"space": {"dimensions": {"shape": cosine, "r_start": r_start}}}


# Bad values that once crashed or were accepted: each exits 2 naming the path and value.
ISSUE = {
    "string choice": (
        _r_start(1.5, "median"),
        "space.dimensions: r_start.choices[1]: 'median' is not a number; r_start takes numbers",
    ),
    "bool choice": (_r_start(True, 1.5), "r_start.choices[0]: True is not a number"),
    "d_ff": (
        {"model": {"d_ff": 2**40}},
        "model.d_ff: 1099511627776 is invalid: Input should be less than or equal to 1048576",
    ),
    "d_model": ({"model": {"d_model": 2**40}}, "model.d_model: 1099511627776 is invalid"),
    "vocab_size": ({"model": {"vocab_size": 2**40}}, "model.vocab_size: 1099511627776 is inv"),
    "seq_len": ({"data": {"seq_len": 2**40}}, "data.seq_len: 1099511627776 is invalid"),
    "tokens": ({"train": {"tokens": 2**70}}, "train.tokens: 1180591620717411303424 is invalid"),
    "infinite lr": ({"train": {"lr": math.inf}}, "train.lr: inf is invalid: Input should be a fi"),
    "mlp_ratio": ({"model": {"d_ff": None, "mlp_ratio": 1e300}}, "model.mlp_ratio: 1e+300 is"),
    "seed": ({"search": {"seeds": [0, -1]}}, "search.seeds: [0, -1] is invalid: seeds must lie"),
}


@pytest.mark.parametrize("case", sorted(ISSUE))
def test_issue_cases_exit_2_naming_the_field(tmp_path: Path, case: str) -> None:
    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    patch, needle = ISSUE[case]
    for section, value in patch.items():
        study[section] = value if section == "space" else {**study[section], **value}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    result = runner.invoke(app, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert needle in " ".join(result.output.split())
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_sizes_that_once_ate_the_machine_exit_2_under_a_memory_cap(tmp_path: Path) -> None:
    # Each of these allocated until the machine ran out of memory (n_layer 2**63 took 24 GiB):
    # run them where 1 GiB of address space is all there is, and check the peak.
    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(study))
    fine = "{type: float, low: 0.5, high: 1.5, step: 9.313225746154785e-10}"  # 2**-30
    cases = [
        (["--set", "model.n_layer=9223372036854775808"], "model.n_layer: 9223372036854775808"),
        (["--set", "target.n_layer=10000000"], "target.n_layer: 10000000 is invalid"),
        (["--set", f"space.dimensions.r_start={fine}"], "grid values, more than 10,000"),
    ]
    cases = [(["validate", str(tmp_path / "s.yaml"), *a], needle) for a, needle in cases]
    cases.append((["widths", "--layers", "9223372036854775808"], "n_layer: must lie in [1, 1024]"))
    code = (
        "import json, resource, sys\n"
        "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
        "from typer.testing import CliRunner\n"
        "from tlmsearch.cli import app\n"
        f"for args, needle in {cases!r}:\n"
        "    r = CliRunner().invoke(app, args)\n"
        "    print(json.dumps([r.exit_code, needle in r.output, r.output[-300:]]))\n"
        # VmHWM: ru_maxrss would carry over this pytest process's own peak (Linux, exec)
        "print([x for x in open('/proc/self/status') if x.startswith('VmHWM')][0].split()[1])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(cases) + 1, out.stdout + out.stderr
    for (args, _), line in zip(cases, lines, strict=False):
        exit_code, found, output = json.loads(line)
        assert exit_code == 2 and found, (args, output)
    assert int(lines[-1]) * 1024 < 1 << 30


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--shape", "sigmoid", "--k", "1000"], "k: must lie in [0.001, 500], but got 1000.0"),
        (["--layers", "1025"], "n_layer: must lie in [1, 1024], but got 1025"),
        (["--d-ff", "2097152"], "d_ff: must be at most 1048576"),
        (["--start", "nan"], "r_start: must be a finite number > 0"),
    ],
)
def test_widths_out_of_range_exits_2(args: list[str], needle: str) -> None:
    result = runner.invoke(app, ["widths", *args])
    assert result.exit_code == 2 and needle in result.output, result.output


# -------------------------------------------------------------------------------------------------
# tlmsearch plan (tlmsearch/evidence/power.py)


def _plan_study(tmp_path: Path, min_effect: float | None = 0.005, **search: object) -> Path:
    study = study_dict(seeds=(0, 1, 2))
    if min_effect is not None:
        study["objectives"][0]["min_effect"] = min_effect
    study["search"].update(search)
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def _row(output: str, label: str) -> list[str]:
    return next(line for line in output.splitlines() if line.startswith(label)).split()


def test_plan_from_a_pilot_prints_seeds_trainings_power_and_hours(tmp_path: Path) -> None:
    pilot = make_run(tmp_path / "pilot", seeds=(0, 1, 2))
    study = _plan_study(tmp_path, concurrency=2)
    result = runner.invoke(app, ["plan", str(study), "--from", str(pilot)])
    assert result.exit_code == 0, result.output
    out = result.output
    # the synthetic pilot: sd 0.00253 on df 12 (7 candidates x 3 seeds); the study compares
    # 5 trainings with uniform (two pairs of its 6 candidates share proxy widths)
    assert "noise: sd of one paired delta 0.00253 (df 12), from the pilot" in out
    assert "Holm over 5 comparisons with uniform at 95%" in out
    # each comparison on its own df: uniform's own 4 beside the pool's 20
    assert _row(out, "needed") == ["needed", "(t,", "df", "13)", "5", "30", "89%", "1.7", "0.87"]
    assert _row(out, "normal approximation")[2:5] == ["3", "18", "47%"]
    assert _row(out, "this study") == [
        "this",
        "study",
        "(search.seeds)",
        "3",
        "18",
        "47%",
        "1.0",
        "0.52",
    ]
    assert "at the pilot's median 4,802 tokens/s per trial" in out
    assert "2 trial(s) at once (search.concurrency)" in out
    # the same with the override and BH: more seeds for a smaller effect, said approximate
    args = [
        "plan",
        str(study),
        "--from",
        str(pilot),
        "--min-effect",
        "0.002",
        "--set",
        "stats.family=bh",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "smallest effect 0.002 (--min-effect)" in result.output
    assert "approximate for BH" in result.output
    assert _row(result.output, "needed")[4:7] == ["20", "120", "80%"]


def test_plan_without_a_pilot_says_the_noise_is_assumed_and_the_cost_unknown(
    tmp_path: Path,
) -> None:
    study = _plan_study(tmp_path, racing={"prior_sd": 0.006})
    result = runner.invoke(app, ["plan", str(study)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "(assumed), from search.racing.prior_sd: an assumption, not a measurement" in out
    assert "cost: no pilot: cost unknown" in out
    assert _row(out, "needed") == ["needed", "(t,", "df", "56)", "18", "108", "80%"]


def _no_trials(tmp_path: Path) -> Path:
    run = tmp_path / "empty"
    run.mkdir()
    (run / "study.yaml").write_text(yaml.safe_dump(study_dict()))
    return run


PLAN_BAD = {
    "missing min_effect": (
        {"min_effect": None},
        ["--from", "pilot"],
        "objectives[0].min_effect: not set, and no --min-effect: give the smallest val_bpb",
    ),
    "zero --min-effect": ({}, ["--from", "pilot", "--min-effect", "0"], "--min-effect: 0.0 is"),
    "negative --min-effect": (
        {},
        ["--from", "pilot", "--min-effect", "-0.01"],
        "--min-effect: -0.01 is not a positive",
    ),
    "negative min_effect": (
        {"min_effect": -0.01},
        ["--from", "pilot"],
        "objectives[0].min_effect: -0.01 is invalid: must be > 0",
    ),
    "no trials table": ({}, ["--from", "empty"], "has no trials table (trials.parquet or"),
    "one seed": ({}, ["--from", "one-seed"], "the pilot has one seed"),
    "not a run dir": ({}, ["--from", "nowhere"], "does not exist; give the folder a run wrote"),
    "no noise": ({}, [], "no noise to size with: pass --from RUN"),
    "power": ({}, ["--from", "pilot", "--power", "1.5"], "--power: 1.5 must lie strictly"),
    "metric": ({}, ["--from", "pilot", "--metric", "mfu"], "--metric 'mfu' is not an objective"),
}


@pytest.mark.parametrize("case", sorted(PLAN_BAD))
def test_plan_bad_input_exits_2_naming_the_field(tmp_path: Path, case: str) -> None:
    search, args, needle = PLAN_BAD[case]
    study = _plan_study(tmp_path, **search)
    runs = {
        "pilot": lambda: make_run(tmp_path / "pilot", seeds=(0, 1)),
        "one-seed": lambda: make_run(tmp_path / "one-seed", seeds=(0,)),
        "empty": lambda: _no_trials(tmp_path),
    }
    args = [
        str(runs[a]()) if a in runs else str(tmp_path / a) if a == "nowhere" else a for a in args
    ]
    result = runner.invoke(app, ["plan", str(study), *args])
    out = " ".join(result.output.split())
    assert result.exit_code == 2, out
    assert needle in out
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_the_one_seed_pilot_says_what_to_run(tmp_path: Path) -> None:
    pilot = make_run(tmp_path / "p", seeds=(0,))
    result = runner.invoke(app, ["plan", str(_plan_study(tmp_path)), "--from", str(pilot)])
    out = " ".join(result.output.split())
    assert result.exit_code == 2
    assert "the pilot has one seed (1 seed(s) x 7 candidate(s) completed with val_bpb)" in out
    assert "run 2+ seeds of 2+ candidates" in out


@pytest.mark.parametrize(
    ("search", "warned"),
    [
        ({"racing": {"prior_sd": 0.006}}, True),
        ({"racing": {"prior_sd": 0.001}}, False),
        ({}, False),
    ],
)
def test_validate_warns_when_the_seeds_cannot_reach_80_percent_power(
    tmp_path: Path, search: dict, warned: bool
) -> None:
    result = runner.invoke(app, ["validate", str(_plan_study(tmp_path, **search)), "--no-config"])
    out = " ".join(result.output.split())
    assert result.exit_code == 0, out  # a warning, not a failure
    assert (
        "warning: objectives[0].min_effect 0.005: 3 seed(s) per candidate (search.seeds) "
        "give 6% power" in out
    ) == warned
    if warned:
        assert "80% needs 18 seeds" in out


def test_the_documented_plan_example() -> None:
    args = [
        "plan",
        str(ROOT / "studies/race.yaml"),
        "--min-effect",
        "0.01",
        "--set",
        "search.racing.prior_sd=0.007",
    ]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    text = (ROOT / "docs/statistics.md").read_text()
    table = text.split("$ tlmsearch plan studies/race.yaml")[1]
    for label in ("normal approximation", "needed (t, df 13)", "this study (racing.max_seeds)"):
        assert _row(result.output, label) == _row(table, label)


@pytest.mark.parametrize(
    ("study", "one_lr", "lines"),
    [
        ("quickstart", True, ["cosine 1.5->0.5: standard: LR and init x1 everywhere"]),
        ("paper_blocks", True, ["blocks wider_middle @0.333/0.667: standard:"]),
        ("lr_sweep", False, ["cosine 1.5->0.5: standard:"]),
        (
            "taper_lr",
            False,
            [
                "cosine 0.5->1.5: standard:",
                "cosine 0.5->1.5: mup: down-projection LR and init x0.67..x2.00",
            ],
        ),
    ],
)
def test_validate_prints_the_effective_lr_of_every_schedule(study, one_lr, lines) -> None:
    """Every study says what its parametrization does to each schedule's layers, and a study
    that compares schedules at one LR says its effects may be an LR effect."""
    args = ["validate", str(ROOT / f"studies/{study}.yaml"), "--no-config"]
    out = " ".join(runner.invoke(app, args, terminal_width=400).output.split())
    assert "effective learning rate per layer, against uniform:" in out
    for line in lines:
        assert line in out
    assert (
        "note: schedules are compared at one learning rate: may be an LR effect; see tuned" in out
    ) is one_lr
    assert "uniform: " not in out.partition("against uniform:")[2]  # uniform is the reference


# a study that moves attention capacity over depth: MLP and heads schedules
HEADS_SPACE = {
    "dimensions": {
        "shape": {"type": "categorical", "choices": ["uniform", "cosine"]},
        "r_start": {"type": "categorical", "choices": [1.5], "when": {"shape": ["cosine"]}},
        "heads.shape": {"type": "categorical", "choices": ["uniform", "linear"]},
        "heads.r_start": {
            "type": "categorical",
            "choices": [0.5],
            "when": {"heads.shape": ["linear"]},
        },
        "heads.share": {"type": "categorical", "choices": [1.0, 0.5]},
    }
}


def test_validate_a_study_with_a_heads_schedule_shows_the_heads(tmp_path: Path) -> None:
    from search_helpers import tiny_study

    model = {"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 128, "multiple_of": 16}
    path = tmp_path / "heads.yaml"
    study = tiny_study(tmp_path, space=HEADS_SPACE, model=model)
    path.write_text(yaml.safe_dump(study, sort_keys=False))  # dimensions in their order
    result = runner.invoke(app, ["validate", str(path), "--no-config"])
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    # uniform and 7 others (uniform MLP and heads at share 1 is the baseline itself)
    assert "8 candidates; 8 trainings per seed (uniform baseline first)" in out
    assert "heads 4 4 4 4" in out  # uniform's, in the title
    assert "2 3 5 6" in out and "1 1 2 3" in out  # linear 0.5 -> 1.5, at share 1 and 0.5
    assert "0.438" in out  # share 0.5 realised at an exactly payable total
    assert "so FLOPs/tok differ between candidates" in out
    assert out.endswith("is valid")


def test_a_study_yaml_warning_prints_as_the_clis_warnings(monkeypatch) -> None:
    import warnings

    from tlmsearch.cli import plain_warnings
    from tlmsearch.config import StudyYamlWarning

    monkeypatch.setattr(warnings, "formatwarning", warnings.formatwarning)  # put back after
    plain_warnings()
    line = warnings.formatwarning("runs/x/study.yaml: read without a", StudyYamlWarning, "f", 1)
    assert line == "warning: runs/x/study.yaml: read without a\n"
    other = warnings.formatwarning("m", UserWarning, "f.py", 3)
    assert other.startswith("f.py:3: UserWarning: m")


def test_validate_says_what_the_confirmation_stage_runs() -> None:
    """search.confirm on the quickstart (seeds [0]): its 2 best and uniform again on seeds 1-3."""
    plain = _validated([])
    assert "confirmation stage" not in plain
    out = _validated(["search.confirm.top=2", "search.confirm.seeds=3"])
    line = (
        "confirmation stage (search.confirm): after the main stage, its best 2 candidates and "
        "uniform train again on fresh seeds 1, 2, 3, never pruned: at most 9 trainings more "
        "(3 x 3); best.yaml's best comes from this stage"
    )
    assert line in out, out
