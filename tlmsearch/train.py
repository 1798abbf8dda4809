"""One proxy training run: a model of given per-layer widths, trained for a token budget.

``train_proxy`` builds the model from a fixed init seed, draws batches in a fixed order for that
seed (so candidates of one seed compare paired), trains with AdamW (no decay on norms and biases),
linear warm-up then cosine or warmup-stable-decay (WSD, arXiv 2404.06395) learning rate, gradient
clipping and accumulation, bf16 autocast where the hardware has it and optional ``torch.compile``.
On CUDA: the fused AdamW kernel, batches through pinned memory (:func:`batches.to_device`), the
flash attention kernel (the models call ``scaled_dot_product_attention(..., is_causal=True)``
with no mask, bf16 under autocast), TF32 matmuls where the run is fp32 (:func:`enable_tf32`), and
MFU against the GPU's data-sheet peak for the precision that runs (:mod:`tlmsearch.mfu`).
At fixed token checkpoints it evaluates on the same validation tokens and hands the metrics to
``on_eval``; with ``train.eval_weights`` ema or lawa the metrics are those of averaged weights
(:mod:`tlmsearch.averaging`) and the raw weights' are kept beside. Divergence ends the run with
status ``diverged``, never an exception.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from tlmsearch import budget, parametrization
from tlmsearch.averaging import WeightAverage, load_average, weight_average
from tlmsearch.config import ModelConfig, TrainConfig
from tlmsearch.data.batches import Batches, pinned, val_windows
from tlmsearch.data.prepare import PreparedData
from tlmsearch.distributed import DistInfo
from tlmsearch.divergence import DivergenceMonitor
from tlmsearch.errors import ConfigError


@dataclass
class TrainSummary:
    """What a run did. ``metrics`` is the last eval; ``curve`` all evals in order."""

    status: str  # completed | diverged | stopped
    reason: str
    tokens: int
    metrics: dict[str, float]
    curve: list[dict[str, float]]
    wall_s: float
    n_params: int
    n_params_nonemb: int
    flops_per_token: float
    setup: dict[str, Any] = field(default_factory=dict)  # device, dtype, compile, threads, batch

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# -------------------------------------------------------------------------------------------------
# Learning rate


def lr_at(tokens: int, cfg: TrainConfig) -> float:
    """The learning rate of the step that brings the count of training tokens to ``tokens``.

    The first step of a warm-up of W tokens in steps of S tokens gets ``lr * S / W`` (a step
    at ``lr * 1 / W`` would be wasted), and the last step of the run gets the minimum.

    Linear warm-up to ``lr`` over ``warmup_tokens``, then cosine to ``min_lr_ratio * lr`` at
    ``cfg.tokens``, or (WSD) constant until the last ``decay_fraction`` of the run and a linear
    decay to the minimum.
    """
    peak, low = cfg.lr, cfg.lr * cfg.min_lr_ratio
    if tokens < cfg.warmup_tokens:
        return peak * tokens / cfg.warmup_tokens
    if cfg.lr_schedule == "cosine":
        p = min(1.0, (tokens - cfg.warmup_tokens) / max(1, cfg.tokens - cfg.warmup_tokens))
        return low + (peak - low) * 0.5 * (1.0 + math.cos(math.pi * p))
    decay_start = max(cfg.warmup_tokens, cfg.tokens - cfg.decay_fraction * cfg.tokens)
    if tokens < decay_start:
        return peak
    span = cfg.tokens - decay_start
    p = min(1.0, (tokens - decay_start) / span) if span > 0 else 1.0
    return peak + (low - peak) * p


# -------------------------------------------------------------------------------------------------
# Setup


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise ConfigError(
            f"device: {device!r} is not a torch device; use auto, cpu or cuda"
        ) from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device: {device!r} but CUDA is not available; use auto or cpu")
    return dev


def resolve_dtype(cfg: TrainConfig, device: torch.device) -> torch.dtype:
    """bf16 autocast where the hardware computes in bf16 natively, else fp32."""
    if cfg.dtype == "fp32":
        return torch.float32
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
    else:
        from tlmsearch.mfu import cpu_has_bf16

        ok = cpu_has_bf16()
    if cfg.dtype == "bf16" and not ok:
        raise ConfigError(
            f"train.dtype: bf16 but this {device.type} has no native bf16; use auto or fp32"
        )
    return torch.bfloat16 if ok else torch.float32


# ``compile: auto`` on a GPU: compile when the run would take this long uncompiled, estimated
# from its model FLOPs at GPU_EAGER_MFU of the device's peak (GPU_UNKNOWN_PEAK where the table
# lacks the GPU).
GPU_COMPILE_AFTER_S = 180.0
GPU_EAGER_MFU = 0.3
GPU_UNKNOWN_PEAK = 100e12


def resolve_compile(
    cfg: TrainConfig,
    device: torch.device | None = None,
    flops_per_token: float = 0.0,
    peak: float | None = None,
) -> bool:
    """Whether training steps run under ``torch.compile``: ``on`` and ``off`` as given; ``auto``
    when the run is long enough to repay the compile (the first step's time, reported as
    ``setup["first_step_s"]``):

    - on a CPU, runs of 2M tokens or more (the compile took ~25-40 s at the quickstart size);
    - on CUDA, runs that would take ``GPU_COMPILE_AFTER_S`` (3 minutes) or more uncompiled,
      estimated as ``tokens * flops_per_token / (GPU_EAGER_MFU * peak)``: the compile (tens of
      seconds; ``benchmarks/gpu.py`` reports it) pays off on a GPU for any run longer than a few
      minutes, while a shorter one (a tiny proxy's whole run takes seconds there) would mostly
      compile.
    """
    if cfg.compile != "auto":
        return cfg.compile == "on"
    if device is not None and device.type == "cuda":
        eager_s = cfg.tokens * flops_per_token / (GPU_EAGER_MFU * (peak or GPU_UNKNOWN_PEAK))
        return eager_s >= GPU_COMPILE_AFTER_S
    return cfg.tokens >= 2_000_000


def enable_tf32(device: torch.device, dtype: torch.dtype) -> bool:
    """fp32 matmuls on TF32 tensor cores (fp32 range, 10-bit mantissa inputs, fp32 sums) where a
    run on a CUDA device computes in fp32; True when set. Without it an fp32 run on an Ampere or
    newer GPU leaves its tensor cores idle (A100: 19.5 vs 156 TFLOP/s). Process-wide (torch's
    ``float32_matmul_precision``), as every run of a trial process resolves it the same way; MFU
    is then against the TF32 peak (``mfu.gpu_peak``)."""
    if device.type == "cuda" and dtype == torch.float32:
        torch.set_float32_matmul_precision("high")
        return True
    return False


def attention_kernel(cfg: TrainConfig, device: torch.device, seq_len: int) -> str:
    """The attention kernel training steps use: ``default`` (torch's choice) or ``math``.

    On this CPU the flash kernel's backward is slow for short windows (profiled at the
    quickstart's body, vocab 4096: 40% of a step's time). With the math kernel (batched matmuls
    and a softmax that torch.compile fuses) a whole step at seq_len 128 ran 1.45x faster at vocab
    4096 and 1.09x at 16384, where the output layer dominates; equal at seq_len 256, ~13% slower
    at 512. Evaluation keeps the default, whose forward is faster (27k vs 24k tokens/s).
    """
    if cfg.attention != "auto":
        return cfg.attention
    return "math" if device.type == "cpu" and seq_len <= 256 else "default"


def attention_context(kernel: str) -> contextlib.AbstractContextManager:
    """A context in which ``F.scaled_dot_product_attention`` uses ``kernel`` (see above)."""
    if kernel == "math":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        return sdpa_kernel(SDPBackend.MATH)
    return contextlib.nullcontext()


def batch_shape(cfg: TrainConfig, seq_len: int) -> tuple[int, int]:
    """(micro batch in sequences, accumulation steps) for ``batch_tokens`` per optimizer step."""
    seqs = cfg.step_sequences(seq_len)
    # The largest micro batch that divides the step exactly: 24 sequences with micro 16 run as
    # 2 x 12, not 1 x 16 (which would silently train on a third fewer tokens per step).
    micro = max(d for d in range(1, min(cfg.micro_batch_size, seqs) + 1) if seqs % d == 0)
    return micro, seqs // micro


def _autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


# -------------------------------------------------------------------------------------------------
# Evaluation


@torch.inference_mode()
def evaluate(
    model: torch.nn.Module,
    vx: torch.Tensor,
    vy: torch.Tensor,
    batch: int,
    device: torch.device,
    dtype: torch.dtype,
) -> float:
    """Summed next-token NLL (nats) over all validation windows."""
    was_training = model.training
    model.eval()
    total = 0.0
    for i in range(0, vx.size(0), batch):
        x = vx[i : i + batch].to(device, non_blocking=True)
        y = vy[i : i + batch].to(device, non_blocking=True)
        with _autocast(device, dtype):
            logits = model(x)
        total += F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="sum").item()
    model.train(was_training)
    return total


# -------------------------------------------------------------------------------------------------
# Training


def _progress(enabled: bool, total: int) -> tuple[Any, Any]:
    if not enabled:
        return None, None
    from rich.progress import (
        BarColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("train"),
        BarColumn(),
        TextColumn("{task.completed:,}/{task.total:,} tokens"),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    bar.start()
    return bar, bar.add_task("train", total=total, info="")


# -------------------------------------------------------------------------------------------------
# Resumable state


@dataclass
class LoopState:
    """The training loop's own counters: with the model, optimizer, data position, RNGs and
    divergence monitor, all a run needs to go on where it stopped."""

    step: int = 0  # optimizer steps done
    tokens: int = 0
    loss_sum: float = 0.0  # training losses since the last eval
    loss_n: int = 0
    next_eval: int = 0
    next_checkpoint: int | None = None
    checkpointed: int = -1  # tokens at the last checkpoint handed out
    curve: list[dict[str, float]] = field(default_factory=list)


def rng_states() -> dict[str, Any]:
    """Every random generator a training step may read (torch's CPU and CUDA generators)."""
    out: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


def pack_state(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Batches,
    monitor: DivergenceMonitor,
    loop: LoopState,
    average: WeightAverage | None = None,
) -> dict[str, Any]:
    """The run's whole state at an eval, for ``on_checkpoint`` (``"model"``: its state_dict;
    ``"average"``: the averaged weights' state, with ``train.eval_weights`` ema or lawa).

    Its tensors are the live ones (no copy): save it before training goes on.
    """
    loop_dict = asdict(loop)
    loop_dict["curve"] = [dict(r) for r in loop.curve]
    extra = {"average": average.state_dict()} if average is not None else {}
    return {
        **extra,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "batches": batches.state_dict(),
        "monitor": monitor.state_dict(),
        "rng": rng_states(),
        "loop": loop_dict,
        "tokens": loop.tokens,
    }


def unpack_state(
    state: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    batches: Batches,
    monitor: DivergenceMonitor,
    average: WeightAverage | None = None,
) -> LoopState:
    """Load a :func:`pack_state` state into a freshly built run; returns its loop counters."""
    load_average(average, state)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    batches.load_state_dict(state["batches"])
    monitor.load_state_dict(state["monitor"])
    set_rng_states(state["rng"])
    loop = LoopState(**state["loop"])
    loop.curve = [dict(r) for r in loop.curve]
    loop.checkpointed = loop.tokens  # the state handed in is this point's checkpoint
    return loop


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

    ``on_checkpoint`` gets the run's whole state (:func:`pack_state`) at the first eval at or
    after every ``train_cfg.checkpoint_every_tokens`` (before that eval's ``on_eval``), and at
    the end of a completed run with ``final_checkpoint``. ``resume``: such a state to continue
    from; on a CPU the run then goes on exactly as if it had never stopped (same losses).

    ``dist``: this process is one rank of a data-parallel group (:mod:`tlmsearch.distributed`);
    the run is the one-worker run, and only rank 0 calls ``on_eval``.

    Example::

        data = prepare_data(cfg.data)
        s = train_proxy(cfg.model, widths, data, cfg.train, seed=0)
        s.status, s.metrics["val_bpb"]
    """
    from tlmsearch.mfu import peak_flops
    from tlmsearch.models import build_model

    t_start = time.perf_counter()
    dev = resolve_device(device)
    n_threads = threads or train_cfg.threads
    if n_threads and dev.type == "cpu":
        torch.set_num_threads(n_threads)
    dtype = resolve_dtype(train_cfg, dev)
    tf32 = enable_tf32(dev, dtype)
    vocab = data.vocab_size
    if model_cfg.vocab_size is not None and model_cfg.vocab_size < vocab:
        raise ConfigError(
            f"model.vocab_size ({model_cfg.vocab_size}) is below the data's vocabulary "
            f"({vocab}); remove model.vocab_size or raise it"
        )
    vocab = model_cfg.vocab_size or vocab
    seq = data.seq_len

    # The same data order and the same initial weights (keyed by seed and parameter name, MLP
    # units by index: build_model) for every candidate of a seed. The model does not read the
    # global generator; it is seeded for anything else random.
    torch.manual_seed(seed)
    model = build_model(model_cfg, widths, vocab, seed=seed).to(dev)
    model.train()
    counts = budget.trial_counts(model_cfg, widths, vocab, seq)
    n_params, n_nonemb, fpt = (
        counts["n_params"],
        counts["n_params_nonemb"],
        float(counts["flops_per_token"]),
    )
    batches = Batches(data.train_tokens(), seq, seed=seed)
    vx, vy = (pinned(t, dev) for t in val_windows(data.val_tokens(), seq))
    n_val_pred = vx.numel()
    peak = peak_flops(dev, n_threads, dtype=dtype)  # the precision that runs, not always bf16
    use_compile = resolve_compile(train_cfg, dev, fpt, peak)

    # The fused AdamW kernel exists for CPU and CUDA; on this CPU it was 3-9% faster per step.
    # train.parametrization (tlmsearch/parametrization.py): under mup each MLP down projection's
    # init is rescaled here and its group carries an lr_scale that set_lr applies.
    optimizer = torch.optim.AdamW(
        parametrization.param_groups(model, model_cfg, train_cfg, vocab_size=vocab),
        lr=train_cfg.lr,
        betas=tuple(train_cfg.betas),
        fused=dev.type in ("cpu", "cuda") or None,
    )

    kernel = attention_kernel(train_cfg, dev, seq)

    def loss_of(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with _autocast(dev, dtype), attention_context(kernel):
            logits = model(x)
        return F.cross_entropy(logits.float().flatten(0, 1), y.flatten())

    step_loss = torch.compile(loss_of) if use_compile else loss_of

    micro, accum = batch_shape(train_cfg, seq)
    step_tokens = micro * accum * seq  # the global step, whatever the number of workers
    # [dist] this rank's share of every step (all of it for one worker)
    local_micro, local_accum = (
        dist.local_shape(micro, accum, train_cfg.micro_batch_size) if dist else (micro, accum)
    )
    n_steps = max(1, math.ceil(train_cfg.tokens / step_tokens))
    interval = train_cfg.eval_interval
    if dist:  # [dist] tokens/s counts every worker's tokens: so does the peak
        peak *= dist.world
    setup = {
        "device": str(dev),
        "dtype": str(dtype).removeprefix("torch."),
        "tf32": tf32,
        "compile": use_compile,
        "attention": kernel,
        "threads": torch.get_num_threads() if dev.type == "cpu" else None,
        "micro_batch": local_micro,
        "accum": local_accum,
        "workers": dist.world if dist else 1,
        "step_tokens": step_tokens,
        "steps": n_steps,
        "peak_flops": peak,
        "first_step_s": None,  # the first step's wall time, the compile included
    }

    status, reason = "completed", ""
    # ln V of the data's vocabulary: a padded model.vocab_size would hide a run stuck at it
    monitor = DivergenceMonitor(train_cfg.divergence_nats, data.vocab_size)
    every = train_cfg.checkpoint_every_tokens
    loop = LoopState(next_eval=interval, next_checkpoint=every)
    # train.eval_weights ema / lawa: averages kept in copies of the model; the compiled step
    # closes over `model` alone, so the copies evaluate eagerly (None: raw)
    average = weight_average(train_cfg, model, step_tokens)
    if resume is not None:
        loop = unpack_state(resume, model, optimizer, batches, monitor, average)
    curve = loop.curve
    train_time, timed_tokens = 0.0, 0  # since the last eval, excluding the first (compile) step
    first_step = loop.step
    bar, task = _progress(progress, n_steps * step_tokens)
    if bar is not None:
        bar.update(task, advance=loop.tokens)

    def val_nll(m: torch.nn.Module) -> float:
        if dist:  # [dist] each rank a slice of the windows, summed
            rows = dist.rows(vx.size(0))
            return dist.sum(evaluate(m, vx[rows], vy[rows], local_micro, dev, dtype))
        return evaluate(m, vx, vy, micro, dev, dtype)

    def bpb(nll: float) -> float:
        return nll / (math.log(2) * data.val_bytes) if data.val_bytes else float("nan")

    def checkpoint() -> None:
        if on_checkpoint is not None:
            on_checkpoint(pack_state(model, optimizer, batches, monitor, loop, average))
        loop.checkpointed = loop.tokens

    try:
        for step in range(first_step, n_steps):
            tokens = loop.tokens
            lr = lr_at(tokens + step_tokens, train_cfg)
            parametrization.set_lr(optimizer, lr)
            t0 = time.perf_counter()
            losses = []
            # [dist] a rank draws the whole step and trains on its share
            draws = (
                dist.step_batches(batches, micro, accum, local_micro, dev)
                if dist
                else (batches.next(micro, dev) for _ in range(accum))
            )
            for x, y in draws:
                loss = step_loss(x, y)
                (loss / local_accum).backward()
                losses.append(loss.detach())
            # one host sync per step, not per micro batch: a GPU keeps its queue meanwhile
            loss_val = torch.stack(losses).sum().item() / local_accum  # fp32 losses
            if dist:  # [dist] the one-worker gradient and loss on every rank
                dist.average_grads(list(model.parameters()))
                loss_val = dist.mean(loss_val)
            why = monitor.step(loss_val)
            if why:
                status, reason = "diverged", f"diverged: {why} at {tokens:,} tokens"
                break
            if train_cfg.grad_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
            model.before_optimizer_step(step)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if average is not None:  # part of the step's time, so tokens/s shows its cost
                average.update(model, tokens + step_tokens)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            dt = time.perf_counter() - t0
            tokens = loop.tokens = tokens + step_tokens
            loop.step = step + 1
            loop.loss_sum += loss_val
            loop.loss_n += 1
            if step > first_step:
                train_time += dt
                timed_tokens += step_tokens
            else:
                setup["first_step_s"] = dt
            if bar is not None:
                bar.update(task, advance=step_tokens, info=f"loss {loss_val:.3f}")
            if tokens >= loop.next_eval or step == n_steps - 1:
                while loop.next_eval <= tokens:
                    loop.next_eval += interval
                nll_raw = val_nll(model)
                # Before LAWA's first checkpoint there is nothing to average: the raw weights
                # stand in, and the row's metric equals its _raw one.
                averaged = average.eval_model() if average is not None else None
                nll = val_nll(averaged) if averaged is not None else nll_raw
                val_loss = nll / n_val_pred
                tps = timed_tokens / train_time if train_time > 0 else float("nan")
                row = {
                    "tokens": tokens,
                    "train_loss": loop.loss_sum / max(1, loop.loss_n),
                    "val_loss": val_loss,
                    "val_ppl": math.exp(min(val_loss, 700.0)),
                    "val_bpb": bpb(nll),
                }
                if average is not None:
                    row["val_loss_raw"] = nll_raw / n_val_pred
                    row["val_bpb_raw"] = bpb(nll_raw)
                row |= {
                    "tokens_per_s": tps,
                    "mfu": tps * fpt / peak if peak else float("nan"),
                    "lr": lr,
                    "wall_s": time.perf_counter() - t_start,
                }
                curve.append(row)
                loop.loss_sum, loop.loss_n, train_time, timed_tokens = 0.0, 0, 0.0, 0
                if bar is not None:
                    bar.update(task, info=f"val_bpb {row['val_bpb']:.3f}")
                # the trained weights diverge, not their (lagging) average
                why = monitor.eval(
                    nll_raw / n_val_pred, warmed_up=tokens >= train_cfg.warmup_tokens
                )
                if why:
                    status, reason = "diverged", f"diverged: {why} at {tokens:,} tokens"
                    break
                if every and loop.next_checkpoint and tokens >= loop.next_checkpoint:
                    while loop.next_checkpoint <= tokens:
                        loop.next_checkpoint += every
                    checkpoint()
                if on_eval is not None or dist:
                    answer = on_eval(dict(row)) if on_eval is not None else None
                    stop = answer is True or answer == "stop"
                    if dist:  # [dist] rank 0 reports; its answer is every rank's
                        stop = dist.agree(stop and dist.main)
                    if stop:
                        status, reason = "stopped", f"stopped by the caller at {tokens:,} tokens"
                        break
        if status == "completed" and final_checkpoint and loop.checkpointed != loop.tokens:
            checkpoint()
    finally:
        if bar is not None:
            bar.stop()
    tokens = loop.tokens
    return TrainSummary(
        status=status,
        reason=reason or f"trained {tokens:,} tokens",
        tokens=tokens,
        metrics=dict(curve[-1]) if curve else {},
        curve=curve,
        wall_s=time.perf_counter() - t_start,
        n_params=n_params,
        n_params_nonemb=n_nonemb,
        flops_per_token=fpt,
        setup=setup,
    )


# -------------------------------------------------------------------------------------------------
# One candidate of a study, outside any search (``tlmsearch train``)


def parse_candidate(text: str) -> dict[str, Any]:
    """``uniform`` or a JSON object of schedule parameters, e.g. ``{"shape": "cosine"}``."""
    import json

    from tlmsearch.space import UNIFORM

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
    """Widths of ``candidate`` for the study's proxy model, then ``train_proxy`` on its data."""
    from tlmsearch.data import prepare_data
    from tlmsearch.schedules import ScheduleError

    model = cfg.model
    try:
        plan = model.plan(candidate)
    except (ScheduleError, TypeError, ValueError) as err:
        raise ConfigError(f"--candidate: {candidate} gives no valid widths: {err}") from None
    data = prepare_data(cfg.data, progress=progress)
    summary = train_proxy(
        model,
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
