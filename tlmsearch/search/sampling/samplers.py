"""Optuna side of a study: samplers, pruners, the define-by-run space and the trial queue.

Every Optuna trial stands for one (candidate, seed) pair. The seed is a user attribute, not a
parameter, so samplers model only the schedule; repeats are *paired*: a freshly sampled
candidate is enqueued once more for every other seed, so each seed sees the same candidates
(and, within a seed, the same data order and init). The uniform baseline is enqueued first,
once per seed, marked as a baseline that samplers do not learn from (:mod:`.baseline`); a grid
study enqueues its whole grid x seeds and never samples.
"""

from __future__ import annotations

import json
import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.config.search import PRUNER_SPECS
from tlmsearch.constants import CONFIRM_STAGE, SAMPLER_TRIALS
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir.tables import atomic_write
from tlmsearch.search.attrs import (
    BASELINE,
    CANDIDATE,
    ENQUEUED_FLAG,
    NUMBER,
    REPLAY,
    RESTART_OF,
    RESUME_FROM,
    RETRY_OF,
    SAME_AS,
    SAMPLED,
    SEED,
    STAGE,
    STANDS_FOR,
    UNPRUNED,
    UNPRUNED_CHOICE,
)
from tlmsearch.search.sampling.storage import set_user_attrs
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.space import UNIFORM, SearchSpace


def grace_tokens(cfg: StudyConfig) -> int:
    """No pruning before this many tokens: never inside the LR warm-up (losses there mislead).

    Unset, it is the warm-up or a quarter of the run, whichever is longer: early in a run the
    curves of different width schedules cross (measured in benchmarks/search.py).
    """
    if cfg.search.grace_tokens is None:
        return max(cfg.train.warmup_tokens, cfg.train.tokens // 4)
    return max(cfg.search.grace_tokens, cfg.train.warmup_tokens)


def sampler_seed(seed: int, after: int = 0) -> int:
    """The sampler's RNG seed for a session that starts with ``after`` trials in its study:
    ``search.sampler_seed`` itself for a new study, else one derived from both. A resumed
    session seeded like the first would draw the first session's candidates again (a random
    sampler exactly, TPE's random start and its candidate draws: 20 repeated (candidate,
    seed) pairs in a 1,000-trial study killed and resumed at 511).

    >>> sampler_seed(7), sampler_seed(7, 0), sampler_seed(7, 511) == sampler_seed(7, 511)
    (7, 7, True)
    >>> sampler_seed(7, 511) != sampler_seed(7, 512)
    True
    """
    import numpy as np

    if after <= 0:
        return seed
    return int(np.random.SeedSequence([seed, after]).generate_state(1)[0])


def make_sampler(cfg: StudyConfig, after: int = 0) -> Any:
    """The study's Optuna sampler (grid studies are fully enqueued; their sampler is unused),
    for a session that starts with ``after`` trials in the study (:func:`sampler_seed`).

    Wrapped in :class:`~tlmsearch.search.sampling.baseline.BaselineBlindSampler`: it learns from
    the candidates only, never from the uniform baseline.
    """
    import optuna

    from tlmsearch.search.sampling.baseline import BaselineBlindSampler

    s = cfg.search
    seed = sampler_seed(s.sampler_seed, after)
    inner: Any
    if s.sampler in ("grid", "random"):
        inner = optuna.samplers.RandomSampler(seed=seed)
    elif s.sampler == "tpe":
        # constant_liar: with parallel trials, pending ones count as bad so workers spread out.
        # group: a space's conditional dimensions (k, midpoint only for sigmoid) form their own
        # group, modelled jointly from the trials that have them; without it multivariate TPE
        # leaves them out of its joint model and draws each one alone (Optuna's TPESampler docs).
        with warnings.catch_warnings():  # `group` is experimental in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            inner = optuna.samplers.TPESampler(
                seed=seed, multivariate=True, group=True, constant_liar=True
            )
        # its good/bad split reads its best 25 at most: those stay, the rest is the recent
        # search.tpe_history, so TPE's own cost stops growing once that window is full (the
        # pass that makes the window still reads every trial: docs/benchmarks.md)
        return BaselineBlindSampler(inner, history=s.tpe_history)
    elif s.sampler == "gp":
        # A GP models one fixed set of dimensions: the unconditional ones (in every candidate,
        # so in the intersection space). Conditional ones (k, midpoint for sigmoid) are drawn
        # at random by design, so the warning Optuna logs for each of them says nothing new.
        inner = optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    elif s.sampler == "nsga2":
        n = s.n_trials or 50
        from tlmsearch.search.sampling.nsga2 import PicklableNSGAIISampler

        inner = PicklableNSGAIISampler(seed=seed, population_size=max(2, min(50, n // 2)))
    else:
        raise AssertionError(s.sampler)  # config validation keeps us from here
    return BaselineBlindSampler(inner)


def make_pruner(cfg: StudyConfig) -> Any:
    """The study's Optuna pruner; steps are tokens seen, so warm-up and resources are tokens.

    ``search.pruner_options`` pass through (e.g. ``percentile: 25``), checked by name against
    the pruner's spec (:data:`tlmsearch.config.search.PRUNER_SPECS`); a value the pruner refuses
    is a :class:`ConfigError` naming the option (exit 2, not a traceback).
    """
    name = cfg.search.pruner
    spec = PRUNER_SPECS[name]
    opts = dict(cfg.search.pruner_options)
    bad = sorted(set(opts) - spec.options)
    if bad:
        valid = ", ".join(sorted(spec.options)) or "none"
        raise ConfigError(
            f"search.pruner_options: {bad[0]!r} is not an option of the {name} pruner; "
            f"valid: {valid}"
        )
    flags = [k for k, v in opts.items() if isinstance(v, bool)]
    if flags:
        raise ConfigError(
            f"search.pruner_options.{flags[0]}: {opts[flags[0]]!r} is a boolean; give a number"
        )
    try:
        return PRUNER_BUILDERS[name](cfg, grace_tokens(cfg), {**spec.defaults, **opts})
    except (ValueError, TypeError) as err:
        raise ConfigError(
            f"search.pruner_options: the {name} pruner refuses {opts}: {err}"
        ) from None


def _median(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    import optuna

    return optuna.pruners.MedianPruner(n_warmup_steps=grace, **opts)


def _percentile(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    import optuna

    return optuna.pruners.PercentilePruner(n_warmup_steps=grace, **opts)


def _successive_halving(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    import optuna

    return optuna.pruners.SuccessiveHalvingPruner(min_resource=max(1, grace), **opts)


def _hyperband(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    import optuna

    return optuna.pruners.HyperbandPruner(
        min_resource=max(1, grace), max_resource=cfg.train.tokens, **opts
    )


def _wilcoxon(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    import optuna

    with warnings.catch_warnings():  # experimental in Optuna: the user chose it knowingly
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        from tlmsearch.search.sampling.wilcoxon import AfterGraceWilcoxonPruner

        return AfterGraceWilcoxonPruner(grace, **opts)


def _paired(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    from tlmsearch.search.sampling.paired_pruner import PairedPruner

    return PairedPruner(grace, **opts)


def _nop(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    import optuna

    return optuna.pruners.NopPruner()


# Pruner name -> (study config, grace tokens, options with the spec's defaults) -> the pruner;
# one entry per tlmsearch.config.search.PRUNER_SPECS (tests/test_search_samplers.py).
PRUNER_BUILDERS: dict[str, Callable[[StudyConfig, int, dict[str, Any]], Any]] = {
    "median": _median,
    "percentile": _percentile,
    "successive_halving": _successive_halving,
    "hyperband": _hyperband,
    "wilcoxon": _wilcoxon,
    "paired": _paired,
    "none": _nop,
}


def searchable(space: SearchSpace, candidate: Candidate) -> dict[str, Any]:
    """The part of ``candidate`` that the space's distributions can hold (for enqueueing).

    The baseline ``{"shape": "uniform"}`` usually lies outside the space (no ``uniform``
    choice); it is then enqueued with no parameters and identified by its user attributes.
    """
    out: dict[str, Any] = {}
    for name, dim in space.dimensions.items():
        if name in candidate and dim.type == "fixed" and candidate[name] != dim.value:
            return {}  # uniform at a setting (train.lr) where the space fixes shape: cosine
        if name not in candidate or not dim.active(out) or dim.type == "fixed":
            continue
        value = candidate[name]
        if dim.type == "categorical" and value not in (dim.choices or []):
            return {}
        out[name] = value
    return out


def _key(candidate: Candidate | Mapping[str, Any]) -> str:
    """A candidate's identity, parsed from its keys where it is not one yet."""
    return Candidate.of(candidate).identity


def initial_queue(cfg: StudyConfig) -> list[tuple[Candidate, int]]:
    """(candidate, seed) pairs enqueued before sampling: the baseline per seed, then the grid.

    A grid study lists every distinct proxy width vector (:meth:`StudyConfig.trainings`) for
    every seed, seed-major so that early results already compare candidates on one seed.
    """
    queue: list[tuple[Candidate, int]] = []
    # a race starts every candidate on the first seed; the race adds the others (race.py)
    seeds = cfg.search.seeds[:1] if cfg.search.racing else cfg.search.seeds
    if cfg.search.sampler == "grid":
        for seed in seeds:
            queue += [(t.candidate, seed) for t in cfg.trainings()]
    elif cfg.search.baseline and not cfg.space.settings:
        queue += [(Candidate(UNIFORM), seed) for seed in seeds]
    # a sampled space with setting dimensions gets uniform at each setting value it samples
    # (DefineByRunSpace): a continuous train.lr has no list of values to enqueue up front
    return queue


def planned_trials(cfg: StudyConfig) -> int:
    """Trials the study runs in all: (distinct proxy width vectors, baseline included) x seeds.

    With racing, the most it can run (every candidate on max_seeds): the race stops earlier.
    With setting dimensions and a sampler, the most it can run: every sample may need uniform
    at a setting value not drawn before (:meth:`DefineByRunSpace._baseline_at`); the search ends
    when nothing is queued or left to sample (:func:`open_ended`).
    """
    n_seeds = cfg.race_seeds
    if cfg.search.sampler == "grid":
        return len(cfg.trainings()) * n_seeds
    from tlmsearch.evidence.power import baselines

    return ((cfg.search.n_trials or SAMPLER_TRIALS) + baselines(cfg)) * n_seeds


def open_ended(cfg: StudyConfig) -> bool:
    """Whether the study's number of trials is known only as an upper bound: a race adds seeds
    as it goes; a sampled space with settings adds uniform at each new setting value drawn."""
    sampled_settings = cfg.search.sampler != "grid" and bool(cfg.space.settings)
    return bool(cfg.search.racing) or sampled_settings


def may_sample(cfg: StudyConfig, study: Any) -> bool:
    """Whether the sampler may still draw a new candidate (a grid never does)."""
    if cfg.search.sampler == "grid":
        return False
    drawn = sum(1 for t in study.get_trials(deepcopy=False) if t.user_attrs.get(SAMPLED))
    return drawn < (cfg.search.n_trials or SAMPLER_TRIALS)


def enqueue(
    study: Any,
    cfg: StudyConfig,
    candidate: Candidate | Mapping[str, Any],
    seed: int,
    stands_for: Sequence[Candidate] = (),
    retry_of: int | None = None,
    resume_from: str | None = None,
    restart_of: int | None = None,
) -> None:
    """Put one (candidate, seed) in the study's queue, with the candidates it stands for.

    The uniform baseline is no sample (samplers never learn from it, see
    search/sampling/baseline.py). ``retry_of``: the number of a failed trial this one runs again (a
    finished trial cannot be marked, so the new one names it); ``restart_of``: likewise, an
    interrupted one (its driver died). ``resume_from``: a checkpoint folder to continue from.
    """
    candidate = Candidate.of(candidate)  # a caller's mapping is parsed here
    attrs: dict[str, Any] = {SEED: seed, CANDIDATE: candidate.identity}
    if retry_of is not None:
        attrs[RETRY_OF] = retry_of
    if restart_of is not None:
        attrs[RESTART_OF] = restart_of
    if resume_from is not None:
        attrs[RESUME_FROM] = resume_from
    if candidate.is_baseline:  # at any setting (train.lr): each has its own
        attrs[BASELINE] = True
    if stands_for:
        attrs[STANDS_FOR] = json.dumps([dict(c) for c in stands_for], sort_keys=True)
    study.enqueue_trial(searchable(cfg.space, candidate), user_attrs=attrs)


def write_initial_queue(study: Any, cfg: StudyConfig) -> bool:
    """Enqueue :func:`initial_queue` once per study (a resumed study keeps its queue)."""
    if study.user_attrs.get(ENQUEUED_FLAG):
        return False
    grid = cfg.search.sampler == "grid"
    aliases = {_key(t.candidate): t.stands_for for t in cfg.trainings()} if grid else {}
    for cand, seed in initial_queue(cfg):
        enqueue(study, cfg, cand, seed, aliases.get(_key(cand), ()))
    study.set_user_attr(ENQUEUED_FLAG, True)
    return True


class DefineByRunSpace:
    """Ray's define-by-run space: a queued (candidate, seed) or a fresh sample + its repeats.

    A class, not a closure: Ray pickles the searcher (and so this) into its experiment state.
    Returns the Ray trial config ``{"candidate": {...}, "seed": s}`` (the sampled parameters
    are the Optuna trial's own; the trial config holds the candidate they make).
    """

    def __init__(self, cfg: StudyConfig) -> None:
        self.space = cfg.space
        self.seeds = list(cfg.search.seeds)
        self.cfg = cfg
        self._firsts: dict[str, list[str]] = {}  # :func:`unpruned`'s, per setting, once found
        self._twins = TwinIndex()  # :func:`find_twin`'s complete trials, read once each

    def __call__(self, trial: Any) -> dict[str, Any]:
        attrs = trial.user_attrs
        if CANDIDATE in attrs:  # from the queue: baseline, grid point or a seed repeat
            cand = Candidate.from_identity(attrs[CANDIDATE])
            if searchable(self.space, cand):
                self.space.suggest(trial)  # records the fixed params as the trial's params
            return self._config(trial, cand, int(attrs[SEED]))
        cand = Candidate(self.space.suggest(trial))
        seed = self.seeds[0]
        set_user_attrs(trial, {SEED: seed, CANDIDATE: _key(cand), SAMPLED: True})
        for other in [] if self.cfg.search.racing else self.seeds[1:]:
            enqueue(trial.study, self.cfg, cand, other)
        self._baseline_at(trial.study, cand)
        return self._config(trial, cand, seed)

    def _baseline_at(self, study: Any, cand: Candidate) -> None:
        """Enqueue uniform at ``cand``'s setting on every seed, unless it is there already: a
        candidate is compared with the uniform of its own setting (train.lr) and seed."""
        settings = cand.settings
        if not settings or not self.cfg.search.baseline:
            return
        baseline = Candidate({**UNIFORM, **settings})
        queued = {t.user_attrs.get(CANDIDATE) for t in study.get_trials(deepcopy=False)}
        if _key(baseline) not in queued:
            for seed in self.seeds:
                enqueue(study, self.cfg, baseline, seed)

    def _config(self, trial: Any, cand: Candidate, seed: int) -> dict[str, Any]:
        """The trial config; a replay of a finished twin when one trained the same model."""
        conf: dict[str, Any] = {"candidate": cand, "seed": seed, NUMBER: trial.number}
        if trial.user_attrs.get(RESUME_FROM):
            conf[RESUME_FROM] = trial.user_attrs[RESUME_FROM]
        baseline = trial.user_attrs.get(BASELINE)  # the baseline is one model per seed anyway
        twin = (
            None
            if baseline
            else find_twin(trial.study, self.cfg, cand, seed, self._twins, asking=True)
        )
        if twin is not None:
            trial.set_user_attr(SAME_AS, twin.number)
            conf[REPLAY] = {"number": twin.number, "curve": twin.user_attrs["curve"]}
        if not baseline and unpruned(trial.study, self.cfg, cand, self._firsts):
            trial.set_user_attr(UNPRUNED, True)
            conf[UNPRUNED] = True
        if seed in self.cfg.search.confirm_seeds:  # the confirmation stage's: never pruned
            trial.set_user_attr(STAGE, CONFIRM_STAGE)
            conf[STAGE] = CONFIRM_STAGE
        return conf


GRID_DRAW, FIRST_DRAWN = "grid", "first_drawn"  # unpruned.json's rule


def draw_unpruned(cfg: StudyConfig) -> dict[str, Any] | None:
    """The unpruned candidates' draw, made before any data (None without a pruner or with
    ``search.unpruned_candidates: 0``).

    A grid knows its candidates up front: ``search.unpruned_candidates`` of each setting's
    trainings (uniform is the baseline, never one), drawn without replacement by a RNG seeded
    with ``search.sampler_seed``. A sampler draws its candidates as it runs, and its first
    draws are random ones (a random sampler's all; TPE's and the GP's first 10 and NSGA-II's
    first generation are drawn at random before any model): the first n distinct candidates
    it draws at each setting are unpruned, n of each setting for sure (:func:`unpruned`).

    >>> from tlmsearch.config import study_from_mapping
    >>> cfg = study_from_mapping({"name": "s", "model": {"n_layer": 4, "d_model": 32,
    ...     "n_head": 2}, "space": {"dimensions": {"shape": {"type": "fixed", "value":
    ...     "cosine"}, "r_start": {"type": "categorical", "choices": [1.5, 1.25, 0.75, 0.5]}}}})
    >>> d = draw_unpruned(cfg)
    >>> d["rule"], d["n"], len(d["by_setting"]["{}"])
    ('grid', 2, 2)
    """
    n, search = cfg.search.unpruned_candidates, cfg.search
    if n < 1 or search.pruner == "none":
        return None
    if search.sampler != "grid":
        return {"rule": FIRST_DRAWN, "seed": search.sampler_seed, "n": n}
    by: dict[str, list[str]] = {}
    for t in cfg.trainings():
        cand = Candidate.of(t.candidate)
        if not cand.is_baseline:
            by.setdefault(_setting_key(cand), []).append(cand.identity)
    rng = random.Random(search.sampler_seed)
    chosen = {s: sorted(rng.sample(keys, min(n, len(keys)))) for s, keys in sorted(by.items())}
    return {"rule": GRID_DRAW, "seed": search.sampler_seed, "n": n, "by_setting": chosen}


def record_unpruned(study: Any, cfg: StudyConfig, run: str | Path | None) -> dict[str, Any] | None:
    """The study's unpruned draw: read back from the run dir's unpruned.json (or the study) when
    one was made, else drawn now (:func:`draw_unpruned`) and written to both, before the first
    trial. Never drawn once a trial exists: a run an older version started keeps its rule (the
    first candidates of each setting in queue order), and None says so."""
    path = RunDir(run).unpruned if run is not None else None
    old = RunDir(run).unpruned_before_0_8 if run is not None else None
    held = study.user_attrs.get(UNPRUNED_CHOICE)
    if path is not None and path.exists():
        choice = json.loads(path.read_text())
    elif old is not None and old.exists():
        choice = json.loads(old.read_text())
    elif held is not None:
        choice = json.loads(held)
    elif study.get_trials(deepcopy=False):
        return None
    else:
        choice = draw_unpruned(cfg)
        if choice is None:
            return None
    if path is not None and not path.exists():  # whole or not at all: a resume reads it back
        text = json.dumps(choice, indent=1, sort_keys=True) + "\n"
        atomic_write(path, lambda tmp: Path(tmp).write_text(text))
    recorded = json.dumps(choice, sort_keys=True)
    if held != recorded:  # the run dir's record decides, and unpruned() reads the study's copy
        study.set_user_attr(UNPRUNED_CHOICE, recorded)
    return choice


def _setting_key(cand: Candidate) -> str:
    return json.dumps(cand.settings, sort_keys=True)


def unpruned(
    study: Any,
    cfg: StudyConfig,
    cand: Candidate | Mapping[str, Any],
    firsts: dict[str, list[str]] | None = None,
) -> bool:
    """Whether the pruner may never stop ``cand``: one of ``search.unpruned_candidates`` of its
    setting drawn at random before any data (:func:`record_unpruned`; a retry or a seed repeat of
    one is one too). A race may still stop giving one seeds.

    Once a pruner stops some candidate, the candidates it left running were selected by it (a
    median-pruned null study's complete cells read its noise's variance at 0.77x the truth):
    these rows are what measures a pruned study's noise (:func:`tlmsearch.stats.row_noise`;
    1.00x the truth on average in benchmarks/stats.py). Drawn at random, not the first in
    queue order, so that they stand for every candidate when noise depends on the schedule.
    A study without a recorded draw (an older version's run) keeps the first candidates of
    each setting in its trial order (:func:`_first_in_order`; ``firsts`` caches them).
    """
    n = cfg.search.unpruned_candidates
    cand = Candidate.of(cand)
    if n < 1 or cfg.search.pruner == "none" or cand.is_baseline:
        return False
    held = study.user_attrs.get(UNPRUNED_CHOICE)
    if held is None:
        return _first_in_order(study, cfg, cand, firsts)
    choice = json.loads(held)
    mine = cand.identity
    if choice.get("rule") == FIRST_DRAWN:
        return _first_in_order(study, cfg, cand, firsts)
    return mine in choice.get("by_setting", {}).get(_setting_key(cand), [])


def _first_in_order(
    study: Any, cfg: StudyConfig, cand: Candidate, firsts: dict[str, list[str]] | None
) -> bool:
    """A sampler's rule, and that of runs an older version started: ``cand`` is one of the
    first ``search.unpruned_candidates`` distinct candidates of its setting in the study's
    trial order. ``firsts``: a cache of each setting's, kept once all of them are known."""
    n = cfg.search.unpruned_candidates
    mine, settings = cand.identity, cand.settings
    setting = json.dumps(settings, sort_keys=True)
    known = (firsts or {}).get(setting)
    if known is not None and len(known) >= n:
        return mine in known
    first: list[str] = []
    for t in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number):
        key = t.user_attrs.get(CANDIDATE)
        if key is None or key in first:
            continue
        other = Candidate.from_identity(key)
        if other.is_baseline or other.settings != settings:
            continue  # uniform (queued or sampled) is the baseline, never an unpruned row
        first.append(key)
        if len(first) == n:
            break
    if firsts is not None:
        firsts[setting] = first
    return mine in first


def find_twin(
    study: Any,
    cfg: StudyConfig,
    cand: Candidate,
    seed: int,
    index: TwinIndex | None = None,
    *,
    asking: bool = False,
) -> Any:
    """A COMPLETE trial of ``seed`` that trained ``cand``'s exact proxy widths and attention
    heads, or None.

    A sampler may draw two candidates whose schedules round to one proxy width vector (at
    small proxies it often does): with the same seed they are the same model, so the second
    replays the first's curve instead of training it again (its trial says ``same_as``). The
    same widths with other heads per layer (a heads schedule) are another model, as in
    :meth:`StudyConfig.trainings`. A twin still running is not waited for: the candidate then
    trains. ``index``: the complete trials already read, kept between calls (a complete trial
    never changes), so an ask reads each trial's attributes once, not once per ask.
    ``asking``: called within the study's ask, with no trial finished since but through
    ``tell`` (:meth:`TwinIndex.same`).
    """
    from tlmsearch.widths.schedules import ScheduleError

    try:
        # the same widths at another train.lr, or with another LR or init profile, is another
        # training: the plan's key holds all of them
        plan = cfg.model.plan(cand)
    except (ScheduleError, TypeError, ValueError):
        return None  # the trainable reports why it cannot be trained
    widths, heads = list(plan.widths), list(plan.heads or cfg.model.heads)
    index = TwinIndex() if index is None else index
    for ft in index.same(study, cfg, seed, widths, heads, asking=asking):
        try:
            if (
                cfg.model.plan(Candidate.from_identity(ft.user_attrs.get(CANDIDATE) or "")).key
                == plan.key
            ):
                return ft
        except (ScheduleError, TypeError, ValueError):
            continue  # a record this version cannot plan is no twin
    return None


class TwinIndex:
    """The study's COMPLETE trials with a curve by (seed, widths, heads): what
    :func:`find_twin` compares, read once per trial."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        self._by: dict[tuple[Any, ...], list[Any]] = {}

    def same(
        self,
        study: Any,
        cfg: StudyConfig,
        seed: int,
        widths: list[int],
        heads: list[int],
        *,
        asking: bool = False,
    ) -> list[Any]:
        """The complete trials of ``seed`` with these widths and heads, in trial order.

        ``asking`` (the searcher, inside ``study.ask``): read through Optuna's per-ask cache
        (one per thread), which the sampler's one read of this ask filled: one storage read a
        trial fewer (~10 ms on SQLite). Where the sampler read none (random sampling) or read
        another study object (Hyperband's brackets), this read fills it. The driver finishes a
        trial only through ``tell``, which empties that cache as ``ask`` does; a caller that
        adds finished trials otherwise reads afresh (``asking`` False)."""
        import optuna

        complete = (optuna.trial.TrialState.COMPLETE,)
        trials = (
            study._get_trials(deepcopy=False, states=complete, use_cache=True)
            if asking
            else study.get_trials(deepcopy=False, states=complete)
        )
        for ft in trials:
            if ft.number in self._seen:
                continue
            self._seen.add(ft.number)
            a = ft.user_attrs
            if not a.get("curve"):
                continue
            # a trial recorded before trials reported heads trained the model's own
            key = _twin_key(a.get(SEED), a.get("widths"), a.get("heads", list(cfg.model.heads)))
            self._by.setdefault(key, []).append(ft)
        return sorted(self._by.get(_twin_key(seed, widths, heads), []), key=lambda t: t.number)

    def __getstate__(self) -> dict[str, Any]:
        return {}  # Ray pickles the searcher into its experiment state: rebuilt, not stored

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


def _twin_key(seed: Any, widths: Any, heads: Any) -> tuple[Any, ...]:
    return (
        seed,
        None if widths is None else tuple(widths),
        None if heads is None else tuple(heads),
    )
