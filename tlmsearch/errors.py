"""Errors for bad user input, and one readable line per problem.

Every message names the YAML path, the bad value and what would be valid, e.g.
``search.pruner: 'mediam' is not one of median, percentile, ...``. The CLI turns a
:class:`ConfigError` into that text and exit status 2.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError


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
    """Base of every config object: unknown keys are errors, objects are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def dotted(loc: tuple[Any, ...], prefix: str = "") -> str:
    """``('search', 'seeds', 0)`` -> ``search.seeds[0]``."""
    out = prefix
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _short(value: Any) -> str:
    text = repr(value)
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


def problems_from(
    error: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> list[str]:
    """One line per pydantic error: path, bad value, what is valid."""
    lines = []
    for err in error.errors():
        # Drop pydantic's internal tags (function-after[...], union member names) from the path.
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and "[" in p))
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
            lines.append(msg)
        elif isinstance(value, dict):  # a whole section failed a cross-field check
            lines.append(f"{path}: {msg}")
        else:
            lines.append(f"{path}: {_short(value)} is invalid: {msg}")
    return lines
