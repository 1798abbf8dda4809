"""How the suite is laid out over pytest-xdist's workers (``-n 2 --dist loadfile``, pyproject).

Each test file runs whole on one worker, so a file's module-scoped fixtures (one embedded Ray, one
finished study) are made once. Files go out in collection order as workers free up. The files
with slow tests (a Ray, a cluster, a corpus, a browser: 10-60 s each) are put first, alternating
with quick ones, so that a worker waiting on Ray's processes tends to share the cores with one
that computes rather than with a second Ray, and quick files fill the tail. (xdist's own order,
most tests first, sends the long files last, while the other worker sits idle.)
"""

from __future__ import annotations

import itertools

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    files: dict[object, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    slow, quick = [], []
    for tests in files.values():
        (slow if any(t.get_closest_marker("slow") for t in tests) else quick).append(tests)
    pairs = itertools.zip_longest(slow, quick, fillvalue=[])
    items[:] = [item for pair in pairs for tests in pair for item in tests]


@pytest.fixture(scope="module")
def local_ray():
    """One embedded Ray (loopback only, 2 CPUs) for the in-process runs of a test file: they join
    it and never stop it. Module-scoped: it stops when the file ends, whatever runs next."""
    import ray

    from tlmsearch.config import RayConfig
    from tlmsearch.search.cluster import start_ray, stop_ray

    if ray.is_initialized():  # a Ray this file started some other way: its owner stops it
        yield
        return
    start_ray(RayConfig(num_cpus=2))
    yield
    stop_ray()
