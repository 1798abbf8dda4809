"""Every test starts from the same process state, whatever ran before it on its worker.

Which tests share a pytest-xdist worker, and in what order, depends on timing (and, with
pytest-randomly, on the run's seed). A test that reads process-global state another test left
behind passes or fails by that luck: issue 30 was a parse that hit Python's recursion limit only
when no test had compiled a model first (torch's inductor lifts the limit to 2,000 on every
compile, for good). So after each test this plugin puts back the state listed in ``STATE``, and
after each file it stops a Ray the file left running.

What a test changes on purpose it changes through a fixture that restores it (``monkeypatch``,
``recursion_limit`` below). State that the code under test changes as a side effect of its
normal work is restored silently: inductor's recursion limit and its environment variables
(``THP_MEM_ALLOC_ENABLE``, ``_TORCHINDUCTOR_PYOBJECT_TENSOR_DATA_PTR``), the variables a search
driver sets for Ray (``TUNE_PRINT_ALL_TRIAL_ERRORS``), gloo's and MLflow's, the trainer's thread
count, log handlers, torch's global RNG. A test that leaves the working directory changed is a
bug in that test (nothing we ship changes it) and fails here, naming what it left; so does a
file that leaves an embedded Ray running.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import torch


@dataclass(frozen=True)
class Global:
    name: str
    read: Callable[[], Any]
    write: Callable[[Any], None]
    a_test_bug: bool = False  # True: leaving it changed fails the test that did
    same: Callable[[Any, Any], bool] = lambda a, b: a == b


# pytest's own: it names the running test and phase
_PYTEST_OWN = "PYTEST_CURRENT_TEST"


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != _PYTEST_OWN}


def _set_environ(saved: dict[str, str]) -> None:
    for key in set(_environ()) - set(saved):
        del os.environ[key]
    os.environ.update(saved)


def _root_logging() -> tuple[int, tuple[logging.Handler, ...], int]:
    root = logging.getLogger()
    return root.level, tuple(root.handlers), logging.root.manager.disable


def _set_root_logging(saved: tuple[int, tuple[logging.Handler, ...], int]) -> None:
    level, handlers, disabled = saved
    root = logging.getLogger()
    root.setLevel(level)
    root.handlers[:] = list(handlers)
    logging.disable(disabled)


STATE: tuple[Global, ...] = (
    Global("the working directory", os.getcwd, os.chdir, a_test_bug=True),
    Global("os.environ", _environ, _set_environ),
    Global("sys.getrecursionlimit()", sys.getrecursionlimit, sys.setrecursionlimit),
    Global("torch.get_num_threads()", torch.get_num_threads, torch.set_num_threads),
    Global("torch.get_default_dtype()", torch.get_default_dtype, torch.set_default_dtype),
    Global("torch.is_grad_enabled()", torch.is_grad_enabled, torch.set_grad_enabled),
    Global("torch's global RNG", torch.get_rng_state, torch.set_rng_state,
           same=lambda a, b: torch.equal(a, b)),
    Global("the root logger", _root_logging, _set_root_logging),
)


def restore(saved: dict[str, Any]) -> list[str]:
    """Put every global back as saved; return what a test should not have left changed."""
    bugs = []
    for g in STATE:
        now = g.read()
        if g.same(saved[g.name], now):
            continue
        if g.a_test_bug:
            bugs.append(f"{g.name}: {saved[g.name]!r} -> {now!r}")
        g.write(saved[g.name])
    return bugs


@pytest.fixture(autouse=True)
def _same_start_for_every_test() -> Iterator[None]:
    saved = {g.name: g.read() for g in STATE}
    yield
    bugs = restore(saved)
    if bugs:
        pytest.fail(
            "this test left process state changed for the tests after it (restored now; "
            "change it through monkeypatch instead): " + "; ".join(bugs),
            pytrace=False,
        )


@pytest.fixture(autouse=True, scope="module")
def _no_ray_left_by_a_file() -> Iterator[None]:
    yield
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        ray.shutdown()
        pytest.fail("this file left an embedded Ray running (stopped now): stop what you start",
                    pytrace=False)


@contextmanager
def recursion_limit(limit: int) -> Iterator[int]:
    """Run a block at a known recursion limit (another test's compile may have raised it)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield limit
    finally:
        sys.setrecursionlimit(before)
