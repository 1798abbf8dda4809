"""Error lines: bounded however large the bad value, one line per problem, unreadable files."""

from __future__ import annotations

from pathlib import Path

import pytest
from isolation import recursion_limit
from pydantic import ValidationError

from tlmsearch.errors import ConfigError


def _bomb() -> list:
    """10**9 leaves in nine small lists (what YAML aliases build): its full repr never ends."""
    node: list = [1] * 10
    for _ in range(8):
        node = [node] * 10
    return node


def test_short_is_bounded_for_any_value() -> None:
    from tlmsearch.errors import short

    assert short("two") == "'two'" and short(1.5) == "1.5" and short(None) == "None"
    for value in (_bomb(), 10**4000, "a" * 10**6, {str(i): i for i in range(10**5)}):
        assert len(short(value)) <= 60


def test_problems_from_merges_union_members_and_caps_lines() -> None:
    from tlmsearch.errors import MAX_PROBLEMS, problems_from
    from tlmsearch.widths.space import Dimension

    with pytest.raises(ValidationError) as info:
        Dimension.model_validate({"type": "categorical", "choices": [1.5, float("nan"), [1]]})
    assert problems_from(info.value, "space.dimensions.r_start") == [
        "space.dimensions.r_start.choices[1]: nan is invalid: Input should be a finite number",
        "space.dimensions.r_start.choices[2]: [1] is invalid: Input should be a string, "
        "integer, number or boolean",
    ]
    with pytest.raises(ValidationError) as info:
        Dimension.model_validate({"type": "categorical", "choices": [_bomb()] * 100})
    lines = problems_from(info.value)
    assert len(lines) == MAX_PROBLEMS + 1 and lines[-1] == "... and 80 more problems"
    assert all(len(line) < 200 for line in lines)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"name: \xff\xfe\n", "not UTF-8 text (byte 6); save the file as UTF-8"),
        # deeper than the limit the test sets (a compile earlier may have lifted it to 2,000)
        (b"model: " + b"[" * 1200 + b"]" * 1200, "nested deeper than Python can read"),
        (b"model: {n_layer: " + b"1" * 5000 + b"}", "a number of more than 4300 digits"),
        (b"a: [b", "not valid YAML at line 1, column 6"),
    ],
)
def test_read_yaml_turns_any_unreadable_file_into_one_line(
    tmp_path: Path, content: bytes, needle: str
) -> None:
    from tlmsearch.errors import read_yaml

    path = tmp_path / "x.yaml"
    path.write_bytes(content)
    with recursion_limit(1000), pytest.raises(ConfigError) as info:
        read_yaml(path)
    assert needle in str(info.value) and str(path) in str(info.value)
