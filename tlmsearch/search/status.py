"""``tlmsearch status``: counts, the best so far, running trials and the ETA, a race's lanes:
from the run's storage while it goes (safe from any process), from the tables its end wrote
once it ended (:func:`tlmsearch.run_dir.tables.final_tables` says when they stand for it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.config.summary import effective_lr_of, learning_rate
from tlmsearch.evidence.confirm import confirm_evidences
from tlmsearch.evidence.factorial import two_by_two
from tlmsearch.evidence.racing import Lane
from tlmsearch.evidence.stages import confirm_stage, main_stage, stage_complete
from tlmsearch.run_dir.driver import driver_gone
from tlmsearch.run_dir.tables import add_deltas, curves_frame, final_tables, trials_frame
from tlmsearch.search import confirm
from tlmsearch.search.attrs import CANDIDATE, INTERRUPTED, PREEMPTED, SEED
from tlmsearch.search.best import (
    best_candidates,
    censored_better,
    confirmation_of,
    evidences,
    first_evidence,
    study_conclusions,
)
from tlmsearch.search.export import open_run, run_config, run_info
from tlmsearch.search.records import interrupted, requeued, trial_records
from tlmsearch.search.sampling.race import lanes, race_of
from tlmsearch.search.sampling.storage import stored_trials
from tlmsearch.widths.candidate import Candidate

REQUEUED = "requeued"  # counts: failed trials `resume --retry-failed` queued again


def no_counts() -> dict[str, int]:
    """Every key of :func:`counts`, at zero.

    >>> sorted(k for k, v in no_counts().items() if v == 0)[:3]
    ['COMPLETE', 'FAIL', 'PRUNED']
    """
    states = ("COMPLETE", "PRUNED", "FAIL", "RUNNING", "WAITING")
    return dict.fromkeys((*states, INTERRUPTED, REQUEUED, PREEMPTED), 0)


def counts(study: Any, skip: frozenset[int] = frozenset()) -> dict[str, int]:
    """Trials by state; ``interrupted`` counts runs lost to a dead driver (queued again),
    ``preempted`` those a SIGTERM stopped (to continue from their checkpoints; neither failed
    nor lost), ``requeued`` failed ones that ``resume --retry-failed`` queued again. ``skip``:
    trial numbers left out (the confirmation stage's, for the main stage's counts)."""
    out = no_counts()
    again, lost = requeued(study), interrupted(study)
    for ft in study.get_trials(deepcopy=False):
        if ft.number in skip:
            continue
        stopped = ft.number in lost or ft.state.name == "RUNNING"
        if ft.user_attrs.get(PREEMPTED) and stopped:
            out[PREEMPTED] += 1
        elif ft.number in lost:
            out[INTERRUPTED] += 1
        elif ft.number in again:
            out[REQUEUED] += 1
        else:
            out[ft.state.name] = out.get(ft.state.name, 0) + 1
    return out


def race_lines(study: Any, cfg: StudyConfig) -> list[str]:
    """One line per candidate of a racing study: its seeds and why it races or stopped."""
    return lane_lines(lanes(study, cfg)) if cfg.search.racing else []


def lane_lines(raced: Sequence[Lane]) -> list[str]:
    """:func:`race_lines` of lanes the race gave.

    >>> from types import SimpleNamespace as Lane_
    >>> lane_lines([Lane_(candidate="cosine 1.5->0.5", status="racing", seeds=(0,), reason="r")])
    ['cosine 1.5->0.5: racing on 1 seed(s) [0]: r']
    """
    return [
        f"{lane.candidate}: {lane.status} on {len(lane.seeds)} seed(s) {list(lane.seeds)}: "
        f"{lane.reason}"
        for lane in raced
    ]


def _last_eval_at(ft: Any, last: Mapping[str, Any]) -> float | None:
    """When a trial's last eval reached the driver (epoch s): recorded, else start + wall_s."""
    at = ft.user_attrs.get("reported_at")
    if isinstance(at, (int, float)):
        return float(at)
    wall = last.get("wall_s")
    if ft.datetime_start is None or not isinstance(wall, (int, float)):
        return None
    return ft.datetime_start.timestamp() + float(wall)  # runs recorded before reported_at


def running_progress(
    study: Any, cfg: StudyConfig, info: Mapping[str, Any], now: float
) -> dict[str, Any]:
    """Running trials' progress and the run's ETA from the storage (safe from any process).

    ``trials``: one row per RUNNING trial (number, label, seed, tokens, total, metric, value,
    rate tokens/s, age_s of its last eval, eta_s); ``eta_s`` the run's (:func:`.eta.study_eta`;
    None unless run.json says running), with ``tokens_left``, ``rate`` (the running trials'
    tokens/s together), ``queued`` and ``slots``.
    """
    from tlmsearch.search import eta

    shown = eta.shown_metric(cfg.objectives[0].metric)
    total = cfg.train.tokens
    going = info.get("status") == "running"  # else RUNNING trials are what a stop left behind
    rows, running, ended = [], [], []
    lost = interrupted(study)
    for ft in study.get_trials(deepcopy=False):
        attrs = ft.user_attrs
        if ft.number in lost or CANDIDATE not in attrs or attrs.get(PREEMPTED):
            continue
        if ft.state.name in ("COMPLETE", "PRUNED") and ft.datetime_complete is not None:
            ended.append((ft.datetime_complete, eta.trial_rate(attrs.get("curve") or [])))
        if ft.state.name != "RUNNING":
            continue
        last = attrs.get("metrics") or {}
        at = _last_eval_at(ft, last) if last else None
        age = max(0.0, now - at) if at is not None else 0.0
        tokens = float(last.get("tokens") or 0)
        r = eta.Running(tokens, total, eta.trial_rate(attrs.get("curve") or []), age)
        running.append(r)
        rows.append(
            {
                "number": ft.number,
                "label": Candidate.from_identity(attrs[CANDIDATE]).label,
                "seed": attrs.get(SEED),
                "tokens": int(tokens),
                "total": total,
                "metric": shown,
                "value": last.get(shown),
                "rate": r.rate,
                "age_s": age if last else None,
                "eta_s": eta.trial_eta(r) if going else None,
            }
        )
    return _progress(counts(study), cfg, info, rows, running, ended)


def _progress(
    c: Mapping[str, int],
    cfg: StudyConfig,
    info: Mapping[str, Any],
    rows: Sequence[dict[str, Any]] = (),
    running: Sequence[Any] = (),
    ended: Sequence[tuple[Any, float | None]] = (),
) -> dict[str, Any]:
    """:func:`running_progress` from the counts, the running trials' rows and progress, and
    when trials ended with their rates (none of them: a run that ended)."""
    from tlmsearch.search import eta

    total = cfg.train.tokens
    going = info.get("status") == "running"
    finished = c["COMPLETE"] + c["PRUNED"] + c["FAIL"]
    planned = planned_of(info)
    queued = max(0, planned - finished - len(running)) if planned else c["WAITING"]
    slots = _whole(info.get("trial_slots"), 1) or cfg.search.concurrency
    # trials that just ended stand in for the rate of running ones without an eval yet
    recent = [r for _, r in sorted(ended, key=lambda e: e[0]) if r is not None][-slots:]
    typical = sum(recent) / len(recent) if recent else None
    rates = [r.rate for r in running if r.rate is not None]
    return {
        "trials": list(rows),
        "eta_s": eta.study_eta(running, queued, total, slots, typical) if going else None,
        "tokens_left": sum(max(0.0, r.total - r.tokens) for r in running) + queued * total,
        "rate": sum(rates) if rates else None,
        "queued": queued,
        "slots": slots,
    }


def planned_of(info: Mapping[str, Any]) -> int | None:
    """run.json's planned trials; None when it has none, or not a number (edited by hand).

    >>> planned_of({"n_trials_planned": 12}), planned_of({"n_trials_planned": "12"})
    (12, None)
    """
    return _whole(info.get("n_trials_planned"), 0)


def _whole(x: Any, least: int) -> int | None:
    """``x`` when it is a whole number (no bool) of at least ``least``, else None."""
    return x if type(x) is int and x >= least else None


def status_report(
    run_dir: str | Path, now: float | None = None, stats_from: str | Path | None = None
) -> dict[str, Any]:
    """What ``tlmsearch status`` prints: run.json, counts, best so far, running trials and the
    ETA (``now``: epoch seconds, default the clock; safe while running, from any process);
    ``stats_from``: a study YAML whose ``stats`` section asks the questions instead of the
    run's (:func:`tlmsearch.config.load.with_stats_from`; nothing is written). Its
    ``learning_rate`` has the comparison; its per-schedule ``effective_lr`` is empty (best.yaml
    has it)."""
    import time

    info = run_info(run_dir)
    gone = driver_gone(info, run_dir)
    if gone and info.get("status") == "running":  # nothing runs: no ETA, no running trials
        info = {**info, "status": "driver gone"}
    ended = final_tables(run_dir, info)
    cfg = run_config(run_dir) if ended else None
    if ended and cfg.search.confirm is not None and confirm.chosen(run_dir) is None:
        ended = None  # the stage's choice is the study's copy alone: read the storage
    if ended is None:  # from the storage (a run going, stopped, or its tables not the end's)
        cfg, study = open_run(run_dir)
        study = stored_trials(study)  # read once: every reader below reads it whole
        trials, curves = trial_records(study)
        frame = add_deltas(trials_frame(trials, cfg.model), [o.metric for o in cfg.objectives])
        curve_rows = curves_frame(curves)
        tally = counts(study)
        running = running_progress(study, cfg, info, time.time() if now is None else now)
        race = race_lines(study, cfg)
        chosen = confirm.chosen(run_dir, study)
    else:  # a run that ended: its tables, as its end wrote them (final_tables says when)
        frame, curve_rows = ended.trials, ended.curves
        tally = {**no_counts(), **info["counts"]}
        running = _progress(tally, cfg, info)
        race = lane_lines(race_of(frame, cfg)[0])
        chosen = confirm.chosen(run_dir)
    if stats_from is not None:
        from tlmsearch.config.load import with_stats_from

        cfg = with_stats_from(cfg, stats_from)
    frame, staged = main_stage(frame), confirm_stage(frame)  # search.confirm's: judged apart
    evs = evidences(frame, cfg, curve_rows)  # once per objective, read by all below
    best = best_candidates(frame, cfg, evs)
    stage_evs = confirm_evidences(staged, cfg)
    stage_ended = bool(stage_evs) and stage_complete(
        staged, cfg.search.confirm_seeds, chosen=chosen
    )
    if stage_ended:  # the best on the fresh seeds (the main stage's is conditional)
        best = [
            {**e, "confirmed_on_seeds": cfg.search.confirm_seeds}
            for e in best_candidates(staged, cfg, stage_evs)
        ]
    for entry in best:  # what the parametrization does to its layers against uniform
        entry["effective_lr"] = effective_lr_of(cfg, Candidate(entry["params"])).as_dict()
    ev = first_evidence(cfg, evs)
    said = study_conclusions(frame, cfg, evidence=ev)
    if stage_ended:  # as best.yaml: the verdict and the conclusions from the fresh seeds
        said = study_conclusions(staged, cfg, evidence=stage_evs[cfg.objectives[0].metric])
    return {
        "run": str(run_dir),
        "status": info.get("status", "unknown"),
        "driver": gone,  # the line that says the driver is gone and what to do, else None
        "planned": planned_of(info),
        "counts": tally,
        "running": running,
        "best": best,
        "censored_better": censored_better(frame, cfg, evs),
        "race": race,
        "confirmation": (
            confirmation_of(frame, staged, cfg, evs, stage_evs, chosen)
            if cfg.search.confirm
            else None
        ),
        "conclusions": said,
        "signal_to_noise": ev.snr if ev is not None else None,
        "contrasts": ev.contrasts if ev is not None else None,  # the study's questions
        "two_by_two": two_by_two(ev.contrasts if ev else None, cfg.stats.two_by_two),
        "level": cfg.stats.level,
        "learning_rate": learning_rate(frame, cfg, per_schedule=False),  # status prints less
        "updated": info.get("updated"),
        "objectives": [(o.metric, o.sense) for o in cfg.objectives],
        "storage": cfg.storage,  # the study's storage section (the dashboard line)
    }
