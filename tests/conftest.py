"""How the suite is laid out over pytest-xdist's workers (``-n 2 --dist loadfile``, pyproject).

Each test file runs whole on one worker, so a file's module-scoped fixtures (one embedded Ray, one
finished study) are made once. Files go out in collection order, one at a time as a worker frees
up; the slow files (a Ray, a cluster, a corpus, a browser: 10-90 s each) come first, so the quick
ones fill in around them and no long file starts last while the other worker sits idle. (xdist's
own order, most tests first, sends the long files last: a tail of a minute or more.)
"""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    # sort is stable: within each group, files and tests keep their order
    items.sort(key=lambda item: item.path not in slow_files)
