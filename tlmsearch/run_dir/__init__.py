"""The run dir's layout, in one place: every file a run writes, by what it holds.

::

    RUN/
      study.yaml        the frozen study (what was run)
      run.json          status, driver, versions, counts (run_dir.tables.write_status)
      trials.parquet    one row per trial  (+ trials.csv)
      curves.parquet    one row per eval   (+ curves.csv)
      best.yaml         the verdict: best candidate(s), effects, conclusions
      unpruned.json     the candidates the pruner never stops, drawn before the first trial
                        (spared.json in run dirs before 0.8, read where unpruned.json is absent)
      confirm.json      the confirmation stage's candidates and fresh seeds (search.confirm)
      report.html       the report (tlmsearch report)
      analysis.parquet  per-layer diagnostics of kept weights (tlmsearch analyze)
      analysis_heads.parquet   per attention head (tlmsearch analyze)
      optuna.db         the Optuna storage (SQLite; optuna.journal with storage.optuna: journal)
      mlflow.db         MLflow's store when tracking.mlflow names no server
      ray/session-N/trial_X/checkpoint_K/   Ray Tune's folders, one session per run/resume
      compile-cache/    torch.compile's caches, shared by the run's trials and its resumes
      ladder.json, fidelity.json, rung-K/   a ladder: its rungs, each a run dir of its own

What each column and key means: docs/run_dir.md. A leaf (docs/contributing.md, rule 19):
pure paths, no reading or writing, so every layer can name a file without importing another.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Files a run dir can be recognised by (any one of them).
MARKERS = ("study.yaml", "trials.parquet", "trials.csv", "run.json")
SESSION = "session-"  # Ray Tune's experiment folders under ray/: session-0, session-1, ...


@dataclass(frozen=True)
class RunDir:
    """A run dir's paths. ``RunDir("runs/quickstart").best`` is its best.yaml."""

    path: Path

    def __init__(self, path: str | Path) -> None:
        object.__setattr__(self, "path", Path(path))

    def __str__(self) -> str:  # in messages: the folder, as the user gave it
        return str(self.path)

    def __fspath__(self) -> str:
        return str(self.path)

    @property
    def study(self) -> Path:
        return self.path / "study.yaml"

    @property
    def status(self) -> Path:
        return self.path / "run.json"

    @property
    def best(self) -> Path:
        return self.path / "best.yaml"

    @property
    def unpruned(self) -> Path:
        """The candidates the pruner never stops (search.unpruned_candidates), drawn at random
        before the first trial; a resume reads it back (:attr:`unpruned_before_0_8` where this
        one is absent)."""
        return self.path / "unpruned.json"

    @property
    def unpruned_before_0_8(self) -> Path:
        """Where a run dir of a version before 0.8 recorded the same draw."""
        return self.path / "spared.json"

    @property
    def confirm(self) -> Path:
        """The confirmation stage's choice (search.confirm): its candidates and fresh seeds,
        written before its first trial; a resume reads it back and never chooses again."""
        return self.path / "confirm.json"

    @property
    def report(self) -> Path:
        return self.path / "report.html"

    @property
    def analysis(self) -> Path:
        return self.path / "analysis.parquet"

    @property
    def analysis_heads(self) -> Path:
        return self.table("analysis_heads")

    @property
    def ray(self) -> Path:
        """Ray Tune's storage: one ``session-N`` folder per run or resume."""
        return self.path / "ray"

    @property
    def compile_cache(self) -> Path:
        """torch.compile's caches (TORCHINDUCTOR_CACHE_DIR): every trial of the run, on any
        node that mounts it, and every resume compiles into it and reads what the others
        compiled (docs/running.md#the-compile-cache)."""
        return self.path / "compile-cache"

    @property
    def ladder(self) -> Path:
        return self.path / "ladder.json"

    @property
    def fidelity(self) -> Path:
        return self.path / "fidelity.json"

    @property
    def optuna_sqlite(self) -> Path:
        return self.path / "optuna.db"

    @property
    def optuna_journal(self) -> Path:
        return self.path / "optuna.journal"

    @property
    def mlflow_sqlite(self) -> Path:
        return self.path / "mlflow.db"

    @property
    def tensorboard_study(self) -> Path:
        """The study's TensorBoard summary, beside the trials' event files under ray/."""
        return self.ray / "study"

    def session(self, index: int) -> str:
        """Ray Tune's experiment name of the run's ``index``-th session (0 first)."""
        return f"{SESSION}{index}"

    def table(self, name: str, fmt: str = "parquet") -> Path:
        """``trials`` or ``curves``, as parquet or csv."""
        return self.path / f"{name}.{fmt}"

    def rung(self, index: int) -> Path:
        """A ladder's rung ``index``: a run dir of its own."""
        return self.path / f"rung-{index}"

    def sessions(self) -> int:
        """How many Ray Tune sessions ran here (the next one is ``session-<that>``)."""
        return len(list(self.ray.glob(f"{SESSION}*"))) if self.ray.exists() else 0

    def trial_dirs(self) -> list[Path]:
        """Every Ray trial folder of the run, all sessions."""
        return sorted(self.ray.glob(f"{SESSION}*/trial_*"))

    def is_run(self) -> bool:
        """Whether any file a run writes is here."""
        return any((self.path / m).exists() for m in MARKERS)
