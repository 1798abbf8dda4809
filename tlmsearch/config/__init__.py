"""Study configuration: one validated, frozen object per study YAML.

``load_study(path, overrides)`` reads the YAML, applies ``--set a.b=value`` overrides (typed by
YAML, validated like the file), resolves the search space and checks that every candidate's
widths can be met for the proxy and the target model. Every problem becomes one line naming the
YAML path, the bad value and what is valid (:class:`tlmsearch.errors.ConfigError`).
No torch, no ray.

The package is data, one module per section, and the code that reads and plans it:

- ``model.py``: ``model`` / ``target`` (:class:`ModelConfig`, architectures' options, ``ARCHS``)
- ``data.py``, ``train.py``: ``data`` (:class:`DataConfig`), ``train`` (:class:`TrainConfig`)
- ``search.py``: ``search``, ``objectives``, ``stats`` (sampler and pruner names, racing)
- ``run.py``, ``tracking.py``: ``storage`` and ``ray``; ``tracking``
- ``study.py``: :class:`StudyConfig`, the checks that span sections, ``validated``
- ``limits.py``: the upper bound of every size
- ``checks.py``: the checks after the sections validate (widths, data, trackers, hf and plugin
  models, ladder rungs)
- ``planning.py``: candidates, trainings, a candidate's study and target, a rung's mapping
- ``load.py``: YAML, ``--set``, :func:`study_from_mapping`, :func:`load_study`; a run dir's
  frozen study.yaml (:func:`frozen_study`, :func:`load_frozen_study`: every reader of a run dir
  takes the typed study they give, a :class:`PartialStudy` where it is no whole one)
- ``schema.py``: the study's JSON Schema and docs/reference.md, generated from these models
- ``summary.py``: ``tlmsearch validate``'s tables (imports rich; not re-exported here)

Names several layers share (``EVAL_KEYS``, ``METRICS``, ``TRACKER_PACKAGES``, ``HF_SET_BY``,
the statistics' ``LEVEL`` and ``FAMILY``) live in :mod:`tlmsearch.constants` and are
re-exported here.
"""

from __future__ import annotations

from tlmsearch.config.checks import (
    check_widths,
    external_problems,
    ladder_problems,
    tracking_problems,
)
from tlmsearch.config.data import SOURCE_KINDS, DataConfig, Source, TokenizerConfig, split_source
from tlmsearch.config.limits import (
    MAX_CANDIDATES,
    MAX_D_FF,
    MAX_D_MODEL,
    MAX_LAYERS,
    MAX_RUNGS,
    MAX_SEED,
    MAX_SEQ_LEN,
    MAX_TOKENS,
    MAX_VOCAB,
    MAX_WORKERS,
)
from tlmsearch.config.load import (
    StudyYamlWarning,
    apply_overrides,
    frozen_study,
    load_frozen_study,
    load_study,
    parse_override,
    study_from_mapping,
)
from tlmsearch.config.model import (
    ARCHS,
    HF_FILE_ONLY,
    PLUGIN_ARCH,
    WIDTH_SITES,
    GatedAttentionOptions,
    HFOptions,
    HopeOptions,
    ModelConfig,
    TitansOptions,
)
from tlmsearch.config.planning import RUNG_SECTIONS, Training, rung_mapping
from tlmsearch.config.run import RayConfig, StorageConfig
from tlmsearch.config.search import (
    PRUNERS,
    SAMPLERS,
    ConfirmConfig,
    Objective,
    RacingConfig,
    SearchConfig,
    StatsConfig,
)
from tlmsearch.config.study import PartialStudy, StudyConfig, name_problem
from tlmsearch.config.tracking import MlflowTracking, TrackingConfig, WandbTracking
from tlmsearch.config.train import TrainConfig
from tlmsearch.constants import (
    EVAL_KEYS,
    FAMILIES,
    FAMILY,
    HF_SET_BY,
    LEVEL,
    METRICS,
    RAW_EVAL_KEYS,
    TRACKER_PACKAGES,
)
from tlmsearch.errors import ConfigError

__all__ = [
    "ARCHS",
    "EVAL_KEYS",
    "FAMILIES",
    "FAMILY",
    "HF_FILE_ONLY",
    "HF_SET_BY",
    "LEVEL",
    "MAX_CANDIDATES",
    "MAX_D_FF",
    "MAX_D_MODEL",
    "MAX_LAYERS",
    "MAX_RUNGS",
    "MAX_SEED",
    "MAX_SEQ_LEN",
    "MAX_TOKENS",
    "MAX_VOCAB",
    "MAX_WORKERS",
    "METRICS",
    "PLUGIN_ARCH",
    "PRUNERS",
    "RAW_EVAL_KEYS",
    "RUNG_SECTIONS",
    "SAMPLERS",
    "SOURCE_KINDS",
    "TRACKER_PACKAGES",
    "WIDTH_SITES",
    "ConfigError",
    "ConfirmConfig",
    "DataConfig",
    "GatedAttentionOptions",
    "HFOptions",
    "HopeOptions",
    "MlflowTracking",
    "ModelConfig",
    "Objective",
    "PartialStudy",
    "RacingConfig",
    "RayConfig",
    "SearchConfig",
    "Source",
    "StatsConfig",
    "StorageConfig",
    "StudyConfig",
    "StudyYamlWarning",
    "TitansOptions",
    "TokenizerConfig",
    "TrackingConfig",
    "TrainConfig",
    "Training",
    "WandbTracking",
    "apply_overrides",
    "check_widths",
    "external_problems",
    "frozen_study",
    "ladder_problems",
    "load_frozen_study",
    "load_study",
    "name_problem",
    "parse_override",
    "rung_mapping",
    "split_source",
    "study_from_mapping",
    "tracking_problems",
]
