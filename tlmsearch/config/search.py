"""``search``, ``objectives`` and ``stats``: how candidates are sampled, pruned, raced over seeds,
ranked and compared with uniform.

The sampler and pruner names are validated here (``search/sampling/samplers.py`` builds them); the
statistics' defaults come from :mod:`tlmsearch.constants`. Pure data: no torch, no ray, no
optuna.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from tlmsearch.config.limits import MAX_CANDIDATES, MAX_SEED, MAX_TOKENS, MAX_WORKERS
from tlmsearch.constants import FAMILIES, FAMILY, LEVEL, METRICS, SCHEDULE_FAMILIES
from tlmsearch.errors import Strict, short
from tlmsearch.widths.space import Scalar

SAMPLERS = ("grid", "random", "tpe", "gp", "nsga2")


@dataclass(frozen=True)
class PrunerSpec:
    """A pruner ``search.pruner`` names: the ``search.pruner_options`` it takes, tlmsearch's
    defaults where Optuna's do not fit a small study, and what it does. Its builder is
    ``tlmsearch.search.sampling.samplers.PRUNER_BUILDERS[name]`` (a test holds the two tables to
    the same names), so a new pruner is an entry here and a builder there."""

    name: str
    options: frozenset[str]
    doc: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


PRUNER_SPECS: dict[str, PrunerSpec] = {
    p.name: p
    for p in (
        PrunerSpec(
            "median",
            frozenset({"n_startup_trials", "n_min_trials", "interval_steps"}),
            "Optuna's median rule",
            {"n_startup_trials": 2},
        ),
        PrunerSpec(
            "percentile",
            frozenset({"percentile", "n_startup_trials", "n_min_trials", "interval_steps"}),
            "Optuna's percentile rule",
            {"percentile": 25.0, "n_startup_trials": 2},
        ),
        PrunerSpec(
            "successive_halving",
            frozenset({"reduction_factor", "min_early_stopping_rate", "bootstrap_count"}),
            "asynchronous successive halving",
            {"reduction_factor": 3},
        ),
        PrunerSpec(
            "hyperband",
            frozenset({"reduction_factor", "bootstrap_count"}),
            "Hyperband over successive halving brackets",
            {"reduction_factor": 3},
        ),
        PrunerSpec(
            "wilcoxon",
            frozenset({"p_threshold", "n_startup_steps"}),
            "Optuna's Wilcoxon test against the best, after the grace period",
        ),
        PrunerSpec(
            "paired",
            frozenset({"patience", "margin_sds", "prior_sd"}),
            "paired deltas vs the same seed's uniform (search/sampling/paired_pruner.py)",
        ),
        PrunerSpec("none", frozenset(), "never prune"),
    )
}
PRUNERS = tuple(PRUNER_SPECS)


class RacingConfig(Strict):
    """Racing seeds (tlmsearch/evidence/racing.py): a candidate gets its next seed only while its
    paired delta is not yet separated from the reference at ``confidence``."""

    max_seeds: int | None = Field(None, ge=1, le=1000)  # None: every seed of search.seeds
    confidence: float = Field(LEVEL, gt=0.5, lt=1)  # separated at this level, over every look
    # uniform: screen vs uniform; best: race the incumbent
    against: Literal["uniform", "best"] = "uniform"
    # The seed noise of paired deltas (in the objective's units) assumed until some candidate
    # has two seeds; None: nothing separates on one seed before then.
    prior_sd: float | None = Field(None, gt=0, le=1e6)
    # Seeds of one candidate that may run at once: 1 waits for each seed's verdict; more keep
    # trial slots busy when few candidates are left racing (at the risk of an unneeded seed).
    parallel_seeds: int = Field(1, ge=1, le=1000)


class ConfirmConfig(Strict):
    """The confirmation stage (tlmsearch/search/confirm.py): once every trial of the main stage
    has ended, its ``top`` best candidates and uniform train again on ``seeds`` fresh seeds, none
    of them prunable; their effects vs uniform, one family of ``top``, give best.yaml's best."""

    top: int = Field(3, ge=1, le=MAX_CANDIDATES)  # candidates confirmed: the main stage's best k
    # fresh seeds each of them and uniform train on: the first unused ones above search.seeds
    seeds: int = Field(3, ge=2, le=1000)


class ArrayConfig(Strict):
    """Trial arrays (tlmsearch/search/arrays/packing.py): due (candidate, seed) trainings of a
    fusable arch packed K to a Ray trial and trained as one fused model
    (tlmsearch/train/trial_array.py), each still its own Optuna trial."""

    # members per array: a number >= 1 (1: one process per trial, as without arrays) or auto
    # (what is due over the trial slots, at most 4 on CPUs and 16 on a GPU)
    size: Annotated[int, Field(ge=1, le=MAX_WORKERS)] | Literal["auto"] = "auto"

    @field_validator("size", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_WORKERS:
            raise ValueError(
                f"give auto or a whole number of members from 1 to {MAX_WORKERS} "
                "(1 trains one process per trial)"
            )
        return v


class SearchConfig(Strict):
    sampler: Literal[SAMPLERS] = "grid"  # grid, random, tpe, gp or nsga2 (Optuna)
    sampler_seed: int = Field(0, ge=0, le=MAX_SEED)  # the sampler's RNG seed
    # tpe: the finished trials it models, its 25 best and the last this many (an ask reads
    # every trial it models: 241 ms at 5,000 with all, 50 ms with 300, benchmarks/scale.py)
    tpe_history: int | None = Field(300, ge=1, le=MAX_CANDIDATES)
    # median, percentile, successive_halving, hyperband, wilcoxon, paired, none
    pruner: Literal[PRUNERS] = "median"
    # the pruner's settings, e.g. {patience: 3, margin_sds: 2.5}
    pruner_options: dict[str, float | int | bool] = Field(default_factory=dict)
    # Candidates the pruner never stops: this many of each setting, drawn at random before any
    # data (seeded by sampler_seed; a sampler leaves the first n it draws unpruned, its random
    # start) and recorded in the run dir's unpruned.json, trained on every seed. Once the
    # pruner stops anything, the survivors' seeds are selected (they looked good), so the
    # study's noise is measured on these rows and uniform's; 0: unknown once anything is pruned.
    unpruned_candidates: int = Field(2, ge=0, le=MAX_CANDIDATES)
    # No pruning before this many tokens (never inside the LR warm-up); default: the longer of
    # the warm-up and a quarter of train.tokens.
    grace_tokens: int | None = Field(None, ge=0, le=MAX_TOKENS)
    # candidates to sample (grid: the whole grid)
    n_trials: int | None = Field(None, ge=1, le=MAX_CANDIDATES)
    # trials at once (fewer if Ray's CPUs fit fewer)
    concurrency: int = Field(2, ge=1, le=MAX_WORKERS)
    # every candidate trains once per seed, paired
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1, max_length=1000)
    baseline: bool = True  # evaluate the uniform baseline first, once per seed
    racing: RacingConfig | None = None  # race seeds instead of running every seed
    # After the main stage: its best candidates and uniform again on fresh, unpruned seeds, e.g.
    # {top: 3, seeds: 3}; best.yaml's best then comes from them. Unset: no such stage.
    confirm: ConfirmConfig | None = None
    # Train due (candidate, seed) pairs K to a process as one fused model ({size: auto} or
    # {size: K}); unset: one process per trial. Archs that do not fuse fall back to that.
    array: ArrayConfig | None = None
    # A trial lost to the system (worker killed, node lost, out of memory) is started again this
    # many times; the uniform baseline once more. An exception or a divergence is never retried.
    max_retries: int = Field(1, ge=0, le=10)
    # sampler grid over exactly these candidates (uniform added first with baseline) instead of
    # the space's grid: what a ladder's promote mode gives an upper rung (search/ladder.py)
    candidates: list[dict[str, Scalar]] | None = Field(
        None, min_length=1, max_length=MAX_CANDIDATES
    )
    # Trained weights kept in the run dir (tlmsearch/train/checkpoints.py): none; final (every
    # completed trial's final weights); best (at the end of the run only those of the uniform
    # baseline and the best candidates); all (final weights and every intermediate checkpoint).
    keep_weights: Literal["none", "final", "best", "all"] = "none"

    @model_validator(mode="after")
    def _pruner_options(self) -> SearchConfig:
        # Checked here, not only when the pruner is built, so `validate` (which imports no
        # optuna) refuses them too; the names are checked by search/sampling/samplers.make_pruner.
        opts = self.pruner_options
        for key, v in opts.items():
            if isinstance(v, bool):
                raise ValueError(f"pruner_options.{key}: {v!r} is a boolean; give a number")
        if self.pruner == "paired":
            patience = opts.get("patience", 2)
            if int(patience) != patience or patience < 1:
                raise ValueError(
                    f"pruner_options.patience must be an integer >= 1, not {patience}"
                )
            if opts.get("margin_sds", 2.5) < 0:
                raise ValueError(
                    f"pruner_options.margin_sds must be >= 0, not {opts['margin_sds']}"
                )
            if "prior_sd" in opts and not opts["prior_sd"] > 0:
                raise ValueError(f"pruner_options.prior_sd must be > 0, not {opts['prior_sd']}")
        return self

    @field_validator("confirm")
    @classmethod
    def _confirm_means_something(
        cls, v: ConfirmConfig | None, info: ValidationInfo
    ) -> ConfirmConfig | None:
        # every field it reads comes before it, so a bad one has failed already (then absent)
        if v is None or not {"sampler", "pruner", "baseline", "seeds"} <= set(info.data):
            return v
        if info.data["sampler"] == "grid" and info.data["pruner"] == "none":
            raise ValueError(
                "a grid without a pruner has nothing to confirm (every candidate ran every "
                "seed, nothing selected which); remove search.confirm, or set search.pruner "
                "or a sampler"
            )
        if not info.data["baseline"]:
            raise ValueError(
                "the stage compares its candidates with uniform on fresh seeds; set "
                "search.baseline: true, or remove search.confirm"
            )
        if len(info.data["seeds"]) + v.seeds > MAX_SEED + 1:
            raise ValueError(
                f"{v.seeds} fresh seeds do not fit beside search.seeds in [0, {MAX_SEED}]; "
                "ask for fewer"
            )
        return v

    @property
    def confirm_seeds(self) -> list[int]:
        """The confirmation stage's fresh seeds: the first ``confirm.seeds`` seeds above the
        largest of ``seeds`` that ``seeds`` does not hold (past the largest seed, from 0 on);
        [] without ``confirm``. A function of the study's seed list: a resume derives the
        same ones.

        >>> SearchConfig(seeds=[0, 5], confirm={"seeds": 3}).confirm_seeds
        [6, 7, 8]
        """
        if self.confirm is None:
            return []
        used, out, seed = set(self.seeds), [], max(self.seeds)
        while len(out) < self.confirm.seeds:
            seed = seed + 1 if seed < MAX_SEED else 0
            if seed not in used:
                out.append(seed)
        return out

    @field_validator("seeds")
    @classmethod
    def _distinct(cls, v: list[int]) -> list[int]:
        if any(not 0 <= s <= MAX_SEED for s in v):
            raise ValueError(f"seeds must lie in [0, {MAX_SEED}]")
        if len(set(v)) != len(v):
            raise ValueError(f"seeds must be distinct, but got {short(v)}")
        return v


class Objective(Strict):
    # what the search ranks candidates by
    metric: Literal[tuple(METRICS)] = "val_bpb"  # type: ignore[valid-type]
    direction: Literal["minimize", "maximize"] | None = None  # None: the metric's natural one
    # The smallest difference from uniform worth finding, in the metric's units (e.g. 0.01 for
    # val_bpb): `tlmsearch plan` sizes the seeds to separate it, `validate` warns when the
    # study's seeds cannot (tlmsearch/evidence/power.py).
    min_effect: float | None = None

    @field_validator("min_effect")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and not v > 0:
            raise ValueError(
                "must be > 0: the smallest difference from uniform you care about, in the "
                "metric's units (e.g. 0.01 for val_bpb)"
            )
        return v

    @property
    def sense(self) -> str:
        return self.direction or METRICS[self.metric]


class ContrastConfig(Strict):
    """One question a study asks, as a contrast (docs/statistics.md, "Contrasts and
    equivalence"): the mean effect of ``schedules`` minus that of ``vs``, over the settings
    that match ``where``; with ``by``, whether that effect depends on a setting dimension (the
    effect at ``levels[1]`` minus the effect at ``levels[0]``)."""

    name: str = Field(min_length=1)  # what it asks, as status and best.yaml print it
    # schedule labels as the trials table names them ("cosine 1.5->0.5"), or a family:
    # early-heavy (taper strength > 0: capacity toward layer 0), late-heavy (< 0), all
    schedules: list[str] = Field(default_factory=list)
    # instead of schedules and vs: explicit weights on schedule labels (uniform included),
    # summing to 0: {C: 1, B: -1, D: -1, uniform: 1} is the interaction (C - B) - (D - A)
    terms: dict[str, float] | None = None

    @field_validator("terms", mode="before")
    @classmethod
    def _numbers(cls, v: Any) -> Any:
        if isinstance(v, dict):
            for name, w in v.items():
                if isinstance(w, bool) or not isinstance(w, int | float):
                    raise ValueError(f"terms[{name!r}]: {w!r} is not a number; e.g. 1 or -1")
        return v

    # the reference the schedules are measured against: labels or families, as schedules
    vs: list[str] = Field(default_factory=lambda: ["uniform"], min_length=1)
    # setting dimension -> the values to pool over (default: every setting the study ran)
    where: dict[str, list[Scalar]] = Field(default_factory=dict)
    by: str | None = None  # a setting dimension (train.lr): the interaction with it
    # the two values of ``by`` compared (default: its smallest and largest)
    levels: list[Scalar] | None = Field(None, min_length=2, max_length=2)

    @field_validator("where")
    @classmethod
    def _settings_named(cls, v: dict[str, list[Scalar]]) -> dict[str, list[Scalar]]:
        for dim, values in v.items():
            if "." not in dim:
                raise ValueError(
                    f"{dim!r} is not a setting dimension; name it with its section, e.g. train.lr"
                )
            if not values:
                raise ValueError(f"{dim}: give at least one value")
        return v

    @field_validator("by")
    @classmethod
    def _dimension(cls, v: str | None) -> str | None:
        if v is not None and "." not in v:
            raise ValueError(
                f"{v!r} is not a setting dimension; name it with its section, "
                "e.g. train.lr or train.parametrization"
            )
        return v

    @model_validator(mode="after")
    def _levels_need_by(self) -> ContrastConfig:
        if self.levels is not None and self.by is None:
            raise ValueError("levels compares two values of a setting dimension: give `by` too")
        if self.terms is None and not self.schedules:
            raise ValueError("give `schedules` (against `vs`, default uniform) or `terms`")
        if self.terms is not None:
            if self.schedules or self.vs != ["uniform"] or self.by is not None:
                raise ValueError("terms gives every weight: remove schedules, vs and by")
            total = sum(self.terms.values())
            weights = [w for w in self.terms.values() if w != 0]
            if len(weights) < 2 or not all(math.isfinite(w) for w in weights):
                raise ValueError("terms: give two or more schedules with finite, non-zero weights")
            families = sorted(set(self.terms) & set(SCHEDULE_FAMILIES))
            if families:
                raise ValueError(
                    f"terms: {', '.join(families)} is a family; terms weigh "
                    "schedule labels (a family goes in schedules or vs)"
                )
            if abs(total) > 1e-9:
                raise ValueError(
                    f"terms: the weights must sum to 0 (a contrast), but sum to {total:g}"
                )
        return self


class TwoByTwoConfig(Strict):
    """A 2 x 2 study's reading (tlmsearch/evidence/factorial.py): the names of three of its
    stats.contrasts."""

    first: str  # the first factor's effect alone against the baseline (steps: B - A)
    second: str  # the second's (capacity: D - A)
    interaction: str  # (AB - B) - (A - baseline): terms {AB: 1, B: -1, A: -1, uniform: 1}


class StatsConfig(Strict):
    """How the study's decisions are made (tlmsearch/evidence/__init__.py): every "separated" and
    "supported" and the verdict hold their error rate over a stated family."""

    # the comparisons of every candidate with uniform: holm (family-wise error), bh (false
    # discovery rate, Benjamini-Hochberg) or none (per comparison; the sentences say so)
    family: Literal[FAMILIES] = FAMILY
    level: float = Field(LEVEL, gt=0.5, lt=1)  # 1 - the error rate of each decision
    # the study's own questions; empty: each schedule and family vs uniform over its settings,
    # at each setting, and each one's interaction with each setting dimension
    contrasts: list[ContrastConfig] = Field(default_factory=list)
    # the margin d of "equivalent within +-d", in the first objective's units; None: its
    # objectives[0].min_effect (and without one, no contrast is called equivalent)
    equivalence: float | None = Field(None, gt=0)

    # a 2 x 2 study's one-sentence reading from three of its contrasts; None: none
    two_by_two: TwoByTwoConfig | None = None

    @model_validator(mode="after")
    def _two_by_two_names(self) -> StatsConfig:
        if self.two_by_two is None:
            return self
        names = [c.name for c in self.contrasts]
        given = [self.two_by_two.first, self.two_by_two.second, self.two_by_two.interaction]
        if len(set(given)) < 3:
            raise ValueError(
                "two_by_two: first, second and interaction name three different contrasts"
            )
        for part in ("first", "second", "interaction"):
            name = getattr(self.two_by_two, part)
            if name not in names:
                raise ValueError(
                    f"two_by_two.{part}: {name!r} is not a contrast of "
                    f"stats.contrasts; give one of {short(names)}"
                )
        return self

    @field_validator("contrasts")
    @classmethod
    def _distinct_names(cls, v: list[ContrastConfig]) -> list[ContrastConfig]:
        names = [c.name for c in v]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"contrast names must be distinct, but {short(twice)} repeat")
        return v
