"""Every private part of Ray that tlmsearch uses, in one place, each checked against the Ray here.

The search layer uses Ray's public API everywhere else. Where Ray has no public way to do what a
run needs, the private use lives here, so that a Ray upgrade fails loudly instead of changing a
run silently: :func:`check` runs before a run starts or joins Ray (``cluster.start_ray``) and
raises :class:`RayInternalsError` naming the Ray version and each symbol that is gone or takes
other parameters, and tests/test_search_ray_internals.py asserts every symbol, its signature and
the Ray behaviour it leans on for the Ray installed, so an upgrade fails a test, not a run.
Checked against Ray :data:`CHECKED_AGAINST`; what breaks without each was measured by running
the tests named below with it taken out.

1. ``ray.air.execution._internal.actor_manager.RayActorManager._actor_task_failed(self,
   tracked_actor_task, exception)``, wrapped by :func:`convert_actor_task_errors`.
   Why: a trial whose worker Ray's memory monitor killed fails its actor task with
   ``ray.exceptions.OutOfMemoryError`` (Ray's core turns an actor's out-of-memory death into
   that error whatever the actor's ``max_restarts``), a lost node with ``NodeDiedError``: both
   ``RayError``, neither ``RayActorError`` nor ``RayTaskError``, and for them Tune's actor
   manager raises ``RuntimeError("Caught unexpected exception ...")`` out of ``Tuner.fit``.
   The wrapper hands each exception through a converter first (tlmsearch's turns those two into
   the ``RayActorError`` they amount to, text kept), so ``FailureConfig`` retries or fails the
   trial. No public way: Tune creates the trainable's actor itself, with no actor options
   (``ray.tune.execution.class_cache``); ``FailureConfig`` and Tune's callbacks act only after
   the actor manager has taken the error; the memory monitor's settings
   (``RAY_memory_usage_threshold``, ``RAY_memory_monitor_refresh_ms``, ``RAY_task_oom_retries``)
   say when it kills, not what the trial's caller gets (Ray chose OutOfMemoryError over an
   actor error on purpose, ray-project/ray#28937), and turning the monitor off
   (``RAY_memory_monitor_refresh_ms=0``) leaves the node to the kernel's OOM killer. Without it
   (measured, tests/test_search_killed.py): the first trial the memory monitor kills ends the
   whole run, ``RuntimeError: Caught unexpected exception: 1 worker(s) were killed due to the
   node running low on memory ...`` out of ``Tuner.fit``, every running trial with it.

2. ``ray._private.worker.print_to_stdstream(data, ignore_prefix)``, wrapped by
   :func:`drop_raylet_lines`. Why: the driver's error listener (``listen_error_messages`` in
   the same module) prints every error the raylet publishes for the job, e.g. its "A worker
   died or was killed ..." paragraph, with ``print`` to stdout through this function. No public
   way: ``ray.init(log_to_driver=False)`` (set) stops the workers' output only, not the
   listener; it logs nothing, so neither ``ray.LoggingConfig`` nor a ``logging.Filter`` on
   Ray's loggers sees it; no setting turns it off. Without it (measured,
   tests/test_search_killed.py): a ``(raylet) A worker died or was killed ...`` paragraph per
   SIGKILLed worker in the log, beside tlmsearch's one line.

3. The driver process's view of the environment that ``cluster`` changes for its embedded Ray
   (loopback only, a token of its own) and gives back after it, refreshed by
   :func:`reload_env`; Ray's own ``ray.init`` refreshes the last two the same way when it
   turns token authentication on:

   - ``ray._private.ray_constants.ENABLE_RAY_CLUSTER``, computed by its ``env_bool`` from
     ``ENABLE_RAY_CLUSTERS_ENV_VAR`` (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER``) and
     ``IS_WINDOWS_OR_OSX`` once, when ray is imported: while it is on, ``ray.init`` turns a
     node address of 127.0.0.1 into the machine's external address.
   - ``ray._raylet.Config.initialize(config_list)``: Ray's C++ config, ``RAY_AUTH_MODE``
     included, is read from the environment once per process.
   - ``ray._raylet.AuthenticationTokenLoader.instance()`` and ``.reset_cache(self)``: the token
     (``RAY_AUTH_TOKEN``) is read once per process.

   No public way: the environment cannot be set before ``import ray`` once for the process,
   because one process starts several Rays (a ladder's rungs, each with a fresh token) and may
   join a cluster with the user's own settings after one; ``runtime_env`` reaches workers only,
   not the driver, GCS and raylet, which need the token. Without them (measured,
   tests/test_search_cluster.py): not even a fresh process's first embedded Ray starts, as the
   driver read ``RAY_AUTH_MODE`` (unset: disabled) when it imported ray and its GCS refuses it
   ("Authentication token is missing or incorrect"); with the mode right, a node address of
   127.0.0.1 would become the external one (``start_ray`` refuses that Ray), a second Ray in the
   process would get the first one's token, and after ``stop_ray`` the process would keep the
   embedded Ray's token and mode for the cluster it joins next.

4. ``ray.init(_node_ip_address=...)``, given by :func:`node_ip_option`: one of ``ray.init``'s
   hidden options ("unstable and may change without notice", its docstring), and the only way
   to give the driver's node address: 127.0.0.1 for the embedded Ray (the one address Ray binds
   to loopback only), a loopback head's address for a loopback cluster, ``ray.node_ip`` when
   joining. Without it: ``ray.init`` raises "Unknown keyword argument(s)", loud already.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tlmsearch.errors import ConfigError

CHECKED_AGAINST = "2.60.0"  # the Ray version every symbol below was read and measured with
_MARK = "_tlmsearch_wrapper"  # set on our wrappers: a second install wraps Ray's own again


@dataclass(frozen=True)
class Internal:
    """One private Ray symbol: where it lives, the parameters it must take, what needs it."""

    module: str
    name: str  # attribute path inside the module, e.g. "RayActorManager._actor_task_failed"
    params: tuple[str, ...] | None  # its parameters in order; None for a value
    needed_for: str

    @property
    def path(self) -> str:
        return f"{self.module}.{self.name}"


_LOST = "retrying a trial whose worker Ray's memory monitor killed"
_QUIET = "keeping Ray's reports of a dead worker out of the log"
_ENV = "the embedded Ray's loopback-only address and token"
INTERNALS = (
    Internal(
        "ray.air.execution._internal.actor_manager",
        "RayActorManager._actor_task_failed",
        ("self", "tracked_actor_task", "exception"),
        _LOST,
    ),
    Internal("ray._private.worker", "print_to_stdstream", ("data", "ignore_prefix"), _QUIET),
    Internal("ray._private.ray_constants", "ENABLE_RAY_CLUSTER", None, _ENV),
    Internal("ray._private.ray_constants", "ENABLE_RAY_CLUSTERS_ENV_VAR", None, _ENV),
    Internal("ray._private.ray_constants", "IS_WINDOWS_OR_OSX", None, _ENV),
    Internal("ray._private.ray_constants", "env_bool", ("key", "default"), _ENV),
    Internal("ray._raylet", "Config.initialize", ("config_list",), _ENV),
    Internal("ray._raylet", "AuthenticationTokenLoader.instance", (), _ENV),
    Internal("ray._raylet", "AuthenticationTokenLoader.reset_cache", ("self",), _ENV),
)
_BY_NAME = {i.name: i for i in INTERNALS}


class RayInternalsError(ConfigError):
    """The installed Ray lacks (or changed) a private symbol tlmsearch needs: one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__(problems, source=f"ray {_ray_version()}")


def problems() -> list[str]:
    """What the installed Ray lacks of :data:`INTERNALS`, one line each; empty if all is there."""
    out = []
    for internal in INTERNALS:
        try:
            _resolve(internal)
        except RayInternalsError as err:
            out += err.problems
    return out


def check() -> None:
    """Raise :class:`RayInternalsError` if any private symbol tlmsearch needs is gone or changed.

    >>> check()  # with Ray 2.60.0: nothing to say
    """
    found = problems()
    if found:
        raise RayInternalsError(found)


def convert_actor_task_errors(convert: Callable[[Exception], Exception]) -> None:
    """Pass every failed actor task's exception through ``convert`` before Tune's actor manager
    sees it (private use 1). Idempotent: a second call replaces the converter."""

    def wrap(failed: Callable[..., None]) -> Callable[..., None]:
        def _actor_task_failed(self: Any, tracked_actor_task: Any, exception: Exception) -> None:
            failed(self, tracked_actor_task, convert(exception))

        return _actor_task_failed

    _install(_BY_NAME["RayActorManager._actor_task_failed"], wrap)


def drop_raylet_lines(drop: Callable[[str], bool]) -> None:
    """Keep the raylet's messages for which ``drop`` is true out of the driver's output; its other
    messages and every worker's output still print (private use 2). Idempotent."""

    def wrap(printer: Callable[..., None]) -> Callable[..., None]:
        def print_to_stdstream(data: dict[str, Any], ignore_prefix: bool) -> None:
            if data.get("pid") == "raylet":
                lines = [ln for ln in data.get("lines", []) if not drop(ln)]
                if not lines:
                    return
                data = {**data, "lines": lines}
            printer(data, ignore_prefix=ignore_prefix)

        return print_to_stdstream

    _install(_BY_NAME["print_to_stdstream"], wrap)


def reload_env() -> None:
    """Make this process see the environment as it is now: the loopback switch, Ray's C++ config
    (``RAY_AUTH_MODE``) and the token (private use 3)."""
    for internal in INTERNALS:
        if internal.needed_for == _ENV:
            _resolve(internal)  # RayInternalsError naming the one that is gone, not half a reload
    constants = _resolve(_BY_NAME["ENABLE_RAY_CLUSTER"])[0]
    constants.ENABLE_RAY_CLUSTER = constants.env_bool(
        constants.ENABLE_RAY_CLUSTERS_ENV_VAR, not constants.IS_WINDOWS_OR_OSX
    )
    config = _resolve(_BY_NAME["Config.initialize"])[0]
    config.initialize("")
    loader = _resolve(_BY_NAME["AuthenticationTokenLoader.instance"])[0]
    loader.instance().reset_cache()


def node_ip_option(ip: str) -> dict[str, str]:
    """``ray.init``'s hidden option that sets the driver's node address (private use 4)."""
    return {"_node_ip_address": ip}


def _install(internal: Internal, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace ``internal`` (a function) by ``wrap(Ray's own)``, never wrapping a wrapper."""
    owner, current = _resolve(internal)
    original = current.__wrapped__ if getattr(current, _MARK, False) else current
    wrapper = functools.wraps(original)(wrap(original))
    setattr(wrapper, _MARK, True)
    setattr(owner, internal.name.rsplit(".", 1)[-1], wrapper)


def _resolve(internal: Internal) -> tuple[Any, Any]:
    """(the object holding it, the symbol) of ``internal``; RayInternalsError if it is gone or its
    parameters changed."""
    try:
        owner: Any = importlib.import_module(internal.module)
        *outer, attr = internal.name.split(".")
        for part in outer:
            owner = getattr(owner, part)
        value = getattr(owner, attr)
    except (ImportError, AttributeError) as err:
        raise RayInternalsError([_gone(internal, f"it is gone ({err})")]) from None
    if internal.params is not None:
        try:
            params = tuple(inspect.signature(value).parameters)  # Ray's own under our wrapper
        except (TypeError, ValueError):
            params = None
        if params != internal.params:
            have = f"({', '.join(params)})" if params is not None else "no readable signature"
            want = f"({', '.join(internal.params)})"
            raise RayInternalsError([_gone(internal, f"it takes {have}, not {want}")])
    return owner, value


def _gone(internal: Internal, what: str) -> str:
    return (
        f"{internal.path}, a private part of Ray that tlmsearch needs for {internal.needed_for}: "
        f"{what}; tlmsearch was checked against Ray {CHECKED_AGAINST} "
        f"(pip install 'ray[tune]=={CHECKED_AGAINST}'; "
        "tlmsearch/search/execution/ray_internals.py says what each part does)"
    )


def _ray_version() -> str:
    try:
        import ray

        return str(ray.__version__)
    except ImportError:  # pragma: no cover - ray is a dependency
        return "(not importable)"
