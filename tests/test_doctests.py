"""Every example in a docstring runs and prints what it says (they are the modules' first docs)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "tlmsearch"
MODULES = sorted(
    ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in PACKAGE.rglob("*.py")
    if ">>> " in p.read_text()
)


def test_the_examples_are_found():
    assert len(MODULES) >= 20, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    # tests/ is on sys.path (pytest's rootdir conftest): tlmsearch.models.external's example
    # builds tests/plugin_model.py
    module = importlib.import_module(name)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    result = doctest.testmod(module, optionflags=flags, verbose=False, report=True)
    assert result.attempted > 0, f"{name}: its >>> examples were not collected"
    assert result.failed == 0, f"{name}: {result.failed} example(s) failed (printed above)"
