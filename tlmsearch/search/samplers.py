"""Optuna side of a study: samplers, pruners, the define-by-run space and the trial queue.

Every Optuna trial stands for one (candidate, seed) pair. The seed is a user attribute, not a
parameter, so samplers model only the schedule; repeats are *paired*: a freshly sampled
candidate is enqueued once more for every other seed, so each seed sees the same candidates
(and, within a seed, the same data order and init). The uniform baseline is enqueued first,
once per seed, marked as a control that samplers do not learn from (:mod:`.control`); a grid
study enqueues its whole grid x seeds and never samples.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tlmsearch.config import StudyConfig
from tlmsearch.config.search import PRUNER_SPECS
from tlmsearch.constants import SAMPLER_TRIALS
from tlmsearch.errors import ConfigError
from tlmsearch.search.attrs import (
    CANDIDATE,
    CONTROL,
    ENQUEUED_FLAG,
    NUMBER,
    REPLAY,
    RESTART_OF,
    RESUME_FROM,
    RETRY_OF,
    SAME_AS,
    SAMPLED,
    SEED,
    SPARED,
    STANDS_FOR,
)
from tlmsearch.search.storage import set_user_attrs
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.space import UNIFORM, SearchSpace, is_control, settings_of


def grace_tokens(cfg: StudyConfig) -> int:
    """No pruning before this many tokens: never inside the LR warm-up (losses there mislead).

    Unset, it is the warm-up or a quarter of the run, whichever is longer: early in a run the
    curves of different width schedules cross (measured in benchmarks/search.py).
    """
    if cfg.search.grace_tokens is None:
        return max(cfg.train.warmup_tokens, cfg.train.tokens // 4)
    return max(cfg.search.grace_tokens, cfg.train.warmup_tokens)


def make_sampler(cfg: StudyConfig) -> Any:
    """The study's Optuna sampler (grid studies are fully enqueued; their sampler is unused).

    Wrapped in :class:`~tlmsearch.search.control.ControlBlindSampler`: it learns from the
    candidates only, never from the uniform baseline.
    """
    import optuna

    from tlmsearch.search.control import ControlBlindSampler

    s = cfg.search
    seed = s.sampler_seed
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
        # search.tpe_history, so an ask costs the same at 5,000 trials as at 300
        return ControlBlindSampler(inner, history=s.tpe_history)
    elif s.sampler == "gp":
        # A GP models one fixed set of dimensions: the unconditional ones (in every candidate,
        # so in the intersection space). Conditional ones (k, midpoint for sigmoid) are drawn
        # at random by design, so the warning Optuna logs for each of them says nothing new.
        inner = optuna.samplers.GPSampler(seed=seed, warn_independent_sampling=False)
    elif s.sampler == "nsga2":
        n = s.n_trials or 50
        from tlmsearch.search.nsga2 import PicklableNSGAIISampler

        inner = PicklableNSGAIISampler(seed=seed, population_size=max(2, min(50, n // 2)))
    else:
        raise AssertionError(s.sampler)  # config validation keeps us from here
    return ControlBlindSampler(inner)


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
        from tlmsearch.search.wilcoxon import AfterGraceWilcoxonPruner

        return AfterGraceWilcoxonPruner(grace, **opts)


def _paired(cfg: StudyConfig, grace: int, opts: dict[str, Any]) -> Any:
    from tlmsearch.search.paired_pruner import PairedPruner

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


def searchable(space: SearchSpace, candidate: Mapping[str, Any]) -> dict[str, Any]:
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


def _key(candidate: Mapping[str, Any]) -> str:
    return Candidate.of(candidate).identity


def initial_queue(cfg: StudyConfig) -> list[tuple[dict[str, Any], int]]:
    """(candidate, seed) pairs enqueued before sampling: the baseline per seed, then the grid.

    A grid study lists every distinct proxy width vector (:meth:`StudyConfig.trainings`) for
    every seed, seed-major so that early results already compare candidates on one seed.
    """
    queue: list[tuple[dict[str, Any], int]] = []
    # a race starts every candidate on the first seed; the race adds the others (search/race.py)
    seeds = cfg.search.seeds[:1] if cfg.search.racing else cfg.search.seeds
    if cfg.search.sampler == "grid":
        for seed in seeds:
            queue += [(t.candidate, seed) for t in cfg.trainings()]
    elif cfg.search.baseline and not cfg.space.settings:
        queue += [(dict(UNIFORM), seed) for seed in seeds]
    # a sampled space with setting dimensions gets uniform at each setting value it samples
    # (SpaceFn): a continuous train.lr has no list of values to enqueue up front
    return queue


def planned_trials(cfg: StudyConfig) -> int:
    """Trials the study runs in all: (distinct proxy width vectors, baseline included) x seeds.

    With racing, the most it can run (every candidate on max_seeds): the race stops earlier.
    With setting dimensions and a sampler, the most it can run: every sample may need uniform
    at a setting value not drawn before (:meth:`SpaceFn._control_at`); the search ends when
    nothing is queued or left to sample (:func:`open_ended`).
    """
    n_seeds = cfg.race_seeds
    if cfg.search.sampler == "grid":
        return len(cfg.trainings()) * n_seeds
    from tlmsearch.evidence.power import controls

    return ((cfg.search.n_trials or SAMPLER_TRIALS) + controls(cfg)) * n_seeds


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
    candidate: Mapping[str, Any],
    seed: int,
    stands_for: Sequence[Mapping[str, Any]] = (),
    retry_of: int | None = None,
    resume_from: str | None = None,
    restart_of: int | None = None,
) -> None:
    """Put one (candidate, seed) in the study's queue, with the candidates it stands for.

    The uniform baseline is a control (samplers never learn from it, see search/control.py).
    ``retry_of``: the number of a failed trial this one runs again (a finished trial cannot be
    marked, so the new one names it); ``restart_of``: likewise, an interrupted one (its driver
    died). ``resume_from``: a checkpoint folder to continue from.
    """
    attrs: dict[str, Any] = {SEED: seed, CANDIDATE: _key(candidate)}
    if retry_of is not None:
        attrs[RETRY_OF] = retry_of
    if restart_of is not None:
        attrs[RESTART_OF] = restart_of
    if resume_from is not None:
        attrs[RESUME_FROM] = resume_from
    if is_control(candidate):  # at any setting (train.lr): each has its own
        attrs[CONTROL] = True
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


class SpaceFn:
    """Ray's define-by-run space: a queued (candidate, seed) or a fresh sample + its repeats.

    A class, not a closure: Ray pickles the searcher (and so this) into its experiment state.
    Returns the Ray trial config ``{"candidate": {...}, "seed": s}`` (the sampled parameters
    are the Optuna trial's own; the trial config holds the candidate they make).
    """

    def __init__(self, cfg: StudyConfig) -> None:
        self.space = cfg.space
        self.seeds = list(cfg.search.seeds)
        self.cfg = cfg
        self._firsts: dict[str, list[str]] = {}  # :func:`spared`'s, per setting, once found
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
        self._control_at(trial.study, cand)
        return self._config(trial, cand, seed)

    def _control_at(self, study: Any, cand: Mapping[str, Any]) -> None:
        """Enqueue uniform at ``cand``'s setting on every seed, unless it is there already: a
        candidate is compared with the uniform of its own setting (train.lr) and seed."""
        settings = settings_of(cand)
        if not settings or not self.cfg.search.baseline:
            return
        control = {**UNIFORM, **settings}
        queued = {t.user_attrs.get(CANDIDATE) for t in study.get_trials(deepcopy=False)}
        if _key(control) not in queued:
            for seed in self.seeds:
                enqueue(study, self.cfg, control, seed)

    def _config(self, trial: Any, cand: dict[str, Any], seed: int) -> dict[str, Any]:
        """The trial config; a replay of a finished twin when one trained the same model."""
        conf: dict[str, Any] = {"candidate": cand, "seed": seed, NUMBER: trial.number}
        if trial.user_attrs.get(RESUME_FROM):
            conf[RESUME_FROM] = trial.user_attrs[RESUME_FROM]
        control = trial.user_attrs.get(CONTROL)  # the baseline is one model per seed anyway
        twin = None if control else find_twin(trial.study, self.cfg, cand, seed, self._twins)
        if twin is not None:
            trial.set_user_attr(SAME_AS, twin.number)
            conf[REPLAY] = {"number": twin.number, "curve": twin.user_attrs["curve"]}
        if not control and spared(trial.study, self.cfg, cand, self._firsts):
            trial.set_user_attr(SPARED, True)
            conf[SPARED] = True
        return conf


def spared(study: Any, cfg: StudyConfig, cand: Mapping[str, Any],
           firsts: dict[str, list[str]] | None = None) -> bool:  # fmt: skip
    """Whether the pruner may never stop ``cand``: it is one of the first
    ``search.unpruned_candidates`` distinct candidates of its setting in the study's trial
    order (queued or drawn, so chosen before any of their own data; a retry or a seed repeat of
    one is one too). A race may still stop giving one seeds.

    Once a pruner stops some candidate, the candidates it left running were selected by it (a
    median-pruned null study's complete cells read its noise's variance at 0.77x the truth):
    these rows are what measures a pruned study's noise (:func:`tlmsearch.stats.row_noise`;
    1.00x the truth on average in benchmarks/stats.py). ``firsts``: a cache of each setting's
    first candidates, kept once all of them are known (a trial's number only grows), so a
    study reads its trials once per setting, not on every ask.
    """
    n = cfg.search.unpruned_candidates
    if n < 1 or cfg.search.pruner == "none" or is_control(cand):
        return False
    mine, settings = _key(cand), settings_of(cand)
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
        if is_control(other) or settings_of(other) != settings:
            continue  # uniform (queued or sampled) is the control, never a spared row
        first.append(key)
        if len(first) == n:
            break
    if firsts is not None:
        firsts[setting] = first
    return mine in first


def find_twin(study: Any, cfg: StudyConfig, cand: Mapping[str, Any], seed: int,
              index: TwinIndex | None = None) -> Any:  # fmt: skip
    """A COMPLETE trial of ``seed`` that trained ``cand``'s exact proxy widths and attention
    heads, or None.

    A sampler may draw two candidates whose schedules round to one proxy width vector (at
    small proxies it often does): with the same seed they are the same model, so the second
    replays the first's curve instead of training it again (its trial says ``same_as``). The
    same widths with other heads per layer (a heads schedule) are another model, as in
    :meth:`StudyConfig.trainings`. A twin still running is not waited for: the candidate then
    trains. ``index``: the complete trials already read, kept between calls (a complete trial
    never changes), so an ask reads each trial's attributes once, not once per ask.
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
    for ft in index.same(study, cfg, seed, widths, heads):
        try:
            if cfg.model.plan(Candidate.from_identity(ft.user_attrs.get(CANDIDATE) or "")).key \
                    == plan.key:  # fmt: skip
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

    def same(self, study: Any, cfg: StudyConfig, seed: int, widths: list[int],
             heads: list[int]) -> list[Any]:  # fmt: skip
        """The complete trials of ``seed`` with these widths and heads, in trial order."""
        import optuna

        for ft in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
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
    return (seed, None if widths is None else tuple(widths), None if heads is None else tuple(heads))
