"""The study: one validated, frozen object per study YAML, its sections and the checks that span
them (racing needs the baseline, muP a built-in architecture, workers divide a step, ...).

:func:`validated` is where a mapping becomes a study with every check (``config/checks.py``);
``config/load.py`` reads the YAML and ``--set`` overrides before it. What a study plans (its
candidates, trainings, a candidate's study) is ``config/planning.py``, behind thin methods here.
No torch, no ray.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from tlmsearch.config import planning
from tlmsearch.config.checks import study_problems
from tlmsearch.config.data import DataConfig
from tlmsearch.config.limits import MAX_CANDIDATES, MAX_RUNGS
from tlmsearch.config.model import WIDTH_SITES, ModelConfig
from tlmsearch.config.planning import Training
from tlmsearch.config.run import RayConfig, StorageConfig
from tlmsearch.config.search import Objective, SearchConfig, StatsConfig
from tlmsearch.config.tracking import TrackingConfig
from tlmsearch.config.train import TrainConfig
from tlmsearch.errors import ConfigError, Strict, problems_from
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.heads import is_heads_key
from tlmsearch.widths.settings import combination_problem, settings_problem
from tlmsearch.widths.space import SearchSpace, settings_of


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a study and its run dir, or None when it can."""
    if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", name):
        return None
    return "use letters, digits, '_', '-' or '.', at most 64 (it names the run dir)"


class StudyConfig(Strict):
    name: str  # names the study and its run dir: letters, digits, _ - . (<= 64)
    description: str = ""  # free text, shown in the report
    space: SearchSpace
    model: ModelConfig
    target: ModelConfig | None = None  # the full-scale model the proxy stands for
    data: DataConfig = DataConfig()
    train: TrainConfig = TrainConfig()
    search: SearchConfig = SearchConfig()
    objectives: list[Objective] = Field(default_factory=lambda: [Objective()], min_length=1)
    storage: StorageConfig = StorageConfig()
    ray: RayConfig = RayConfig()
    stats: StatsConfig = StatsConfig()
    tracking: TrackingConfig = TrackingConfig()  # MLflow, W&B, TensorBoard: off by default
    # Fidelity across scales (search/ladder.py, tlmsearch/evidence/fidelity.py): proxy sizes, each
    # a mapping of model / train / data overrides applied to this study, smallest compute first.
    ladder: list[dict[str, Any]] | None = Field(None, min_length=2, max_length=MAX_RUNGS)
    # all: every candidate at every rung; promote: a rung's promote_top best (and uniform) go up
    ladder_mode: Literal["all", "promote"] = "all"
    # ladder_mode promote: candidates each rung sends up
    promote_top: int | None = Field(None, ge=1, le=MAX_CANDIDATES)

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str) -> str:
        problem = name_problem(v)
        if problem:
            raise ValueError(problem)
        return v

    @model_validator(mode="before")
    @classmethod
    def _flops_at_seq_len(cls, data: Any) -> Any:
        """``model.attention.hold: flops`` counts FLOPs at the data's sequence length unless
        the model names one (for the target too: its FLOPs at the proxy's sequence length)."""
        if not isinstance(data, Mapping):
            return data
        out = dict(data)
        for section in ("model", "target"):
            model = out.get(section)
            att = model.get("attention") if isinstance(model, Mapping) else None
            if isinstance(att, Mapping) and att.get("hold") == "flops" and "seq_len" not in att:
                seq = (
                    out.get("data", {}).get("seq_len")
                    if isinstance(out.get("data"), Mapping)
                    else None
                )
                seq = DataConfig.model_fields["seq_len"].default if seq is None else seq
                out[section] = {**model, "attention": {**att, "seq_len": seq}}
        return out

    @model_validator(mode="after")
    def _consistent(self) -> StudyConfig:
        scheduled = any(is_heads_key(name) for name in self.space.dimensions) or any(
            is_heads_key(key) for cand in self.search.candidates or [] for key in cand
        )
        for section in ("model", "target"):
            model = getattr(self, section)
            if scheduled and model is not None and model.layer_heads is not None:
                raise ValueError(
                    f"{section}.layer_heads fixes every candidate's heads, but the study "
                    "schedules them (heads.* in the space or search.candidates): the baseline "
                    f"would keep {section}.layer_heads and the candidates not; remove one"
                )
        self._check_study()
        problem = self._settings_problem()
        if problem:
            raise ValueError(problem)
        return self

    def _check_study(self) -> None:
        """The study-level checks of one config, setting dimensions aside (ValueError)."""
        explicit = self.search.candidates is not None
        if explicit and self.search.sampler != "grid":
            raise ValueError(
                f"search.candidates lists the candidates of a grid, but search.sampler is "
                f"{self.search.sampler}; set search.sampler: grid or remove search.candidates"
            )
        if self.search.sampler == "grid" and not self.space.finite and not explicit:
            raise ValueError(
                "search.sampler is grid but the space is continuous: use random, tpe, gp or "
                "nsga2, or give every float dimension a step"
            )
        sim = self.train.simulate
        if self.search.confirm is not None and sim is not None and sim.run is not None:
            raise ValueError(
                "search.confirm trains its candidates on fresh seeds, which a replayed run "
                "(train.simulate.run) never trained; use train.simulate.surrogate, or remove "
                "search.confirm"
            )
        if len(self.objectives) > 1 and self.search.pruner != "none":
            raise ValueError(
                f"search.pruner ({self.search.pruner}) cannot prune several objectives; "
                "set search.pruner: none, or keep one objective"
            )
        racing = self.search.racing
        if racing is not None:
            if len(self.objectives) > 1:
                raise ValueError("search.racing races one objective; keep one, or remove racing")
            if not self.search.baseline:
                raise ValueError(
                    "search.racing measures candidates against the uniform baseline of each "
                    "seed; set search.baseline: true"
                )
            if self.space.settings:
                raise ValueError(
                    "search.racing races candidates against one uniform per seed, but the space "
                    f"has setting dimensions ({', '.join(self.space.settings)}), each with its "
                    "own uniform baseline; remove racing (run every seed) or the setting "
                    "dimensions"
                )
            if racing.max_seeds is not None and racing.max_seeds > len(self.search.seeds):
                raise ValueError(
                    f"search.racing.max_seeds ({racing.max_seeds}) exceeds the seeds listed in "
                    f"search.seeds ({len(self.search.seeds)}); list more seeds or lower it"
                )
        self._ladder_fields()
        site = WIDTH_SITES.get(self.model.arch)
        if self.train.parametrization == "mup" and site != "mlp":
            builtin = ", ".join(a for a, s in WIDTH_SITES.items() if s == "mlp")
            why = (
                f"supports only the built-in architectures ({builtin}) today, not model.arch "
                f"{self.model.arch}"
                if site is None  # arch: hf or a plugin
                else f"scales MLP hidden widths, but model.arch {self.model.arch} puts the "
                f"per-layer width into {site}"
            )
            raise ValueError(
                f"train.parametrization: 'mup' {why}; set train.parametrization: standard"
            )
        metrics = [o.metric for o in self.objectives]
        if len(set(metrics)) != len(metrics):
            raise ValueError(f"objectives repeat a metric: {metrics}")
        seqs, n = self.train.step_sequences(self.data.seq_len), self.ray.workers_per_trial
        if seqs % n:
            raise ValueError(
                f"ray.workers_per_trial ({n}) must divide the {seqs} sequences of a step "
                f"(train.batch_tokens {self.train.batch_tokens} / data.seq_len "
                f"{self.data.seq_len}); e.g. train.batch_tokens: "
                f"{-(-seqs // n) * n * self.data.seq_len}"
            )
        chunk = self.model.titans.chunk_size
        if self.model.arch == "titans" and chunk >= self.data.seq_len:
            # Tokens read the memory written by earlier chunks only (tlmsearch/models/titans.py).
            raise ValueError(
                f"model.titans.chunk_size ({chunk}) must be below data.seq_len "
                f"({self.data.seq_len}), or the memory is never written; "
                f"try chunk_size: {max(1, self.data.seq_len // 4)}"
            )

    def _settings_problem(self) -> str | None:
        """Why the space's setting dimensions (``train.lr``) cannot be searched, or None."""
        problem = settings_problem(self)
        if problem:
            return problem
        for i, cand in enumerate(self.search.candidates or []):  # a ladder's promoted ones
            why = combination_problem(self, settings_of(cand)) if settings_of(cand) else None
            if why:
                return f"search.candidates[{i}]: its settings are not a valid study ({why})"
        if self.space.settings and self.search.pruner == "paired":
            return (
                "search.pruner: paired compares a trial with its seed's uniform, but each "
                f"setting ({', '.join(self.space.settings)}) has a uniform of its own; use "
                "median, percentile, wilcoxon or none"
            )
        return None

    def _ladder_fields(self) -> None:
        if self.ladder is None:
            if self.ladder_mode != "all" or self.promote_top is not None:
                raise ValueError("ladder_mode and promote_top need a ladder: list its rungs")
            return
        if self.ladder_mode == "promote" and self.promote_top is None:
            raise ValueError(
                "promote_top: ladder_mode promote needs it: how many of a rung's best "
                "candidates go up to the next (uniform always goes up)"
            )
        if self.ladder_mode == "all" and self.promote_top is not None:
            raise ValueError("promote_top is read in ladder_mode: promote only; remove it")

    # -- derived ------------------------------------------------------------------------------

    @property
    def vocab_size(self) -> int | None:
        """The proxy's vocabulary: the model's, else the tokenizer's (None until data is read)."""
        if self.model.vocab_size is not None:
            return self.model.vocab_size
        tok = self.data.tokenizer
        return 256 if tok.kind == "bytes" else tok.vocab_size if tok.kind == "bpe" else None

    def data_for_run(self) -> DataConfig:
        """The data section as a run prepares it: with ``ray.shared_path`` and no
        ``data.cache_dir``, the prepared arrays live on the shared path every node reads."""
        if self.ray.shared_path and not self.data.cache_dir:
            return self.data.model_copy(update={"cache_dir": self.ray.shared_path})
        return self.data

    def candidates(self) -> list[Candidate]:
        """The grid (finite space) with the uniform baseline first, or the corners (continuous)."""
        return planning.candidates(self)

    def for_candidate(self, candidate: Candidate | Mapping[str, Any]) -> StudyConfig:
        """This study as ``candidate``'s trial trains it: its settings (``train.lr``) applied.

        >>> from tlmsearch.config import study_from_mapping
        >>> cfg = study_from_mapping({"name": "s", "model": {"n_layer": 2, "d_model": 32,
        ...     "n_head": 2}, "space": {"dimensions": {"shape": {"type": "fixed",
        ...     "value": "cosine"}, "train.lr": {"type": "categorical", "choices": [0.001]}}}})
        >>> cfg.for_candidate({"shape": "cosine", "train.lr": 0.001}).train.lr
        0.001
        """
        return planning.for_candidate(self, candidate)

    def target_for(self, candidate: Candidate | Mapping[str, Any]) -> ModelConfig | None:
        """The target model with ``candidate``'s model settings (``model.rope_theta``) applied:
        a value found at proxy scale is the value the full-scale model is exported with."""
        return planning.target_for(self, candidate)

    def rung(self, index: int) -> StudyConfig:
        """The study of ladder rung ``index``: this one with the rung's overrides, no ladder."""
        if not self.ladder or not 0 <= index < len(self.ladder):
            raise IndexError(f"no ladder rung {index}")
        data = self.to_dict()
        for section in ("model", "target"):  # a filled-in FLOPs length follows the rung's data
            att = (data.get(section) or {}).get("attention", {})
            if att.get("hold") == "flops" and att.get("seq_len") == self.data.seq_len:
                del att["seq_len"]
        return validated(planning.rung_mapping(data, self.ladder[index]))

    def trainings(self) -> list[Training]:
        """:meth:`candidates` grouped by their proxy width vector, in the same order.

        Candidates whose schedules round to the same proxy widths (blocks boundaries at 4 layers,
        linear 2.0/1.5 and 1.333/1.0) would train the same model on the same seed: each vector
        trains once per seed, and its trial records every candidate it stands for.
        """
        return planning.trainings(self)

    @property
    def race_seeds(self) -> int:
        """Seeds a candidate may get: racing's max_seeds, else every seed of search.seeds."""
        racing = self.search.racing
        n = len(self.search.seeds)
        return n if racing is None or racing.max_seeds is None else racing.max_seeds

    def to_dict(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", exclude_none=True)
        if self.ladder is None:  # study.yaml of a plain study says nothing of ladders
            out.pop("ladder_mode")
        return out

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


class PartialStudy(StudyConfig):
    """A study.yaml that is no whole study (a hand-written one, a test's, or one whose name,
    space or model this version cannot read), read section by section: each section given is
    validated by its own model, every other field keeps its model's default, and ``name``,
    ``space`` and ``model`` are None when missing. No check across sections: some are missing.

    What :func:`tlmsearch.config.load.frozen_study` gives where a run dir's study.yaml does not
    validate as a :class:`StudyConfig`; a reader that needs the whole study (its candidates,
    its learning rates) tells the two apart with ``isinstance(cfg, PartialStudy)``.

    >>> PartialStudy.model_validate({"objectives": [{"metric": "tokens_per_s"}]}).stats.level
    0.95
    """

    name: str | None = None  # type: ignore[assignment]
    space: SearchSpace | None = None  # type: ignore[assignment]
    model: ModelConfig | None = None  # type: ignore[assignment]

    @field_validator("name")
    @classmethod
    def _slug(cls, v: str | None) -> str | None:
        return None if v is None else StudyConfig._slug(v)

    @model_validator(mode="after")
    def _consistent(self) -> PartialStudy:  # replaces StudyConfig's: sections may be missing
        return self


def validated(data: Mapping[str, Any], source: str | None = None) -> StudyConfig:
    """``data`` (its ``space`` a mapping) as a study, with every check of ``config/checks.py``.
    Raises :class:`ConfigError` with one line per problem, naming ``source`` when given."""
    try:
        cfg = StudyConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(problems_from(err, model=StudyConfig), source) from None
    problems = study_problems(cfg)
    if problems:
        raise ConfigError(problems, source)
    return cfg
