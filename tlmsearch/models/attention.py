"""``transformer``: Llama-style blocks, causal softmax attention then a SwiGLU MLP.

Source: Vaswani et al. 2017 (arXiv 1706.03762) with the Llama choices (arXiv 2302.13971):
pre-norm RMSNorm, RoPE, SwiGLU, no biases. Attention runs through
``F.scaled_dot_product_attention`` (fused kernels, no T x T matrix in Python).
"""

from __future__ import annotations

from collections.abc import Sequence

from tlmsearch.config import ModelConfig
from tlmsearch.models.common import Block, CausalSelfAttention, SwiGLU


def transformer_blocks(cfg: ModelConfig, widths: Sequence[int]) -> list[Block]:
    """One block per layer: ``x += attn(norm(x)); x += mlp_l(norm(x))`` with width widths[l]."""
    return [
        Block(
            [CausalSelfAttention(cfg.d_model, cfg.n_head)],
            [SwiGLU(cfg.d_model, w)],
            cfg.d_model,
            cfg.norm_eps,
        )
        for w in widths
    ]
