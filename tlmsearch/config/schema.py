"""The study YAML's JSON Schema and its Markdown reference, generated from the pydantic models.

A field's documentation is the comment beside or directly above it in ``tlmsearch/config/`` /
``space.py`` (the code's own words, so the reference cannot drift from it); a section's is its
class docstring. ``tlmsearch schema`` prints the schema (``--space`` a search-space file's,
``--markdown`` the reference); ``make docs`` writes ``docs/study.schema.json``,
``docs/space.schema.json`` and ``docs/reference.md``, and ``tests/test_schema.py`` fails when a
committed one is stale. No torch, no ray.

    >>> study_schema()["properties"]["search"]["$ref"]
    '#/$defs/SearchConfig'
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import re
import textwrap
import tokenize
import typing
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from tlmsearch.config import StudyConfig
from tlmsearch.widths.space import SearchSpace

SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# The files `make docs` writes: (what `tlmsearch schema` prints, the committed path).
DOC_FILES = {
    "study": "docs/study.schema.json",
    "space": "docs/space.schema.json",
    "markdown": "docs/reference.md",
}
REFRESH = "make docs"


def field_comments(cls: type[BaseModel]) -> dict[str, str]:
    """Each field's comment in ``cls``'s own source: the comment lines directly above its
    assignment (no blank line between) and any comment on the assignment's own lines.

    >>> field_comments(StudyConfig)["target"]
    'the full-scale model the proxy stands for'
    """
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # a class built at run time has no source
        return {}
    lines = source.splitlines()
    comments: dict[int, str] = {}  # 1-based line -> its comment text
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    body = ast.parse(source).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for node in body.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line >= 1 and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        beside = [
            comments[i]
            for i in range(node.lineno, (node.end_lineno or node.lineno) + 1)
            if i in comments
        ]
        text = " ".join(c for c in above + beside if c and not c.startswith(("type:", "fmt:")))
        if text:
            found[node.target.id] = text
    return found


def _models(root: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """Every pydantic model reachable from ``root``'s fields, by class name (the $defs keys)."""
    seen: dict[str, type[BaseModel]] = {}

    def visit(tp: Any) -> None:
        if isinstance(tp, type) and issubclass(tp, BaseModel) and tp.__name__ not in seen:
            seen[tp.__name__] = tp
            for field in tp.model_fields.values():
                visit(field.annotation)
        for arg in typing.get_args(tp):
            visit(arg)

    visit(root)
    return seen


def _describe(schema: dict[str, Any], root: type[BaseModel]) -> dict[str, Any]:
    """``schema`` with every property's comment as its ``description`` (what editors show)."""
    for name, cls in _models(root).items():
        node = schema if cls is root else schema["$defs"][name]
        for field, text in field_comments(cls).items():
            prop = node["properties"].get(field)
            if prop is not None and "description" not in prop:
                # the comments speak Python; a YAML user writes null
                prop["description"] = re.sub(r"\bNone\b", "null", text)
        for field, info in cls.model_fields.items():  # pydantic leaves these out
            prop = node["properties"].get(field)
            if prop is not None and info.default_factory is not None and "default" not in prop:
                prop["default"] = to_jsonable_python(info.get_default(call_default_factory=True))
    return schema


def space_schema() -> dict[str, Any]:
    """The JSON Schema of a search-space file (``search_spaces/*.yaml``)."""
    schema = _describe(SearchSpace.model_json_schema(), SearchSpace)
    return {"$schema": SCHEMA_DIALECT, **schema}


def study_schema() -> dict[str, Any]:
    """The JSON Schema of a study YAML (``studies/*.yaml``), as ``load_study`` reads it."""
    schema = _describe(StudyConfig.model_json_schema(), StudyConfig)
    props = schema["properties"]
    # A study may name its space (a file under search_spaces/ or a path) instead of inlining it
    # (config.study_from_mapping resolves it before the model sees it).
    props["space"] = {
        "anyOf": [
            {
                "type": "string",
                "description": "a shipped space's name (paper, blocks, continuous) or a path "
                "to a search-space YAML",
            },
            {"$ref": "#/$defs/SearchSpace"},
        ],
        "description": "the search space: a name, a path, or the space itself inline",
    }
    # DataConfig reads one source given as a plain string as a list of one.
    sources = schema["$defs"]["DataConfig"]["properties"]["sources"]
    items = {k: sources.pop(k) for k in ("items", "minItems") if k in sources}
    sources["anyOf"] = [{"type": "string"}, {"type": "array", **items}]
    sources.pop("type", None)
    # ``mlflow: true`` / ``wandb: false`` turn a tracker on with its defaults, or off
    tracking = schema["$defs"]["TrackingConfig"]["properties"]
    for name in ("mlflow", "wandb"):
        tracking[name]["anyOf"].append({"type": "boolean"})
    return {"$schema": SCHEMA_DIALECT, **schema}


def schema_text(schema: dict[str, Any]) -> str:
    """The committed form of a schema: sorted keys, two-space indent, one newline at the end."""
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


# -------------------------------------------------------------------------------------------------
# Markdown reference


def _type(prop: dict[str, Any]) -> str:
    """A property's type in words: ``int``, ``"cosine" | "wsd"``, ``list of int``, a link."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "enum" in prop:
        return " | ".join(f"`{json.dumps(v)}`" for v in prop["enum"])
    if "const" in prop:
        return f"`{json.dumps(prop['const'])}`"
    if "anyOf" in prop:
        arms = [a for a in prop["anyOf"] if a.get("type") != "null"]
        text = " or ".join(_type(a) for a in arms)
        return text + (" or null" if len(arms) < len(prop["anyOf"]) else "")
    kind = prop.get("type")
    if kind == "array":
        if "prefixItems" in prop:
            return "[" + ", ".join(_type(p) for p in prop["prefixItems"]) + "]"
        item = _type(prop.get("items", {}))
        return "list of " + (f"({item})" if " or " in item else item)
    if kind == "object":
        extra = prop.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            return "mapping of name to " + _type(extra)
        return "mapping"
    words = {"integer": "int", "number": "float", "string": "str", "boolean": "bool"}
    return words.get(kind, "any") if kind else "any"


_BOUNDS = (
    ("minimum", ">= {}"),
    ("exclusiveMinimum", "> {}"),
    ("maximum", "<= {}"),
    ("exclusiveMaximum", "< {}"),
    ("minItems", "length >= {}"),
    ("maxItems", "length <= {}"),
    ("minProperties", "entries >= {}"),
)


def _limits(prop: dict[str, Any]) -> str:
    """A property's bounds, also those inside an ``anyOf`` arm (``int >= 1 or null``)."""
    parts = [fmt.format(_number(prop[k])) for k, fmt in _BOUNDS if k in prop]
    for arm in prop.get("anyOf", []):
        parts += [fmt.format(_number(arm[k])) for k, fmt in _BOUNDS if k in arm]
    if prop.get("type") == "array" and "prefixItems" in prop:
        # a fixed-length tuple's type says its length already
        parts = [p for p in parts if not p.startswith("length")]
    return ", ".join(dict.fromkeys(parts))


def _number(v: Any) -> str:
    """A bound as a reader would write it: 10^15, 2^20, 2^32 - 1; small numbers as they are."""
    if isinstance(v, float) and v.is_integer() and abs(v) >= 1e6:
        v = int(v)
    if isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**6:
        sign, v = "-" if v < 0 else "", abs(v)
        if v == 10 ** (len(str(v)) - 1):
            return f"{sign}10^{len(str(v)) - 1}"
        if v & (v - 1) == 0:
            return f"{sign}2^{v.bit_length() - 1}"
        if (v + 1) & v == 0:
            return f"{sign}(2^{v.bit_length()} - 1)"
        return f"{sign}{v:,}"
    return json.dumps(v) if isinstance(v, bool) or v is None else str(v)


def _default(prop: dict[str, Any], required: bool) -> str:
    if required:
        return "**required**"
    if "default" not in prop:
        return ""
    v = prop["default"]
    if isinstance(v, dict) and v:
        return "(see its section)"
    return (
        f"`{json.dumps(v)}`"
        if not isinstance(v, (int, float)) or isinstance(v, bool)
        else f"`{_number(v)}`"
    )


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def _section(name: str, node: dict[str, Any], path: str) -> list[str]:
    out = [f"### {name}", ""]
    if path:
        out += [f"YAML path: `{path}`", ""]
    if node.get("description"):
        out += [" ".join(node["description"].split()), ""]
    required = set(node.get("required", []))
    out += ["| field | type | default | limits | meaning |", "|---|---|---|---|---|"]
    for field, prop in node["properties"].items():
        cells = [
            f"`{field}`",
            _type(prop),
            _default(prop, field in required),
            _limits(prop),
            prop.get("description", ""),
        ]
        out.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return [*out, ""]


def _paths(schema: dict[str, Any]) -> dict[str, str]:
    """Each section's YAML path(s) from the top (``search.racing``), by $defs name."""
    paths: dict[str, list[str]] = {}

    def refs(prop: dict[str, Any]) -> list[str]:
        found = [prop["$ref"].rsplit("/", 1)[-1]] if "$ref" in prop else []
        for key in ("anyOf", "items", "additionalProperties"):
            sub = prop.get(key)
            for s in sub if isinstance(sub, list) else [sub] if isinstance(sub, dict) else []:
                found += refs(s)
        return found

    def walk(node: dict[str, Any], prefix: str) -> None:
        for field, prop in node.get("properties", {}).items():
            path = f"{prefix}{field}"
            if prop.get("type") == "array" or any(
                a.get("type") == "array" for a in prop.get("anyOf", [])
            ):
                path += "[]"
            elif "additionalProperties" in prop:
                path += ".<name>"
            for name in refs(prop):
                if path not in paths.setdefault(name, []):
                    paths[name].append(path)
                    walk(schema["$defs"][name], path + ".")

    walk(schema, "")
    return {name: ", ".join(f"{p}" for p in ps) for name, ps in paths.items()}


def reference_markdown() -> str:
    """docs/reference.md: every section of a study YAML, its fields, types, defaults, limits."""
    schema = study_schema()
    paths = _paths(schema)
    out = [
        "# Study YAML reference",
        "",
        f"<!-- Generated from the pydantic models by `tlmsearch schema --markdown` ({REFRESH}); "
        "do not edit by hand: edit the comments beside the fields in tlmsearch/config/ and "
        "tlmsearch/widths/space.py. -->",
        "",
        "Every key a study YAML (`studies/*.yaml`) may hold. Unknown keys are errors; "
        "`tlmsearch validate STUDY` checks a file (exit 2 names the YAML path, the bad value "
        "and what is valid). The same facts as a JSON Schema, for editor completion: "
        "[study.schema.json](study.schema.json) (a search-space file: "
        "[space.schema.json](space.schema.json)): a study whose first line is "
        "`# yaml-language-server: $schema=../docs/study.schema.json` (the path relative to "
        "the YAML file) gets completion and validation in editors that read the modeline. "
        "Some rules span fields (e.g. `d_model` divisible by `n_head`, racing needs "
        "`search.baseline`); `validate` states them when they fail.",
        "",
        "## Sections",
        "",
    ]
    order = ["StudyConfig", *sorted(schema["$defs"], key=lambda n: paths.get(n, "~"))]
    for name in order:
        where = paths.get(name, "")
        out.append(f"- [{name}](#{name.lower()})" + (f": `{where}`" if where else ""))
    out.append("")
    out += _section("StudyConfig", {**schema, "description": "The top level of a study YAML."}, "")
    for name in order[1:]:
        out += _section(name, schema["$defs"][name], paths.get(name, ""))
    return "\n".join(out).rstrip() + "\n"
