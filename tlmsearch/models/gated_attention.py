"""``gated_attention``: softmax attention whose head outputs pass a sigmoid gate.

Source: Qiu et al. 2025, "Gated Attention for Large Language Models" (arXiv 2505.06708), the
gate at position G1: after scaled-dot-product attention and before the output projection,
``Y' = Y * sigmoid(X W_g)`` where X is the block's normed input (the same one that feeds
q/k/v). ``elementwise``: W_g is d_model x (heads * head_dim), one gate per channel;
``headwise``: d_model x heads, one scalar per head (a layer's own heads under a heads
schedule). No bias (the paper's form). The gate is part of the mixer, which follows the layer's
heads but not its MLP width; the MLP is the same SwiGLU as ``transformer``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from tlmsearch.config import ModelConfig
from tlmsearch.models.common import Block, CausalSelfAttention, SwiGLU


class GatedSelfAttention(CausalSelfAttention):
    """Causal attention with a query-dependent sigmoid gate on each head's output."""

    def __init__(
        self,
        d_model: int,
        n_head: int,
        gate: str = "elementwise",
        *,
        n_kv_head: int | None = None,
        head_dim: int | None = None,
    ) -> None:
        super().__init__(d_model, n_head, n_kv_head, head_dim)
        if gate not in ("elementwise", "headwise"):
            raise ValueError(f"gate must be elementwise or headwise, but got {gate=}")
        self.headwise = gate == "headwise"
        out = n_head if self.headwise else n_head * self.head_dim
        self.gate = nn.Linear(d_model, out, bias=False)
        self.gate.head_units = 0  # a row per head channel (or head): drawn by head, not whole

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        B, T, _ = x.shape
        y = self.attend(x, rope)  # (B, T, nh, hs)
        g = torch.sigmoid(self.gate(x)).view(B, T, self.n_head, -1)  # (B, T, nh, hs or 1)
        return self.proj((y * g).flatten(2))  # (B, T, nh * hs) -> (B, T, d)


def gated_attention_blocks(cfg: ModelConfig, widths: Sequence[int]) -> list[Block]:
    """Transformer blocks whose attention is gated (``model.gated_attention.gate``), layer l
    with ``cfg.heads[l]`` query and ``cfg.kv_heads[l]`` key/value heads."""
    gate = cfg.gated_attention.gate
    return [
        Block(
            [GatedSelfAttention(cfg.d_model, heads, gate, n_kv_head=kv, head_dim=cfg.head_dim)],
            [SwiGLU(cfg.d_model, w)],
            cfg.d_model,
            cfg.norm_eps,
        )
        for w, heads, kv in zip(widths, cfg.heads, cfg.kv_heads, strict=True)
    ]
