"""How the suite is laid out over pytest-xdist's workers (``-n 2 --dist loadfile``, pyproject).

Order. pytest-randomly shuffles the files and the tests inside each file with a seed printed in
the header (``Using --randomly-seed=N``), so every run tries another order and a test that leans
on what ran before it fails somewhere, not only on a newcomer's machine. Then the files with slow
tests (a Ray, a cluster, a corpus, a browser: 10-60 s each) are put first, alternating with quick
ones (each group in the shuffled order), so that a worker waiting on Ray's processes tends to
share the cores with one that computes rather than with a second Ray, and quick files fill the
tail. (xdist's own order, most tests first, sends the long files last while the other worker
idles.) Each test file runs whole on one worker, so its module-scoped fixtures (one embedded Ray,
one finished study) are made once.

State. Every test starts from the same process state (tests/isolation.py).

Replay. Which files share a worker depends on timing, so the seed alone does not replay a
failure: when a run fails, the order each worker ran its tests in is written to
``.pytest_cache/tlmsearch-order/<worker>.txt`` and the summary prints the one command that runs
that worker's sequence again in one process (``--replay=FILE``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import sys
from pathlib import Path

import pytest

# every test starts from the same process state (tests/isolation.py)
pytest_plugins = ["isolation"]

ORDER_DIR = Path(".pytest_cache") / "tlmsearch-order"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--replay",
        metavar="FILE",
        default=None,
        help="run exactly the test ids in FILE, in its order (a failed run's summary names it)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    replay = config.getoption("--replay")
    if replay:
        _replay(config, Path(replay), items)
        return
    files: dict[object, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    slow, quick = [], []
    for tests in files.values():
        (slow if any(t.get_closest_marker("slow") for t in tests) else quick).append(tests)
    pairs = itertools.zip_longest(slow, quick, fillvalue=[])
    items[:] = [item for pair in pairs for tests in pair for item in tests]


def _replay(config: pytest.Config, path: Path, items: list[pytest.Item]) -> None:
    if not path.is_file():
        raise pytest.UsageError(f"--replay: {path} is not a file (a failing run names one)")
    wanted = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    if not wanted:
        raise pytest.UsageError(f"--replay: {path} names no test")
    by_id = {item.nodeid: item for item in items}
    missing = [nodeid for nodeid in wanted if nodeid not in by_id]
    if missing:
        raise pytest.UsageError(
            f"--replay: {len(missing)} test ids in {path} were not collected (first: "
            f"{missing[0]}); pass the same paths and -k/-m as the run that wrote it, or none"
        )
    chosen = set(wanted)
    config.hook.pytest_deselected(items=[i for i in items if i.nodeid not in chosen])
    items[:] = [by_id[nodeid] for nodeid in wanted]


class _Order:
    """On the controller: the ids each worker started, in order, and on failure a replay line."""

    def __init__(self) -> None:
        self.ran: dict[str, list[str]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        node = getattr(report, "node", None)
        if report.when == "setup" and node is not None:
            self.ran.setdefault(node.gateway.id, []).append(report.nodeid)

    def pytest_terminal_summary(self, terminalreporter, exitstatus, config) -> None:
        failed = [r for key in ("failed", "error") for r in terminalreporter.stats.get(key, [])]
        workers = {getattr(getattr(r, "node", None), "gateway", None) for r in failed}
        workers = sorted(w.id for w in workers if w is not None)
        if not workers:
            return
        out = Path(config.rootpath) / ORDER_DIR
        shutil.rmtree(out, ignore_errors=True)  # no stale file of an earlier run
        out.mkdir(parents=True)
        seed = config.getoption("randomly_seed", None)
        shuffled = config.pluginmanager.hasplugin("randomly") and isinstance(seed, int)
        seed_arg = f"-p randomly --randomly-seed={seed}" if shuffled else "-p no:randomly"
        python = Path(sys.executable)
        python = (
            python.relative_to(config.rootpath)
            if python.is_relative_to(config.rootpath)
            else python
        )
        terminalreporter.section("replaying a failure in the order it ran")
        for worker in workers:
            path = out / f"{worker}.txt"
            path.write_text("\n".join(self.ran.get(worker, [])) + "\n")
            terminalreporter.write_line(
                f"{worker} ran {len(self.ran.get(worker, []))} tests; again, in its order, in one "
                f"process: {python} -m pytest -n 0 {seed_arg} "
                f"--replay={path.relative_to(config.rootpath)}"
            )


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):
        _one_thread_per_worker()
    if config.getoption("--replay") and config.getoption("numprocesses", None):
        raise pytest.UsageError("--replay runs the sequence in one process: add -n 0")
    if not hasattr(config, "workerinput") and config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_Order(), "tlmsearch-order")


def _one_thread_per_worker() -> None:
    """Each xdist worker computes on one thread: the suite runs a worker per core, and torch's
    default (a thread per core in every worker) oversubscribed the cores, where its threads
    wait on each other: a tiny model trained 2.7x slower beside another worker. Set before
    torch is imported, so its subprocesses (a ``tlmsearch`` run's driver) inherit it; a test
    that trains with ``train.threads`` still sets its own count."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if "torch" in sys.modules:  # a plugin imported it first
        sys.modules["torch"].set_num_threads(int(os.environ["OMP_NUM_THREADS"]))


@pytest.fixture(scope="module")
def local_ray():
    """One embedded Ray (loopback only, 2 CPUs) for the in-process runs of a test file: they join
    it and never stop it. Module-scoped: it stops when the file ends, whatever runs next."""
    import ray

    from tlmsearch.config import RayConfig
    from tlmsearch.search.execution.cluster import start_ray, stop_ray

    if ray.is_initialized():  # a Ray this file started some other way: its owner stops it
        yield
        return
    start_ray(RayConfig(num_cpus=2))
    yield
    stop_ray()
