"""The run dir's tables: trial and curve records in, normalised parquet + CSV out, and back.

``write_results(run_dir, trials, curves)`` turns lists of dicts (one per trial, one per eval) into
the columns of ``docs/run_dir.md`` (missing ones NaN or empty), computes each objective's
``delta_<metric>`` against the uniform baseline of the same seed, and writes ``trials.parquet``,
``trials.csv``, ``curves.parquet`` and ``curves.csv`` atomically (a temp file, then
``os.replace``), so a report or dashboard reading mid-run never sees half a file.
``load_run(run_dir)`` reads it all back as a :class:`RunData`.

Import-light on purpose (pandas, pyarrow, yaml; no torch, no ray): reports run on a laptop with
only a copy of the run dir.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> _ = write_results(d, [{"trial_id": "t0", "params": {"shape": "uniform"}, "val_bpb": 1.5}], [])
>>> row = load_run(d).trials.iloc[0]
>>> row["candidate"], bool(row["is_baseline"]), float(row["val_bpb"]), row["state"]
('uniform', True, 1.5, 'COMPLETE')
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd
import yaml

from tlmsearch import stats
from tlmsearch.config import (
    EVAL_KEYS,
    ModelConfig,
    PartialStudy,
    StudyConfig,
    frozen_study,
)
from tlmsearch.constants import VERSION
from tlmsearch.errors import ConfigError
from tlmsearch.metrics import metric_column, objectives_of
from tlmsearch.run_dir import MARKERS, RunDir
from tlmsearch.widths.candidate import IDENTITY, Candidate
from tlmsearch.widths.profiles import LAYERED, QUANTITIES

STATES = ("COMPLETE", "PRUNED", "FAIL", "RUNNING")

# Column -> kind, in the order of docs/run_dir.md. Kinds: str (missing ""), int (nullable
# Int64, missing <NA>), float (missing NaN), bool (missing False).
TRIAL_COLUMNS: dict[str, str] = {
    "trial_id": "str",
    "number": "int",
    "seed": "int",
    "candidate": "str",
    IDENTITY: "str",
    "schedule": "str",
    "setting": "str",
    "shape": "str",
    "r_start": "float",
    "r_end": "float",
    "realised_start": "float",
    "realised_end": "float",
    "taper": "float",
    "realised_taper": "float",
    LAYERED["mlp"].column: "str",  # widths_json
    LAYERED["heads"].column: "str",  # heads_json
    "heads_shape": "str",
    "heads_share": "float",
    # each depth profile's per-layer multipliers (lr_profile_json: widths/profiles.py)
    **{e.column: "str" for e in LAYERED.values() if e.name in QUANTITIES},
    "stands_for": "str",
    "same_as": "int",
    "is_baseline": "bool",
    "unpruned": "bool",
    "stage": "str",  # "confirm": a trial of the confirmation stage (search.confirm); else ""
    "state": "str",
    "reason": "str",
    "retries": "int",
    "tokens": "int",
    "val_bpb": "float",
    "val_loss": "float",
    "val_ppl": "float",
    "val_bpb_raw": "float",
    "val_loss_raw": "float",
    "train_loss": "float",
    "tokens_per_s": "float",
    "mfu": "float",
    "n_params": "int",
    "n_params_nonemb": "int",
    "flops_per_token": "int",
    "wall_s": "float",
    "node": "str",
    "weights": "str",
    "race_decision": "str",
}
CURVE_COLUMNS: dict[str, str] = {
    "trial_id": "str",
    "seed": "int",
    **{key: "int" if key == "tokens" else "float" for key in EVAL_KEYS},
}
# analysis.parquet (``tlmsearch analyze``, :mod:`tlmsearch.analysis`): one row per (kept trial,
# layer, level), level 0 except hope_attention's CMS levels.
# Which kept trial a row of either analysis table reads.
_ANALYZED_TRIAL: dict[str, str] = {
    "trial_id": "str",
    "number": "int",
    "seed": "int",
    "candidate": "str",
    "shape": "str",
    "is_baseline": "bool",
    "arch": "str",
}
ANALYSIS_COLUMNS: dict[str, str] = {
    **_ANALYZED_TRIAL,
    "layer": "int",
    "level": "int",
    "width": "int",
    "cosine": "float",
    "rel_norm": "float",
    "ablation_nats": "float",
    # the layer's attention (on its level-0 row; NA/NaN without one: hf, plugins, titans alone)
    "heads": "int",
    "kv_heads": "int",
    "attn_entropy_nats": "float",
    "attn_entropy_min_nats": "float",
    "attn_entropy_max_nats": "float",
    "attn_ablation_nats": "float",
    "val_loss": "float",
    "val_tokens": "int",
}
# analysis_heads.parquet (``tlmsearch analyze``): one row per (kept trial, layer, query head).
ANALYSIS_HEAD_COLUMNS: dict[str, str] = {
    **_ANALYZED_TRIAL,
    "layer": "int",
    "head": "int",
    "kv_head": "int",
    "entropy_nats": "float",
    "ablation_nats": "float",  # NaN: the model had more heads than analyze's cap
    "val_tokens": "int",
}


@dataclass(frozen=True)
class RunData:
    """Everything a report needs, read from one run dir."""

    path: Path
    # study.yaml as the run wrote it, shown in the report; every setting is read from ``study``
    config: dict[str, Any] = field(default_factory=dict)
    trials: pd.DataFrame = field(default_factory=lambda: trials_frame([]))
    curves: pd.DataFrame = field(default_factory=lambda: curves_frame([]))
    status: dict[str, Any] = field(default_factory=dict)  # run.json
    # analysis.parquet (``tlmsearch analyze``); empty when the run has not been analysed
    analysis: pd.DataFrame = field(default_factory=lambda: analysis_frame([]))
    # analysis_heads.parquet: per attention head (``tlmsearch analyze``); empty likewise
    analysis_heads: pd.DataFrame = field(default_factory=lambda: analysis_heads_frame([]))
    # study.yaml validated once (tlmsearch.config.frozen_study): what every reader takes
    study: StudyConfig = field(default_factory=PartialStudy)

    @property
    def name(self) -> str:
        return str(self.study.name or self.path.name)

    @property
    def objectives(self) -> list[tuple[str, str]]:
        return objectives_of(self.study)


# -------------------------------------------------------------------------------------------------
# Normalising


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def _derive(rec: Mapping[str, Any]) -> dict[str, Any]:
    """Fill columns that follow from ``params`` / ``widths`` / ``heads`` when the record lacks
    them."""
    from tlmsearch.widths.heads import heads_schedule
    from tlmsearch.widths.schedules import SHAPES
    from tlmsearch.widths.space import (
        describe,
        is_baseline,
        schedule_of,
        setting_label,
        taper_strength,
    )

    row = dict(rec)
    params = row.pop("params", None)
    if params is None and row.get(IDENTITY):
        params = json.loads(row[IDENTITY])
    if isinstance(params, Mapping):
        row.setdefault(IDENTITY, Candidate.of(params).identity)
        shape = params.get("shape", "uniform")
        row.setdefault("shape", shape)
        row.setdefault("candidate", describe(params))
        row.setdefault("schedule", describe(schedule_of(params)))
        row.setdefault("setting", setting_label(params, exact=True))
        # a shape this version does not know (another version's record) has no taper: NaN
        spec = SHAPES.get(shape) if isinstance(shape, str) else None
        if "taper" not in row:
            row["taper"] = taper_strength(params) if spec is not None else math.nan
        if spec is not None and spec.ratio_columns:
            rs, re_ = spec.ends_of(params)
            row.setdefault("r_start", rs)
            row.setdefault("r_end", re_)
        heads = heads_schedule(params)
        row.setdefault("heads_shape", "" if heads is None else heads.get("shape"))
        # an attention-only taper keeps uniform MLPs but is a candidate, not the baseline
        row.setdefault("is_baseline", is_baseline(params))
    # every per-layer list the record gives (widths, heads, lr_profile, ...) -> its column
    layers = {e.name: row.pop(e.record, None) for e in LAYERED.values()}
    for e in LAYERED.values():
        if layers[e.name] is not None:
            row.setdefault(e.column, e.as_json(layers[e.name]))
    widths = [int(w) for w in layers["mlp"] or ()]
    if widths and "realised_start" not in row:
        mean = sum(widths) / len(widths)  # widths keep the uniform total: mean == d_ff
        row["realised_start"] = widths[0] / mean
        row["realised_end"] = widths[-1] / mean
    if "is_baseline" not in row and row.get("shape"):  # a record without params
        row["is_baseline"] = row["shape"] == "uniform"
    return row


def _coerce(df: pd.DataFrame, columns: Mapping[str, str]) -> pd.DataFrame:
    out = pd.DataFrame(index=df.index)
    for name, kind in columns.items():
        col = df[name] if name in df else pd.Series([None] * len(df), index=df.index, dtype=object)
        if kind == "str":
            out[name] = col.map(lambda v: "" if _is_missing(v) else str(v)).astype(object)
        elif kind == "int":
            num = pd.to_numeric(col, errors="coerce")
            out[name] = num.round().astype("Int64")
        elif kind == "float":
            out[name] = pd.to_numeric(col, errors="coerce").astype("float64")
        else:
            out[name] = col.map(lambda v: False if _is_missing(v) else bool(v)).astype(bool)
    extra = [c for c in df.columns if c not in columns]
    for name in extra:  # keep what the writer added (delta_*, user fields), JSON for containers
        col = df[name]
        kind = _extra_kind(name)
        if kind == "float":
            out[name] = pd.to_numeric(col, errors="coerce").astype("float64")
        elif kind == "int":
            out[name] = pd.to_numeric(col, errors="coerce").round().astype("Int64")
        elif kind == "str":
            out[name] = col.map(lambda v: "" if _is_missing(v) else str(v)).astype(object)
        elif col.map(lambda v: isinstance(v, (list, dict, tuple))).any():
            out[name] = col.map(lambda v: "" if _is_missing(v) else json.dumps(v))
        else:
            out[name] = col
    return out.reset_index(drop=True)


def _extra_kind(name: str) -> str | None:
    """The kind of a column the writer adds per objective (delta_*, effect_*), else None."""
    if name.startswith(("effect_seeds_",)):
        return "int"
    if name.startswith("effect_from_"):
        return "str"
    if name.startswith(("delta_", "effect_")):
        return "float"
    return None


def trials_frame(
    trials: Iterable[Mapping[str, Any]], model: ModelConfig | Mapping[str, Any] | None = None
) -> pd.DataFrame:
    """Trial records -> the trials table: every contract column present, typed, in order.

    A record may give ``params`` (a dict) and ``widths`` (a list) instead of its identity,
    ``widths_json``, ``candidate``, ``shape``, ``r_start``/``r_end``, ``taper``, ``realised_*``.
    ``model`` (the study's proxy model) gives the realised ratios of records without widths:
    see :func:`fill_realised`.
    """
    rows = [_derive(r) for r in trials]
    df = _coerce(pd.DataFrame(rows), TRIAL_COLUMNS)
    return fill_realised(_normalise_states(unique_labels(df)), model)


def unique_labels(trials: pd.DataFrame) -> pd.DataFrame:
    """Make ``candidate`` name one candidate: a label two candidates share is suffixed with each
    one's identity.

    ``space.describe`` rounds the ratios it prints, so r_start 1.2500001 and 1.2500002 (a
    continuous sampler) share "cosine 1.25->0.75"; keyed by that label the statistics would
    pool two candidates' seeds as if they were one.

    >>> t = pd.DataFrame({"candidate": ["c 1.25", "c 1.25", "u"],
    ...                   IDENTITY: ['{"r": 1.2501}', '{"r": 1.2502}', "{}"]})
    >>> unique_labels(t)["candidate"].tolist()
    ['c 1.25 {"r": 1.2501}', 'c 1.25 {"r": 1.2502}', 'u']
    """
    if trials.empty:
        return trials
    shared = trials.groupby("candidate")[IDENTITY].transform("nunique") > 1
    if not shared.any():
        return trials
    out = trials.copy()
    out.loc[shared, "candidate"] = out.loc[shared, "candidate"] + " " + out.loc[shared, IDENTITY]
    return out


def fill_realised(
    trials: pd.DataFrame, model: ModelConfig | Mapping[str, Any] | None = None
) -> pd.DataFrame:
    """Realised ratios (first / last width over the mean width, and ``heads_share``) where a
    trial lacks them.

    Every profile is renormalised to mean 1, so the *requested* r_start / r_end need not be
    what trained: cosine 0.5 -> 0.25 trains at about 1.31 -> 0.69; likewise a heads schedule's
    ``heads.share`` is rounded to an exactly payable heads total. A trial that recorded no
    widths (e.g. it failed before they were written) gets them from its params through the
    same exact-budget plan the trainer builds (``ModelConfig.plan``), when the study's
    ``model`` is known; otherwise they stay NaN. ``realised_taper`` is realised_start -
    realised_end.
    """
    out = trials.copy()
    known = out[IDENTITY] != ""
    missing = (out["realised_start"].isna() | out["heads_share"].isna()) & known
    planner = _planner(model) if missing.any() else None
    if planner is not None:
        for i in out.index[missing]:
            realised = planner(out.at[i, IDENTITY])
            if realised is None:
                continue
            if pd.isna(out.at[i, "realised_start"]):
                out.at[i, "realised_start"], out.at[i, "realised_end"] = realised[:2]
            if pd.isna(out.at[i, "heads_share"]):
                out.at[i, "heads_share"] = realised[2]
    taper = out["realised_start"] - out["realised_end"]
    out["realised_taper"] = out["realised_taper"].where(out["realised_taper"].notna(), taper)
    return out


def _planner(model: ModelConfig | Mapping[str, Any] | None) -> Any:
    """identity -> (realised_start, realised_end, heads_share) of ``model``'s plan, or None
    (no valid model)."""
    if model is None:
        return None
    try:
        cfg = model if isinstance(model, ModelConfig) else ModelConfig(**dict(model))
    except (TypeError, ValueError):  # a hand-written study.yaml: no fallback, the ratios stay NaN
        return None

    @functools.cache  # every seed of a candidate plans the same
    def realised(identity: str) -> tuple[float, float, float] | None:
        try:
            plan = cfg.plan(Candidate.from_identity(identity))
        except (TypeError, ValueError):  # ScheduleError: this candidate has no widths at all
            return None
        return plan.realised_start, plan.realised_end, plan.heads_share

    return realised


def _normalise_states(df: pd.DataFrame) -> pd.DataFrame:
    """States upper-case; a record without one has finished (COMPLETE)."""
    df["state"] = df["state"].map(lambda s: s.upper() if s else "COMPLETE")
    return df


def curves_frame(curves: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Eval records -> the curves table, sorted by trial then tokens."""
    df = _coerce(pd.DataFrame(list(curves)), CURVE_COLUMNS)
    return df.sort_values(["trial_id", "tokens"], kind="stable").reset_index(drop=True)


def analysis_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Per-layer diagnostic records -> the analysis table, sorted by trial number, layer, level."""
    df = _coerce(pd.DataFrame(list(rows)), ANALYSIS_COLUMNS)
    return df.sort_values(["number", "layer", "level"], kind="stable").reset_index(drop=True)


def analysis_heads_frame(rows: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Per-head attention records -> the heads table, sorted by trial number, layer, head."""
    df = _coerce(pd.DataFrame(list(rows)), ANALYSIS_HEAD_COLUMNS)
    return df.sort_values(["number", "layer", "head"], kind="stable").reset_index(drop=True)


def add_deltas(trials: pd.DataFrame, metrics: Sequence[str]) -> pd.DataFrame:
    """Add ``delta_<metric>``: value minus the mean of the same seed's COMPLETE uniform trials.

    Paired by seed because within a seed every candidate sees the same data order and init
    (:func:`tlmsearch.stats.baseline_by_seed`). NaN where a seed has no finished baseline, the
    trial has no value, or the trial did not complete: a pruned trial's last value was taken
    at fewer tokens than the baseline's, so their difference is no effect.
    """
    out = trials.copy()
    done = out["state"] == "COMPLETE"
    seeds = pd.to_numeric(out["seed"], errors="coerce").astype("float64")
    for metric in metrics:
        col = metric_column(metric)
        if col not in out:
            continue
        values = pd.to_numeric(out[col], errors="coerce").astype("float64")
        base = pd.Series(np.nan, index=out.index, dtype="float64")
        # a study with setting dimensions (train.lr) has a uniform per setting and seed
        groups = out.groupby("setting").groups if "setting" in out else {"": out.index}
        for rows in groups.values():
            ref = stats.baseline_by_seed(out.loc[rows], col)
            ref.index = ref.index.astype("float64")
            base.loc[rows] = seeds.loc[rows].map(ref)
        out[f"delta_{metric}"] = (values - base).where(done).astype("float64")
    return out


# A candidate's paired effect vs uniform, per objective metric, on each of its trials' rows
# (tlmsearch.stats.effects, the block-design noise): column prefix -> stats.effects column.
EFFECT_PREFIXES = {
    "effect_": "mean_delta",
    "effect_lo_": "lo",
    "effect_hi_": "hi",
    "effect_noise_": "effect_noise",
    "effect_seeds_": "n",
    "effect_from_": "noise",
}


def add_effects(
    trials: pd.DataFrame,
    metrics: Sequence[str],
    study: StudyConfig | None = None,
    evidences: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """Add each trial's *candidate's* paired effect vs uniform, for each objective metric.

    Every number is the study's :class:`tlmsearch.evidence.Evidence` of that metric (its
    ``stats`` level and family, its race, each setting's own noise), keyed by the candidate's
    exact parameters. Columns (``m`` the metric): ``effect_m`` (mean paired delta over its
    paired seeds), ``effect_lo_m`` / ``effect_hi_m`` (its interval at ``stats.level``),
    ``effect_noise_m`` (mean / seed noise), ``effect_seeds_m`` (paired seeds) and
    ``effect_from_m``: ``model`` (the block-design noise of a paired delta,
    :func:`tlmsearch.stats.block_noise`) or ``unknown`` (no residual df yet). The same on every
    trial of a candidate of the main stage; NaN / ``""`` on the uniform baseline's rows and on
    the confirmation stage's (``search.confirm``: best.yaml's ``confirmation`` judges those,
    on their own seeds). ``study``: the run's
    (its objectives give each metric's sense; None: the models' defaults). ``evidences``:
    :func:`tlmsearch.evidence.study_evidences` of ``trials``, when the caller built them.
    """
    from tlmsearch.evidence import study_evidences
    from tlmsearch.evidence.stages import is_confirm

    out = trials.copy()
    main = ~is_confirm(out)
    study = study if study is not None else PartialStudy()
    if evidences is None:
        evidences = study_evidences(out, study, metrics)
    for metric in metrics:
        col = metric_column(metric)
        if col not in out:
            continue
        if out.empty:
            eff = pd.DataFrame(columns=[IDENTITY, *EFFECT_PREFIXES.values()])
        else:
            eff = evidences[metric].effects
        eff = eff.set_index(IDENTITY)
        for prefix, src in EFFECT_PREFIXES.items():
            values = out[IDENTITY].map(eff[src]) if len(eff) else pd.Series(index=out.index)
            values = values.where(main)  # the main stage's effect: not a stage row's
            if prefix == "effect_from_":
                out[prefix + metric] = values.astype(object).where(values.notna(), "")
            elif prefix == "effect_seeds_":
                out[prefix + metric] = pd.to_numeric(values).astype("Int64")
            else:
                out[prefix + metric] = pd.to_numeric(values).astype("float64")
    return out


# -------------------------------------------------------------------------------------------------
# Writing and reading


def atomic_write(path: Path, write: Any) -> None:
    """Write through a temp file in the same folder, then rename over ``path``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        # mkstemp makes 0600 files; a run dir on shared storage must be readable like any other
        # file the user writes, so apply the umask's usual mode.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML ({err}); is this a run dir?") from None
    return data if isinstance(data, dict) else {}


class RunTables(NamedTuple):
    """What :func:`write_run_tables` wrote, and the evidence it built on the way."""

    trials: pd.DataFrame
    curves: pd.DataFrame
    # metric -> the study's Evidence (tlmsearch.evidence.study_evidences: keyed by identity,
    # the first objective's with the curves): best.yaml and the run's end read these
    evidences: dict[str, Any]


def write_run_tables(
    run_dir: str | Path,
    trials: Iterable[Mapping[str, Any]],
    curves: Iterable[Mapping[str, Any]],
    metrics: Sequence[str] | None = None,
    study: StudyConfig | None = None,
    evidences: Mapping[str, Any] | None = None,
) -> RunTables:
    """Normalise and write trials/curves (parquet + CSV, atomically); return both frames and
    each metric's :class:`tlmsearch.evidence.Evidence`, built once here (the effect columns
    are its numbers) for the caller to pass on (:func:`tlmsearch.search.best.write_best`).

    ``metrics`` get a ``delta_<metric>`` column; by default the study's objectives. ``study``:
    the run's, when the caller has it (else read from its study.yaml). ``evidences``: the ones
    an earlier write of the same trials built (a refresh that changed no metric, state or
    seed), else built here.
    """
    from tlmsearch.evidence import study_evidences

    run = RunDir(run_dir)
    run.path.mkdir(parents=True, exist_ok=True)
    if study is None:
        study = frozen_study(_read_yaml(run.study), str(run.study), run.path)
    if metrics is None:
        metrics = [m for m, _ in objectives_of(study)]
    tdf = add_deltas(trials_frame(trials, study.model), metrics)
    cdf = curves_frame(curves)
    evs = (
        dict(evidences)
        if evidences is not None
        else study_evidences(tdf, study, metrics, curves=cdf)
    )
    tdf = add_effects(tdf, metrics, study, evs)
    for name, df in (("trials", tdf), ("curves", cdf)):
        atomic_write(run.table(name), lambda p, df=df: df.to_parquet(p, index=False))
        atomic_write(run.table(name, "csv"), lambda p, df=df: df.to_csv(p, index=False))
    return RunTables(tdf, cdf, evs)


def write_results(
    run_dir: str | Path,
    trials: Iterable[Mapping[str, Any]],
    curves: Iterable[Mapping[str, Any]],
    metrics: Sequence[str] | None = None,
    study: StudyConfig | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`write_run_tables`, the two frames only."""
    out = write_run_tables(run_dir, trials, curves, metrics, study)
    return out.trials, out.curves


_STATUS_LOCK = threading.Lock()  # the driver's heartbeat thread writes run.json too


def write_status(run_dir: str | Path, status: str | None, **fields: Any) -> dict[str, Any]:
    """Merge ``status`` (running|finished|failed|interrupted|preempted; None: the one it has)
    and ``fields`` into run.json.

    ``started`` is set on first write, ``updated`` on every write.
    """
    path = RunDir(run_dir).status
    with _STATUS_LOCK:
        data = json.loads(path.read_text()) if path.exists() else {}
        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        data.setdefault("started", now)
        data.update(fields, updated=now)
        if status is not None or "status" not in data:
            data["status"] = status or "unknown"
        atomic_write(
            path, lambda p: Path(p).write_text(json.dumps(data, indent=2, default=str) + "\n")
        )
    return data


# run.json's record of the tables a run's end wrote from its storage (their rows, the version
# and columns that wrote them): ``tlmsearch status`` of a run that ended reads them, not the
# storage
TABLES = "tables"
ENDED = ("finished", "failed")  # run.json's status of a run whose storage no longer moves
_COLUMNS = hashlib.sha256(json.dumps([TRIAL_COLUMNS, CURVE_COLUMNS]).encode()).hexdigest()[:16]


def tables_stamp(tables: RunTables) -> dict[str, Any]:
    """What run.json records of the tables a run's end wrote (:data:`TABLES`).

    >>> stamp = tables_stamp(RunTables(trials_frame([]), curves_frame([]), {}))
    >>> sorted(stamp), stamp["trials"]
    (['columns', 'curves', 'trials', 'version'], 0)
    """
    return {
        "version": VERSION,
        "columns": _COLUMNS,
        "trials": len(tables.trials),
        "curves": len(tables.curves),
    }


def final_tables(run_dir: str | Path, info: Mapping[str, Any]) -> RunTables | None:
    """The trials and curves tables of a run that ended (``info``: its run.json), when they
    stand for its storage: the run's end wrote them (:func:`tables_stamp`) with this version,
    nothing was left running or queued, and nothing changed their rows since. None otherwise
    (read the storage). ``evidences`` is empty: the caller builds what it asks."""
    stamp, counts = info.get(TABLES), info.get("counts")
    if info.get("status") not in ENDED or not isinstance(counts, dict):
        return None
    if not all(type(n) is int for n in counts.values()) or not isinstance(stamp, dict):
        return None  # counts status prints as they are: a run.json edited by hand is not read
    if counts.get("RUNNING") or counts.get("WAITING"):
        return None
    if (stamp.get("version"), stamp.get("columns")) != (VERSION, _COLUMNS):
        return None  # another version's tables: its columns or their values may differ
    run = RunDir(run_dir)
    if not (run.table("trials").is_file() and run.table("curves").is_file()):
        return None
    trials = _normalise_states(_read_table(run, "trials", TRIAL_COLUMNS))
    curves = _read_table(run, "curves", CURVE_COLUMNS)
    if (len(trials), len(curves)) != (stamp.get("trials"), stamp.get("curves")):
        return None
    # a weights folder removed since (by hand): as the storage's records say, only while it is
    kept = [w if w and Path(w).is_dir() else "" for w in trials["weights"]]
    trials["weights"] = pd.Series(kept, index=trials.index, dtype=trials["weights"].dtype)
    return RunTables(trials, curves, {})


RENAMED = {"spared": "unpruned", "is_control": "is_baseline"}  # old column -> new, older run dirs


def _read_table(run: RunDir, name: str, columns: Mapping[str, str]) -> pd.DataFrame:
    pq, csv = run.table(name), run.table(name, "csv")
    if pq.exists():
        df = pd.read_parquet(pq)
    elif csv.exists():
        df = pd.read_csv(csv, keep_default_na=False, na_values=[""])
    else:
        df = pd.DataFrame()
    # a column a version before 0.8 wrote under its old name
    df = df.rename(columns={old: new for old, new in RENAMED.items() if new not in df})
    return _coerce(df, columns)


def load_run(run_dir: str | Path) -> RunData:
    """Read study.yaml, trials, curves, run.json and the analysis tables of a run dir (missing
    parts are empty)."""
    run = RunDir(run_dir)
    if not run.path.is_dir():
        raise ConfigError(f"run dir {str(run.path)!r} does not exist; give the folder a run wrote")
    if not run.is_run():
        raise ConfigError(
            f"{str(run.path)!r} is not a run dir: it has none of {', '.join(MARKERS)}; "
            "give the folder a run wrote, e.g. runs/quickstart"
        )
    status_path = run.status
    try:
        status = json.loads(status_path.read_text()) if status_path.exists() else {}
    except json.JSONDecodeError as err:
        raise ConfigError(f"{status_path}: not valid JSON ({err})") from None
    config = _read_yaml(run.study)
    study = frozen_study(config, str(run.study), run.path)  # once: every reader takes it
    # fill_realised: run dirs written before realised_taper, or trials that recorded no widths
    trials = fill_realised(
        _normalise_states(_read_table(run, "trials", TRIAL_COLUMNS)), study.model
    )
    curves = _read_table(run, "curves", CURVE_COLUMNS)
    return RunData(
        path=run.path,
        config=config,
        trials=trials,
        curves=curves,
        status=status,
        analysis=_read_table(run, "analysis", ANALYSIS_COLUMNS),
        analysis_heads=_read_table(run, "analysis_heads", ANALYSIS_HEAD_COLUMNS),
        study=study,
    )
