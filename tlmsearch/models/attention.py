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
    """One block per layer: ``x += attn_l(norm(x)); x += mlp_l(norm(x))``, the MLP of width
    widths[l] and the attention of ``cfg.heads[l]`` query and ``cfg.kv_heads[l]`` key/value
    heads of the model's head size (all ``n_head`` without a heads schedule)."""
    return [
        Block(
            [CausalSelfAttention(cfg.d_model, heads, kv, cfg.head_dim)],
            [SwiGLU(cfg.d_model, w)],
            cfg.d_model,
            cfg.norm_eps,
        )
        for w, heads, kv in zip(widths, cfg.heads, cfg.kv_heads, strict=True)
    ]
