"""Reading a study: the YAML file, ``--set a.b=value`` overrides (typed by YAML, validated like
the file), a search space named by file, then :func:`~tlmsearch.config.study.validated`. Every
problem becomes one line naming the YAML path, the bad value and what is valid
(:class:`tlmsearch.errors.ConfigError`). No torch, no ray.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from tlmsearch.config.study import StudyConfig, validated
from tlmsearch.errors import ConfigError, read_yaml, short, unreadable
from tlmsearch.widths.space import find_space, load_space


def parse_override(text: str) -> tuple[list[str], Any]:
    """``search.pruner=none`` -> (['search', 'pruner'], 'none'); the value is typed by YAML."""
    key, sep, raw = text.partition("=")
    path = key.strip().split(".")
    if not sep or not all(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", p) for p in path):
        raise ConfigError(f"--set {text!r}: expected KEY.PATH=VALUE, e.g. search.pruner=none")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    except (ValueError, RecursionError) as err:  # a 5000-digit integer, [[[[...]]]]
        why = unreadable(err)
        raise ConfigError(f"--set {short(text)}: the value cannot be read: {why}") from None
    return path, value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    for text in overrides:
        path, value = parse_override(text)
        node = data
        for i, part in enumerate(path[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(path[: i + 1])
                raise ConfigError(f"--set {text!r}: {where} is {short(child)}, not a section")
            node = child
        node[path[-1]] = value
    return data


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        found = path.is_file()
    except OSError:  # e.g. a name too long for the file system
        found = False
    if not found:
        raise ConfigError(f"study file not found: {path}")
    data = read_yaml(path)
    if data is None:
        raise ConfigError(
            "the file is empty; a study needs at least name, space and model "
            "(see studies/quickstart.yaml)",
            source=str(path),
        )
    if not isinstance(data, dict):
        raise ConfigError(
            f"(top level): expected a mapping of sections (name, space, model, ...), "
            f"but got a {type(data).__name__}",
            source=str(path),
        )
    return data


def study_from_mapping(
    data: Mapping[str, Any], base: Path | None = None, source: str | None = None
) -> StudyConfig:
    """Validate a study given as a mapping (``space`` may name a file under ``base``)."""
    data = dict(data)
    space = data.get("space")
    if isinstance(space, str):
        try:
            data["space"] = load_space(find_space(space, base)).model_dump(mode="json")
        except ConfigError as err:
            raise ConfigError([f"space: {p}" for p in err.problems], source) from None
    return validated(data, source)


def load_study(path: str | Path, overrides: Sequence[str] = ()) -> StudyConfig:
    """Read, override, validate. Raises :class:`ConfigError` with one line per problem."""
    path = Path(path)
    data = _read_yaml(path)
    try:
        data = apply_overrides(data, overrides)
    except ConfigError as err:
        raise ConfigError(err.problems, str(path)) from None
    return study_from_mapping(data, base=path.parent, source=str(path))
