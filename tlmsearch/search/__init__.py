"""Search runs: Ray Tune executes trials that Optuna samples and prunes; storage; resume.

``run_study(cfg)`` / ``resume_run(run_dir)`` (runner), ``status_report`` (status), ``export_run``
(export). Import-light: Ray and Optuna load inside the functions that need them.
"""

from tlmsearch.search.export import export_run
from tlmsearch.search.runner import RunFailed, RunResult, resume_run, run_study
from tlmsearch.search.status import status_report

__all__ = ["RunFailed", "RunResult", "export_run", "resume_run", "run_study", "status_report"]
