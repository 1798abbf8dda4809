"""What a training run needs around its model: the LR schedule, device, dtype, compile and
attention choices, batch shape, autocast, the evaluation and the run's summary.

A leaf of :mod:`tlmsearch.train.loop` (the loop) and :mod:`tlmsearch.train.trainer` (its state
object): both import these, neither is imported here (docs/contributing.md, rule 19).
"""

from __future__ import annotations

import contextlib
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

from tlmsearch.config import TrainConfig
from tlmsearch.constants import COMPILE_CACHE_ENV
from tlmsearch.errors import ConfigError
from tlmsearch.train.loss import nll_sum


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
        from tlmsearch.train.mfu import cpu_has_bf16

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


def use_compile_cache(folder: str | None) -> None:
    """Make ``folder`` this process's torch.compile cache (``TORCHINDUCTOR_CACHE_DIR``); call
    it before the process compiles. Nothing when None.

    The search hands every trial process (a solo trial, an array, each Ray Train worker) the
    run's ``compile-cache`` (:attr:`tlmsearch.run_dir.RunDir.compile_cache`), so a trial whose
    compiled graph another trial of the run, a node that mounts the run dir or an earlier
    session of a resumed run compiled already loads it instead of compiling: at the quickstart
    size ~5.5 s instead of ~22 s on this CPU (docs/benchmarks.md, "Compile cache"; a graph is
    per width vector, so the seeds of a candidate share it, other candidates compile their own).

    Example::

        use_compile_cache("runs/quickstart/compile-cache")
    """
    if folder:
        os.environ[COMPILE_CACHE_ENV] = str(folder)


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


def autocast_context(
    device: torch.device, dtype: torch.dtype
) -> contextlib.AbstractContextManager:
    """bf16 autocast on ``device`` for a bf16 run; nothing for fp32."""
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
    """Summed next-token NLL (nats) over all validation windows, ``batch`` windows at a time;
    the batches' sums stay on the device until one read at the end. No windows sum to 0.0 (a
    rank whose slice of the windows is empty when there are fewer windows than workers)."""
    was_training = model.training
    model.eval()
    sums = []
    for i in range(0, vx.size(0), batch):
        x = vx[i : i + batch].to(device, non_blocking=True)
        y = vy[i : i + batch].to(device, non_blocking=True)
        with autocast_context(device, dtype):
            sums.append(nll_sum(model, x, y))
    model.train(was_training)
    if not sums:
        return 0.0
    return sum(torch.stack(sums).tolist())  # summed in order, in float64
