"""A ladder run: the study trained at every rung of proxy sizes, one ordinary run per rung.

``RUN/`` holds the ladder study (``study.yaml``, with its ``ladder:``), ``ladder.json`` (the
rungs, their overrides, the candidates promoted to each), ``run.json``, and one run dir per rung,
``RUN/rung-0/``, ``RUN/rung-1/``, ..., each made by :func:`~tlmsearch.search.runner.run_study`
on the rung's study (its own study.yaml, Optuna storage, trials, best.yaml and report). Rungs
run in order. ``ladder_mode: all`` trains every candidate at every rung; ``promote`` trains the
next rung on a grid of the ``promote_top`` candidates the rung below ranked best
(:func:`tlmsearch.stats.rank`, so a censored candidate never goes up ahead of a fully measured
one) and uniform. When the last rung is done, ``fidelity.json``
(:mod:`tlmsearch.evidence.fidelity`),
``best.yaml`` (the top rung's, with a ``fidelity:`` block) and ``report.html`` are written.
``resume_ladder`` continues the first unfinished rung and the rest.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tlmsearch.config import (
    PartialStudy,
    StudyConfig,
    load_frozen_study,
    load_study,
    name_problem,
    study_from_mapping,
)
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir
from tlmsearch.search.sampling.storage import check_names_free, storage_url
from tlmsearch.widths.candidate import IDENTITY, Candidate

LADDER_FILE = RunDir(".").ladder.name
FIDELITY_FILE = RunDir(".").fidelity.name


@dataclass
class LadderResult:
    run_dir: Path
    status: str  # finished | interrupted
    rungs: list[Any] = field(default_factory=list)  # runner.RunResult of the rungs run now
    fidelity: dict[str, Any] | None = None
    best: list[dict[str, Any]] = field(default_factory=list)


def is_ladder_run(run_dir: str | Path) -> bool:
    return RunDir(run_dir).ladder.is_file()


def rung_dir(run: Path, index: int) -> Path:
    return RunDir(run).rung(index)


def rung_study_name(run: Path, index: int) -> str:
    """The Optuna study of rung ``index``: ``<ladder run>.rung-<index>``, so the rungs of every
    ladder can share one server storage (``storage.optuna: postgresql://...``)."""
    return f"{run.resolve().name}.{rung_dir(run, index).name}"  # resolved: `resume .` too


def rung_study(
    cfg: StudyConfig, index: int, run: Path, candidates: list[dict[str, Any]] | None = None
) -> StudyConfig:
    """Rung ``index`` of a ladder study, stored under ``run``; a grid of ``candidates`` when
    given (promote mode: what the rung below ranked best), uniform first."""
    data = cfg.rung(index).to_dict()
    data["storage"] = {**data["storage"], "runs_dir": str(run)}
    if candidates is not None:
        data["search"] = {**data["search"], "sampler": "grid", "candidates": candidates}
    return study_from_mapping(data)


# -------------------------------------------------------------------------------------------------
# Compute per rung


def rung_compute(cfg: StudyConfig, trials: Any = None) -> float:
    """Training FLOPs of one training at this rung: FLOPs per token x tokens (NaN if unknown).

    From the uniform trials' recorded ``flops_per_token`` when given (every candidate has the
    uniform budget; a ``heads.share`` other than 1 under ``model.attention.hold: params`` moves
    a candidate's FLOPs off it a little, and this counts the baseline's), else from
    :mod:`tlmsearch.widths.budget` when the vocabulary is known (the baseline's model: no heads
    schedule, so ``cfg.model`` as it is).
    """
    fpt = math.nan
    if trials is not None and len(trials):
        recorded = trials.loc[trials["is_baseline"].astype(bool), "flops_per_token"].dropna()
        if len(recorded):
            fpt = float(recorded.median())
    if math.isnan(fpt):
        from tlmsearch.widths.budget import flops_per_token
        from tlmsearch.widths.schedules import uniform_widths

        vocab = cfg.vocab_size
        if vocab is None:
            return math.nan
        widths = uniform_widths(cfg.model.n_layer, cfg.model.d_ff_uniform)
        fpt = float(flops_per_token(cfg.model, widths, vocab, cfg.data.seq_len).training)
    return fpt * cfg.train.tokens


def ladder_notes(cfg: StudyConfig) -> list[str]:
    """What ``validate`` and ``run`` say about a ladder: each rung's size and compute, a warning
    where compute does not grow, and candidates a rung cannot tell apart."""
    if not cfg.ladder:
        return []
    out, prev = [], None
    for i in range(len(cfg.ladder)):
        sub = cfg.rung(i)
        c = rung_compute(sub)
        m = sub.model
        size = f"{m.n_layer} layers, d_model {m.d_model}, d_ff {m.d_ff_uniform}"
        cost = (
            "compute unknown until the data's vocabulary is read"
            if math.isnan(c)
            else (f"{c:.3g} training FLOPs per training")
        )
        out.append(f"rung {i}: {size}, {sub.train.tokens:,} tokens: {cost}")
        if prev is not None and not math.isnan(c) and not math.isnan(prev) and c <= prev:
            out.append(
                f"warning: rung {i} does not spend more compute than rung {i - 1} "
                f"({c:.3g} <= {prev:.3g}); fidelity reads the rungs as growing proxies"
            )
        prev = c
        from tlmsearch.widths.space import describe

        for t in sub.trainings():
            if t.stands_for:
                same = ", ".join(describe(c) for c in t.stands_for)
                out.append(
                    f"note: at rung {i} {same} train(s) the same proxy as {describe(t.candidate)} "
                    "(identical widths and heads): not told apart there"
                )
    mode = cfg.ladder_mode
    out.append(
        "ladder_mode all: every candidate at every rung"
        if mode == "all"
        else f"ladder_mode promote: the best {cfg.promote_top} of a rung (and uniform) go up"
    )
    return out


# -------------------------------------------------------------------------------------------------
# Running


def promoted(cfg_rung: StudyConfig, rung_run: Path, top: int) -> list[dict[str, Any]]:
    """The ``top`` best candidates of a finished rung, best first (uniform not counted).

    Ranked as the rung's :class:`tlmsearch.evidence.Evidence` ranks them on the first
    objective (best.yaml's ranking): fully measured candidates first, on their common seeds or,
    with racing, the seeds the race gave them, then censored ones (never ahead of them).
    """
    from tlmsearch.run_dir.tables import load_run
    from tlmsearch.search.best import evidences

    trials = load_run(rung_run).trials
    ev = evidences(trials, cfg_rung).get(cfg_rung.objectives[0].metric)
    if ev is None:  # a rung with no trials (or none with the metric): nothing to promote
        return []
    r = ev.ranking
    r = r[(~r["is_baseline"].astype(bool)) & r["rank"].notna()]
    return [Candidate.from_identity(k) for k in r[IDENTITY].head(top)]


def _write_ladder(run: Path, cfg: StudyConfig, promoted_to: dict[int, Any]) -> None:
    from tlmsearch.run_dir.tables import atomic_write

    doc = {
        "mode": cfg.ladder_mode,
        "promote_top": cfg.promote_top,
        "rungs": [
            {
                "index": i,
                "dir": rung_dir(run, i).name,
                "overrides": rung,
                "candidates": promoted_to.get(i),
            }
            for i, rung in enumerate(cfg.ladder or [])
        ],
    }
    text = json.dumps(doc, indent=2) + "\n"
    atomic_write(RunDir(run).ladder, lambda p: Path(p).write_text(text))


def _read_ladder(run: Path) -> dict[str, Any]:
    try:
        return json.loads(RunDir(run).ladder.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ConfigError(
            f"{RunDir(run).ladder}: not readable ({err}); is this a ladder run?"
        ) from None


def run_ladder(
    cfg: StudyConfig, *, address: str | None = None, name: str | None = None, echo: Any = print
) -> LadderResult:
    """Start a ladder run in ``runs_dir/<name>`` and climb every rung."""
    from tlmsearch.run_dir.tables import write_status

    if name is not None and name_problem(name):
        raise ConfigError(f"--name: {name!r} is invalid: {name_problem(name)}")
    run = Path(cfg.storage.runs_dir) / (name or cfg.name)
    if RunDir(run).study.exists():
        raise ConfigError(
            f"run dir {str(run)!r} exists; continue it with `tlmsearch resume {run}`, or start "
            "another with --name NEW"
        )
    for i in range(len(cfg.ladder or [])):
        rung_study(cfg, i, run)  # every rung is a valid study before anything starts
    rungs = [rung_study_name(run, i) for i in range(len(cfg.ladder or []))]
    check_names_free(cfg.storage, storage_url(cfg.storage, run), rungs)  # before any rung dir
    if name is not None:
        cfg = cfg.model_copy(update={"name": name})
    run.mkdir(parents=True, exist_ok=True)
    RunDir(run).study.write_text(cfg.to_yaml())
    _write_ladder(run, cfg, {})
    write_status(run, "running", rungs=len(cfg.ladder or []))
    return _climb(run, cfg, address=address, retry_failed=False, trust=False, echo=echo)


def resume_ladder(
    run_dir: str | Path,
    *,
    address: str | None = None,
    retry_failed: bool = False,
    trust_checkpoints: bool = False,
    echo: Any = print,
) -> LadderResult:
    """Continue a ladder run: each rung's run is resumed (finished ones are kept as they are),
    the rungs not started yet are started."""
    run = Path(run_dir)
    cfg = load_study(RunDir(run).study)
    return _climb(
        run, cfg, address=address, retry_failed=retry_failed, trust=trust_checkpoints, echo=echo
    )


def _climb(
    run: Path,
    cfg: StudyConfig,
    *,
    address: str | None,
    retry_failed: bool,
    trust: bool,
    echo: Any,
) -> LadderResult:
    from tlmsearch.run_dir.tables import write_status
    from tlmsearch.search.runner import RunFailed

    try:
        return _rungs(run, cfg, address=address, retry_failed=retry_failed, trust=trust, echo=echo)
    except RunFailed:
        write_status(run, "failed")
        raise


def _rungs(
    run: Path,
    cfg: StudyConfig,
    *,
    address: str | None,
    retry_failed: bool,
    trust: bool,
    echo: Any,
) -> LadderResult:
    from tlmsearch.run_dir.tables import write_status
    from tlmsearch.search.runner import resume_run, run_study

    state = _read_ladder(run)
    promoted_to = {r["index"]: r.get("candidates") for r in state["rungs"] if r.get("candidates")}
    results = []
    for i in range(len(cfg.ladder or [])):
        here = rung_dir(run, i)
        echo(f"ladder: rung {i} of {len(cfg.ladder or [])} in {here}")
        if RunDir(here).study.exists():
            res = resume_run(
                here,
                address=address,
                retry_failed=retry_failed,
                trust_checkpoints=trust,
                echo=echo,
            )
        else:
            cands = None
            if cfg.ladder_mode == "promote" and i > 0:
                below = rung_study(cfg, i - 1, run, promoted_to.get(i - 1))
                cands = promoted(below, rung_dir(run, i - 1), int(cfg.promote_top or 1))
                if not cands:
                    echo(f"ladder: rung {i - 1} ranked no candidate; nothing to promote")
                    break
                promoted_to[i] = cands
                _write_ladder(run, cfg, promoted_to)
                echo(f"ladder: {len(cands)} candidate(s) promoted to rung {i}")
            sub = rung_study(cfg, i, run, cands)
            res = run_study(
                sub, address=address, name=here.name, study_name=rung_study_name(run, i), echo=echo
            )
        results.append(res)
        if res.status != "finished":
            write_status(run, res.status)
            return LadderResult(run, res.status, results)
    doc = finish_ladder(run)
    write_status(run, "finished")
    return LadderResult(run, "finished", results, doc["fidelity"], doc["best"])


# -------------------------------------------------------------------------------------------------
# After the rungs: fidelity.json and best.yaml


def rung_dirs(run: Path) -> list[Path]:
    """The rung run dirs that hold trials, in rung order."""
    n = len(_read_ladder(run)["rungs"])
    return [rung_dir(run, i) for i in range(n) if RunDir(rung_dir(run, i)).study.exists()]


def ladder_fidelity(run_dir: str | Path) -> dict[str, Any]:
    """:func:`tlmsearch.evidence.fidelity.fidelity` of a ladder run's rungs, from their trials
    tables."""
    from tlmsearch.evidence import fidelity as fid
    from tlmsearch.run_dir.tables import load_run, metric_column

    run = Path(run_dir)
    if not is_ladder_run(run):
        raise ConfigError(
            f"{str(run)!r} is not a ladder run (no {LADDER_FILE}); give the run dir of a study "
            "with a ladder: (tlmsearch run makes one)"
        )
    cfg = load_frozen_study(RunDir(run).study, whole=True)
    promoted_to = [r.get("candidates") for r in _read_ladder(run)["rungs"]]
    rungs = []
    for i, d in enumerate(rung_dirs(run)):
        data = load_run(d)
        sub = data.study
        if isinstance(sub, PartialStudy):  # no whole study: its compute is unknown
            sub = load_frozen_study(RunDir(d).study, whole=True)  # raises, saying why
        by = i - 1 if promoted_to[i] else None  # its candidates: the rung below's best by rank
        rungs.append(
            fid.Rung(data.trials, rung_compute(sub, data.trials), d.name, by, data.curves)
        )
    if len(rungs) < 2:
        raise ConfigError(f"{run}: {len(rungs)} rung(s) have run; fidelity needs two")
    o = cfg.objectives[0]
    doc = fid.fidelity(
        rungs, metric_column(o.metric), o.sense, level=cfg.stats.level, family=cfg.stats.family
    )
    doc["mode"] = cfg.ladder_mode
    return doc


def write_fidelity(run_dir: str | Path) -> dict[str, Any]:
    from tlmsearch.run_dir.tables import atomic_write

    doc = ladder_fidelity(run_dir)
    text = json.dumps(doc, indent=2) + "\n"
    atomic_write(RunDir(run_dir).fidelity, lambda p: Path(p).write_text(text))
    return doc


def fidelity_block(doc: dict[str, Any]) -> dict[str, Any]:
    """best.yaml's ``fidelity:``: the measured rank agreement between the top two rungs."""
    from tlmsearch.evidence.fidelity import top_pair

    p = top_pair(doc) or {}
    return {
        "between": f"rung {p.get('lower')} and rung {p.get('upper')}" if p else None,
        "kendall_tau": p.get("kendall_tau"),
        "tau_ci95": p.get("tau_ci95"),
        "spearman_rho": p.get("spearman_rho"),
        "decision_accuracy": p.get("decision_accuracy"),
        "n_candidates": p.get("n_candidates"),
        "n_seeds": p.get("n_seeds"),
        "bootstrap_resamples": doc["bootstrap"]["resamples"],
        "distinct_resamples": p.get("distinct_resamples"),
        "conditional_on": p.get("conditional_on"),
        "statement": doc["trust"],
    }


def finish_ladder(run_dir: str | Path) -> dict[str, Any]:
    """fidelity.json and best.yaml (the top rung's best, with a fidelity: block)."""
    from tlmsearch.run_dir.tables import atomic_write

    run = Path(run_dir)
    doc = write_fidelity(run)
    top = rung_dirs(run)[-1]
    top_best = RunDir(top).best
    best = yaml.safe_load(top_best.read_text()) if top_best.exists() else {}
    best = {**(best or {}), "rung": top.name, "fidelity": fidelity_block(doc)}
    text = yaml.safe_dump(best, sort_keys=False)
    atomic_write(RunDir(run).best, lambda p: Path(p).write_text(text))
    return {"fidelity": doc, "best": best.get("best") or []}
