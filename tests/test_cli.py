"""The validate / widths commands: exit codes, one clear line per problem, no heavy imports."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
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


def test_validate_continuous_space_reports_corners(tmp_path: Path) -> None:
    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    study.update(space="continuous", search={"sampler": "tpe"})
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    result = runner.invoke(app, ["validate", str(path), "--no-config"])
    assert result.exit_code == 0, result.output
    assert "continuous; 24 corner candidates checked" in result.output


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


def test_widths_bad_request_exits_2() -> None:
    result = runner.invoke(app, ["widths", "--d-ff", "100", "--multiple-of", "16"])
    assert result.exit_code == 2 and "d_ff:" in result.output


def test_fast_commands_import_neither_torch_nor_ray() -> None:
    code = (
        "import sys\n"
        "import tlmsearch, tlmsearch.cli, tlmsearch.schedules, tlmsearch.space, tlmsearch.config\n"
        "import tlmsearch.budget, tlmsearch.summary\n"
        "from typer.testing import CliRunner\n"
        f"study = {str(ROOT / 'studies/quickstart.yaml')!r}\n"
        "r = CliRunner().invoke(tlmsearch.cli.app, ['validate', study])\n"
        "assert r.exit_code == 0, r.output\n"
        "heavy = sorted(m for m in ('torch', 'ray', 'optuna', 'plotly') if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
