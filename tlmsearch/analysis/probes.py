"""Reading and silencing a trained model's modules, for ``tlmsearch analyze``
(:mod:`tlmsearch.analysis`): an attention layer's distributions recomputed from its own weights,
and context managers that zero a module's or one head's output without touching a weight.

The attention numbers follow :meth:`CausalSelfAttention.attend
<tlmsearch.models.common.CausalSelfAttention.attend>` step by step (fused ``qkv`` rows
[q heads | k heads | v heads], RoPE by :func:`~tlmsearch.models.common.apply_rope`, query head i
reading key head i // (h / kv), SDPA's scale 1 / sqrt(hs)): ``attention_probs(attn, x, rope) @ v``
is ``attn.attend(x, rope)`` (tests/test_probes.py), and the module's forward is unchanged.

>>> from tlmsearch.models.common import Rotary
>>> attn = CausalSelfAttention(8, 2)
>>> _ = torch.nn.init.zeros_(attn.qkv.weight)   # q = k = 0: every visible key weighs the same
>>> h = attention_entropy(attn, torch.randn(1, 3, 8), Rotary(4)(3))  # (B, nh, T), nats
>>> h.shape, torch.allclose(h[0, 0], torch.tensor([1.0, 2.0, 3.0]).log())  # log(t + 1)
(torch.Size([1, 2, 3]), True)
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from tlmsearch.models.common import CausalSelfAttention, apply_rope


def mean_nll(model: nn.Module, vx: torch.Tensor, vy: torch.Tensor, batch: int, dev: Any) -> float:
    """The mean next-token NLL (nats/token) over the windows, in fp32, ``batch`` at a time."""
    from tlmsearch.train.runtime import evaluate

    return evaluate(model, vx, vy, batch, dev, torch.float32) / vy.numel()


def check_windows(vx: torch.Tensor, vy: torch.Tensor, batch: int) -> None:
    """ValueError unless ``vx``, ``vy`` are equal non-empty (windows, T) and ``batch`` >= 1."""
    if batch < 1:
        raise ValueError(f"batch must be >= 1, but got {batch=}")
    if vx.ndim != 2 or vx.shape != vy.shape or vx.numel() == 0:
        raise ValueError(f"vx, vy must be equal (windows, T) tensors, got {vx.shape}, {vy.shape}")


@contextmanager
def ablated(module: nn.Module) -> Iterator[None]:
    """Inside the block, ``module`` returns zeros shaped like its output (a forward hook; no
    weight is touched): a residual branch that adds nothing. The hook is removed on exit.

    Example: ``with ablated(model.blocks[0].mixers[0]): loss = ...``.
    """
    handle = module.register_forward_hook(lambda m, args, out: torch.zeros_like(out))
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def ablated_head(attn: CausalSelfAttention, head: int) -> Iterator[None]:
    """Inside the block, query head ``head`` of ``attn`` contributes nothing: its channels of
    the output projection's input (the heads' outputs, head-major) are zeroed by a forward
    pre-hook on ``attn.proj``; the other heads are intact. Removed on exit."""
    if not 0 <= head < attn.n_head:
        raise ValueError(f"head must be in [0, {attn.n_head}), but got {head=}")
    hs = attn.head_dim

    def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        y = args[0].clone()  # (B, T, nh * hs)
        y[..., head * hs : (head + 1) * hs] = 0
        return (y, *args[1:])

    handle = attn.proj.register_forward_pre_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def attention_sites(model: nn.Module) -> list[tuple[int, CausalSelfAttention]]:
    """``(layer, attention)`` for every tlmsearch attention layer of a model, in depth order
    (gated_attention's is a subclass; titans' memory is not attention). A model that lists its
    own (``attention_sites()``) is asked; hf and plugin models have none here (their attention
    is the family's own code), nor titans without ``with_attention``."""
    if hasattr(model, "attention_sites"):
        return model.attention_sites()
    return [
        (layer, mixer)
        for layer, block in enumerate(getattr(model, "blocks", ()))
        for mixer in getattr(block, "mixers", ())
        if isinstance(mixer, CausalSelfAttention)
    ]


def _queries_keys(
    attn: CausalSelfAttention, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """q (B, nh, T, hs) and k (B, nkv, T, hs) after RoPE, in fp32, as ``attn.attend`` makes
    them from its input ``x`` (B, T, d) with its own weights."""
    B, T, _ = x.shape
    h, kv, hs = attn.n_head, attn.n_kv_head, attn.head_dim
    q, k, _ = attn.qkv(x).split((h * hs, kv * hs, kv * hs), dim=-1)
    q = q.view(B, T, h, hs).transpose(1, 2)  # (B, nh, T, hs)
    k = k.view(B, T, kv, hs).transpose(1, 2)  # (B, nkv, T, hs)
    return apply_rope(q, rope).float(), apply_rope(k, rope).float()


def _log_probs(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """log softmax(q k^T / sqrt(hs)) under the causal mask, (..., T, T) with -inf above the
    diagonal (SDPA's default scale), and the mask (T, T): True where a query sees a key."""
    T = q.size(-2)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))  # (..., T, T)
    return scores.masked_fill(~causal, float("-inf")).log_softmax(-1), causal


def attention_probs(
    attn: CausalSelfAttention, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """The causal attention weights (B, nh, T, T) of ``attn`` on its input ``x`` (B, T, d):
    ``probs @ v`` is what ``attn.attend`` returns. All heads at once (memory B nh T^2); the
    analysis takes entropies head by head (:func:`attention_entropy`)."""
    q, k = _queries_keys(attn, x, rope)
    group = attn.n_head // attn.n_kv_head
    k = k.repeat_interleave(group, dim=1)  # query head i reads key head i // group
    return _log_probs(q, k)[0].exp()


def attention_entropy(
    attn: CausalSelfAttention, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """H_t = -sum_j p_tj log p_tj in nats (B, nh, T): the entropy of each head's attention
    distribution at each query position t (0 at t = 0; log(t + 1) if uniform), one head at a
    time so that memory stays B T^2."""
    q, k = _queries_keys(attn, x, rope)
    group = attn.n_head // attn.n_kv_head
    out = []
    for head in range(attn.n_head):
        lp, causal = _log_probs(q[:, head], k[:, head // group])  # (B, T, T)
        out.append(-(lp.exp() * lp.masked_fill(~causal, 0.0)).sum(-1))  # 0 log 0 = 0
    return torch.stack(out, dim=1)
