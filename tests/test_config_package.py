"""The config package's shape: the names it re-exports, the section modules that hold only data,
the shared constants its defaults read, and the planning functions behind StudyConfig's methods."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from module_imports import imports_of

import tlmsearch.config as config
from tlmsearch import constants
from tlmsearch.config import planning

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tlmsearch" / "config"

# Every public name tlmsearch/config.py defined before it became a package: still importable.
NAMES = [
    "ARCHS",
    "PLUGIN_ARCH",
    "HF_SET_BY",
    "HF_FILE_ONLY",
    "WIDTH_SITES",
    "SAMPLERS",
    "PRUNERS",
    "METRICS",
    "EVAL_KEYS",
    "RAW_EVAL_KEYS",
    "MAX_D_MODEL",
    "MAX_VOCAB",
    "MAX_SEQ_LEN",
    "MAX_TOKENS",
    "MAX_SEED",
    "MAX_WORKERS",
    "MAX_RUNGS",
    "RUNG_SECTIONS",
    "GatedAttentionOptions",
    "TitansOptions",
    "HopeOptions",
    "HFOptions",
    "ModelConfig",
    "TokenizerConfig",
    "SOURCE_KINDS",
    "split_source",
    "Source",
    "DataConfig",
    "TrainConfig",
    "RacingConfig",
    "SearchConfig",
    "Objective",
    "StorageConfig",
    "RayConfig",
    "Training",
    "name_problem",
    "StatsConfig",
    "TRACKER_PACKAGES",
    "MlflowTracking",
    "WandbTracking",
    "TrackingConfig",
    "tracking_problems",
    "StudyConfig",
    "parse_override",
    "apply_overrides",
    "study_from_mapping",
    "rung_mapping",
    "ladder_problems",
    "load_study",
    "external_problems",
    "check_widths",
    "MAX_LAYERS",
    "MAX_D_FF",
    "MAX_CANDIDATES",
    "ConfigError",
]
# Two setting dimensions, so a candidate's study and target differ from the study's.
TINY = {
    "name": "tiny",
    "space": {
        "dimensions": {
            "shape": {"type": "categorical", "choices": ["cosine", "linear"]},
            "r_start": {"type": "float", "low": 1.25, "high": 1.5, "step": 0.25},
            "train.lr": {"type": "categorical", "choices": [0.001, 0.003]},
            "model.rope_theta": {"type": "fixed", "value": 500.0},
        }
    },
    "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "d_ff": 64, "multiple_of": 16},
    "target": {"n_layer": 4, "d_model": 64, "n_head": 2, "d_ff": 128},
    "data": {"tokenizer": {"kind": "bytes"}},
}
# The modules that hold a study's sections as data: they import no checks, planning or loading.
SECTIONS = ("model", "data", "train", "search", "run", "tracking", "limits")


def test_every_former_name_is_importable_and_listed() -> None:
    missing = [n for n in NAMES if not hasattr(config, n)]
    assert missing == []
    assert set(NAMES) <= set(config.__all__)
    assert [n for n in config.__all__ if not hasattr(config, n)] == []


def test_the_shared_constants_are_one_object_wherever_read() -> None:
    assert config.METRICS is constants.METRICS
    assert config.EVAL_KEYS is constants.EVAL_KEYS
    assert config.TRACKER_PACKAGES is constants.TRACKER_PACKAGES
    assert config.HF_SET_BY is constants.HF_SET_BY


def test_the_statistics_defaults_read_the_constants() -> None:
    assert config.StatsConfig().level == constants.LEVEL == 0.95
    assert config.StatsConfig().family == constants.FAMILY == "holm"
    assert config.RacingConfig().confidence == constants.LEVEL
    schema = config.StatsConfig.model_json_schema()["properties"]["family"]
    assert tuple(schema["enum"]) == constants.FAMILIES


def test_constants_is_a_leaf() -> None:
    assert imports_of(ROOT / "tlmsearch" / "constants.py") <= {"__future__"}


@pytest.mark.parametrize("name", SECTIONS)
def test_a_section_module_is_data_only(name: str) -> None:
    """No settings, models, data or search code, nor the config's own checks and planning."""
    ours = {m for m in imports_of(PACKAGE / f"{name}.py") if m.startswith("tlmsearch")}
    allowed = {
        "tlmsearch.errors",
        "tlmsearch.widths.schedules",
        "tlmsearch.widths.space",
        "tlmsearch.constants",
    }
    # candidate.py plans a candidate's layers (pure, no torch: ModelConfig.plan), heads.py and
    # profiles.py its attention heads and depth profiles (train's multiplier bounds)
    allowed |= {
        "tlmsearch.config.limits",
        "tlmsearch.widths.heads",
        "tlmsearch.widths.profiles",
        "tlmsearch.widths.candidate",
    }
    assert ours <= allowed, ours - allowed


def test_validating_a_study_imports_no_torch() -> None:
    """The hf and plugin check imports torch only for those models (checks.external_problems)."""
    assert "torch" not in imports_of(PACKAGE / "checks.py")  # models.counting, inside a function
    config.study_from_mapping(TINY)
    if "torch" not in sys.modules:  # another test in this process may have imported it
        assert "tlmsearch.models.counting" not in sys.modules


def test_the_methods_are_the_planning_functions() -> None:
    cfg = config.study_from_mapping(TINY)
    assert cfg.candidates() == planning.candidates(cfg)
    assert cfg.candidates()[:2] == [
        {"shape": "uniform", "train.lr": lr, "model.rope_theta": 500.0} for lr in (0.001, 0.003)
    ]
    assert cfg.trainings() == planning.trainings(cfg)
    # the same widths at another learning rate is another model
    assert all(len({c["train.lr"] for c in t.all}) == 1 for t in cfg.trainings())
    assert sum(len(t.all) for t in cfg.trainings()) == len(cfg.candidates())
    cand = cfg.candidates()[-1]
    assert cfg.for_candidate(cand) == planning.for_candidate(cfg, cand)
    assert cfg.for_candidate(cand).train.lr == cand["train.lr"] == 0.003
    assert cfg.target_for(cand) == planning.target_for(cfg, cand)
    assert cfg.target_for(cand).rope_theta == 500.0 != cfg.target.rope_theta


def test_rung_mapping_merges_sections_key_by_key_and_drops_the_ladder() -> None:
    study = {
        "name": "s",
        "model": {"n_layer": 2, "d_model": 32},
        "ladder": [{}, {}],
        "ladder_mode": "all",
        "promote_top": None,
    }
    got = planning.rung_mapping(study, {"model": {"d_model": 64}})
    assert got == {"name": "s", "model": {"n_layer": 2, "d_model": 64}}
    assert study["model"] == {"n_layer": 2, "d_model": 32}  # the study's mapping is unchanged
