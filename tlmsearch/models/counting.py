"""Parameters and FLOPs of hf and plugin models, counted on the model built on the meta device
(no memory, no weights drawn): their code is not ours, so :mod:`tlmsearch.widths.budget` cannot
count them analytically. Also the check that validation runs on them (:func:`check_external`).

>>> from tlmsearch.config import ModelConfig
>>> cfg = ModelConfig(arch="hf", hf={"model_type": "llama"}, n_layer=2, d_model=32, n_head=2,
...                   d_ff=64)
>>> built_counts(cfg, [96, 32], 256)["total"] == built_counts(cfg, [64, 64], 256)["total"]
True
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from tlmsearch.errors import ConfigError
from tlmsearch.models.external import ExternalLM, build_plugin, protocol_error
from tlmsearch.models.hf import build_hf

if TYPE_CHECKING:  # config checks these models at validation (check_external): no import back
    from tlmsearch.config import ModelConfig


def is_external(arch: str) -> bool:
    """Whether ``arch`` is built by code not ours (hf or a plugin)."""
    return arch == "hf" or ":" in arch


def build_external(
    model_cfg: ModelConfig, widths: Sequence[int], vocab_size: int, *, seed: int = 0
) -> ExternalLM:
    """The hf family's or the plugin's model, wrapped (models/hf.py, models/external.py)."""
    if model_cfg.arch == "hf":
        return build_hf(model_cfg, widths, vocab_size, seed=seed)
    return build_plugin(model_cfg, widths, vocab_size, seed=seed)


_COUNTS: dict[tuple, dict[str, int]] = {}  # (config json, widths, vocab, T) -> counts
_MAX_CACHED = 256


def _counts(
    model_cfg: ModelConfig, widths: tuple[int, ...], vocab_size: int, seq_len: int
) -> dict[str, int]:
    with torch.device("meta"):
        model = build_external(model_cfg, widths, vocab_size)
    params = {id(p): p.numel() for p in model.parameters()}
    embedding = {
        id(m.weight): m.weight.numel() for m in model.modules() if isinstance(m, nn.Embedding)
    }
    head = model._head[0] if model._head else None
    if isinstance(head, nn.Linear):
        embedding[id(head.weight)] = head.weight.numel()  # tied: the same id, counted once
    mlp_weights = [
        m.weight
        for _, _, _, mlp in model.mlp_sites()
        for m in mlp.modules()
        if isinstance(m, nn.Linear)
    ]
    mlp = sum(p.numel() for _, _, _, m in model.mlp_sites() for p in m.parameters())
    dense = 2 * sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))
    head_flops = 2 * head.weight.numel() if isinstance(head, nn.Linear) else 0
    if model._attention_flops is not None:
        attention = int(model._attention_flops(seq_len))
    else:
        attention = _measured_extra(model, vocab_size, seq_len, dense, model_cfg.arch)
    return {
        "total": sum(params.values()),
        "embedding": sum(embedding.values()),
        "mlp": mlp,
        "dense": dense,
        "attention": attention,
        "mlp_flops": 2 * sum(w.numel() for w in mlp_weights),
        "head": head_flops,
    }


def _measured_extra(
    model: ExternalLM, vocab_size: int, seq_len: int, dense: int, spec: str
) -> int:
    """FLOPs per token beyond the projections (attention and anything else), from
    ``torch.utils.flop_counter`` over one meta forward; rounded up to an integer."""
    from torch.utils.flop_counter import FlopCounterMode

    with torch.device("meta"):
        idx = torch.zeros(1, seq_len, dtype=torch.long)
    try:
        with FlopCounterMode(display=False) as counter:
            out = model(idx)
    except Exception as err:
        raise protocol_error(
            spec, f"forward(idx) failed on the meta device ({type(err).__name__}: {err})"
        ) from None
    if tuple(out.shape) != (1, seq_len, vocab_size):
        raise protocol_error(
            spec,
            f"forward(idx) of shape (1, {seq_len}) returned {tuple(out.shape)}, "
            f"not (1, {seq_len}, {vocab_size}) logits",
        )
    return max(0, math.ceil(counter.get_total_flops() / seq_len) - dense)


def built_counts(
    model_cfg: ModelConfig, widths: Sequence[int], vocab_size: int, seq_len: int = 1
) -> dict[str, int]:
    """Parameters and FLOPs per token counted on the model built on the meta device: total,
    embedding (embeddings and the LM head once), mlp (every MLP parameter), dense (2 x every
    nn.Linear weight), attention, mlp_flops, head. Cached per (config, widths, vocab, T)."""
    key = (model_cfg.model_dump_json(), tuple(int(w) for w in widths), int(vocab_size), seq_len)
    if key not in _COUNTS:
        if len(_COUNTS) >= _MAX_CACHED:
            _COUNTS.clear()
        _COUNTS[key] = _counts(model_cfg, *key[1:])
    return dict(_COUNTS[key])


def check_external(model_cfg: ModelConfig) -> None:
    """Build the uniform model on the meta device (and run a plugin's forward there): the
    protocol's failures become ConfigErrors at validation instead of in a trial."""
    width = model_cfg.d_ff_uniform
    field = "model.hf" if model_cfg.arch == "hf" else "model.arch"
    try:
        built_counts(model_cfg, [width] * model_cfg.n_layer, 256, 8)
    except ConfigError:
        raise
    except Exception as err:  # e.g. transformers refusing a combination of keys
        text = " ".join(str(err).split())[:300]
        raise ConfigError(
            f"{field}: building the model failed: {type(err).__name__}: {text}"
        ) from None
