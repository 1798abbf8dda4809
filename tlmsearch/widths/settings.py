"""Setting dimensions: a scalar of ``train`` or ``model`` searched beside the schedule.

A space dimension named ``train.lr`` (any scalar field of
:class:`~tlmsearch.config.TrainConfig`, or ``model.`` one of :data:`MODEL_SETTINGS`) makes every
trial train at its candidate's value
(:meth:`StudyConfig.for_candidate`). The uniform baseline runs at every value
(:meth:`StudyConfig.candidates`), statistics pair a candidate with the uniform of its own setting
and seed (``setting`` column, :mod:`tlmsearch.stats`), and :mod:`tlmsearch.evidence.tuned` compares
each shape at its own best value. This module checks that a dimension names such a field and that
the field accepts each of its values. No torch, no ray.
"""

from __future__ import annotations

import itertools
import types
import typing
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from tlmsearch.errors import short

if TYPE_CHECKING:
    from tlmsearch.config import StudyConfig

# Model fields that change neither the parameter count nor the MLP widths: candidates of one
# study keep equal parameters (the budget every schedule keeps) at any value of these.
MODEL_SETTINGS = ("rope_theta", "norm_eps", "init_std")
# Why a model field that is a scalar is still not a setting.
_BUDGET = (
    "changes the parameter budget or the widths, so candidates at different values would not "
    "have equal parameters; give it one value in model (a ladder varies model size)"
)


def _scalar(annotation: Any) -> bool:
    """Whether a field's type holds one int, float, bool or literal string (or None)."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return all(a is type(None) or _scalar(a) for a in args)
    if typing.get_origin(annotation) is Literal:
        return all(isinstance(a, str | int | float | bool) for a in args)
    return annotation in (int, float, bool, str)


def _fields(section: str, cfg: StudyConfig) -> tuple[type[BaseModel], list[str]]:
    """The config class of ``section`` (read off ``cfg``: this module never imports
    tlmsearch.config, which imports it) and the fields of it a setting may name."""
    if section == "train":
        klass = type(cfg.train)
        return klass, [n for n, f in klass.model_fields.items() if _scalar(f.annotation)]
    return type(cfg.model), list(MODEL_SETTINGS)


def setting_problem(name: str, cfg: StudyConfig) -> str | None:
    """Why ``name`` (``train.lr``) cannot be a setting dimension of ``cfg``, or None."""
    section, _, field = name.partition(".")
    klass, allowed = _fields(section, cfg)
    if field in allowed:
        return None
    if field in klass.model_fields:
        why = _BUDGET if section == "model" else "is not a scalar (int, float, bool or a name)"
        return f"{section}.{field} {why}; settings of {section}: {', '.join(allowed)}"
    return f"{section} has no field {field!r}; settings of {section}: {', '.join(allowed)}"


def _why(err: ValueError) -> str:
    """A check's message; a section's validation error's, each after the YAML path it names."""
    if not isinstance(err, ValidationError):
        return str(err)
    # the section that failed: the error's title is its class
    section = {"TrainConfig": "train", "ModelConfig": "model"}.get(err.title)
    parts = []
    for e in err.errors():
        msg = e["msg"].removeprefix("Value error, ")
        loc = ".".join(str(x) for x in (section, *e["loc"]) if x)
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def combination_problem(cfg: StudyConfig, values: Mapping[str, Any]) -> str | None:
    """Why the study cannot train at setting values ``values`` (``{"train.lr": 0.003}``), or None.

    The whole study is checked as a trial of that candidate sees it
    (:meth:`StudyConfig.for_candidate`): a field's own bounds, its section's cross-field checks
    (warmup_tokens below tokens) and the study's (muP needs a built-in arch, workers divide the
    step's sequences).
    """
    try:
        cfg.for_candidate(values)
    except ValueError as err:  # a section's ValidationError, or a study-level check
        return _why(err)
    return None


def settings_problem(cfg: StudyConfig) -> str | None:
    """Why some combination of the space's setting values cannot train, or None.

    Every combination of every setting dimension's grid values (a continuous range: its two
    ends) is checked as a whole, so a value valid on its own but not beside another dimension's
    (train.tokens 50000 with train.warmup_tokens 100000) is an error naming both.
    """
    names = cfg.space.settings
    for name in names:
        problem = setting_problem(name, cfg)
        if problem:
            return f"space.dimensions.{name}: {problem}"
    labelled = []
    for name in names:
        dim = cfg.space.dimensions[name]
        where = {"categorical": "choices[{}]", "fixed": "value"}.get(dim.type, "low..high")
        labelled.append([(where.format(i), v) for i, v in enumerate(dim.values())])
    for combo in itertools.product(*labelled):
        pairs = list(zip(names, combo, strict=True))
        values = {n: v for n, (_, v) in pairs}
        where = " with ".join(f"space.dimensions.{n}: {w}: {short(v)}" for n, (w, v) in pairs)
        why = combination_problem(cfg, values)
        if why and len(names) == 1:
            return f"{where} is not a valid {names[0]} ({why}); give values the study accepts"
        if why:
            return (
                f"{where} is not a valid combination ({why}); every combination of setting "
                "values trains, so give values that are valid together"
            )
    return None
