"""The stats package's shape: the names it re-exports, the defaults its functions (and their
callers') read from tlmsearch.constants, what its modules import, and their docstring examples."""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
from module_imports import imports_of

import tlmsearch.stats as stats
from tlmsearch import constants, evidence
from tlmsearch.config import PartialStudy
from tlmsearch.evidence import conclusions, fidelity, racing, tuned

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tlmsearch" / "stats"
MODULES = sorted(m.name for m in pkgutil.iter_modules([str(PACKAGE)]))

# Every public name tlmsearch/stats.py defined before it became a package (its top-level
# functions, classes and assignments, read with ast): still importable from tlmsearch.stats.
NAMES = [
    "UNKNOWN_SEED",
    "PENDING_STATES",
    "TIERS",
    "t_quantile",
    "Interval",
    "mean_interval",
    "t_sf",
    "range_critical",
    "Noise",
    "block_fit",
    "block_noise",
    "setting_column",
    "setting_noises",
    "setting_noise",
    "pitman_morgan",
    "FAMILIES",
    "adjust",
    "family_words",
    "Seeds",
    "seed_outcomes",
    "baseline_by_seed",
    "paired_deltas",
    "SUMMARY_COLUMNS",
    "summarise",
    "RANK_COLUMNS",
    "rank",
    "tier_name",
    "MODEL",
    "UNKNOWN",
    "EFFECT_COLUMNS",
    "PAIR_COLUMNS",
    "effects",
    "decide",
    "pairwise",
    "MCB_COLUMNS",
    "mcb",
    "CHECKPOINT_EVALS",
    "relative_dispersion",
    "expected_range",
    "CheckpointNoise",
    "checkpoint_noise",
    "SignalToNoise",
    "candidate_means",
    "signal_to_noise",
]
# The functions with a level or family default, in the package and in the modules that call it.
WITH_DEFAULTS = {
    "stats": [
        "t_quantile",
        "mean_interval",
        "summarise",
        "rank",
        "effects",
        "pairwise",
        "mcb",
        "adjust",
    ],
    "callers": [
        conclusions.conclusions,
        evidence.Evidence.build,
        evidence.pair_noise,
        tuned.tuned,
        fidelity.fidelity,
    ],
}


def test_every_former_name_is_importable_and_listed() -> None:
    missing = [n for n in NAMES if not hasattr(stats, n)]
    assert missing == []
    assert set(NAMES) <= set(stats.__all__)
    assert [n for n in stats.__all__ if not hasattr(stats, n)] == []
    namespace: dict[str, object] = {}
    exec(f"from tlmsearch.stats import {', '.join(NAMES)}", namespace)  # the other spelling
    assert all(namespace[n] is getattr(stats, n) for n in NAMES)


def test_no_module_shadows_a_name_the_package_exports() -> None:
    """A submodule named like a function (``effects.py`` beside ``effects``) would make
    ``import tlmsearch.stats.effects as m`` return the function, and the package attribute
    depend on import order."""
    assert set(MODULES) & set(stats.__all__) == set()
    for name in MODULES:
        assert importlib.import_module(f"tlmsearch.stats.{name}").__name__.endswith(name)


@pytest.mark.parametrize("name", WITH_DEFAULTS["stats"])
def test_the_package_defaults_read_the_constants(name: str) -> None:
    params = inspect.signature(getattr(stats, name)).parameters
    assert {"level", "family"} & set(params), name
    if "level" in params:
        assert params["level"].default == constants.LEVEL == 0.95
    if "family" in params:
        assert params["family"].default == constants.FAMILY == "holm"


def test_every_public_level_or_family_default_is_the_constant() -> None:
    """Not only the listed ones: any public function of the package with such a parameter."""
    seen = []
    for name in stats.__all__:
        obj = getattr(stats, name)
        if not inspect.isfunction(obj):
            continue
        for param in inspect.signature(obj).parameters.values():
            if param.name in ("level", "family") and param.default is not param.empty:
                expected = constants.LEVEL if param.name == "level" else constants.FAMILY
                assert param.default == expected, (name, param.name)
                seen.append(name)
    assert set(WITH_DEFAULTS["stats"]) <= set(seen)
    assert stats.FAMILIES is constants.FAMILIES


@pytest.mark.parametrize("func", WITH_DEFAULTS["callers"], ids=lambda f: f.__qualname__)
def test_the_callers_defaults_read_the_constants(func) -> None:
    params = inspect.signature(func).parameters
    assert params["level"].default == constants.LEVEL
    if "family" in params:
        assert params["family"].default == constants.FAMILY


def test_the_race_and_its_settings_default_to_the_level() -> None:
    assert inspect.signature(racing.race).parameters["confidence"].default == constants.LEVEL
    study = PartialStudy.model_validate({"search": {"seeds": [0, 1], "racing": {"max_seeds": 2}}})
    settings = racing.race_settings(study)
    assert settings["confidence"] == constants.LEVEL


@pytest.mark.parametrize("name", MODULES)
def test_a_module_imports_only_the_package_and_leaves(name: str) -> None:
    """The pure formulas: numpy, pandas, scipy, and of ours only leaves and the package itself
    (no torch, ray or plotting: docs/contributing.md's layer rules)."""
    ours = {m for m in imports_of(PACKAGE / f"{name}.py") if m.startswith("tlmsearch")}
    assert {m for m in ours if not m.startswith("tlmsearch.stats.")} <= {
        "tlmsearch.constants",
        "tlmsearch.reasons",
    }
    others = {m.split(".")[0] for m in imports_of(PACKAGE / f"{name}.py")} - {"tlmsearch"}
    assert others <= {
        "__future__",
        "collections",
        "contextlib",
        "contextvars",
        "dataclasses",
        "functools",
        "math",
        "numpy",
        "pandas",
        "scipy",
        "typing",
    }, others


@pytest.mark.parametrize("name", ["__init__", *MODULES])
def test_the_docstring_examples_hold(name: str) -> None:
    """The package's examples run here (the suite collects no doctests elsewhere)."""
    mod = stats if name == "__init__" else importlib.import_module(f"tlmsearch.stats.{name}")
    result = doctest.testmod(mod)
    assert result.failed == 0
    assert result.attempted > 0 or name == "__init__"  # every module has examples
