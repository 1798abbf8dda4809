"""The package's layout: no function or method over MAX_LINES lines; the layers import only
the layers before them (``LAYERS``); no package attribute hides one of its modules.

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


def test_no_package_attribute_shadows_its_submodule() -> None:
    """``from tlmsearch.evidence import tuned`` must give the module: a package that binds a
    name like one of its submodules (a function ``tuned`` imported into ``evidence/__init__``)
    makes that import return the function, depending on import order."""
    import importlib
    import pkgutil

    shadowed = []
    for init in sorted(PACKAGE.rglob("__init__.py")):
        package = ".".join(init.parent.relative_to(ROOT).parts)
        for info in pkgutil.iter_modules([str(init.parent)]):
            module = importlib.import_module(f"{package}.{info.name}")
            if getattr(importlib.import_module(package), info.name) is not module:
                shadowed.append(f"{package}.{info.name}")
    assert shadowed == [], f"package attributes that hide their submodule: {shadowed}"


# The layers, bottom first: a module imports, at module level (outside functions and
# ``if TYPE_CHECKING:``), only its own layer's modules and those of layers before it
# (docs/contributing.md, "Package layout"). Units are packages, but ``run_dir/tables.py`` sits
# far above ``run_dir/__init__.py`` (the layout leaf).
LAYERS: list[set[str]] = [
    {"constants", "errors", "reasons", "tables", "run_dir"},
    {"metrics"},
    {"widths"},
    {"config"},
    {"stats", "models", "data"},
    {"train"},
    {"analysis", "evidence"},
    {"run_dir.tables"},
    {"search"},
    {"report"},
    {"cli", "tlmsearch"},
    {"__main__", "cli_reference"},  # python -m tlmsearch; docs/cli.md from the CLI
]
RANK = {unit: n for n, layer in enumerate(LAYERS) for unit in layer}


def _unit(module: str) -> str:
    parts = module.split(".")
    if parts[1:3] == ["run_dir", "tables"]:
        return "run_dir.tables"
    return parts[1] if len(parts) > 1 else "tlmsearch"


def _is_module(dotted: str) -> bool:
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _module_level_imports(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(tlmsearch module, line) of every import that runs when the module is imported."""
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue  # a class body runs at import, but no module here imports inside one
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for n in ast.walk(node):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tlmsearch"):
                # `from P import x`: the module P.x where x is one (`from tlmsearch.run_dir
                # import tables` imports the tables, not the layout leaf), else P itself
                for a in n.names:
                    sub = f"{n.module}.{a.name}"
                    yield (sub if _is_module(sub) else n.module), n.lineno
            elif isinstance(n, ast.Import):
                yield from ((a.name, n.lineno) for a in n.names if a.name.startswith("tlmsearch"))


def test_every_package_is_in_a_layer() -> None:
    units = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir() if p.suffix == ".py"}
    units |= {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    units = (units - {"__init__"}) | {"tlmsearch", "run_dir.tables"}
    assert units == set(RANK), "add the new package or module to LAYERS (and to contributing.md)"


def test_layers_import_only_the_layers_before_them() -> None:
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for target, line in _module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            a, b = _unit(module), _unit(target)
            if a != b and RANK[b] >= RANK[a]:
                upward.append(f"{path.relative_to(ROOT)}:{line}: {target}")
    assert upward == [], "module-level imports of a layer not before this one:\n  " + "\n  ".join(
        upward
    )


# Imports inside functions that reach a layer not before the caller's: deferred so that the
# caller's layer stays importable without the heavy one (validate answers in about a second
# without torch), each named here with why. A new one fails the test, and so does an entry no
# longer needed, so the list only shrinks.
UPWARD_IN_FUNCTIONS: dict[tuple[str, str], str] = {
    ("tlmsearch.analysis", "tlmsearch.run_dir.tables"): "analyze reads a run dir's tables",
    ("tlmsearch.config.checks", "tlmsearch.data.tokens"): "val_bpb needs the token files' bytes",
    ("tlmsearch.config.checks", "tlmsearch.models.counting"): "hf / plugin models built on meta",
    ("tlmsearch.config.summary", "tlmsearch.train.parametrization"): "validate's effective LR",
    ("tlmsearch.evidence.power", "tlmsearch.run_dir.tables"): "plan --from reads a pilot run",
    ("tlmsearch.search.cli", "tlmsearch.report.html"): "a run ends by writing its report",
    ("tlmsearch.widths.budget", "tlmsearch.models.counting"): "an external model's counts",
}


def _function_level_imports(tree: ast.Module) -> Iterator[str]:
    """Every tlmsearch module imported inside a function (run at call time, not import)."""
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for n in ast.walk(fn):
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tlmsearch"):
                for a in n.names:
                    sub = f"{n.module}.{a.name}"
                    yield sub if _is_module(sub) else n.module
            elif isinstance(n, ast.Import):
                yield from (a.name for a in n.names if a.name.startswith("tlmsearch"))


def test_imports_inside_functions_reach_up_only_where_listed() -> None:
    found = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        for target in _function_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            a, b = _unit(module), _unit(target)
            if a != b and RANK[b] >= RANK[a]:
                found.add((module, target))
    new = sorted(found - set(UPWARD_IN_FUNCTIONS))
    stale = sorted(set(UPWARD_IN_FUNCTIONS) - found)
    assert new == [], f"upward imports inside functions, not in UPWARD_IN_FUNCTIONS: {new}"
    assert stale == [], f"UPWARD_IN_FUNCTIONS entries no longer needed: remove {stale}"
