"""The confirmation stage inside a run: the driver's side of :mod:`tlmsearch.evidence.confirm`.

Once every trial of the main stage has ended, :func:`prepare` builds the main stage's evidence,
takes its ``search.confirm.top`` best fully measured candidates (:func:`tlmsearch.evidence.
confirm.choose`), records that choice in the run dir's confirm.json and the study
(:data:`~tlmsearch.search.attrs.CONFIRM_CHOICE`) before the stage's first trial, and enqueues
each of them and the uniform of its setting on the fresh seeds
(:attr:`tlmsearch.config.search.SearchConfig.confirm_seeds`) through the race's queue
(:func:`tlmsearch.search.sampling.race.enqueue_due`: a pair queued, running or finished is never
queued again). The runner then trains them in one more Ray Tune session of the same driver; their
trial config says ``stage: confirm``
(:class:`~tlmsearch.search.sampling.samplers.DefineByRunSpace`), so the pruning scheduler never
stops them. A ``tlmsearch resume`` after a kill reads the recorded choice back and finishes the
same stage: it never chooses again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir.tables import atomic_write
from tlmsearch.search.attrs import CANDIDATE, CONFIRM_CHOICE, SEED
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.space import UNIFORM

FINISHED = ("COMPLETE", "PRUNED", "FAIL")


def stage_trials(study: Any, cfg: StudyConfig) -> list[Any]:
    """The study's trials on the confirmation stage's seeds (queued ones included)."""
    seeds = set(cfg.search.confirm_seeds)
    if not seeds:
        return []
    return [
        ft
        for ft in study.get_trials(deepcopy=False)
        if CANDIDATE in ft.user_attrs and ft.user_attrs.get(SEED) in seeds
    ]


def recorded(run: str | Path | None, study: Any) -> dict[str, Any] | None:
    """The stage's choice as recorded (the run dir's confirm.json, else the study's copy);
    None before it was made."""
    path = RunDir(run).confirm if run is not None else None
    if path is not None and path.exists():
        return json.loads(path.read_text())
    held = study.user_attrs.get(CONFIRM_CHOICE)
    return json.loads(held) if held else None


def chosen(run: str | Path, study: Any = None) -> list[str] | None:
    """The stage's chosen candidates (identities) as recorded (:func:`recorded`; ``study``:
    its copy, where the run dir has none); None before the stage chose."""
    if study is None and not RunDir(run).confirm.exists():
        return None
    choice = recorded(run, study)
    return None if choice is None else [str(k) for k in choice.get("top", [])]


def owed(run: str | Path | None, study: Any, cfg: StudyConfig) -> bool:
    """Whether the stage still has work: not chosen yet, or a trial of it not finished."""
    if cfg.search.confirm is None:
        return False
    choice = recorded(run, study)
    if choice is None:
        return True
    if not choice["top"]:
        return False
    return any(ft.state.name not in FINISHED for ft in stage_trials(study, cfg)) or bool(
        _missing(study, cfg, choice)
    )


def choose_now(study: Any, cfg: StudyConfig) -> dict[str, Any]:
    """The choice, from the main stage's evidence of the first objective (never recorded
    here: :func:`prepare` writes it)."""
    from tlmsearch.evidence import study_evidences
    from tlmsearch.evidence.confirm import choose
    from tlmsearch.run_dir.tables import add_deltas, trials_frame
    from tlmsearch.search.records import trial_records

    assert cfg.search.confirm is not None
    metric = cfg.objectives[0].metric
    rows, _ = trial_records(study)
    frame = add_deltas(trials_frame(rows, cfg.model), [metric]) if rows else None
    evs = study_evidences(frame, cfg, [metric]) if frame is not None else {}
    ev = evs.get(metric)
    top = choose(ev.ranking, ev.key, cfg.search.confirm.top) if ev is not None else []
    return {
        "top": list(top),
        "labels": [ev.name(k) for k in top] if ev is not None else [],
        "seeds": cfg.search.confirm_seeds,
        "metric": metric,
        "rule": "the main stage's best ranked, fully measured candidates (never uniform)",
    }


def record(run: str | Path | None, study: Any, choice: dict[str, Any]) -> None:
    """Write the choice to the run dir's confirm.json (whole or not at all) and the study."""
    text = json.dumps(choice, indent=1, sort_keys=True) + "\n"
    if run is not None:
        atomic_write(RunDir(run).confirm, lambda tmp: Path(tmp).write_text(text))
    study.set_user_attr(CONFIRM_CHOICE, json.dumps(choice, sort_keys=True))


def _pairs(cfg: StudyConfig, choice: dict[str, Any]) -> list[tuple[Candidate, int]]:
    """Every (candidate, seed) of the stage: per fresh seed, the uniform of each chosen
    candidate's setting first (every delta's reference), then the candidates."""
    cands = [Candidate.from_identity(k) for k in choice["top"]]
    baselines: dict[str, Candidate] = {}
    for c in cands:
        baseline = Candidate({**UNIFORM, **c.settings})
        baselines.setdefault(baseline.identity, baseline)
    return [(c, int(s)) for s in choice["seeds"] for c in [*baselines.values(), *cands]]


def _missing(study: Any, cfg: StudyConfig, choice: dict[str, Any]) -> list[Any]:
    have = {(ft.user_attrs[CANDIDATE], ft.user_attrs[SEED]) for ft in stage_trials(study, cfg)}
    return [(c, s) for c, s in _pairs(cfg, choice) if (c.identity, s) not in have]


def size(run: str | Path | None, study: Any, cfg: StudyConfig) -> int:
    """The stage's trainings once chosen (its candidates and uniforms x fresh seeds), else 0."""
    choice = recorded(run, study) if cfg.search.confirm is not None else None
    return len(_pairs(cfg, choice)) if choice else 0


def prepare(run: str | Path | None, study: Any, cfg: StudyConfig, echo: Any = print) -> int:
    """Choose (once) and enqueue the stage; returns how many of its trials are left to run
    (queued, or left running by a dead driver and queued again by resume)."""
    from tlmsearch.search.sampling.race import enqueue_due

    if cfg.search.confirm is None:
        return 0
    choice = recorded(run, study)
    if choice is None:
        choice = choose_now(study, cfg)
        record(run, study, choice)  # before the stage's first trial: a resume reads it back
        names = ", ".join(choice["labels"]) or "none"
        echo(f"confirm: {names} and uniform on fresh seeds {choice['seeds']}, never pruned")
    elif study.user_attrs.get(CONFIRM_CHOICE) is None:
        record(None, study, choice)  # the run dir's record decides
    if not choice["top"]:
        echo("confirm: no fully measured candidate to confirm")
        return 0
    enqueue_due(study, cfg, _pairs(cfg, choice))
    return sum(ft.state.name == "WAITING" for ft in stage_trials(study, cfg))
