"""Racing seeds inside a run: the driver's side of :mod:`tlmsearch.evidence.racing`.

After every trial that ends (COMPLETE, PRUNED, FAIL) the driver calls :func:`advance`: it reads
the Optuna study, asks :func:`tlmsearch.evidence.racing.race` where each candidate stands, and
enqueues the seeds that are due, with the uniform baseline of any seed that has none yet (the
baseline runs on every seed a candidate uses). A candidate the race decides (separated, tied,
stopped) is recorded in the study (``tlm_race:<candidate>``) the first time, and that decision
stands: a later look, with more data for the noise, never revisits it (the error spent over the
looks is counted once, racing.py). Everything else is a function of the stored trials, so a resumed
run calls :func:`advance` once and the race continues where it stopped; nothing is run twice
because pairs already queued, running or finished are never enqueued again.
"""

from __future__ import annotations

from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.evidence.racing import FINAL, Lane, decision, race, race_family_size
from tlmsearch.evidence.stages import main_stage
from tlmsearch.run_dir.tables import metric_column
from tlmsearch.search.attrs import CANDIDATE, RACE_DECISION, SEED
from tlmsearch.search.records import trial_records
from tlmsearch.search.sampling.samplers import _key, enqueue
from tlmsearch.widths.candidate import IDENTITY, Candidate
from tlmsearch.widths.space import UNIFORM


def lanes(study: Any, cfg: StudyConfig) -> list[Lane]:
    """Where every candidate of ``study`` stands in the race (empty without racing)."""
    return _race(study, cfg)[0]


def _pairs(study: Any, states: tuple[str, ...]) -> set[tuple[str, int]]:
    out = set()
    for ft in study.get_trials(deepcopy=False):
        a = ft.user_attrs
        if ft.state.name in states and CANDIDATE in a and SEED in a:
            out.add((_key(Candidate.from_identity(a[CANDIDATE])), int(a[SEED])))
    return out


def _race(study: Any, cfg: StudyConfig) -> tuple[list[Lane], dict[str, Candidate]]:
    from tlmsearch.run_dir.tables import trials_frame

    if cfg.search.racing is None:
        return [], {}
    rows, _ = trial_records(study)
    frame = trials_frame(rows, model=cfg.model) if rows else None
    return race_of(frame, cfg, _pairs(study, ("WAITING",)))


def race_of(
    frame: Any, cfg: StudyConfig, waiting: set[tuple[str, int]] = frozenset()
) -> tuple[list[Lane], dict[str, Candidate]]:
    """Where every candidate of a trials frame (``run_dir.tables``' columns) stands in the
    race, and its params by name; ``waiting``: the (candidate key, seed) pairs queued in the
    storage. ``tlmsearch status`` of a finished run reads its trials table (nothing queued)."""
    racing = cfg.search.racing
    if racing is None:
        return [], {}
    if frame is not None:  # the confirmation stage's seeds are no seeds of the race
        frame = main_stage(frame)
    if frame is None or frame.empty:
        return [], {}
    pairs = zip(frame["candidate"], frame[IDENTITY], strict=True)
    params = {str(c): Candidate.from_identity(p) for c, p in pairs}
    label = dict(zip(frame[IDENTITY], frame["candidate"], strict=True))  # one name each
    fresh = set(cfg.search.confirm_seeds)  # the confirmation stage's queue is not the race's
    queued = {
        (label.get(k, Candidate.from_identity(k).label), s) for k, s in waiting if s not in fresh
    }
    metric, sense = metric_column(cfg.objectives[0].metric), cfg.objectives[0].sense
    result = race(
        frame,
        metric,
        sense=sense,
        seeds=cfg.search.seeds,
        max_seeds=cfg.race_seeds,
        confidence=racing.confidence,
        against=racing.against,
        prior_sd=racing.prior_sd,
        queued=queued,
        parallel_seeds=racing.parallel_seeds,
        family_size=race_family_size(cfg),
    )
    return result, params


def advance(study: Any, cfg: StudyConfig) -> list[tuple[Candidate, int]]:
    """Enqueue every (candidate, seed) the race says is due, and its seed's baseline."""
    lanes_, params = _race(study, cfg)
    due: list[tuple[Candidate, int]] = []
    recorded = study.user_attrs  # one read of the storage, not one per lane
    for lane in lanes_:
        name = RACE_DECISION + _key(params[lane.candidate])
        if lane.status in FINAL and not recorded.get(name):
            study.set_user_attr(name, decision(lane))  # decided once: it stands from now on
        if lane.next_seed is None:
            continue
        due.append((Candidate(UNIFORM), lane.next_seed))  # the baseline first: every delta's
        due.append((params[lane.candidate], lane.next_seed))  # reference
    return enqueue_due(study, cfg, due)


def enqueue_due(
    study: Any, cfg: StudyConfig, due: list[tuple[Candidate, int]]
) -> list[tuple[Candidate, int]]:
    """Enqueue each (candidate, seed) of ``due``, in order, that is not queued, running or
    finished yet (a grid candidate with the candidates it stands for); returns those added.
    The race's seeds and the confirmation stage's (search/confirm.py) both go through here, so
    a resumed driver that calls it again never runs a pair twice."""
    known = _pairs(study, ("WAITING", "RUNNING", "COMPLETE", "PRUNED", "FAIL"))
    grid = cfg.search.sampler == "grid"
    aliases = {_key(t.candidate): t.stands_for for t in cfg.trainings()} if grid else {}
    added: list[tuple[Candidate, int]] = []
    for cand, seed in due:
        if (_key(cand), seed) not in known:
            enqueue(study, cfg, cand, seed, aliases.get(_key(cand), ()))
            known.add((_key(cand), seed))
            added.append((cand, seed))
    return added
