"""One proxy training run: a model of given per-layer widths, trained for a token budget.

``train_proxy`` builds the model from a fixed init seed, draws batches in a fixed order for that
seed (so candidates of one seed compare paired), trains with AdamW (no decay on norms and biases),
linear warm-up then cosine or warmup-stable-decay (WSD, arXiv 2404.06395) learning rate, gradient
clipping and accumulation, bf16 autocast where the hardware has it and optional ``torch.compile``.
On CUDA: the fused AdamW kernel, batches through pinned memory (:func:`batches.to_device`), the
flash attention kernel (the models call ``scaled_dot_product_attention(..., is_causal=True)``
with no mask, bf16 under autocast), TF32 matmuls where the run is fp32 (:func:`enable_tf32`), and
MFU against the GPU's data-sheet peak for the precision that runs (:mod:`tlmsearch.train.mfu`).
At fixed token checkpoints it evaluates on the same validation tokens and hands the metrics to
``on_eval``; with ``train.eval_weights`` ema or lawa the metrics are those of averaged weights
(:mod:`tlmsearch.train.averaging`) and the raw weights' are kept beside. Divergence ends the run
with status ``diverged``, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tlmsearch.config import ModelConfig, TrainConfig
from tlmsearch.data.prepare import PreparedData
from tlmsearch.errors import ConfigError
from tlmsearch.train.distributed import DistInfo
from tlmsearch.train.runtime import TrainSummary

__all__ = ["parse_candidate", "train_candidate", "train_proxy"]


# -------------------------------------------------------------------------------------------------
# The loop


class _Bar:
    """A rich progress bar of tokens (or nothing, when disabled)."""

    def __init__(self, enabled: bool, total: int, done: int) -> None:
        self.bar = None
        if not enabled:
            return
        from rich.progress import (
            BarColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.bar = Progress(
            TextColumn("train"),
            BarColumn(),
            TextColumn("{task.completed:,}/{task.total:,} tokens"),
            TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        self.bar.start()
        self.task = self.bar.add_task("train", total=total, info="", completed=done)

    def update(self, tokens: int, row: dict | None = None) -> None:
        if self.bar is not None:
            info = f"loss {row['train_loss']:.3f} val_bpb {row['val_bpb']:.3f}" if row else None
            self.bar.update(self.task, completed=tokens, **({"info": info} if info else {}))

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def train_proxy(
    model_cfg: ModelConfig,
    widths: Sequence[int],
    data: PreparedData,
    train_cfg: TrainConfig,
    *,
    seed: int,
    threads: int | None = None,
    on_eval: Callable[[dict], object] | None = None,
    device: str = "auto",
    progress: bool = False,
    resume: dict[str, Any] | None = None,
    on_checkpoint: Callable[[dict[str, Any]], None] | None = None,
    final_checkpoint: bool = False,
    dist: DistInfo | None = None,
) -> TrainSummary:
    """Train one proxy for ``train_cfg.tokens`` tokens and evaluate it at fixed checkpoints.

    ``on_checkpoint`` gets the run's whole state (:meth:`Trainer.state_dict`) at the first eval
    at or after every ``train_cfg.checkpoint_every_tokens`` (before that eval's ``on_eval``), and
    at the end of a completed run with ``final_checkpoint``. ``resume``: such a state to continue
    from; on a CPU the run then goes on exactly as if it had never stopped (same losses).

    ``dist``: this process is one rank of a data-parallel group
    (:mod:`tlmsearch.train.distributed`); the run is the one-worker run, and only rank 0 calls
    ``on_eval``.

    Example::

        data = prepare_data(cfg.data)
        s = train_proxy(cfg.model, widths, data, cfg.train, seed=0)
        s.status, s.metrics["val_bpb"]
    """
    from tlmsearch.train.trainer import Trainer

    t = Trainer(
        model_cfg, widths, data, train_cfg, seed=seed, threads=threads, device=device, dist=dist
    )
    if resume is not None:
        t.load_state_dict(resume)
    checkpointed = t.tokens if resume is not None else -1  # the state handed in is this point's

    def checkpoint() -> None:
        nonlocal checkpointed
        if on_checkpoint is not None:
            on_checkpoint(t.state_dict())
        checkpointed = t.tokens

    bar = _Bar(progress, t.n_steps * t.step_tokens, t.tokens)
    try:
        while not t.done:
            t.step()
            bar.update(t.tokens)
            if not t.eval_due:
                continue
            row = t.evaluate()
            if row is None:  # diverged
                break
            bar.update(t.tokens, row)
            if t.checkpoint_due():
                checkpoint()
            if t.stop_asked(on_eval(dict(row)) if on_eval is not None else None):
                break
        if t.status == "completed" and final_checkpoint and checkpointed != t.tokens:
            checkpoint()
    finally:
        t.close()
        bar.stop()
    return t.summary()


# -------------------------------------------------------------------------------------------------
# One candidate of a study, outside any search (``tlmsearch train``)


def parse_candidate(text: str) -> dict[str, Any]:
    """``uniform`` or a JSON object of schedule parameters, e.g. ``{"shape": "cosine"}``."""
    import json

    from tlmsearch.widths.space import UNIFORM

    if text.strip() == "uniform":
        return dict(UNIFORM)
    try:
        cand = json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(
            f"--candidate: {text!r} is not 'uniform' or JSON ({err.msg}); e.g. "
            '\'{"shape": "cosine", "r_start": 1.5}\''
        ) from None
    if not isinstance(cand, dict):
        raise ConfigError(f"--candidate: expected a JSON object of parameters, got {text!r}")
    return cand


def train_candidate(
    cfg: Any,
    candidate: dict[str, Any],
    *,
    seed: int | None = None,
    device: str = "auto",
    progress: bool = True,
    on_eval: Callable[[dict], object] | None = None,
) -> tuple[tuple[int, ...], TrainSummary]:
    """Widths of ``candidate`` for the study's proxy model, then ``train_proxy`` on its data:
    the model and training its trial in a search would have (its settings, e.g. ``train.lr``,
    applied; its heads schedule's per-layer heads: ``StudyConfig.for_candidate``)."""
    from tlmsearch.data import prepare_data
    from tlmsearch.widths.schedules import ScheduleError

    try:
        cfg = cfg.for_candidate(candidate)
        plan = cfg.model.plan(candidate)
    except (ScheduleError, TypeError, ValueError) as err:
        raise ConfigError(f"--candidate: {candidate} gives no valid widths: {err}") from None
    data = prepare_data(cfg.data, progress=progress)
    summary = train_proxy(
        cfg.model,
        plan.widths,
        data,
        cfg.train,
        seed=cfg.search.seeds[0] if seed is None else seed,
        threads=cfg.train.threads,
        on_eval=on_eval,
        device=device,
        progress=progress,
    )
    return tuple(plan.widths), summary
