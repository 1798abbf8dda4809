"""Every test starts from the same process state, whatever ran before it on its worker.

Which tests share a pytest-xdist worker, and in what order, depends on timing (and, with
pytest-randomly, on the run's seed). A test that reads process-global state another test left
behind passes or fails by that luck: one was a parse that hit Python's recursion limit only
when no test had compiled a model first (torch's inductor lifts the limit to 2,000 on every
compile, for good). So this plugin puts back the state listed in ``STATE`` after each test, and
after each file what the file's module-scoped fixtures changed (a finished study sets the
search driver's variables, a Trainer its thread count), and stops a Ray the file left running.

What a test changes on purpose it changes through a fixture that restores it (``monkeypatch``,
``recursion_limit`` below). State that the code under test changes as a side effect of its
normal work is restored silently: inductor's recursion limit, environment variables and
recompile limit, the variables a search driver sets for Ray (``TUNE_PRINT_ALL_TRIAL_ERRORS``),
gloo's and MLflow's, the trainer's thread count, Ray's and Optuna's log levels, torch's global
RNG. A test or file that leaves the working directory changed is a bug in it (nothing we ship
changes it) and fails here, naming what it left; so does a file that leaves a Ray running.

torch is read only once something imported it (a process that never does, like the small
pytest runs of test_isolation, does not pay for the import).
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


@dataclass(frozen=True)
class Global:
    name: str
    read: Callable[[], Any]
    write: Callable[[Any], None]
    a_test_bug: bool = False  # True: leaving it changed fails the test that did
    same: Callable[[Any, Any], bool] = lambda a, b: a == b


# pytest's own: it names the running test and phase
_PYTEST_OWN = "PYTEST_CURRENT_TEST"
# loggers that tlmsearch.search.execution.cluster.quiet_ray (and Optuna's set_verbosity) turn down
_LIBRARY_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.air", "ray.tune.tune", "optuna")


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


def _library_levels() -> dict[str, int]:
    return {name: logging.getLogger(name).level for name in _LIBRARY_LOGGERS}


def _set_library_levels(saved: dict[str, int]) -> None:
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def _torch(
    read: Callable[[Any], Any], write: Callable[[Any, Any], None]
) -> tuple[Callable[[], Any], Callable[[Any], None]]:
    """A torch global's reader and writer, live only once torch is imported (None before)."""

    def get() -> Any:
        torch = sys.modules.get("torch")
        return None if torch is None else read(torch)

    def put(value: Any) -> None:
        torch = sys.modules.get("torch")
        if torch is not None and value is not None:
            write(torch, value)

    return get, put


def _dynamo_limit() -> int | None:
    config = sys.modules.get("torch._dynamo.config")
    return None if config is None else config.recompile_limit


def _set_dynamo_limit(value: int | None) -> None:
    config = sys.modules.get("torch._dynamo.config")
    if config is not None and value is not None:
        config.recompile_limit = value


def _same_rng(a: Any, b: Any) -> bool:
    return a is None or b is None or (a.shape == b.shape and bool((a == b).all()))


STATE: tuple[Global, ...] = (
    Global("the working directory", os.getcwd, os.chdir, a_test_bug=True),
    Global("os.environ", _environ, _set_environ),
    Global("sys.getrecursionlimit()", sys.getrecursionlimit, sys.setrecursionlimit),
    Global("the root logger", _root_logging, _set_root_logging),
    Global("Ray's and Optuna's log levels", _library_levels, _set_library_levels),
    Global(
        "torch.get_num_threads()",
        *_torch(lambda t: t.get_num_threads(), lambda t, v: t.set_num_threads(v)),
    ),
    Global(
        "torch.get_default_dtype()",
        *_torch(lambda t: t.get_default_dtype(), lambda t, v: t.set_default_dtype(v)),
    ),
    Global(
        "torch.is_grad_enabled()",
        *_torch(lambda t: t.is_grad_enabled(), lambda t, v: t.set_grad_enabled(v)),
    ),
    Global(
        "torch's global RNG",
        *_torch(lambda t: t.get_rng_state(), lambda t, v: t.set_rng_state(v)),
        same=_same_rng,
    ),
    Global("torch._dynamo's recompile_limit", _dynamo_limit, _set_dynamo_limit),
)


def snapshot() -> dict[str, Any]:
    return {g.name: g.read() for g in STATE}


def restore(saved: dict[str, Any]) -> list[str]:
    """Put every global back as saved; return what a test should not have left changed (and
    what could not be put back: each global is tried, whatever the others do)."""
    bugs = []
    for g in STATE:
        try:
            now = g.read()
            if g.same(saved[g.name], now):
                continue
            if g.a_test_bug:
                bugs.append(f"{g.name}: {saved[g.name]!r} -> {now!r}")
            g.write(saved[g.name])
        except Exception as err:  # e.g. a working directory the test removed
            bugs.append(f"{g.name}: could not be read or put back ({type(err).__name__}: {err})")
    return bugs


def _fail(what: str, bugs: list[str]) -> None:
    pytest.fail(
        f"this {what} left process state changed for the tests after it (restored now; "
        "change it through monkeypatch, or a fixture that gives it back): " + "; ".join(bugs),
        pytrace=False,
    )


@pytest.fixture(autouse=True)
def _same_start_for_every_test() -> Iterator[None]:
    saved = snapshot()
    yield
    bugs = restore(saved)
    if bugs:
        _fail("test", bugs)


@pytest.fixture(autouse=True, scope="module")
def _same_start_for_every_file() -> Iterator[None]:
    """Set up before the file's other module-scoped fixtures and torn down after them."""
    saved = snapshot()
    yield
    bugs = []
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        from tlmsearch.search.execution.cluster import stop_ray

        stop_ray()  # the embedded Ray's token and loopback settings go with it
        bugs.append("an embedded Ray was still running (stopped now): stop what you start")
    bugs += restore(saved)
    if bugs:
        _fail("file", bugs)


@contextmanager
def recursion_limit(limit: int) -> Iterator[int]:
    """Run a block at a known recursion limit (another test's compile may have raised it)."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield limit
    finally:
        sys.setrecursionlimit(before)
