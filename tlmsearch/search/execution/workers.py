"""One trial on N data-parallel workers (ray.workers_per_trial): Ray Train inside the Tune trial.

Ray 2.60 (Train V2, on by default) runs Ray Train under Tune the way its guide "Hyperparameter
Tuning with Ray Tune" shows (doc/source/train/user-guides/hyperparameter-optimization.md): the
Tune function trainable is the Train driver; it builds a trainer whose ``ScalingConfig`` names the
workers and their resources and calls ``fit()``, whose controller actor starts the workers in a
placement group of their own (the Tuner(trainer) pattern of Train V1 is deprecated). The trial
itself computes nothing, so it reserves only a little memory (:data:`DRIVER`); the workers reserve
the CPUs and GPUs.

Ray's ``TuneReportCallback`` (ray/tune/integration/ray_train.py) forwards rank 0's reports to
Tune one way, but our scheduler prunes by answering STOP to a reported eval, and the workers must
hear that answer. So rank 0 sends each eval through a Ray queue to the trial, which hands it to
the same ``on_eval`` a one-worker trial uses (``tune.report``) and sends the answer back. A STOP
ends ``tune.report`` with SystemExit in the trial's thread, which then removes the workers'
placement group: they end at once and give their resources back. (Tune ends the trial's actor
right after, and Ray Train's cleaner of an orphaned placement group asks the State API, which a
Ray without a dashboard, like the embedded one, does not serve: nothing else would free them.)

The workers meet in a process group of their own (:mod:`tlmsearch.train.distributed`; gloo on CPU,
NCCL on GPU) whose rendezvous listens on rank 0's node address only: on the embedded Ray, loopback.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from tlmsearch.config import ModelConfig, RayConfig, StudyConfig
from tlmsearch.errors import ConfigError
from tlmsearch.train.runtime import TrainSummary

DRIVER = {"cpu": 0, "gpu": 0, "memory": 256 * 2**20}  # the trial of a multi-worker run: a driver
POLL_S = 0.5  # how often the driver looks whether fit() ended while it waits for an eval


def trial_resources(cfg: RayConfig) -> dict[str, float]:
    """What Tune reserves for one trial: all of it, or a driver when Ray Train starts workers."""
    if cfg.workers_per_trial > 1:
        return dict(DRIVER)
    return {"cpu": cfg.cpus_per_trial, "gpu": cfg.gpus_per_trial}


def check_fits(cfg: RayConfig, facts: dict[str, Any]) -> None:
    """A trial's workers must fit in the cluster at once, or Ray Train waits for them forever."""
    if cfg.workers_per_trial == 1:
        return
    for kind, need in (("cpus", cfg.cpus_per_trial), ("gpus", cfg.gpus_per_trial)):
        have = facts.get(kind) or 0.0
        if need > have:
            raise ConfigError(
                f"ray.workers_per_trial: a trial's {cfg.workers_per_trial} workers need "
                f"{need:g} {kind.upper()} in all (x ray.{kind}_per_worker), but the Ray cluster "
                f"has {have:g}; lower them, or add nodes"
            )


def _ray_trainer(
    cfg: StudyConfig,
    model: ModelConfig,
    widths: Sequence[int],
    data: Any,
    *,
    seed: int,
    threads: int,
    resume: dict[str, Any] | None,
    checkpoints: bool,
    final_checkpoint: bool,
    compile_cache: str | None = None,
) -> tuple[Any, Any, Any]:
    """(Ray Train's trainer of :func:`_worker` on ``ray.workers_per_trial`` workers, the queue
    rank 0 sends on, the queue it hears the answers on); nothing started yet."""
    import ray
    from ray.train import FailureConfig, RunConfig, ScalingConfig
    from ray.train.backend import BackendConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    from ray.util.queue import Queue

    rc = cfg.ray
    evals: Any = Queue(actor_options={"num_cpus": 0})  # rank 0 -> trial: start, evals, summary
    answers: Any = Queue(actor_options={"num_cpus": 0})  # trial -> rank 0: stop or go on
    per_worker = {"CPU": rc.cpus_per_worker or 0.0, "GPU": rc.gpus_per_worker or 0.0}
    trainer = DataParallelTrainer(
        _worker,
        train_loop_config={
            "model": model,
            "widths": list(widths),
            "train": cfg.train,
            "seed": seed,
            "threads": threads,
            "device": "cuda" if per_worker["GPU"] else "cpu",
            "data": ray.put(data),
            "resume": ray.put(resume),
            "checkpoints": checkpoints,
            "final_checkpoint": final_checkpoint,
            "compile_cache": compile_cache,  # the run's, set in each worker before it compiles
            "evals": evals,
            "answers": answers,
        },
        backend_config=BackendConfig(),  # the process group is ours (tlmsearch.train.distributed)
        scaling_config=ScalingConfig(
            num_workers=rc.workers_per_trial,
            use_gpu=bool(per_worker["GPU"]),
            resources_per_worker={k: v for k, v in per_worker.items() if v},
            placement_strategy=rc.worker_placement,
        ),
        run_config=RunConfig(
            name="workers",
            storage_path=_trial_dir(),
            failure_config=FailureConfig(max_failures=0),  # a lost worker: the trial's error
        ),
    )
    return trainer, evals, answers


def _fit_in_background(trainer: Any) -> tuple[threading.Thread, dict[str, BaseException]]:
    """``trainer.fit()`` started in a thread of its own; its exception lands in the dict."""
    ended: dict[str, BaseException] = {}

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as err:  # raised in the trial's thread by train_on_workers
            ended["error"] = err

    runner = threading.Thread(target=fit, name="ray-train-fit", daemon=True)
    runner.start()
    return runner, ended


def _serve(
    evals: Any,
    answers: Any,
    runner: threading.Thread,
    *,
    on_eval: Callable[[dict], object],
    on_nodes: Callable[[list[str]], None],
    on_checkpoint: Callable[[dict[str, Any]], None] | None,
) -> TrainSummary | None:
    """The trial's side of the queues: rank 0's messages handed on and answered, till its
    summary (None: ``fit()`` ended without one). Going down, the workers' placement group goes
    with it."""
    import ray
    from ray.util.queue import Empty

    summary, group = None, None
    try:
        while summary is None:
            try:
                kind, payload = evals.get(timeout=POLL_S)
            except Empty:
                if not runner.is_alive():
                    break
                continue
            if kind == "start":
                nodes, group = payload
                on_nodes(nodes)
            elif kind == "eval":
                answer = on_eval(payload)
                answers.put(answer is True or answer == "stop")
            elif kind == "checkpoint":  # [ref]: the state stays in the object store till here
                if on_checkpoint is not None:
                    on_checkpoint(ray.get(payload[0]))
                answers.put(True)  # rank 0 may go on (and drop the state)
            else:
                summary = TrainSummary(**payload)
    except BaseException:  # Tune stopped the trial (pruned) or the driver is going down
        if group is not None:
            ray.util.remove_placement_group(group)  # the workers end with it
        raise
    return summary


def train_on_workers(
    cfg: StudyConfig,
    model: ModelConfig,
    widths: Sequence[int],
    data: Any,
    *,
    seed: int,
    threads: int,
    on_eval: Callable[[dict], object],
    on_nodes: Callable[[list[str]], None],
    resume: dict[str, Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    final_checkpoint: bool = False,
    compile_cache: str | None = None,
) -> TrainSummary:
    """``train_proxy`` on ``cfg.ray.workers_per_trial`` Ray Train workers; rank 0's summary.

    ``on_eval`` gets every eval (and its answer stops every rank); ``on_nodes`` the address of
    each rank's node, by rank, before the first eval; ``on_checkpoint`` rank 0's state (every
    rank holds the same), here, before the eval it belongs to. Every rank starts from ``resume``
    and compiles into ``compile_cache`` (:func:`tlmsearch.train.runtime.use_compile_cache`). A
    worker's exception is raised here.
    """
    trainer, evals, answers = _ray_trainer(
        cfg,
        model,
        widths,
        data,
        seed=seed,
        threads=threads,
        resume=resume,
        checkpoints=on_checkpoint is not None,
        final_checkpoint=final_checkpoint,
        compile_cache=compile_cache,
    )
    runner, ended = _fit_in_background(trainer)
    summary = _serve(
        evals, answers, runner, on_eval=on_eval, on_nodes=on_nodes, on_checkpoint=on_checkpoint
    )
    runner.join()
    if "error" in ended:
        raise ended["error"]
    if summary is None:
        raise RuntimeError("the Ray Train workers ended without a summary")
    return summary


def _trial_dir() -> str | None:
    try:
        from ray import tune

        return tune.get_context().get_trial_dir()
    except Exception:  # outside a Tune trial: Ray Train's default storage
        return None


def _worker(loop: dict[str, Any]) -> None:
    """One rank: join the group, train its share, and (rank 0) talk to the trial."""
    import ray
    import ray.train
    import torch
    from ray.train.collective import broadcast_from_rank_zero

    from tlmsearch.train.distributed import close_group, init_group, listen
    from tlmsearch.train.loop import train_proxy
    from tlmsearch.train.runtime import resolve_device, use_compile_cache

    use_compile_cache(loop.get("compile_cache"))  # a worker is a process of its own
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    node = ray.util.get_node_ip_address()
    device: torch.device = resolve_device(loop["device"])
    listener = listen(node) if rank == 0 else None
    host, port = broadcast_from_rank_zero(listener.getsockname()[:2] if listener else None)
    info = init_group(rank, world, host, port, device, listener)
    finished = False
    try:
        nodes = info.gather(node)
        evals, answers = loop["evals"], loop["answers"]
        on_eval = on_checkpoint = None
        if info.main:  # rank 0 talks to the trial; each message waits for its answer
            evals.put(("start", (nodes, ray.util.get_current_placement_group())))

            def on_eval(row: dict) -> bool:
                evals.put(("eval", row))
                return bool(answers.get())

            def write(state: dict) -> None:
                evals.put(("checkpoint", [ray.put(state)]))
                answers.get()

            on_checkpoint = write if loop["checkpoints"] else None

        summary = train_proxy(
            loop["model"],
            loop["widths"],
            ray.get(loop["data"]),
            loop["train"],
            seed=loop["seed"],
            threads=loop["threads"],
            on_eval=on_eval,
            device=loop["device"],
            resume=ray.get(loop["resume"]),  # the same state on every rank
            on_checkpoint=on_checkpoint,
            final_checkpoint=loop["final_checkpoint"],
            dist=info,
        )
        if info.main:
            evals.put(("done", summary.to_dict()))
        finished = True
    finally:
        close_group(together=finished)
