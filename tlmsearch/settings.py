"""Setting dimensions: a scalar of ``train`` or ``model`` searched beside the schedule.

A space dimension named ``train.lr`` (any scalar field of
:class:`~tlmsearch.config.TrainConfig`, or ``model.`` one of :data:`MODEL_SETTINGS`) makes every
trial train at its candidate's value
(:meth:`StudyConfig.for_candidate`). The uniform control runs at every value
(:meth:`StudyConfig.candidates`), statistics pair a candidate with the uniform of its own setting
and seed (``setting`` column, :mod:`tlmsearch.stats`), and :mod:`tlmsearch.tuned` compares each
shape at its own best value. This module checks that a dimension names such a field and that the
field accepts each of its values. No torch, no ray.
"""

from __future__ import annotations

import types
import typing
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ValidationError

from tlmsearch.errors import short

if TYPE_CHECKING:
    from tlmsearch.config import StudyConfig
    from tlmsearch.space import Dimension

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


def _fields(section: str) -> tuple[type[BaseModel], list[str]]:
    """The config class of ``section`` and the fields of it a setting may name."""
    from tlmsearch.config import ModelConfig, TrainConfig

    if section == "train":
        scalar = [n for n, f in TrainConfig.model_fields.items() if _scalar(f.annotation)]
        return TrainConfig, scalar
    return ModelConfig, list(MODEL_SETTINGS)


def setting_problem(name: str, dim: Dimension, cfg: StudyConfig) -> str | None:
    """Why dimension ``name`` (``train.lr``) cannot be searched in ``cfg``, or None.

    Every grid value, or both ends of a continuous range, must be a value the field accepts
    in the study's section (``train.lr`` > 0, warmup_tokens below tokens, ...).
    """
    section, _, field = name.partition(".")
    klass, allowed = _fields(section)
    if field not in allowed:
        if field in klass.model_fields:
            why = (
                _BUDGET
                if section == "model"
                else "is not a scalar (int, float, bool or a name)"
            )
            return f"{section}.{field} {why}; settings of {section}: {', '.join(allowed)}"
        return f"{section} has no field {field!r}; settings of {section}: {', '.join(allowed)}"
    current = getattr(cfg, section).model_dump(mode="json", exclude_none=True)
    for i, value in enumerate(dim.values()):
        where = {"categorical": f"choices[{i}]", "fixed": "value"}.get(dim.type, "low..high")
        try:
            klass.model_validate({**current, field: value})
        except ValidationError as err:
            why = "; ".join(e["msg"].removeprefix("Value error, ") for e in err.errors())
            return (
                f"{where}: {short(value)} is not a valid {section}.{field} ({why}); give "
                f"values {section}.{field} accepts"
            )
    return None
