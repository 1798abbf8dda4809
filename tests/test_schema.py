"""The study YAML's JSON Schema and reference (tlmsearch/config/schema.py, `tlmsearch schema`)."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field, ValidationError
from test_fuzz_studies import _bases, mutate_tree, schema_fields, set_field
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import StudyConfig
from tlmsearch.config.schema import (
    DOC_FILES,
    REFRESH,
    _number,
    field_comments,
    reference_markdown,
    schema_text,
    space_schema,
    study_schema,
)
from tlmsearch.errors import ConfigError, Strict
from tlmsearch.widths.space import find_space, load_space

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
GENERATED = {
    "study": lambda: schema_text(study_schema()),
    "space": lambda: schema_text(space_schema()),
    "markdown": reference_markdown,
}


@pytest.mark.parametrize("kind", sorted(DOC_FILES))
def test_the_committed_schema_and_reference_are_current(kind: str) -> None:
    path = ROOT / DOC_FILES[kind]
    assert path.exists(), f"{DOC_FILES[kind]} is missing: run `{REFRESH}`"
    assert path.read_text() == GENERATED[kind](), (
        f"{DOC_FILES[kind]} is stale (the pydantic models or their comments changed): "
        f"run `{REFRESH}` and commit the result"
    )


class _Example(Strict):
    plain: int = 1
    beside: int = 2  # a comment beside
    # a comment above,
    # on two lines
    above: int = Field(3, ge=0)

    spaced: int = 4

    # both: above
    both: int = Field(
        5,  # and inside
        ge=0,
    )  # and after
    typed: int = 6  # type: ignore[misc]


def test_field_comments_reads_the_comments_beside_and_directly_above_a_field() -> None:
    assert field_comments(_Example) == {
        "beside": "a comment beside",
        "above": "a comment above, on two lines",
        "both": "both: above and inside and after",
    }


def test_every_setting_is_documented_in_the_schema() -> None:
    """A field with no comment would be a blank row in docs/reference.md: comment it in
    config.py / space.py (a section, a $ref, is documented by its own table)."""
    schema = study_schema()
    nodes = {"StudyConfig": schema, **schema["$defs"]}
    bare = [
        f"{name}.{field}"
        for name, node in nodes.items()
        for field, prop in node["properties"].items()
        if not prop.get("description") and "$ref" not in json.dumps(prop)
    ]
    assert bare == [], f"fields without a comment in tlmsearch/config.py or space.py: {bare}"


def test_the_reference_has_a_row_for_every_field_of_every_section() -> None:
    text = reference_markdown()
    schema = study_schema()
    for name, node in {"StudyConfig": schema, **schema["$defs"]}.items():
        section = text.split(f"### {name}\n", 1)[1].split("\n### ", 1)[0]
        for field in node["properties"]:
            assert f"| `{field}` |" in section, (name, field)
    assert "YAML path: `search.racing`" in text
    assert '| `pruner` | `"median"` \\| `"percentile"`' in text  # a pipe inside a cell


def _validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_the_shipped_studies_and_spaces_pass_their_schema() -> None:
    study, space = _validator(study_schema()), _validator(space_schema())
    for path in sorted((ROOT / "studies").glob("*.yaml")):
        assert not list(study.iter_errors(yaml.safe_load(path.read_text()))), path
    for path in sorted((ROOT / "search_spaces").glob("*.yaml")):
        assert not list(space.iter_errors(yaml.safe_load(path.read_text()))), path


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda d: d["search"].update(pruner="mediam"), "'mediam' is not one of"),
        (lambda d: d["model"].update(n_layr=4), "'n_layr' was unexpected"),
        (lambda d: d["train"].update(tokens=0), "0 is less than the minimum of 1"),
        (lambda d: d.pop("model"), "'model' is a required property"),
        (lambda d: d.update(space={"dimensions": {"shape": {"type": "grid"}}}), "'grid'"),
    ],
)
def test_the_schema_rejects_what_validate_rejects(edit: Any, needle: str) -> None:
    doc = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    edit(doc)
    messages = [e.message for e in _validator(study_schema()).iter_errors(doc)]
    assert any(needle in m for m in messages), messages


def test_the_schema_accepts_every_study_the_models_accept() -> None:
    """An editor must never flag a study that `tlmsearch validate` takes: mutated shipped
    studies (the fuzzer's mutations) that the pydantic models accept pass the schema too.
    Strict JSON validation, because pydantic's lax mode reads "0.5" as 0.5, which an editor
    rightly flags."""
    validator = _validator(study_schema())
    bases, fields = _bases(), schema_fields()
    accepted = 0
    for i in range(400):
        rng = random.Random(f"schema/{i}")
        doc: Any = copy.deepcopy(rng.choice(bases))
        doc = set_field(rng, doc, fields) if rng.random() < 0.5 else mutate_tree(rng, doc)
        if not isinstance(doc, dict) or not isinstance(doc.get("space"), (dict, str)):
            continue
        space = doc["space"]
        if isinstance(space, str):  # a name or a path: what study_from_mapping reads in
            try:
                space = load_space(find_space(space, ROOT / "studies")).model_dump(mode="json")
            except ConfigError:
                continue
        try:
            StudyConfig.model_validate_json(json.dumps({**doc, "space": space}), strict=True)
        except (ValidationError, ValueError):
            continue
        accepted += 1
        errors = [e.message for e in validator.iter_errors(doc)]
        assert not errors, (i, errors)
    assert accepted >= 40  # enough of the mutations stay valid to mean something


def test_the_schema_accepts_the_short_forms_the_models_read() -> None:
    doc = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    doc["data"] = {**doc.get("data", {}), "sources": "classics"}  # one source, not a list
    StudyConfig.model_validate(doc)  # quickstart's space is inline
    assert not list(_validator(study_schema()).iter_errors(doc))


def test_schema_command_prints_the_schema_and_writes_files(tmp_path: Path) -> None:
    result = runner.invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == json.loads(schema_text(study_schema()))
    result = runner.invoke(app, ["schema", "--space", "--out", str(tmp_path / "s.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "s.json").read_text())["title"] == "SearchSpace"
    result = runner.invoke(app, ["schema", "--markdown"])
    assert result.output == reference_markdown()


def test_schema_command_refuses_space_with_markdown() -> None:
    result = runner.invoke(app, ["schema", "--space", "--markdown"])
    assert result.exit_code == 2
    assert "--space and --markdown" in result.output


@given(
    st.one_of(st.integers(-(2**70), 2**70), st.sampled_from([10**15, 2**32 - 1, 2**21, -(10**6)]))
)
def test_a_bound_reads_as_the_number_it_is(v: int) -> None:
    """docs/reference.md writes 10^15, 2^20, (2^32 - 1): each still evaluates to the bound."""
    text = _number(v)
    assert eval(text.replace("^", "**").replace(",", "")) == v
