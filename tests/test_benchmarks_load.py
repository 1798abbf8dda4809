"""Every script under benchmarks/ imports: a rename in the package that a script still uses by
its old name fails here, not the day someone runs the benchmark."""

from __future__ import annotations

import pytest
from bench_module import ROOT, load

SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py"))


def test_there_are_benchmark_scripts() -> None:
    assert {"stats", "scale", "search", "contrasts"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_the_script_imports(script: str) -> None:
    mod = load(script)
    assert callable(getattr(mod, "main", None)), f"benchmarks/{script}.py has no main()"
