"""The run dir's layout lives in one object: every module names a run's files through it."""

from __future__ import annotations

import re
from pathlib import Path

from tlmsearch.run_dir import MARKERS, RunDir

PACKAGE = Path(__file__).resolve().parents[1] / "tlmsearch"
# A run dir's file names as string literals: only tlmsearch/run_dir/__init__.py may spell them.
LAYOUT = re.compile(
    r"""(["'])(study\.yaml|run\.json|best\.yaml|report\.html|ladder\.json|fidelity\.json|"""
    r"""(optuna|mlflow)\.(db|journal)|session-|(trials|curves|analysis|analysis_heads)\.(parquet|csv)|rung-|compile-cache|unpruned\.json)"""
    r"""\1"""
)


def test_paths_are_under_the_run(tmp_path):
    run = RunDir(tmp_path / "r")
    assert run.study == tmp_path / "r" / "study.yaml"
    assert run.table("curves", "csv") == tmp_path / "r" / "curves.csv"
    assert run.analysis_heads == tmp_path / "r" / "analysis_heads.parquet"
    assert run.rung(2) == tmp_path / "r" / "rung-2"
    assert run.compile_cache == tmp_path / "r" / "compile-cache"
    assert run.unpruned == tmp_path / "r" / "unpruned.json"
    assert run.unpruned_before_0_8 == tmp_path / "r" / "spared.json"
    assert RunDir(str(tmp_path)).path == tmp_path  # a str is a path too


def test_sessions_trial_dirs_and_markers(tmp_path):
    run = RunDir(tmp_path)
    assert run.sessions() == 0 and run.trial_dirs() == [] and not run.is_run()
    for s, t in [(0, "a"), (1, "b"), (1, "c")]:
        (run.ray / f"session-{s}" / f"trial_{t}").mkdir(parents=True)
    assert run.sessions() == 2
    assert [p.name for p in run.trial_dirs()] == ["trial_a", "trial_b", "trial_c"]
    for marker in MARKERS:
        (tmp_path / marker).touch()
        assert run.is_run()
        (tmp_path / marker).unlink()


def test_no_module_spells_the_layout_itself():
    offenders = [
        f"{path.relative_to(PACKAGE.parent)}:{n}: {line.strip()}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != PACKAGE / "run_dir" / "__init__.py"
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if LAYOUT.search(line) and not line.lstrip().startswith("#")
    ]
    assert offenders == [], "name run-dir files through tlmsearch.run_dir.RunDir:\n" + "\n".join(
        offenders
    )


def test_messages_name_the_folder_not_the_object(tmp_path):
    """`tlmsearch status EMPTY` printed "RunDir(path=PosixPath(...)) is not a run dir"."""
    import pytest

    from tlmsearch.errors import ConfigError
    from tlmsearch.search.export import open_run

    assert str(RunDir(tmp_path)) == str(tmp_path) and Path(RunDir(tmp_path)) == tmp_path
    with pytest.raises(ConfigError) as err:
        open_run(tmp_path)
    assert str(err.value).startswith(f"{str(tmp_path)!r} is not a run dir")
