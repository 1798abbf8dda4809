"""The embedded Ray closed to the network, and a real two-node Ray cluster on loopback. Slow.

Every socket of a real run on the embedded Ray, sampled while it runs, is checked by
test_search_workers.py (a run of two workers per trial has every kind of process a run has).

The cluster: head 127.0.0.2, worker 127.0.0.3 (``ray start`` rewrites 127.0.0.1 to the external
address); every process uses the same ``RAY_AUTH_MODE`` (token) and the same secret, made here for
this cluster alone (never the user's ``~/.ray/auth_token``, which a fresh machine does not have),
or workers and drivers fail to connect. The nodes are ``ray start --block`` processes stopped by
PID (never ``ray stop``, which stops every Ray on the machine).
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from search_helpers import tiny_study

from tlmsearch.config import RayConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.execution.cluster import start_ray

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent
HEAD, WORKER = "127.0.0.2", "127.0.0.3"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in path.read_text():
            return
        assert proc.poll() is None, path.read_text()
        time.sleep(0.3)
    pytest.fail(f"{text!r} not in {path}:\n{path.read_text()}")


def cluster_env(base) -> dict[str, str]:
    """The environment of every process of a test cluster: token auth with a secret of its own.

    Whatever Ray settings the user has (``RAY_AUTH_TOKEN_PATH``, a token, auth off) are dropped,
    so the cluster never reads ``~/.ray/auth_token`` and never depends on it existing.
    """
    env = {k: v for k, v in base.items() if not k.startswith("RAY_AUTH")}
    # Ray 2.60's `ray start --block` drains a node for up to 30 s on SIGTERM (for Serve
    # replicas); a test cluster has none, and the wait was 30 s of every teardown. Ray Train's
    # controller looks at its workers every 2 s: a two-worker trial ended up to 2 s after them
    # (a look that goes unanswered is only repeated; Ray gives up on a worker after 10 minutes)
    return {
        **env,
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25",
    }


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """One two-node cluster for the module's runs (each run a study of its own name)."""
    tmp_path = tmp_path_factory.mktemp("cluster")
    env = cluster_env(os.environ)
    env["HOME"] = str(tmp_path / "home")  # empty, as on a fresh machine: no ~/.ray of the user's
    Path(env["HOME"]).mkdir()
    port = _free_port(HEAD)
    address = f"{HEAD}:{port}"
    common = ["--num-cpus=1", "--block", "--disable-usage-stats"]
    procs = []
    try:
        head_log = tmp_path / "head.log"
        head = subprocess.Popen(
            [
                str(BIN / "ray"),
                "start",
                "--head",
                f"--node-ip-address={HEAD}",
                f"--port={port}",
                "--include-dashboard=false",
                *common,
            ],
            stdout=head_log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        procs.append(head)
        _wait_for(head_log, "block forever", head)
        worker_log = tmp_path / "worker.log"
        worker = subprocess.Popen(
            [
                str(BIN / "ray"),
                "start",
                f"--address={address}",
                f"--node-ip-address={WORKER}",
                *common,
            ],
            stdout=worker_log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
        )
        procs.append(worker)
        _wait_for(worker_log, "block forever", worker)
        yield address, env
    finally:
        for p in reversed(procs):  # ours, by PID; `ray start --block` stops its children
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        stale = Path("/tmp/ray/ray_current_cluster")  # written by our head; points at nothing
        if stale.exists() and stale.read_text().strip() == address:
            stale.unlink()


def test_embedded_ray_gives_every_worker_the_training_env():
    """THP_MEM_ALLOC_ENABLE must be in a trial's environment before torch starts there."""
    code = (
        "import os, ray\n"
        "from tlmsearch.config import RayConfig, TrainConfig\n"
        "from tlmsearch.search.execution.cluster import start_ray, stop_ray\n"
        "start_ray(RayConfig(num_cpus=1), env=TrainConfig().process_env())\n"
        "probe = ray.remote(lambda: os.environ.get('THP_MEM_ALLOC_ENABLE'))\n"
        "print('worker sees', ray.get(probe.remote()))\n"
        "stop_ray()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "THP_MEM_ALLOC_ENABLE"}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, env=env
    )
    assert "worker sees 1" in out.stdout, out.stdout + out.stderr[-2000:]


@pytest.mark.parametrize("node_ip", ["192.0.2.7", "0.0.0.0", "::"])
def test_embedded_ray_refuses_a_node_ip_beyond_loopback(node_ip):
    with pytest.raises(ConfigError, match=r"ray\.node_ip: .* only when joining a cluster"):
        start_ray(RayConfig(node_ip=node_ip))


def test_each_embedded_ray_has_a_fresh_token_and_stop_gives_the_environment_back():
    """Two embedded Rays in one process: each its own token (Ray caches the first one per
    process); after each, the user's own settings are back (here: auth off for their Rays)."""
    code = (
        "import os, ray\n"
        "from tlmsearch.config import RayConfig\n"
        "from tlmsearch.search.execution.cluster import LOCAL_ONLY, start_ray, stop_ray\n"
        "tokens = []\n"
        "for _ in range(2):\n"
        "    start_ray(RayConfig(num_cpus=1))\n"
        "    tokens.append(os.environ['RAY_AUTH_TOKEN'])\n"
        "    print('ran', ray.get(ray.remote(lambda: os.environ['RAY_AUTH_MODE']).remote()))\n"
        "    stop_ray()\n"
        "    env = [os.environ.get(k) for k in ('RAY_AUTH_MODE', 'RAY_AUTH_TOKEN', LOCAL_ONLY)]\n"
        "    print('after', *env)\n"
        "print('fresh', tokens[0] != tokens[1])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_AUTH", "RAY_ENABLE"))}
    env["RAY_AUTH_MODE"] = "disabled"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert out.stdout.count("ran token") == 2, out.stdout + out.stderr[-2000:]
    assert out.stdout.count("after disabled None None") == 2 and "fresh True" in out.stdout


# -------------------------------------------------------------------------------------------------
# A real two-node cluster (last in the file: the module-scoped cluster stops when they end)


def _run_on(address: str, env: dict, tmp_path: Path, data: dict, name: str):
    """``tlmsearch run`` of study ``data`` (named ``name``) on the cluster: (result, trials)."""
    data["name"] = name
    study = tmp_path / f"{name}.yaml"
    study.write_text(yaml.safe_dump(data))
    res = subprocess.run(
        [str(BIN / "tlmsearch"), "run", str(study), "--address", address],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return res, pd.read_parquet(tmp_path / "runs" / name / "trials.parquet")


def test_trials_run_on_both_nodes(cluster, tmp_path: Path):
    address, env = cluster
    # 3 trials (uniform, 2 candidates), 2 at once: each node has 1 CPU and a trial takes 1, so
    # the first two run one on each node (this was 6 trials of twice the tokens)
    data = tiny_study(tmp_path, search={"seeds": [0]})
    res, df = _run_on(address, env, tmp_path, data, "cluster")
    assert "joined" in res.stdout and "2 node(s)" in res.stdout
    assert len(df) == 3 and (df["state"] == "COMPLETE").all()
    assert set(df["node"]) == {HEAD, WORKER}


def test_a_two_worker_trial_spreads_over_both_nodes(cluster, tmp_path: Path):
    """One trial, two Ray Train workers of 1 CPU each on the two 1-CPU nodes (SPREAD): its
    process group runs across nodes, and each rank reports its own node."""
    address, env = cluster
    data = tiny_study(
        tmp_path,
        search={"baseline": False, "seeds": [0]},
        ray={"workers_per_trial": 2, "cpus_per_worker": 1, "worker_placement": "STRICT_SPREAD"},
    )
    data["ray"].pop("cpus_per_trial")
    data["space"]["dimensions"] = {
        "shape": {"type": "categorical", "choices": ["cosine"]},
        "r_start": {"type": "float", "low": 1.5, "high": 1.5, "step": 0.25},
    }  # one candidate, one trial
    _, df = _run_on(address, env, tmp_path, data, "spread")
    assert len(df) == 1 and df["state"].iloc[0] == "COMPLETE"
    assert sorted(df["node"].iloc[0].split(",")) == [HEAD, WORKER]  # rank by rank


def test_tunes_unread_bookkeeping_is_off_unless_the_user_set_it(monkeypatch):
    """Ray's per-result CSV/JSON/TensorBoard files and its frequent experiment-state writes
    cost the driver time per trial that nothing reads: off by default, the user's value wins."""
    from tlmsearch.search.execution import cluster

    monkeypatch.delenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", raising=False)
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "auto")
    with cluster.lean_tune():
        assert os.environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] == "1"
        assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "auto"
    # afterwards as it was: a later Tuner in this process (a notebook's, a test's) keeps
    # Ray's per-result files
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in os.environ
    assert os.environ["TUNE_GLOBAL_CHECKPOINT_S"] == "auto"
