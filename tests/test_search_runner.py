"""search/runner.py's checks before a run starts: a storage of the user's (a server, or a file
they name) that cannot open or already holds the study's name is exit 2 before Ray starts."""

from __future__ import annotations

import os
from pathlib import Path

import optuna
import pytest
import yaml
from search_helpers import tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app


@pytest.mark.parametrize("case", ["cannot open", "name taken"])
def test_a_user_storage_problem_is_exit_2_before_ray_starts(tmp_path: Path, case: str) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    if case == "cannot open":
        shared = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'optuna.db'}"
        said = "storage.optuna: cannot open"
    else:
        optuna.create_study(storage=shared, study_name="tiny")  # another run's, elsewhere
        said = "already holds a study 'tiny'; pick another run with --name NEW"
    data = tiny_study(tmp_path, storage={"runs_dir": str(tmp_path / "runs"), "optuna": shared})
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(data))
    res = CliRunner().invoke(app, ["run", str(tmp_path / "tiny.yaml")])
    assert res.exit_code == 2, res.output
    assert said in res.output and "ray: started" not in res.output  # it used to start Ray first
    assert not (tmp_path / "runs" / "tiny").exists()


def test_the_run_compiles_into_its_own_cache_unless_the_user_names_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every trial of a run, and every resume of it, is handed one torch.compile cache: the
    run dir's (absolute: a trial's working directory is not the driver's), or the user's
    ``TORCHINDUCTOR_CACHE_DIR`` when the driver's environment sets one."""
    from tlmsearch.run_dir import RunDir
    from tlmsearch.search.runner import compile_cache

    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    run = Path("runs") / "tiny"  # relative, as runs_dir usually is
    assert compile_cache(run) == str(tmp_path / "runs" / "tiny" / "compile-cache")
    assert (
        compile_cache(run)
        == compile_cache(run.resolve())
        == str(RunDir(run.resolve()).compile_cache)
    )  # a resume (which resolves the run dir) gets the run's cache back
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "mine"))
    assert compile_cache(run) == str(tmp_path / "mine")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "mine")  # relative: each trial has its folder
    assert compile_cache(run) == str(tmp_path / "mine")


def test_torchs_own_default_in_the_environment_is_not_the_users_choice(tmp_path, monkeypatch):
    """Importing torch._dynamo (the driver does, with the models, to check an hf study) sets
    TORCHINDUCTOR_CACHE_DIR to torch's per-user default: the run still gets its own cache."""
    import torch._dynamo  # noqa: F401  (what sets it)
    from torch._inductor.runtime.cache_dir_utils import cache_dir, default_cache_dir

    from tlmsearch.search.runner import compile_cache

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "unset-marker")
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    cache_dir()  # torch writes its default into the environment
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == default_cache_dir()
    assert compile_cache(tmp_path / "run") == str((tmp_path / "run" / "compile-cache").resolve())


def test_a_run_imports_what_its_end_reads_before_its_first_trial(tmp_path, monkeypatch) -> None:
    """A package edited or upgraded while a study ran crashed the run after its last trial (the
    end's lazy imports read new code beside the old). With what the runner and the CLI load
    before the first trial, the end (best.yaml from the trials, the report) imports no
    tlmsearch module of its own."""
    import json
    import subprocess
    import sys

    from fixtures_run import make_run

    from tlmsearch.search import runner

    run = make_run(tmp_path / "run")
    code = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from tlmsearch.config.load import load_frozen_study\n"
        "from tlmsearch.run_dir.tables import load_run\n"
        "from tlmsearch.search import cli, runner\n"
        "run = Path(sys.argv[1])\n"
        "runner.load_the_end(); cli._load_the_report()\n"
        "before = set(sys.modules)\n"
        "cfg = load_frozen_study(run / 'study.yaml', whole=True)\n"
        "from tlmsearch.search.best import write_best\n"
        "write_best(run, load_run(run).trials, cfg)\n"
        "from tlmsearch.report.html import write_report\n"
        "write_report(run)\n"
        "print(json.dumps(sorted(m for m in set(sys.modules) - before"
        " if m.startswith('tlmsearch'))))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(run)], capture_output=True, text=True, check=True
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
    assert (run / "best.yaml").is_file() and (run / "report.html").is_file()

    class First(Exception):
        pass

    def first(cfg) -> None:
        raise First

    monkeypatch.setattr(runner, "load_the_end", first)
    monkeypatch.setattr(runner, "_calibrate_peak", lambda *a: pytest.fail("a step before it"))
    with pytest.raises(First):
        runner._execute(Path("run"), None, None, "", None, {}, print)


def test_a_requeued_slurm_job_marks_what_its_driver_left_running_preempted(monkeypatch) -> None:
    """Under load Slurm's SIGKILL (KillWait after the SIGTERM) could end the driver before its
    own mark, and the requeued trial read "interrupted": the requeued job's resume marks it."""
    from tlmsearch.search.attrs import PREEMPTED
    from tlmsearch.search.runner import mark_if_requeued

    study = optuna.create_study()
    running, done = study.ask(), study.ask()
    study.tell(done, 1.0)
    info = {"slurm_job": "7", "slurm_restart": 0}
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "0")  # the same allocation: not requeued
    assert mark_if_requeued(study, info) == 0
    monkeypatch.setenv("SLURM_JOB_ID", "8")  # another job
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    assert mark_if_requeued(study, info) == 0
    assert PREEMPTED not in study.trials[running.number].user_attrs
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # this job, requeued once since
    assert mark_if_requeued(study, info) == 1
    assert study.trials[running.number].user_attrs[PREEMPTED] is True
    assert PREEMPTED not in study.trials[done.number].user_attrs
