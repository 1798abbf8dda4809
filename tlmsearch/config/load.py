"""Reading a study: the YAML file, ``--set a.b=value`` overrides (typed by YAML, validated like
the file), a search space named by file, then :func:`~tlmsearch.config.study.validated`. Every
problem becomes one line naming the YAML path, the bad value and what is valid
(:class:`tlmsearch.errors.ConfigError`). No torch, no ray.

A run dir's frozen study.yaml is read once by :func:`frozen_study` (every reader of a run dir
then takes the typed study): validated by the same models, and readable when an older version
wrote it (its unknown keys dropped, with a warning naming each).
"""

from __future__ import annotations

import contextlib
import copy
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from tlmsearch.config.study import PartialStudy, StudyConfig, validated
from tlmsearch.errors import ConfigError, dotted, problems_from, read_yaml, short, unreadable
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


def with_stats_from(cfg: StudyConfig, path: str | Path) -> StudyConfig:
    """``cfg`` (a run's) judged by the ``stats`` section of the study YAML at ``path``: its
    contrasts, equivalence margin, level, family and 2 x 2 reading (the whole section replaces
    the run's), to ask a stored run new questions. What
    trained is unchanged, and nothing in the run dir is written; each contrast must name the
    run's schedules and setting dimensions. Raises :class:`ConfigError` naming the field."""
    from pydantic import ValidationError

    from tlmsearch.config.checks import contrast_problems
    from tlmsearch.config.search import StatsConfig

    path = Path(path)
    where = f"--stats-from {path}"
    try:
        found = path.is_file()
    except OSError:
        found = False
    if not found:
        raise ConfigError(f"{where}: file not found; give a study YAML with a stats section")
    try:
        data = read_yaml(path)
    except ConfigError as err:
        raise ConfigError(err.problems, where) from None
    if not isinstance(data, dict) or "stats" not in data:
        raise ConfigError(
            "stats: missing; --stats-from reads the stats section of a study YAML (e.g. "
            "stats.contrasts, stats.equivalence), and this file has none",
            source=where,
        )
    if not isinstance(data["stats"], dict):
        raise ConfigError(
            f"stats: {short(data['stats'])} is not a section; give a mapping, e.g. "
            "stats: {contrasts: [...], equivalence: 0.01}",
            source=where,
        )
    try:
        stats = StatsConfig.model_validate(data["stats"])
    except ValidationError as err:
        raise ConfigError(problems_from(err, "stats", StatsConfig), where) from None
    judged = cfg.model_copy(update={"stats": stats})
    problems = contrast_problems(judged)
    if problems:
        raise ConfigError(problems, where)
    return judged


# -------------------------------------------------------------------------------------------------
# A run dir's frozen study.yaml


class StudyYamlWarning(UserWarning):
    """A run dir's study.yaml was read without keys this version cannot read (each named)."""


def frozen_study(
    data: Mapping[str, Any], source: str | None = None, base: Path | None = None
) -> StudyConfig:
    """A run dir's study.yaml (as a mapping) as the typed study every reader of the run takes.

    Validated by the same models as a study file, without the checks of the machine it runs
    on (``config/checks.py``: trackers installed, hf models built): a run dir is read where it
    was not run. One that an older version wrote stays readable: a key this version does not
    know (a field since removed or renamed) or a value it no longer takes is dropped, so its
    model's default applies, with a :class:`StudyYamlWarning` naming each (``source``: the
    file, in the warning). A mapping that is still no whole study (a hand-written one without
    ``space``, a check across sections that fails) is a :class:`PartialStudy`: its sections
    read one by one. ``base``: where a ``space`` named by file is looked up.

    >>> frozen_study({"objectives": [{"metric": "tokens_per_s"}]}).objectives[0].sense
    'maximize'
    """
    return _read(data, source, base)[0]


def load_frozen_study(path: str | Path, *, whole: bool = False) -> StudyConfig:
    """A run dir's study.yaml file read by :func:`frozen_study` (no file: an empty
    :class:`PartialStudy`). ``whole``: what needs the whole study (status, export: its storage,
    model and space) gets a :class:`ConfigError` naming why it is not one, instead."""
    path = Path(path)
    if not path.is_file():
        if whole:
            raise ConfigError(f"study file not found: {path}")
        return PartialStudy()
    data = read_yaml(path)
    cfg, problems = _read(data if isinstance(data, Mapping) else {}, str(path), path.parent)
    if whole and isinstance(cfg, PartialStudy):
        raise ConfigError([f"not a study this version can read: {p}" for p in problems], str(path))
    return cfg


def _read(
    data: Mapping[str, Any], source: str | None, base: Path | None
) -> tuple[StudyConfig, list[str]]:
    """:func:`frozen_study`, and why the study is no whole one ([] when it is)."""
    data = copy.deepcopy(dict(data))
    space = data.get("space")
    if isinstance(space, str) and base is not None:  # as load_study reads it
        with contextlib.suppress(ConfigError):  # else dropped below, saying why
            data["space"] = load_space(find_space(space, base)).model_dump(mode="json")
    dropped: list[str] = []
    problems: list[str] = []
    cfg: StudyConfig | None = None
    # a whole study first (dropping keys, never whole sections), then section by section
    for model, sections in ((StudyConfig, False), (PartialStudy, True)):
        while cfg is None:
            try:
                with warnings.catch_warnings():  # a run dir's key under its old name is read
                    # as it is: nothing for the reader of a frozen study.yaml to rename
                    warnings.filterwarnings("ignore", "[^ ]+ is now called", FutureWarning)
                    cfg = model.model_validate(data)
            except ValidationError as err:
                gone = _drop_failing(data, err, sections)
                dropped += gone
                if not gone:
                    problems = problems or problems_from(err, model=StudyConfig)
                    break
        if cfg is not None:
            break
    if cfg is None:  # not expected: PartialStudy takes any mapping once failing keys are gone
        cfg, dropped = PartialStudy(), [*dropped, "every section"]
    if dropped:
        where = f"{source}: " if source else ""
        warnings.warn(
            f"{where}read without {'; '.join(dropped)}: this version does not read them (an "
            "older version's field or option?), so their defaults apply",
            StudyYamlWarning,
            stacklevel=3,
        )
    return cfg, problems


def _drop_failing(data: dict[str, Any], err: ValidationError, sections: bool) -> list[str]:
    """Remove from ``data`` the key each error of ``err`` points at (its deepest key present):
    a section (a mapping) only when it is an unknown key or ``sections``. One line per key
    removed: its YAML path and why."""
    targets: dict[tuple[int, str], tuple[dict[str, Any], str, str]] = {}
    for e in err.errors():
        parent, key, loc, node, path = None, "", (), data, ()
        for part in e["loc"]:
            if isinstance(node, dict) and part in node:
                path += (part,)
                parent, key, loc, node = node, str(part), path, node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                path += (part,)
                node = node[part]
            else:
                break
        unknown = e["type"] == "extra_forbidden" and loc == path
        if parent is None or (isinstance(parent[key], dict) and not (unknown or sections)):
            continue
        at = tuple(p for p in e["loc"] if not (isinstance(p, str) and "[" in p))  # no tags
        why = (
            "not a key of this version"
            if unknown
            else f"{short(parent[key])}: {e['msg']}"
            if at == loc
            else f"{dotted(at)}: {e['msg']}"
        )
        targets.setdefault((id(parent), key), (parent, key, f"{dotted(loc)} ({why})"))
    for parent, key, _ in targets.values():
        parent.pop(key, None)
    return [line for _, _, line in targets.values()]
