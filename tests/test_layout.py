"""The package's layout: no function or method over MAX_LINES lines.

Length as ``ast`` gives it, ``end_lineno - lineno + 1``, from the first decorator when there is
one (``lineno`` is the ``def`` line): decorators, signature, docstring and body; a nested
function counts inside its parent and on its own. A long function is split into a short one and
named private helpers (pure helpers that compute, a thin function that acts), not allowed here.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "tlmsearch"
MAX_LINES = 100

# "path:qualified name" of functions still over MAX_LINES while someone splits them, each with
# a comment saying so, e.g. "tlmsearch/search/runner.py:_execute" (129 lines) was here until
# its split. An entry that is no longer over fails the test too: remove it, so the allowance
# cannot outlive its reason.
ALLOWED: set[str] = set()


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, length) of every function and method in ``tree``, nested ones too."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            assert node.end_lineno is not None
            yield name, node.end_lineno - start + 1
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _lengths() -> dict[str, int]:
    """{"path:qualified name": length} of every function in the package."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for name, length in _functions(ast.parse(path.read_text(encoding="utf-8"), rel)):
            out[f"{rel}:{name}"] = length
    return out


def test_the_walk_finds_functions_methods_and_nested_ones() -> None:
    tree = ast.parse(
        "def f():\n    def g():\n        pass\n\n"
        "class C:\n    @property\n    def m(self):\n        return 1\n"
        "if True:\n    async def h():\n        pass\n"
    )
    assert dict(_functions(tree)) == {"f": 3, "f.g": 2, "C.m": 3, "h": 2}


def test_no_function_is_over_the_limit() -> None:
    lengths = _lengths()
    assert len(lengths) > 500  # the walk saw the package
    long = {key: n for key, n in lengths.items() if n > MAX_LINES}
    new = [
        f"{key.split(':')[1]} in {key.split(':')[0]}: {n} lines"
        for key, n in sorted(long.items())
        if key not in ALLOWED
    ]
    stale = [
        f"{key}: {'no longer found' if key not in lengths else f'{lengths[key]} lines'}"
        for key in sorted(ALLOWED - set(long))
    ]
    problems = []
    if new:
        problems.append(
            f"over {MAX_LINES} lines (split each into a short function and named private "
            "helpers):\n  " + "\n  ".join(new)
        )
    if stale:
        problems.append(
            f"ALLOWED entries no longer over {MAX_LINES} lines (remove them from ALLOWED in "
            "tests/test_layout.py):\n  " + "\n  ".join(stale)
        )
    assert not problems, "\n".join(problems)
