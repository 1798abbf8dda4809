"""No import circles in tlmsearch, function-local imports included (docs/contributing.md, rule 19).

A function-local import hides a circle from Python at import time but not from the reader: the
two modules still need each other. The graph is read from the source with :mod:`ast`, so these
tests import nothing but ``tlmsearch`` itself (to find its folder).
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import pytest

import tlmsearch

ROOT = Path(tlmsearch.__file__).parent


def _name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_only(tree: ast.Module) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (never run: no circle)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {tlmsearch module it imports: line}, at any depth of the file.

    ``from pkg import sub`` is an edge to the submodule ``pkg.sub`` (not to ``pkg``'s
    ``__init__``); a parent package that Python runs on the way is not an edge.
    """
    files = {_name(p): p for p in sorted(root.rglob("*.py"))}
    graph: dict[str, dict[str, int]] = {}
    for mod, path in files.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        skip = _type_only(tree)
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1 folders
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                subs = [f"{base}.{alias.name}" for alias in node.names]
                targets = [s if s in files else base for s in subs]
            else:
                continue
            for target in targets:
                if target in files and target != mod:
                    edges.setdefault(target, node.lineno)
        graph[mod] = edges
    return graph


def find_cycle(graph: dict[str, dict[str, int]]) -> list[str]:
    """One cycle ``[a, b, ..., a]`` of ``graph``, or ``[]`` when it has none.

    >>> find_cycle({"a": {"b": 1}, "b": {"a": 1}, "c": {"a": 1}})
    ['a', 'b', 'a']
    """
    live = {m: set(edges) & set(graph) for m, edges in graph.items()}
    while True:  # drop modules that import no live module: none of them is on a cycle
        sinks = {m for m, edges in live.items() if not edges}
        if not sinks:
            break
        live = {m: edges - sinks for m, edges in live.items() if m not in sinks}
    if not live:
        return []
    path = [min(live)]  # every live module imports a live one: walk until one repeats
    while path[-1] not in path[:-1]:
        path.append(min(live[path[-1]]))
    return path[path.index(path[-1]) :]


def _reaches(graph: dict[str, dict[str, int]], start: str, goal: str) -> bool:
    seen, todo = set(), [start]
    while todo:
        mod = todo.pop()
        if mod == goal:
            return True
        if mod not in seen:
            seen.add(mod)
            todo += graph.get(mod, {})
    return False


def test_find_cycle_on_known_graphs() -> None:
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {}}) == []
    assert find_cycle({"a": {"b": 1}, "b": {"c": 1}, "c": {"b": 1}}) == ["b", "c", "b"]
    assert find_cycle({"x": {"a": 1}, "a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}}) == [
        "a",
        "b",
        "c",
        "a",
    ]


def test_the_graph_sees_function_local_and_submodule_imports() -> None:
    graph = import_graph()
    # samplers.make_sampler imports BaselineBlindSampler inside the function (optuna stays lazy)
    assert "tlmsearch.search.sampling.baseline" in graph["tlmsearch.search.sampling.samplers"]
    # `from tlmsearch.search import export` in runner.py: the module, not the package
    assert "tlmsearch.search.export" in graph["tlmsearch.search.runner"]
    assert "tlmsearch.search" not in graph["tlmsearch.search.runner"]


def test_no_tlmsearch_module_imports_itself_back() -> None:
    graph = import_graph()
    cycle = find_cycle(graph)
    steps = [f"{a} imports {b} (line {graph[a][b]})" for a, b in itertools.pairwise(cycle)]
    assert not cycle, "an import circle: " + "; ".join(steps)


@pytest.mark.parametrize(
    "a, b",
    [
        ("tlmsearch.search.sampling.baseline", "tlmsearch.search.sampling.samplers"),
        ("tlmsearch.search.export", "tlmsearch.search.sampling.race"),
        ("tlmsearch.search.status", "tlmsearch.search.sampling.race"),
    ],
)
def test_circles_that_once_existed_stay_broken(a: str, b: str) -> None:
    graph = import_graph()
    both_ways = _reaches(graph, a, b) and _reaches(graph, b, a)
    assert not both_ways, f"{a} and {b} import each other"


def test_leaf_modules_import_nothing_that_needs_them() -> None:
    """attrs.py imports nothing at all; records.py, of the search package, only the keys."""
    graph = import_graph()
    attrs = ast.parse((ROOT / "search" / "attrs.py").read_text())
    assert not [n for n in ast.walk(attrs) if isinstance(n, ast.Import | ast.ImportFrom)]
    search = {m for m in graph["tlmsearch.search.records"] if m.startswith("tlmsearch.search")}
    assert search <= {"tlmsearch.search.attrs", "tlmsearch.search.execution.failures"}


SUBPACKAGES = ("sampling", "execution", "arrays", "tracking")
DRIVERS = ("runner", "driver", "cli", "best", "status", "export", "ladder", "confirm")


def test_the_search_adapters_never_import_the_drivers_and_readers_above_them() -> None:
    """search/'s subpackages (Optuna's side, Ray's side, trial arrays, trackers) sit below the
    modules that drive a run and read what it stored (docs/contributing.md)."""
    graph = import_graph()
    adapters = [
        m for m in graph if any(m.startswith(f"tlmsearch.search.{s}") for s in SUBPACKAGES)
    ]
    assert len(adapters) >= 4 + 20  # the four packages and their modules
    above = {f"tlmsearch.search.{m}" for m in DRIVERS}
    wrong = {m: sorted(set(graph[m]) & above) for m in adapters if set(graph[m]) & above}
    assert not wrong


def test_the_search_package_keeps_few_modules_at_its_top() -> None:
    top = sorted(p.stem for p in (ROOT / "search").glob("*.py") if p.stem != "__init__")
    assert len(top) <= 14, top
    assert {p.name for p in (ROOT / "search").iterdir() if p.is_dir()} >= set(SUBPACKAGES)
