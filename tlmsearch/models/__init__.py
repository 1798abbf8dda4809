"""The four architectures, each a causal LM whose layer l has a SwiGLU MLP of width widths[l];
and models built by other code: ``arch: hf`` (a transformers family, models/hf.py) or a plugin
``arch: "package.module:build"`` (models/external.py), wrapped to the same protocol.

>>> import torch
>>> from tlmsearch.config import ModelConfig
>>> cfg = ModelConfig(arch="transformer", n_layer=2, d_model=32, n_head=2, d_ff=64)
>>> model = build_model(cfg, [96, 32], vocab_size=256)   # the widths are used as given
>>> model(torch.zeros(1, 8, dtype=torch.long)).shape
torch.Size([1, 8, 256])

Every model also has ``before_optimizer_step(step)`` (the trainer calls it after backward and
gradient clipping, right before ``optimizer.step()``) and ``param_groups(weight_decay)`` (AdamW
groups). Parameter and FLOP counts come from :mod:`tlmsearch.widths.budget` without building a
model.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import nn

from tlmsearch.config import ModelConfig
from tlmsearch.models.attention import transformer_blocks
from tlmsearch.models.common import Block, CausalLM
from tlmsearch.models.counting import build_external, is_external
from tlmsearch.models.gated_attention import gated_attention_blocks
from tlmsearch.models.hope import hope_blocks
from tlmsearch.models.titans import titans_blocks

# Architecture name -> a function (model config, widths) -> the per-layer blocks.
ARCHITECTURES: dict[str, Callable[[ModelConfig, Sequence[int]], list[Block]]] = {
    "transformer": transformer_blocks,
    "gated_attention": gated_attention_blocks,
    "titans": titans_blocks,
    "hope_attention": hope_blocks,
}


def build_model(
    model_cfg: ModelConfig, widths: Sequence[int], vocab_size: int, *, seed: int = 0
) -> nn.Module:
    """A causal LM of architecture ``model_cfg.arch`` with MLP width ``widths[l]`` in layer l.

    The widths are final (rounded by :mod:`tlmsearch.widths.schedules`) and are never rescaled
    here. The initial weights depend on the config, the widths and ``seed`` only (never on torch's
    global generator): each parameter is drawn from a generator keyed by (seed, its name), and MLP
    hidden unit j of a layer by (seed, name, j), so two candidates of one seed share every
    parameter they have in common, MLP units included (``CausalLM.init_weights``).
    """
    arch = model_cfg.arch
    if arch not in ARCHITECTURES and not is_external(arch):
        raise ValueError(f"model.arch: {arch!r} is not one of {', '.join(ARCHITECTURES)}")
    widths = list(widths)
    if len(widths) != model_cfg.n_layer:
        raise ValueError(
            f"widths has {len(widths)} entries but model.n_layer is {model_cfg.n_layer}: "
            "give one MLP width per layer"
        )
    bad = [w for w in widths if isinstance(w, bool) or int(w) != w or w < 1]
    if bad:
        raise ValueError(f"widths must be positive integers, but got {bad[0]!r} in {widths}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, but got {vocab_size=}")
    if is_external(arch):  # hf or a plugin: built by its own code, wrapped (models/external.py)
        return build_external(model_cfg, [int(w) for w in widths], vocab_size, seed=seed)
    blocks = ARCHITECTURES[arch](model_cfg, [int(w) for w in widths])
    return CausalLM(
        blocks,
        vocab_size=vocab_size,
        d_model=model_cfg.d_model,
        head_dim=model_cfg.head_dim,
        rope_theta=model_cfg.rope_theta,
        norm_eps=model_cfg.norm_eps,
        tie_embeddings=model_cfg.tie_embeddings,
        init_std=model_cfg.init_std,
        seed=seed,
    )


__all__ = ["ARCHITECTURES", "Block", "CausalLM", "build_model"]
