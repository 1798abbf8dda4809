"""The private parts of Ray that tlmsearch uses (tlmsearch/search/execution/ray_internals.py),
checked on the Ray installed: each symbol is there with the parameters it had, and does what we
lean on.

A Ray upgrade that drops or changes one fails here (and a run refuses to start, naming it),
instead of a run going wrong silently. No Ray is started: the end-to-end runs through these
paths are tests/test_search_killed.py and tests/test_search_cluster.py.
"""

from __future__ import annotations

import inspect
from types import SimpleNamespace

import pytest
import ray
import ray._private.worker as ray_worker
from ray import exceptions as rex
from ray._private import ray_constants, services
from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, get_authentication_mode
from ray.air.execution._internal.actor_manager import RayActorManager

from tlmsearch.config import RayConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.execution import cluster, ray_internals
from tlmsearch.search.execution.failures import handle_lost_workers
from tlmsearch.search.execution.ray_internals import CHECKED_AGAINST, INTERNALS, RayInternalsError


def test_every_private_symbol_is_in_this_ray_with_its_parameters():
    assert ray_internals.problems() == [], f"ray {ray.__version__}"
    ray_internals.check()
    paths = {i.path for i in INTERNALS}
    assert paths == {
        "ray.air.execution._internal.actor_manager.RayActorManager._actor_task_failed",
        "ray._private.worker.print_to_stdstream",
        "ray._private.ray_constants.ENABLE_RAY_CLUSTER",
        "ray._private.ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR",
        "ray._private.ray_constants.IS_WINDOWS_OR_OSX",
        "ray._private.ray_constants.env_bool",
        "ray._raylet.Config.initialize",
        "ray._raylet.AuthenticationTokenLoader.instance",
        "ray._raylet.AuthenticationTokenLoader.reset_cache",
    }
    # the values are what reload_env computes with
    assert isinstance(ray_constants.ENABLE_RAY_CLUSTER, bool)
    assert isinstance(ray_constants.IS_WINDOWS_OR_OSX, bool)
    assert ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR == cluster.LOCAL_ONLY
    # ray.init's hidden option for the node address (private use 4)
    assert "_node_ip_address" in inspect.getsource(inspect.unwrap(ray.init))
    assert ray_internals.node_ip_option("127.0.0.1") == {"_node_ip_address": "127.0.0.1"}


def test_tunes_actor_manager_still_crashes_on_a_memory_monitor_kill_without_the_wrapper():
    """Ray's own _actor_task_failed raises for OutOfMemoryError (the reason for private use 1):
    when a Ray handles it, this fails and the wrapper can go."""
    own = inspect.unwrap(RayActorManager._actor_task_failed)
    actor = SimpleNamespace(actor_id="a1", _on_error=None)
    task = SimpleNamespace(_tracked_actor=actor, _on_error=lambda *_: None)
    manager = SimpleNamespace(_failed_actor_ids=set(), _cleanup_actor=lambda tracked_actor: None)
    for error in (rex.OutOfMemoryError("low on memory"), rex.NodeDiedError("node died")):
        assert not isinstance(error, (rex.RayActorError, rex.RayTaskError))
        with pytest.raises(RuntimeError, match="Caught unexpected exception"):
            own(manager, task, error)


def test_the_error_listener_prints_through_the_function_we_wrap():
    """listen_error_messages looks print_to_stdstream up by name on every message, so the
    wrapper in the module is the one it calls."""
    listener = ray_worker.listen_error_messages
    assert "print_to_stdstream" in listener.__code__.co_names
    assert listener.__globals__ is vars(ray_worker)


def test_wrappers_are_installed_once_over_rays_own():
    handle_lost_workers()
    handle_lost_workers()
    for fn in (RayActorManager._actor_task_failed, ray_worker.print_to_stdstream):
        assert getattr(fn, "_tlmsearch_wrapper", False)
        assert not getattr(fn.__wrapped__, "_tlmsearch_wrapper", False)  # one layer only
    assert ray_internals.problems() == []  # the signature seen is Ray's own under the wrapper


def test_reload_env_makes_this_process_see_the_loopback_switch_mode_and_token(monkeypatch):
    """What cluster._seal and _unseal need (private use 3): without reload_env this process
    keeps what it read first."""
    assert ray_worker.global_worker.connected is False  # no Ray in this process
    before = (ray_constants.ENABLE_RAY_CLUSTER, get_authentication_mode())
    loader = AuthenticationTokenLoader.instance()
    token_before = loader.get_raw_token(ignore_auth_mode=True)
    try:
        for token in ("a" * 64, "b" * 64):  # a second Ray's fresh token is seen too
            monkeypatch.setenv(cluster.LOCAL_ONLY, "0")
            monkeypatch.setenv("RAY_AUTH_MODE", "token")
            monkeypatch.setenv("RAY_AUTH_TOKEN", token)
            ray_internals.reload_env()
            assert ray_constants.ENABLE_RAY_CLUSTER is False
            # a node address of 127.0.0.1 stays on loopback (Linux: the external one, else)
            assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
            assert get_authentication_mode() == AuthenticationMode.TOKEN
            assert loader.get_raw_token() == token
    finally:
        monkeypatch.undo()
        ray_internals.reload_env()
    assert (ray_constants.ENABLE_RAY_CLUSTER, get_authentication_mode()) == before
    assert loader.get_raw_token(ignore_auth_mode=True) == token_before


def test_a_ray_without_a_symbol_is_refused_naming_it_and_the_versions(monkeypatch):
    monkeypatch.delattr(ray_worker, "print_to_stdstream")
    with pytest.raises(RayInternalsError) as err:
        ray_internals.check()
    assert isinstance(err.value, ConfigError)  # the CLI prints it and exits 2
    (line,) = err.value.lines()
    assert line.startswith(f"ray {ray.__version__}: ray._private.worker.print_to_stdstream, ")
    assert "it is gone" in line and f"checked against Ray {CHECKED_AGAINST}" in line
    assert "keeping Ray's reports of a dead worker out of the log" in line
    with pytest.raises(RayInternalsError, match="print_to_stdstream"):
        handle_lost_workers()  # not an AttributeError half way
    with pytest.raises(RayInternalsError, match="print_to_stdstream"):
        cluster.start_ray(RayConfig(num_cpus=1))  # before any Ray starts
    assert not ray.is_initialized()


def test_a_symbol_with_other_parameters_is_refused(monkeypatch):
    monkeypatch.setattr(RayActorManager, "_actor_task_failed", lambda self, task: None)
    monkeypatch.setattr(ray_constants, "env_bool", lambda key: True)
    with pytest.raises(RayInternalsError) as err:
        ray_internals.check()
    assert err.value.problems[0].startswith(
        "ray.air.execution._internal.actor_manager.RayActorManager._actor_task_failed, a private "
        "part of Ray that tlmsearch needs for retrying a trial whose worker Ray's memory monitor "
        "killed: it takes (self, task), not (self, tracked_actor_task, exception)"
    )
    assert "env_bool" in err.value.problems[1] and "takes (key), not (key, default)" in str(
        err.value
    )
