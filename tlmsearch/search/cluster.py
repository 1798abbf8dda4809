"""Starting an embedded Ray on loopback, or joining a Ray cluster.

Ray picks the machine's external interface as its node address even for a local run and
rewrites 127.0.0.1 to it; another loopback address (127.0.0.2) is left alone (measured, Ray
2.60). Token authentication is on by default: every process of a cluster must use the same
``RAY_AUTH_MODE`` (see README, "Running on a Ray cluster").
"""

from __future__ import annotations

import logging
import os
from typing import Any

from tlmsearch.config import RayConfig
from tlmsearch.errors import ConfigError


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


def start_ray(
    cfg: RayConfig, address: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Join ``address`` (or ``cfg.address``), else start a local Ray bound to ``cfg.node_ip``.

    Returns facts for the log: address, nodes, CPUs. Raises ConfigError for an unreachable
    cluster, naming the address and what to check.
    """
    import ray

    quiet_ray()
    address = address or cfg.address
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
            kwargs["_node_ip_address"] = address.removeprefix("ray://").rsplit(":", 1)[0]
        elif ip and not ip.startswith("127."):
            kwargs["_node_ip_address"] = ip
        try:
            ctx = ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as err:
            raise ConfigError(
                f"ray.address: cannot join the Ray cluster at {address!r} ({err}); start it "
                "with `ray start --head`, check the address and that RAY_AUTH_MODE matches"
            ) from None
    else:
        kwargs["_node_ip_address"] = cfg.node_ip or "127.0.0.2"
        if cfg.num_cpus:
            kwargs["num_cpus"] = cfg.num_cpus
        ctx = ray.init(address="local", **kwargs)  # never a stale cluster from /tmp/ray
    return {**_facts(ray, ctx.address_info.get("gcs_address", "")), "joined": bool(address)}


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


def stop_ray() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()
