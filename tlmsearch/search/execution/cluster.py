"""Starting an embedded Ray reachable from loopback only, or joining a Ray cluster.

Measured with Ray 2.60 (``ss -ltnp`` during a run): the gRPC servers of Ray (GCS, the raylet's
node and object managers, the core worker of the driver and of every trial worker) listen on
127.0.0.1 only when the node address is exactly 127.0.0.1, and on every interface for any other
address, 127.0.0.2 included. On Linux Ray also rewrites a node address of 127.0.0.1 to the
machine's external one, unless ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` is off (Ray's own default
on macOS and Windows, where local clusters stay on loopback). So the embedded Ray turns it off
and asks for 127.0.0.1, and checks that it got it.

Loopback is still reachable by every user of a shared machine, and ``~/.ray/auth_token`` serves
all of a user's Rays, so the embedded Ray also requires Ray's token authentication with a secret
of its own: it lives only in the environment of this Ray's processes, never in a log, a file or
the run dir. Joining a cluster is the user's choice: every process of a cluster must use the same
``RAY_AUTH_MODE`` and token (docs/cluster.md, "On a Ray cluster").
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import secrets
from collections.abc import Iterator
from typing import Any

from tlmsearch.config import RayConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.execution import ray_internals

LOOPBACK = "127.0.0.1"  # the one node address Ray binds to loopback only
# 1 (Ray's default on Linux): a node address of 127.0.0.1 becomes the external address
LOCAL_ONLY = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_replaced_env: dict[str, str | None] = {}  # what _seal changed in os.environ, for _unseal


def quiet_ray() -> None:
    """Keep Ray's own tables and banners out of the terminal (tlmsearch draws its own)."""
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "60")
    for name in ("ray", "ray.tune", "ray.train", "ray.air"):
        logging.getLogger(name).setLevel(logging.ERROR)
    # "Trials did not complete": failed trials are ours to report, with their reasons.
    logging.getLogger("ray.tune.tune").setLevel(logging.CRITICAL)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)


# Ray Tune's per-trial bookkeeping that tlmsearch never reads (documented Tune environment
# variables; a value already in the environment wins). Ray's automatic CSV, JSON and
# TensorBoard loggers write progress.csv, result.json and an event file in every trial folder
# on every result: the ledger and curves.parquet hold the same, and TensorBoard is the
# opt-in tracking.tensorboard (ours, at step = tokens). Ray's experiment state is written
# every max(10 s, 19 x its last write) and at the end; a resume reads the Optuna storage,
# never it (Tuner.restore is not used), so every 5 minutes is enough. Together they were
# ~15% of the driver's time per trial (benchmarks/scale.py under cProfile).
LEAN_TUNE = {"TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1", "TUNE_GLOBAL_CHECKPOINT_S": "300"}


@contextlib.contextmanager
def lean_tune() -> Iterator[None]:
    """Ray Tune's bookkeeping that tlmsearch never reads (:data:`LEAN_TUNE`) off for the
    Tuners fitted inside (Tune reads these when a Tuner fits, in this, the driver's, process).
    A value the user set wins; afterwards the environment is as it was, so a notebook's or a
    test's own Tuner in the same process keeps Ray's defaults (its progress.csv and
    result.json, which ``ResultGrid.metrics_dataframe`` reads)."""
    added = [key for key in LEAN_TUNE if key not in os.environ]
    os.environ.update({key: LEAN_TUNE[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)


def start_ray(
    cfg: RayConfig, address: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Join ``address`` (or ``cfg.address``), else start a Ray reachable from loopback only.

    Returns facts for the log: address, nodes, CPUs. Raises ConfigError for an unreachable
    cluster, naming the address and what to check, and for a ``ray.node_ip`` beyond loopback
    without a cluster to join.
    """
    address = address or cfg.address
    if not address and cfg.node_ip and not _is_loopback_host(cfg.node_ip):
        raise ConfigError(
            f"ray.node_ip: {cfg.node_ip!r} is used only when joining a cluster (ray.address "
            f"or --address); the embedded Ray listens on {LOOPBACK} only"
        )
    ray_internals.check()  # a Ray without the private parts a run needs: say so before it starts
    import ray

    quiet_ray()
    if ray.is_initialized():  # a notebook's or a test's Ray: use it, leave it running
        return {**_facts(ray, ""), "joined": True, "owned": False}
    kwargs: dict[str, Any] = {
        "log_to_driver": False,  # trial output stays in the trial's log files
        "include_dashboard": False,
        "configure_logging": True,
        "logging_level": logging.ERROR,
    }
    if env:  # set in every worker process before torch starts (e.g. THP_MEM_ALLOC_ENABLE)
        kwargs["runtime_env"] = {"env_vars": dict(env)}
    if address:
        ip = cfg.node_ip
        if _is_loopback(address):
            # A driver of a loopback cluster claims the head's loopback address too, or Ray
            # looks for a raylet on the external one.
            kwargs |= ray_internals.node_ip_option(
                address.removeprefix("ray://").rsplit(":", 1)[0]
            )
        elif ip and not ip.startswith("127."):
            kwargs |= ray_internals.node_ip_option(ip)
        try:
            ctx = ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ConfigError(
                f"ray.address: cannot join the Ray cluster at {address!r} ({err}); start it "
                "with `ray start --head`, check the address and that RAY_AUTH_MODE matches"
            ) from None
    else:
        kwargs |= ray_internals.node_ip_option(LOOPBACK)
        if cfg.num_cpus:
            kwargs["num_cpus"] = cfg.num_cpus
        _seal()
        try:
            ctx = ray.init(address="local", **kwargs)  # never a stale cluster from /tmp/ray
            ip = ctx.address_info.get("node_ip_address")
            if ip != LOOPBACK:  # a Ray that would listen on every interface: never run it
                ray.shutdown()
                raise RuntimeError(f"the embedded Ray came up on {ip}, not on {LOOPBACK}")
        except BaseException:
            _unseal()
            raise
    return {**_facts(ray, ctx.address_info.get("gcs_address", "")), "joined": bool(address)}


def _seal() -> None:
    """Loopback only and a fresh secret token for the Ray this process is about to start."""
    env = {LOCAL_ONLY: "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    for key, value in env.items():
        _replaced_env.setdefault(key, os.environ.get(key))
        os.environ[key] = value  # Ray's processes inherit it from here
    _reload_ray_env()


def _unseal() -> None:
    """Give the process back the environment it had before ``_seal``."""
    for key, value in _replaced_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    _replaced_env.clear()
    _reload_ray_env()


def _reload_ray_env() -> None:
    # Ray reads LOCAL_ONLY when it is imported, its config (RAY_AUTH_MODE) on first use and the
    # token once per process: make this process see the environment as it is now, as Ray's own
    # ray.init does when it turns token authentication on. Ray has no public way to (one process
    # starts several Rays, each with a fresh token): ray_internals, private use 3.
    ray_internals.reload_env()


def _facts(ray: Any, address: str) -> dict[str, Any]:
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    return {
        "address": address or ray.get_runtime_context().gcs_address,
        "nodes": [n.get("NodeManagerAddress", "") for n in nodes],
        "cpus": ray.cluster_resources().get("CPU", 0),
        "gpus": ray.cluster_resources().get("GPU", 0),
        "owned": True,
    }


def _is_loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].removeprefix("ray://")
    return host.startswith("127.") or host == "localhost"


def _is_loopback_host(host: str) -> bool:
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
    if _replaced_env:
        _unseal()
