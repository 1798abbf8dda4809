"""The Ray Tune trainable: one (candidate, seed) -> one proxy training run, reported per eval.

Runs on any Ray node. The study arrives as a plain dict and the data through Ray's object store
(or as paths on storage every node mounts, ``ray.shared_path``), never through the driver's disk.
Each eval is reported with the trial's static facts (widths, heads, parameter counts, node); a
last report with ``final: True`` carries the trainer's status, so the searcher can tell Optuna
COMPLETE or FAIL with the reason. Divergence is a status of the trainer, not an exception, and so
is an exception: the trial reports it as ``failed``, with its traceback (kept as the Optuna
trial's ``traceback`` attribute), so Ray does not retry it. Only a lost worker or memory reaches
Ray as an error, and Ray retries those (:mod:`tlmsearch.search.execution.failures`).
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from typing import Any

from tlmsearch.config import METRICS, StudyConfig
from tlmsearch.search.attrs import NUMBER, REPLAY, RESUME_FROM
from tlmsearch.search.execution import faults
from tlmsearch.search.execution.failures import exception_line, is_out_of_memory
from tlmsearch.widths.budget import trial_counts
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.profiles import QUANTITIES

NAN = float("nan")
TRACEBACK_CHARS = 4000  # the end of a failed trial's traceback, kept in its Optuna trial


def trial_threads(cfg: StudyConfig) -> int:
    """Intra-op threads: the YAML's ``train.threads``, else a worker's CPU allotment (with one
    worker per trial, the trial's)."""
    return cfg.train.threads or max(1, math.floor(cfg.ray.cpus_per_worker or 1))


def trial_device(cfg: StudyConfig) -> str:
    """``cuda`` when the study gives each trial a GPU or a share of one (``ray.gpus_per_trial``
    > 0): Ray has set CUDA_VISIBLE_DEVICES to the GPU it assigned, so ``cuda`` is that one,
    shared with the trials it also holds at a fraction. ``cpu`` otherwise, on a GPU node too:
    Ray accounted no GPU to the trial, and trials piling onto one unaccounted would contend."""
    return "cuda" if cfg.ray.gpus_per_trial > 0 else "cpu"


def _metrics(values: dict[str, Any], static: dict[str, Any]) -> dict[str, Any]:
    """Every objective metric name present (Ray rejects results that lack the metric)."""
    out = {m: NAN for m in METRICS}
    out.update({k: v for k, v in values.items() if k != "curve"})
    out["params"] = static.get("n_params", NAN)
    out["non_embedding_params"] = static.get("n_params_nonemb", NAN)
    out["flops_per_token"] = static.get("flops_per_token", NAN)
    return out


def run_trial(
    config: dict[str, Any], study: dict[str, Any], data: Any, compile_cache: str | None = None
) -> None:
    """Train the proxy for ``config["candidate"]`` at ``config["seed"]``; report each eval.

    ``compile_cache``: the run's torch.compile cache
    (:func:`tlmsearch.train.runtime.use_compile_cache`), this process's and its Ray Train workers'.
    An exception ends the trial with a ``failed`` final report (its last eval's metrics, the
    exception line as the reason, the traceback); an allocation failure is raised, for Ray to
    retry.
    """
    from ray import tune

    if compile_cache:  # none for a simulated study: its trials never import torch
        from tlmsearch.train.runtime import use_compile_cache

        use_compile_cache(compile_cache)  # before anything compiles in this process
    last: dict[str, Any] = {}  # the last eval's report: a failure keeps its metrics
    try:
        _train(config, study, data, last, compile_cache)
    except Exception as err:
        if is_out_of_memory(err):
            raise  # the system's doing: Ray retries it (search.max_retries)
        failed = {
            "final": True,
            "status": "failed",
            "reason": exception_line(err),
            "traceback": traceback.format_exc()[-TRACEBACK_CHARS:],
        }
        tune.report({**_metrics({}, {}), **last, **failed})  # every metric, as Ray requires


def _setup(
    base: StudyConfig, candidate: Candidate, data: Any
) -> tuple[StudyConfig, Any, Any, dict[str, Any]]:
    """(the study as the candidate's trial trains it, its model, its width plan, the static
    facts every report carries)."""
    # the candidate's settings (train.lr, model.init_std) applied and its heads schedule's
    # per-layer heads (model.layer_heads): what this trial trains with
    cfg = base.for_candidate(candidate)
    model = cfg.model
    if model.vocab_size is None:
        model = model.model_copy(update={"vocab_size": data.vocab_size})
    plan = model.plan(candidate)
    static: dict[str, Any] = {
        "widths": list(plan.widths),
        "heads": list(model.heads),  # the model built: its heads schedule's, or n_head each
        "heads_share": plan.heads_share,  # realised heads total over uniform's
        # each depth profile's per-layer multipliers (lr_profile: [...]); absent: flat
        **{
            q.profile_field: getattr(cfg.train, q.profile_field)
            for q in QUANTITIES.values()
            if getattr(cfg.train, q.profile_field) is not None
        },
        "node": _node_ip(),
    }
    # counted up front, so pruned trials carry them too; of the model as the candidate builds it
    static.update(trial_counts(model, plan.widths, model.vocab_size, cfg.data.seq_len))
    return cfg, model, plan, static


def _meta(config: dict[str, Any], cfg: StudyConfig, model: Any, plan: Any) -> dict[str, Any]:
    """What a checkpoint's meta.json says the weights are (checkpoints.py)."""
    return {
        "number": config.get(NUMBER),
        "candidate": config["candidate"],
        "seed": int(config["seed"]),
        "widths": list(plan.widths),
        "heads": list(model.heads),
        "model": model.model_dump(mode="json"),
        "train": cfg.train.model_dump(mode="json"),
        "arch": model.arch,
    }


def _replay(
    report: Callable[[dict[str, Any]], Any], replay: dict[str, Any], static: dict[str, Any]
) -> None:
    """A finished trial of this seed trained these exact widths: report its curve."""
    for ev in replay["curve"]:
        report({**_metrics(ev, static), **static, "final": False})
    report(
        {
            **_metrics(dict(replay["curve"][-1]), static),
            **static,
            "final": True,
            "status": "completed",
            "reason": f"same model as trial {replay['number']}: its curve, not trained again",
        }
    )


def _simulate(
    report: Callable[[dict[str, Any]], Any],
    answer: Any,
    static: dict[str, Any],
    seconds_per_eval: float,
    last: dict,
) -> None:
    """``train.backend: simulate``: report the blackbox's curve (:mod:`.blackbox`) as a trained
    trial reports its evals, then its final report with the blackbox's status."""
    start = time.time()
    for ev in answer.evals:
        if seconds_per_eval:
            time.sleep(seconds_per_eval)
        row = {**_metrics({**ev, "wall_s": time.time() - start}, static), **static}
        report({**row, "final": False})
        last.update(row)
    report(
        {
            **_metrics({}, static),
            **last,
            "final": True,
            "status": answer.status,
            "reason": answer.reason,
        }
    )


def _train(
    config: dict[str, Any], study: dict[str, Any], data: Any, last: dict, compile_cache: str | None
) -> None:
    from ray import tune

    candidate, seed = Candidate.of(config["candidate"]), int(config["seed"])
    cfg, model, plan, static = _setup(StudyConfig.model_validate(study), candidate, data)
    last.update(_metrics({}, static), **static)
    replay = config.get(REPLAY)
    if replay:  # a finished trial of this seed trained these exact widths: report its curve
        _replay(tune.report, replay, static)
        return
    if cfg.train.backend == "simulate":  # ``data`` is the blackbox (search/execution/blackbox.py)
        _simulate(tune.report, data.curve(candidate, seed), static, data.seconds_per_eval, last)
        return
    from tlmsearch.train.loop import train_proxy
    from tlmsearch.train.trainer import Trainer

    threads = trial_threads(cfg)  # the trainer sets torch's intra-op threads to this
    start = time.time()
    meta = _meta(config, cfg, model, plan)
    reporter = _Reporter(meta, cfg.train.tokens)
    resume = _resume_state(config, meta)
    if resume is not None:  # the evals before the checkpoint, so Optuna has the whole curve
        for ev in Trainer.evals_of(resume):
            reporter.report({**_metrics(ev, static), **static, "final": False})

    def on_eval(ev: dict[str, Any]) -> bool:
        ev = faults.shifted(candidate, ev)  # tests only; inert otherwise
        report = {**_metrics(ev, static), **static, "final": False}
        reporter.report(report)
        last.update(report)
        faults.at_eval(candidate, seed, ev.get("tokens"))  # tests only; inert otherwise
        return False

    run = {
        "seed": seed,
        "threads": threads,
        "on_eval": on_eval,
        "resume": resume,
        "on_checkpoint": reporter.checkpoint,
        "final_checkpoint": cfg.search.keep_weights != "none",
    }
    if cfg.ray.workers_per_trial > 1:  # Ray Train workers; this trial is their driver
        from tlmsearch.search.execution.workers import train_on_workers

        def on_nodes(nodes: list[str]) -> None:  # where the workers run, by rank
            static["node"] = ",".join(nodes)

        summary = train_on_workers(
            cfg, model, plan.widths, data, on_nodes=on_nodes, compile_cache=compile_cache, **run
        )
    else:
        summary = train_proxy(model, plan.widths, data, cfg.train, device=trial_device(cfg), **run)
    metrics = faults.shifted(candidate, dict(summary.metrics or {}))
    metrics.update(tokens=summary.tokens, wall_s=time.time() - start)
    reporter.report(
        {
            **_metrics(metrics, static),
            **static,
            "final": True,
            "status": summary.status,
            "reason": summary.reason or "",
        }
    )


class _Reporter:
    """``tune.report`` that attaches the checkpoint written since the last report, if any.

    Ray copies the folder into the trial's storage during ``tune.report``; the temporary one is
    removed after. A checkpoint is written at an eval, before its report: the report carrying a
    checkpoint is always an eval's (or the final one).
    """

    def __init__(self, meta: dict[str, Any], total_tokens: int) -> None:
        self.meta = meta
        self.total = total_tokens
        self.pending: str | None = None

    def checkpoint(self, state: dict[str, Any]) -> None:
        from tlmsearch.train.checkpoints import write_checkpoint

        if self.pending:  # never reported (cannot happen: one checkpoint per eval at most)
            shutil.rmtree(self.pending, ignore_errors=True)
        self.pending = tempfile.mkdtemp(prefix="tlmsearch-ckpt-")
        tokens = int(state["tokens"])
        write_checkpoint(
            self.pending, state, {**self.meta, "tokens": tokens, "final": tokens >= self.total}
        )

    def report(self, metrics: dict[str, Any]) -> None:
        from ray import tune

        folder, self.pending = self.pending, None
        if folder is None:
            tune.report(metrics)
            return
        try:
            tune.report(metrics, checkpoint=tune.Checkpoint.from_directory(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _resume_state(config: dict[str, Any], meta: dict[str, Any]) -> dict[str, Any] | None:
    """The state to continue from: Ray's latest checkpoint of this trial (a retry after a lost
    worker), else the interrupted trial's that ``tlmsearch resume`` named (``resume_from``).
    None when neither is a valid checkpoint of this very model (candidate widths, heads and
    seed)."""
    from ray import tune

    from tlmsearch.train.checkpoints import load_checkpoint

    loaded = None
    ckpt = tune.get_checkpoint()
    if ckpt is not None:
        with ckpt.as_directory() as folder:
            loaded = load_checkpoint(folder)
    if loaded is None and config.get(RESUME_FROM):
        loaded = load_checkpoint(config[RESUME_FROM])
    return _matching(loaded, meta)


def _matching(loaded: tuple[dict, dict] | None, meta: dict[str, Any]) -> dict[str, Any] | None:
    """The state of a loaded checkpoint when it is this very model's, else None."""
    if loaded is None:
        return None
    state, saved = loaded
    # a checkpoint written before trials recorded heads predates heads schedules: the same
    # study's model, so the same heads
    heads = saved.get("heads", meta["heads"])
    if (saved["widths"], heads, saved["seed"]) != (meta["widths"], meta["heads"], meta["seed"]):
        return None  # another model's: training from zero is right
    if _profiles(saved) != _profiles(meta):
        return None  # the same model trained with other per-layer LRs or init: another run
    return state


def _profiles(meta: dict[str, Any]) -> tuple:
    """The depth profiles a checkpoint's training used: every train field a profile sets
    (none recorded: the defaults, which a checkpoint from before profiles trained with)."""
    train = meta.get("train") or {}
    return tuple(train.get(f, d) for q in QUANTITIES.values() for f, d, _ in q.train_fields())


def _node_ip() -> str:
    import ray

    try:
        return ray.util.get_node_ip_address()
    except Exception:
        return ""
