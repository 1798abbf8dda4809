"""A real two-node Ray cluster on loopback: head 127.0.0.2, worker 127.0.0.3. Slow.

Ray rewrites 127.0.0.1 to the external address, so the nodes use other loopback addresses; every
process uses the same ``RAY_AUTH_MODE`` (token), or workers and drivers fail to connect. The
nodes are ``ray start --block`` processes stopped by PID (never ``ray stop``, which stops every
Ray on the machine).
"""

from __future__ import annotations

import os
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


@pytest.fixture
def cluster(tmp_path: Path):
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    port = _free_port(HEAD)
    address = f"{HEAD}:{port}"
    common = ["--num-cpus=1", "--block", "--disable-usage-stats"]
    procs = []
    try:
        head_log = tmp_path / "head.log"
        head = subprocess.Popen(
            [str(BIN / "ray"), "start", "--head", f"--node-ip-address={HEAD}", f"--port={port}",
             "--include-dashboard=false", *common],
            stdout=head_log.open("w"), stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
        procs.append(head)
        _wait_for(head_log, "block forever", head)
        worker_log = tmp_path / "worker.log"
        worker = subprocess.Popen(
            [str(BIN / "ray"), "start", f"--address={address}", f"--node-ip-address={WORKER}",
             *common],
            stdout=worker_log.open("w"), stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
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


def test_trials_run_on_both_nodes(cluster, tmp_path: Path):
    address, env = cluster
    # 3 distinct widths x 2 seeds: enough trials that both nodes get some
    data = tiny_study(tmp_path, train={"tokens": 16384}, search={"seeds": [0, 1]})
    data["name"] = "cluster"
    study = tmp_path / "cluster.yaml"
    study.write_text(yaml.safe_dump(data))
    res = subprocess.run(
        [str(BIN / "tlmsearch"), "run", str(study), "--address", address],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "joined" in res.stdout and "2 node(s)" in res.stdout
    df = pd.read_parquet(tmp_path / "runs" / "cluster" / "trials.parquet")
    assert len(df) == 6 and (df["state"] == "COMPLETE").all()
    assert set(df["node"]) == {HEAD, WORKER}


def test_embedded_ray_gives_every_worker_the_training_env():
    """THP_MEM_ALLOC_ENABLE must be in a trial's environment before torch starts there."""
    code = (
        "import os, ray\n"
        "from tlmsearch.config import RayConfig, TrainConfig\n"
        "from tlmsearch.search.cluster import start_ray, stop_ray\n"
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
