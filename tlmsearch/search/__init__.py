"""Search runs: Ray Tune executes trials that Optuna samples and prunes; storage; resume.

``run_study(cfg)`` / ``resume_run(run_dir)`` (runner), ``status_report`` / ``export_run``
(export). Import-light: Ray and Optuna load inside the functions that need them.
"""

from tlmsearch.search.export import export_run, status_report
from tlmsearch.search.runner import RunFailed, RunResult, resume_run, run_study

__all__ = ["RunFailed", "RunResult", "export_run", "resume_run", "run_study", "status_report"]
