"""What a validated study plans: its candidates, the trainings they need, a candidate's own
study and target, a ladder rung's study mapping, and whether its trainings fuse into trial
arrays.

Pure functions of a :class:`~tlmsearch.config.StudyConfig` (``StudyConfig.candidates``,
``trainings``, ``for_candidate``, ``target_for`` and ``rung`` are thin methods over them), so
the config stays data. No torch, no ray.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tlmsearch.config.model import FUSABLE_ARCHS, ModelConfig
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.space import UNIFORM, is_baseline, is_flat, settings_of

if TYPE_CHECKING:  # study.py imports this module: no import back
    from tlmsearch.config.study import StudyConfig

# What a ladder rung may override: the proxy's size and how long it trains, nothing that changes
# the candidates or how they are searched and compared (pairing across rungs needs the same ones).
RUNG_SECTIONS = ("model", "train", "data")


@dataclass(frozen=True)
class Training:
    """One proxy model to train per seed: ``candidate`` and the ones with its exact widths."""

    candidate: Candidate
    stands_for: tuple[Candidate, ...]  # the other candidates with these proxy widths
    widths: tuple[int, ...]

    @property
    def all(self) -> list[Candidate]:
        return [self.candidate, *self.stands_for]


def candidates(cfg: StudyConfig) -> list[Candidate]:
    """The grid (finite space) with the uniform baseline first, or the corners (continuous)."""
    if cfg.search.candidates is not None:
        cands = [Candidate(c) for c in cfg.search.candidates]
    else:
        space = cfg.space.grid() if cfg.space.finite else cfg.space.corners()
        cands = [Candidate(c) for c in space]
    if cfg.search.baseline:
        # A candidate with a flat profile (blocks' uniform preset, linear 1 -> 1) is the
        # baseline at every scale: with the same seed it would train the same model again.
        layers = [cfg.model.n_layer] + ([cfg.target.n_layer] if cfg.target else [])
        # the uniform baseline at every setting value the candidates take (train.lr x ...):
        # a taper is compared with uniform at its own setting
        settings: list[dict[str, Any]] = []
        for c in cands:
            if settings_of(c) not in settings:
                settings.append(settings_of(c))
        baselines = [Candidate({**UNIFORM, **s}) for s in settings or [{}]]
        cands = baselines + [c for c in cands if not is_flat(c, layers)]
    return cands


def for_candidate(cfg: StudyConfig, candidate: Candidate | Mapping[str, Any]) -> StudyConfig:
    """``cfg`` as ``candidate``'s trial trains it: its settings (``train.lr``) applied, its
    heads schedule's per-layer heads and its depth profiles' per-layer multipliers
    (``train.lr_profile``)."""
    cand = Candidate.of(candidate)
    return _profiled(_with_settings(cfg, cand), cand)


def _with_settings(cfg: StudyConfig, candidate: Candidate) -> StudyConfig:
    settings = candidate.settings
    if not settings:
        return _with_heads(cfg, candidate)
    sections: dict[str, dict[str, Any]] = {}
    for name, value in settings.items():
        section, _, field = name.partition(".")
        sections.setdefault(section, {})[field] = value
    update = {}
    for section, fields in sections.items():
        current = getattr(cfg, section)
        data = {**current.model_dump(mode="json", exclude_none=True), **fields}
        update[section] = type(current).model_validate(data)
    # Only the changed sections and the study-level checks: the space (unchanged) is not
    # validated again, nor the space's other setting values against this candidate's.
    out = cfg.model_copy(update=update)
    out._check_study()
    return _with_heads(out, candidate)


def _profiled(cfg: StudyConfig, candidate: Candidate) -> StudyConfig:
    """``cfg`` with ``candidate``'s depth profiles planned over the proxy's layers into
    ``train`` (``lr_profile``, ``lr_profile_part``, ...); ``cfg`` itself without one."""
    if not candidate.profiles:
        return cfg
    update = cfg.model.plan(candidate).train_update
    if not update:
        return cfg
    data = {**cfg.train.model_dump(mode="json", exclude_none=True), **update}
    return cfg.model_copy(update={"train": type(cfg.train).model_validate(data)})


def _with_heads(cfg: StudyConfig, candidate: Candidate) -> StudyConfig:
    """``cfg`` with the model as ``candidate`` builds it: its heads schedule's per-layer heads
    (``ModelConfig.built_for``); ``cfg`` itself without one."""
    model = cfg.model.built_for(candidate)
    return cfg if model is cfg.model else cfg.model_copy(update={"model": model})


def target_for(cfg: StudyConfig, candidate: Candidate | Mapping[str, Any]) -> ModelConfig | None:
    """The target model with ``candidate``'s model settings (``model.rope_theta``) applied:
    a value found at proxy scale is the value the full-scale model is exported with."""
    cand = Candidate.of(candidate)
    fields = {
        name.partition(".")[2]: value
        for name, value in cand.settings.items()
        if name.startswith("model.")
    }
    if cfg.target is None:
        return None
    if not fields:
        return cfg.target.built_for(cand)
    data = cfg.target.model_dump(mode="json", exclude_none=True)
    return ModelConfig.model_validate({**data, **fields}).built_for(cand)


def trainings(cfg: StudyConfig) -> list[Training]:
    """:func:`candidates` grouped by their proxy width vector, in the same order.

    Candidates whose schedules round to the same proxy widths (blocks boundaries at 4 layers,
    linear 2.0/1.5 and 1.333/1.0) would train the same model on the same seed: each vector
    trains once per seed, and its trial records every candidate it stands for.
    """
    groups: dict[tuple[Any, ...], list[Candidate]] = {}
    for cand in cfg.candidates():
        groups.setdefault(cfg.model.plan(cand).key, []).append(cand)
    return [Training(cands[0], tuple(cands[1:]), key[0]) for key, cands in groups.items()]


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` merged into ``base``: nested mappings key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def rung_mapping(study: Mapping[str, Any], rung: Mapping[str, Any]) -> dict[str, Any]:
    """A ladder study's mapping -> one rung's: the rung's overrides merged in, no ladder."""
    base = {k: v for k, v in study.items() if k not in ("ladder", "ladder_mode", "promote_top")}
    return _merge(base, rung)


# Trial arrays (search/arrays/packing.py packs them; validate and the run log say which applies)

AUTO_MAX_CPU, AUTO_MAX_GPU = 4, 16  # size: auto's most members per array


def fallback(cfg: StudyConfig) -> str | None:
    """Why this study trains one process per trial although ``search.array`` asks for
    arrays; None when arrays apply (or were not asked for)."""
    if cfg.search.array is None or cfg.search.array.size == 1:
        return None
    if cfg.model.arch not in FUSABLE_ARCHS:
        return (
            f"model.arch {cfg.model.arch!r} does not fuse (trial arrays: "
            f"{', '.join(FUSABLE_ARCHS)})"
        )
    if cfg.ray.workers_per_trial > 1:
        return "ray.workers_per_trial > 1 (a trial is several processes already)"
    if cfg.tracking.enabled():
        return "experiment trackers log one run per Ray trial"
    return None


def arrays_on(cfg: StudyConfig) -> bool:
    """Whether the search packs trials into arrays."""
    array = cfg.search.array
    return array is not None and array.size != 1 and fallback(cfg) is None


def array_line(cfg: StudyConfig) -> str | None:
    """The run log's and ``validate``'s one line about arrays (None without
    ``search.array``)."""
    array = cfg.search.array
    if array is None or array.size == 1:
        return None
    why = fallback(cfg)
    if why:
        return f"trial arrays: off, one process per trial: {why}"
    if array.size == "auto":
        return (
            f"trial arrays: size auto (the trainings due over the trial slots, at most "
            f"{AUTO_MAX_CPU} a Ray trial on CPUs, {AUTO_MAX_GPU} on a GPU), fused in one "
            "process"
        )
    return f"trial arrays: up to {array.size} trainings a Ray trial, fused in one process"


def confirm_line(cfg: StudyConfig) -> str | None:
    """``validate``'s line about the confirmation stage (``search.confirm``): what it runs, on
    which fresh seeds, and the most trainings it adds; None without it."""
    confirm = cfg.search.confirm
    if confirm is None:
        return None
    k, seeds = confirm.top, cfg.search.confirm_seeds
    uniforms = k if cfg.space.settings else 1  # the uniform of each one's setting
    most = (k + uniforms) * len(seeds)
    return (
        f"confirmation stage (search.confirm): after the main stage, its best {k} "
        f"candidate{'s' * (k > 1)} and uniform train again on fresh seeds "
        f"{', '.join(map(str, seeds))}, never pruned: at most {most} trainings more "
        f"({k + uniforms} x {len(seeds)}); best.yaml's best comes from this stage"
    )


def pruner_line(cfg: StudyConfig) -> str | None:
    """``validate``'s line about the candidates the pruner may never stop
    (``search.unpruned_candidates``); None without a pruner."""
    search = cfg.search
    if search.pruner == "none":
        return None
    n = search.unpruned_candidates
    if n == 0:
        return (
            f"pruning: {search.pruner}, no candidate unpruned (search.unpruned_candidates: 0): "
            "once anything is pruned the study's noise is unknown and nothing is separated"
        )
    grid = search.sampler == "grid"
    continuous = [d for d in cfg.space.settings if not cfg.space.dimensions[d].finite]
    if not grid and continuous:
        return (
            f"pruning: {search.pruner} stops nothing: {', '.join(continuous)} is continuous, "
            "so every draw is a setting of its own, with its own uniform, and "
            f"{n} candidate{'s' * (n > 1)} of each setting are never pruned "
            "(search.unpruned_candidates); set search.pruner: none, or "
            "search.unpruned_candidates: 0 to prune (a pruned study's noise is then unknown)"
        )
    per_setting: dict[str, int] = {}
    for t in cfg.trainings() if grid else ():
        if not is_baseline(t.candidate):
            key = json.dumps(settings_of(t.candidate), sort_keys=True)
            per_setting[key] = per_setting.get(key, 0) + 1
    if grid and max(per_setting.values(), default=0) <= n:
        return (
            f"pruning: {search.pruner} stops nothing: search.unpruned_candidates ({n}) "
            "leaves every candidate of the grid unpruned"
        )
    if grid:
        return (
            f"pruning: {search.pruner}; {n} candidate{'s' * (n > 1)} of each setting, drawn "
            "at random before the first trial (the run dir's unpruned.json), are never pruned "
            "(search.unpruned_candidates): with uniform they measure the noise once "
            "anything is pruned"
        )
    return (
        f"pruning: {search.pruner}; the first {n} candidate{'s' * (n > 1)} the sampler draws "
        "at each setting (its random start) are never pruned (search.unpruned_candidates): "
        "with uniform they measure the noise once anything is pruned"
    )
