"""The suite's own order and state rules (tests/conftest.py, tests/isolation.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import isolation
import torch

HERE = Path(__file__).resolve().parent


def test_restore_puts_back_what_a_test_changed_and_names_only_test_bugs(tmp_path: Path) -> None:
    saved = {g.name: g.read() for g in isolation.STATE}
    limit, threads = sys.getrecursionlimit(), torch.get_num_threads()
    try:
        sys.setrecursionlimit(limit + 1234)  # what a compile does
        os.environ["TLMSEARCH_ISOLATION_PROBE"] = "1"
        torch.set_num_threads(1 if threads != 1 else 2)
        torch.set_default_dtype(torch.float64)
        torch.manual_seed(12345)
        os.chdir(tmp_path)
        bugs = isolation.restore(saved)
    finally:
        isolation.restore(saved)
    assert len(bugs) == 1 and bugs[0].startswith("the working directory: ")
    assert sys.getrecursionlimit() == limit and torch.get_num_threads() == threads
    assert "TLMSEARCH_ISOLATION_PROBE" not in os.environ
    assert (
        torch.get_default_dtype() == torch.float32
        and os.getcwd() == saved["the working directory"]
    )
    assert torch.equal(torch.get_rng_state(), saved["torch's global RNG"])
    assert isolation.restore(saved) == []


def test_recursion_limit_sets_and_gives_back() -> None:
    before = sys.getrecursionlimit()
    with isolation.recursion_limit(before + 77) as limit:
        assert sys.getrecursionlimit() == limit == before + 77
    assert sys.getrecursionlimit() == before


def _suite(tmp_path: Path) -> Path:
    """A copy of our conftest and isolation plugin beside two test files: one leaves the
    working directory changed, one fails after a test that ran before it on its worker."""
    for name in ("conftest.py", "isolation.py"):
        shutil.copy(HERE / name, tmp_path / name)
    (tmp_path / "test_a.py").write_text(
        "import os, pytest\n"
        "@pytest.fixture(scope='module')\n"
        "def driver():\n    os.environ['PROBE_SET_BY_A_FILE'] = '1'\n"  # as a search does
        "def test_leaves_cwd(tmp_path, driver):\n    os.chdir(tmp_path)\n"
        "def test_fine():\n    pass\n"
    )
    (tmp_path / "test_b.py").write_text("def test_fails():\n    assert False\n")
    (tmp_path / "test_c.py").write_text(
        "import os\n"
        "def test_no_file_leaves_its_environment():\n"
        "    assert 'PROBE_SET_BY_A_FILE' not in os.environ\n"
    )
    return tmp_path


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(cwd),
            "-c",
            os.devnull,
            *args,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_failed_run_prints_a_replay_line_that_runs_the_same_order(tmp_path: Path) -> None:
    suite = _suite(tmp_path)
    run = _pytest(
        suite,
        "-n",
        "1",
        "--dist",
        "loadfile",
        "-p",
        "randomly",
        "--randomly-seed=3",
        "-p",
        "xdist",
    )
    out = run.stdout
    assert run.returncode == 1, out
    assert "this test left process state changed" in out and "the working directory" in out
    assert "1 failed, 3 passed, 1 error" in out  # test_c saw no variable of test_a's fixture
    replays = [line for line in out.splitlines() if "--replay=" in line]
    assert replays and all(
        " -m pytest -n 0 -p randomly --randomly-seed=3 " in line for line in replays
    ), out
    orders = sorted((suite / ".pytest_cache" / "tlmsearch-order").glob("gw*.txt"))
    ran = [nodeid for path in orders for nodeid in path.read_text().split()]
    assert sorted(ran) == sorted(
        [
            "test_a.py::test_leaves_cwd",
            "test_a.py::test_fine",
            "test_b.py::test_fails",
            "test_c.py::test_no_file_leaves_its_environment",
        ]
    )
    # the replay runs exactly that worker's tests, in its order, in one process
    path = next(p for p in orders if "test_b.py::test_fails" in p.read_text())
    again = _pytest(suite, "-n", "0", "-p", "xdist", "--replay=" + str(path), "-vv")
    ids = [ln.split(" ")[0] for ln in again.stdout.splitlines() if ln.endswith("%]")]
    # (a teardown error repeats its test's id)
    assert list(dict.fromkeys(ids)) == path.read_text().split(), again.stdout
    assert again.returncode == 1 and "FAILED test_b.py::test_fails" in again.stdout
    for content, args, why in [
        ("test_b.py::test_nothing_of_that_name\n", ("-n", "0"), "were not collected"),
        ("\n", ("-n", "0"), "names no test"),
        ("test_b.py::test_fails\n", ("-n", "2"), "add -n 0"),
    ]:
        bad = suite / "bad.txt"
        bad.write_text(content)
        refused = _pytest(suite, *args, "-p", "xdist", "--replay=" + str(bad))
        assert refused.returncode == 4 and why in refused.stderr + refused.stdout, why
