"""The Optuna storage of a run -> its trials / curves tables; export as CSV, parquet, YAML, hf.

The storage is the source of truth (the driver writes every eval and end state there as it
happens), so these work while a run is going and after a crash. best.yaml is
:mod:`tlmsearch.search.best`; ``tlmsearch status`` is :mod:`tlmsearch.search.status`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig, load_frozen_study, load_study
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir
from tlmsearch.search.best import write_best
from tlmsearch.search.records import trial_records
from tlmsearch.search.sampling.storage import open_storage, storage_url


def run_info(run_dir: str | Path) -> dict[str, Any]:
    path = RunDir(run_dir).status
    if not path.exists():
        return {}
    return json.loads(path.read_text())


def run_config(run_dir: str | Path, *, strict: bool = False) -> StudyConfig:
    """The run's frozen config, as every reader of a run dir takes it
    (:func:`tlmsearch.config.frozen_study`: an older version's study.yaml stays readable);
    ``strict``: with every check of a study about to train (``resume``:
    :func:`tlmsearch.config.load_study`)."""
    run = RunDir(run_dir)
    if not run.study.is_file():
        raise ConfigError(
            f"{str(run.path)!r} is not a run dir (no study.yaml); give the folder a run wrote, "
            "e.g. runs/quickstart"
        )
    return load_study(run.study) if strict else load_frozen_study(run.study, whole=True)


def open_run(run_dir: str | Path, *, strict: bool = False) -> tuple[StudyConfig, Any]:
    """The run's frozen config (:func:`run_config`) and its Optuna study (loaded, not
    created)."""
    import optuna

    run = RunDir(run_dir)
    cfg = run_config(run_dir, strict=strict)
    named = run_info(run.path).get("optuna_study")
    name = named or cfg.name
    if not isinstance(name, str):
        raise ConfigError(
            f"{run.status}: optuna_study is {name!r}, not a study name; write back the name of "
            "the run's study in its storage, or remove the key to use study.yaml's name"
        )
    storage = open_storage(storage_url(cfg.storage, run.path.resolve()))
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        where = f"the name {run.status} gives (optuna_study)" if named else "study.yaml's name"
        raise ConfigError(
            f"{run.path}: the storage has no study {name!r}, {where}; did the run start?"
        ) from None
    return cfg, study


def write_run_tables(
    run_dir: str | Path, study: Any, cfg: StudyConfig, evidences: Any = None
) -> Any:
    """Write trials/curves parquet + CSV; return them with the evidences built on the way
    (:func:`tlmsearch.run_dir.tables.write_run_tables`: pass them to ``write_best``), or
    reused from ``evidences`` (an earlier write of the same trials)."""
    from tlmsearch.run_dir.tables import write_run_tables as write

    trials, curves = trial_records(study)
    return write(run_dir, trials, curves, [o.metric for o in cfg.objectives], cfg, evidences)


def write_tables(run_dir: str | Path, study: Any, cfg: StudyConfig) -> Any:
    """Write trials/curves parquet + CSV (:func:`write_run_tables`); return the trials
    frame."""
    return write_run_tables(run_dir, study, cfg).trials


def _unstamp(run: Path) -> None:
    """Before an export rewrites a run's tables, status stops reading them in place of the
    storage where the run's end stamped another version's (their columns or values may differ
    from these). Only ever a drop: status then reads the storage, whatever runs beside it."""
    from tlmsearch.constants import VERSION
    from tlmsearch.run_dir.tables import TABLES, write_status

    stamp = run_info(run).get(TABLES)
    if isinstance(stamp, dict) and stamp.get("version") != VERSION:
        write_status(run, None, **{TABLES: None})


def export_run(run_dir: str | Path, fmt: str, out: str | Path | None = None) -> list[Path]:
    """Refresh the tables from storage and write them as csv, parquet, yaml (best.yaml) or hf
    (a Hugging Face folder of the best target, RUN/hf or OUT: tlmsearch/models/hf_export.py)."""
    if fmt not in ("csv", "parquet", "yaml", "hf"):
        raise ConfigError(f"--format: {fmt!r} is not one of csv, parquet, yaml, hf")
    cfg, study = open_run(run_dir)
    run = Path(run_dir)
    _unstamp(run)  # before the tables change
    written = write_run_tables(run, study, cfg)
    tdf, evs = written.trials, written.evidences
    if fmt == "hf":
        from tlmsearch.models.hf_export import export_best

        return export_best(run, cfg, write_best(run, tdf, cfg, evs), out)["files"]
    if fmt == "yaml":
        write_best(run, tdf, cfg, evs)
        files = [RunDir(run).best]
    else:
        files = [RunDir(run).table("trials", fmt), RunDir(run).table("curves", fmt)]
    if out is not None:
        import shutil

        dest = Path(out)
        dest.mkdir(parents=True, exist_ok=True)
        files = [Path(shutil.copy2(f, dest / f.name)) for f in files]
    return files
