"""One version: tlmsearch.__version__, ``tlmsearch --version``, ``python -m tlmsearch``, the
distribution's (pyproject.toml reads tlmsearch/constants.py) and CHANGELOG.md's top entry."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import tlmsearch
from tlmsearch.cli import app
from tlmsearch.constants import VERSION

ROOT = Path(__file__).resolve().parent.parent
SEMVER = re.compile(r"\d+\.\d+\.\d+")


def test_the_version_is_semantic_and_the_package_exports_it() -> None:
    assert SEMVER.fullmatch(VERSION), VERSION
    assert tlmsearch.__version__ == VERSION


def test_the_cli_prints_the_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"tlmsearch {VERSION}\n"


def test_python_dash_m_runs_the_cli() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tlmsearch", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"tlmsearch {VERSION}\n"


def test_pyproject_reads_its_version_from_the_package() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    assert re.search(r'^dynamic = \[[^\]]*"version"', project, flags=re.M), project
    assert not re.search(r"^version\s*=", project, flags=re.M), "a second, static version"
    assert 'version = {attr = "tlmsearch.constants.VERSION"}' in text
    # setuptools reads the attribute statically: a literal assignment in constants.py
    constants = (ROOT / "tlmsearch" / "constants.py").read_text()
    assert re.search(rf'^VERSION = "{re.escape(VERSION)}"$', constants, flags=re.M)


def test_the_changelog_top_entry_is_this_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    versions = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", text, flags=re.M)
    assert versions, "CHANGELOG.md has no '## [x.y.z] - YYYY-MM-DD' entries"
    assert versions[0][0] == VERSION, f"CHANGELOG.md's top entry {versions[0][0]} != {VERSION}"
    # newest first, each version once
    keys = [tuple(int(x) for x in v.split(".")) for v, _ in versions]
    assert keys == sorted(set(keys), reverse=True), keys
