"""``tlmsearch status``: counts, the best so far, running trials and the ETA, a race's lanes,
from the run's storage (safe while running, from any process).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.config.summary import effective_lr_of, learning_rate
from tlmsearch.evidence.confirm import confirm_evidences
from tlmsearch.evidence.factorial import two_by_two
from tlmsearch.evidence.stages import confirm_stage, main_stage, stage_complete
from tlmsearch.run_dir.driver import driver_gone
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
from tlmsearch.search.export import open_run, run_info
from tlmsearch.search.records import interrupted, requeued, trial_records
from tlmsearch.search.sampling.race import lanes
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.space import describe

REQUEUED = "requeued"  # counts: failed trials `resume --retry-failed` queued again


def counts(study: Any, skip: frozenset[int] = frozenset()) -> dict[str, int]:
    """Trials by state; ``interrupted`` counts runs lost to a dead driver (queued again),
    ``preempted`` those a SIGTERM stopped (to continue from their checkpoints; neither failed
    nor lost), ``requeued`` failed ones that ``resume --retry-failed`` queued again. ``skip``:
    trial numbers left out (the confirmation stage's, for the main stage's counts)."""
    out = {"COMPLETE": 0, "PRUNED": 0, "FAIL": 0, "RUNNING": 0, "WAITING": 0, INTERRUPTED: 0}
    out[REQUEUED] = out[PREEMPTED] = 0
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
    if not cfg.search.racing:
        return []
    return [
        f"{lane.candidate}: {lane.status} on {len(lane.seeds)} seed(s) {list(lane.seeds)}: "
        f"{lane.reason}"
        for lane in lanes(study, cfg)
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
    c = counts(study)
    finished = c["COMPLETE"] + c["PRUNED"] + c["FAIL"]
    planned = info.get("n_trials_planned")
    queued = max(0, planned - finished - len(running)) if planned else c["WAITING"]
    slots = int(info.get("trial_slots") or cfg.search.concurrency)
    # trials that just ended stand in for the rate of running ones without an eval yet
    recent = [r for _, r in sorted(ended, key=lambda e: e[0]) if r is not None][-slots:]
    typical = sum(recent) / len(recent) if recent else None
    rates = [r.rate for r in running if r.rate is not None]
    return {
        "trials": rows,
        "eta_s": eta.study_eta(running, queued, total, slots, typical) if going else None,
        "tokens_left": sum(max(0.0, r.total - r.tokens) for r in running) + queued * total,
        "rate": sum(rates) if rates else None,
        "queued": queued,
        "slots": slots,
    }


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

    from tlmsearch.run_dir.tables import curves_frame, trials_frame

    cfg, study = open_run(run_dir)
    if stats_from is not None:
        from tlmsearch.config.load import with_stats_from

        cfg = with_stats_from(cfg, stats_from)
    info = run_info(run_dir)
    gone = driver_gone(info, run_dir)
    if gone and info.get("status") == "running":  # nothing runs: no ETA, no running trials
        info = {**info, "status": "driver gone"}
    trials, curves = trial_records(study)
    from tlmsearch.run_dir.tables import add_deltas

    frame = add_deltas(trials_frame(trials, cfg.model), [o.metric for o in cfg.objectives])
    frame, staged = main_stage(frame), confirm_stage(frame)  # search.confirm's: judged apart
    evs = evidences(frame, cfg, curves_frame(curves))  # once per objective, read by all below
    best = best_candidates(frame, cfg, evs)
    stage_evs = confirm_evidences(staged, cfg)
    chosen = confirm.chosen(run_dir, study)
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
        "planned": info.get("n_trials_planned"),
        "counts": counts(study),
        "running": running_progress(study, cfg, info, time.time() if now is None else now),
        "best": best,
        "censored_better": censored_better(frame, cfg, evs),
        "race": race_lines(study, cfg),
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
        "label": {r["number"]: describe(r["params"]) for r in trials},
        "storage": cfg.storage,  # the study's storage section (the dashboard line)
    }
