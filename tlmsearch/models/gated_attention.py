"""``gated_attention``: softmax attention whose head outputs pass a sigmoid gate.

Source: Qiu et al. 2025, "Gated Attention for Large Language Models" (arXiv 2505.06708), the
gate at position G1: after scaled-dot-product attention and before the output projection,
``Y' = Y * sigmoid(X W_g)`` where X is the block's normed input (the same one that feeds
q/k/v). ``elementwise``: W_g is d_model x (n_head * head_dim), one gate per channel;
``headwise``: d_model x n_head, one scalar per head. No bias (the paper's form). The gate is
part of the mixer, which is not tapered; the MLP is the same SwiGLU as ``transformer``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from tlmsearch.config import ModelConfig
from tlmsearch.models.common import Block, CausalSelfAttention, SwiGLU


class GatedSelfAttention(CausalSelfAttention):
    """Causal attention with a query-dependent sigmoid gate on each head's output."""

    def __init__(self, d_model: int, n_head: int, gate: str = "elementwise") -> None:
        super().__init__(d_model, n_head)
        if gate not in ("elementwise", "headwise"):
            raise ValueError(f"gate must be elementwise or headwise, but got {gate=}")
        self.headwise = gate == "headwise"
        self.gate = nn.Linear(d_model, n_head if self.headwise else d_model, bias=False)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        B, T, _ = x.shape
        y = self.attend(x, rope)  # (B, T, nh, hs)
        g = torch.sigmoid(self.gate(x)).view(B, T, self.n_head, -1)  # (B, T, nh, hs or 1)
        return self.proj((y * g).reshape(x.shape))


def gated_attention_blocks(cfg: ModelConfig, widths: Sequence[int]) -> list[Block]:
    """Transformer blocks whose attention is gated (``model.gated_attention.gate``)."""
    gate = cfg.gated_attention.gate
    return [
        Block(
            [GatedSelfAttention(cfg.d_model, cfg.n_head, gate)],
            [SwiGLU(cfg.d_model, w)],
            cfg.d_model,
            cfg.norm_eps,
        )
        for w in widths
    ]
