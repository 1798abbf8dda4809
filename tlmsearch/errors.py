"""Errors for bad user input, and one readable line per problem.

Every message names the YAML path, the bad value and what would be valid, e.g.
``search.pruner: 'mediam' is not one of median, percentile, ...``. The CLI turns a
:class:`ConfigError` into that text and exit status 2.
"""

from __future__ import annotations

import reprlib
import types
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)


class ConfigError(ValueError):
    """Bad input: a study, search space or override. ``problems`` holds one line each."""

    def __init__(self, problems: list[str] | str, source: str | None = None) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        super().__init__(head + "; ".join(self.problems))

    def lines(self) -> list[str]:
        where = f"{self.source}: " if self.source else ""
        return [f"{where}{p}" for p in self.problems]


class Strict(BaseModel):
    """Base of every config object: unknown keys are errors, objects are frozen, and no float
    is NaN or infinite (a YAML ``.nan`` or ``.inf`` is never a meaningful setting)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)
    # a key's old name -> its name now: a study file with the old one still loads, with a
    # FutureWarning naming both (the old names are read until version 1.0)
    RENAMED: ClassVar[Mapping[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _renamed_keys(cls, data: Any) -> Any:
        if not cls.RENAMED or not isinstance(data, Mapping):
            return data
        data = dict(data)
        for old, new in cls.RENAMED.items():
            if old not in data:
                continue
            if new in data:
                raise ValueError(f"give {new} only: {old} is its old name")
            warnings.warn(
                f"{old} is now called {new}: rename it in the study file "
                "(the old name is read until version 1.0)",
                FutureWarning,
                stacklevel=2,
            )
            data[new] = data.pop(old)
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_a_number(cls, v: Any, info: ValidationInfo) -> Any:
        # pydantic reads YAML's `true` as 1 in an int field: a typo that trains something else
        if info.field_name and _stray_bool(v, cls.model_fields[info.field_name].annotation):
            raise ValueError(f"{v!r} is a boolean, which this field does not take")
        return v


def _stray_bool(v: Any, annotation: Any) -> bool:
    """Whether ``v`` is (or a list of ``v`` holds) a bool where ``annotation`` takes none."""
    import typing

    if isinstance(v, bool):
        return not _takes_bool(annotation)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):  # e.g. list[int] | None
        arms = [a for a in typing.get_args(annotation) if a is not type(None)]
        return len(arms) == 1 and _stray_bool(v, arms[0])
    if isinstance(v, list) and origin in (list, tuple):
        args = typing.get_args(annotation)
        return len(args) >= 1 and any(_stray_bool(x, args[0]) for x in v)
    return False


def _takes_bool(annotation: Any) -> bool:
    """Whether a field's type admits a bool: bool itself, Any, or a union/container with one."""
    import typing

    if annotation is bool or annotation is Any:
        return True
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return any(isinstance(a, bool) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return any(_takes_bool(a) for a in typing.get_args(annotation))
    return origin is not None and origin not in (list, tuple, set, frozenset)


def dotted(loc: tuple[Any, ...], prefix: str = "") -> str:
    """``('search', 'seeds', 0)`` -> ``search.seeds[0]``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


# repr of a bad value, bounded before it is built: a YAML alias bomb is cheap to parse but its
# full repr would be exponentially large, and a 4000-digit integer is no use in a message.
_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxlist, _REPR.maxdict, _REPR.maxtuple = 3, 8, 8, 8
_REPR.maxstring, _REPR.maxlong, _REPR.maxother = 60, 40, 60


def short(value: Any) -> str:
    """A short repr of ``value`` for a message, however large or deep ``value`` is."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int past Python's digit limit for str()
        text = f"<{type(value).__name__} too long to print>"
    return text if len(text) <= 60 else text[:57] + "..."


def _fields_at(model: type[BaseModel] | None, loc: tuple[Any, ...]) -> list[str]:
    """The keys valid at ``loc`` inside ``model`` (walking nested models, dicts and lists)."""
    for part in loc:
        if model is None:
            return []
        if isinstance(part, int) or part not in model.model_fields:
            continue
        model = _model_in(model.model_fields[part].annotation)
    return list(model.model_fields) if model is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


# Union members pydantic names in an error's path (``choices[0].str``): one line says them all.
_MEMBERS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}
MAX_PROBLEMS = 20  # lines per error; a list of 10,000 bad entries needs only the first few


def _merged(error: ValidationError) -> list[dict[str, Any]]:
    """pydantic's errors with internal tags dropped and a union's members merged into one."""
    out: dict[tuple[Any, ...], dict[str, Any]] = {}
    for err in error.errors():
        # Drop pydantic's internal tags (function-after[...], list[...] members) from the path.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
        member = loc[-1] if loc and isinstance(loc[-1], str) and loc[-1] in _MEMBERS else None
        if member is None:
            out[(len(out),)] = {**err, "loc": loc}
            continue
        key = ("union", *loc[:-1])
        merged = out.setdefault(key, {**err, "loc": loc[:-1], "members": []})
        merged["members"].append(_MEMBERS[member])
        if err["type"] == "finite_number":  # the one member message that says more than a type
            merged["specific"] = err["msg"]
    for err in out.values():
        if err.get("members"):
            names = err["members"]
            listed = ", ".join(names[:-1]) + f" or {names[-1]}" if len(names) > 1 else names[0]
            err["msg"] = err.get("specific") or f"Input should be a {listed}"
    return list(out.values())


def problems_from(
    error: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> list[str]:
    """One line per pydantic error: path, bad value, what is valid."""
    lines = []
    errors = _merged(error)
    for err in errors[:MAX_PROBLEMS]:
        loc = err["loc"]
        path = dotted(loc, prefix)
        kind = err["type"]
        if kind == "extra_forbidden":
            valid = _fields_at(model, loc[:-1])
            hint = f"valid keys here: {', '.join(valid)}" if valid else "check its spelling"
            lines.append(f"{path}: unknown key; {hint}")
            continue
        if kind == "missing":
            lines.append(f"{path}: required but missing")
            continue
        msg = err["msg"].removeprefix("Value error, ")
        value = err.get("input")
        if not loc:
            lines.append(f"{prefix}: {msg}" if prefix else msg)
        elif isinstance(value, dict):  # a whole section failed a cross-field check
            lines.append(f"{path}: {msg}")
        else:
            lines.append(f"{path}: {short(value)} is invalid: {msg}")
    if len(errors) > MAX_PROBLEMS:
        lines.append(f"... and {len(errors) - MAX_PROBLEMS} more problems")
    return lines


def unreadable(err: BaseException) -> str:
    """Why YAML text that the parser raised ``err`` on cannot be read, in a few words."""
    if isinstance(err, RecursionError):
        return "nested deeper than Python can read; flatten it"
    text = str(err).splitlines()[0]
    if "integer string conversion" in text:  # Python's guard against quadratic int parsing
        return "a number of more than 4300 digits; no setting takes one that large"
    return text


def read_yaml(path: Path) -> Any:
    """``yaml.safe_load`` of a file; anything unreadable is a :class:`ConfigError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(
            f"not UTF-8 text (byte {err.start}); save the file as UTF-8", source=str(path)
        ) from None
    except OSError as err:
        raise ConfigError(f"cannot read the file: {err.strerror}", source=str(path)) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise ConfigError(f"not valid YAML{where}: {problem}", source=str(path)) from None
    except (ValueError, RecursionError) as err:
        raise ConfigError(f"not readable YAML: {unreadable(err)}", source=str(path)) from None
