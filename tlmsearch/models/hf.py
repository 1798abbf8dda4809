"""``hf``: a Hugging Face ``transformers`` family (Llama, Qwen2, Mistral, ...) with per-layer MLPs.

The family's own modeling code builds the model from a config made of ``model.hf`` (a
``model_type`` and extra keys of that family's config, or the keys of a local ``config.json``)
and the shape fields of :class:`~tlmsearch.config.ModelConfig`; then layer i's MLP is replaced
by the family's MLP class built from a copy of the config whose ``intermediate_size`` is
widths[i], so its gate/up/down projections have width widths[i]. Attention is the family's in
every layer: ``n_head`` query heads and ``n_kv_head`` key/value heads (grouped-query attention;
``num_key_value_heads``), the same in each layer (the config refuses ``model.layer_heads`` and
``heads.*`` dimensions for ``hf``). Nothing is downloaded: only ``transformers``' config and
modeling classes are used.

>>> from tlmsearch.config import ModelConfig
>>> cfg = ModelConfig(arch="hf", hf={"model_type": "qwen2"}, n_layer=2, d_model=32, n_head=2,
...                   d_ff=64)
>>> type(family_model(cfg, [96, 32], vocab_size=256)).__name__
'Qwen2ForCausalLM'

:func:`build_hf` wraps it into the CausalLM protocol (:class:`~tlmsearch.models.external.
ExternalLM`): ``model(idx) -> logits``, keyed init (common random numbers), ``mlp_sites()``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from tlmsearch.errors import ConfigError
from tlmsearch.models.external import ExternalLM, Site

if TYPE_CHECKING:  # config checks these models at validation: no import back
    from tlmsearch.config import ModelConfig

# The family's MLP projections and which weight dimension indexes the hidden units (the keyed
# init draws units by index: rows of gate/up, columns of down).
UNIT_DIMS = {"gate_proj": 0, "up_proj": 0, "down_proj": 1}


def family_config(model_cfg: ModelConfig, vocab_size: int, intermediate_size: int) -> Any:
    """The family's config (a ``transformers`` ``PretrainedConfig``): ``model.hf``'s keys, then
    the shape of ``model_cfg`` (:data:`tlmsearch.config.HF_SET_BY` names what sets which key)."""
    from transformers import CONFIG_MAPPING

    opts = model_cfg.hf
    assert opts is not None, "model.arch: hf without model.hf passed validation"
    keys = copy.deepcopy(opts.model_extra or {})  # transformers fills rope_parameters in place
    shape = {
        "vocab_size": vocab_size,
        "hidden_size": model_cfg.d_model,
        "num_hidden_layers": model_cfg.n_layer,
        "num_attention_heads": model_cfg.n_head,
        "intermediate_size": intermediate_size,
        "tie_word_embeddings": model_cfg.tie_embeddings,
        "rms_norm_eps": model_cfg.norm_eps,
        "initializer_range": model_cfg.init_std,
        "rope_theta": model_cfg.rope_theta,  # transformers puts it into rope_parameters
        "head_dim": model_cfg.head_dim,  # Llama's and Mistral's config.json files carry one
        # grouped-query attention with model.n_kv_head, else multi-head (Qwen2's own default
        # would be 32 kv heads); ModelConfig checks that it divides n_head
        "num_key_value_heads": model_cfg.n_kv_head or model_cfg.n_head,
    }
    # a saved config.json lists its per-layer attention kinds for its own depth
    kinds = keys.get("layer_types")
    if isinstance(kinds, list) and len(kinds) != model_cfg.n_layer:
        if len(set(kinds)) > 1:
            raise ConfigError(
                f"model.hf.layer_types has {len(kinds)} entries but model.n_layer is "
                f"{model_cfg.n_layer}: give one per layer"
            )
        del keys["layer_types"]  # one kind everywhere: the family derives it for any depth
    cfg = CONFIG_MAPPING[opts.model_type](**{**keys, **shape})
    cfg._attn_implementation = "sdpa"  # torch's fused attention; no flash-attn package needed
    return cfg


def family_model(model_cfg: ModelConfig, widths: Sequence[int], vocab_size: int) -> nn.Module:
    """The family's ``...ForCausalLM`` with layer i's MLP of width widths[i], as the family
    initialises it (``build_hf`` redraws the weights, keyed by seed)."""
    from transformers import AutoModelForCausalLM

    widths = [int(w) for w in widths]
    cfg = family_config(model_cfg, vocab_size, min(widths))  # the least memory before the swap
    model = AutoModelForCausalLM.from_config(cfg)
    layers = decoder_layers(model)
    mlp_class = type(layers[0].mlp)
    for layer, width in zip(layers, widths, strict=True):
        one = copy.deepcopy(cfg)
        one.intermediate_size = width
        layer.mlp = mlp_class(one)
        missing = [p for p in UNIT_DIMS if not isinstance(getattr(layer.mlp, p, None), nn.Linear)]
        if missing:
            raise ConfigError(
                f"model.hf.model_type: {cfg.model_type}'s MLP ({mlp_class.__name__}) has no "
                f"{', '.join(missing)} projection; arch hf needs a gate/up/down MLP "
                "(Llama, Qwen2, Mistral, ...); write a plugin (model.arch: 'module:build')"
            )
    return model


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """``model.model.layers``: the decoder layers of a ``...ForCausalLM``."""
    layers = getattr(getattr(model, "model", None), "layers", None)
    if not isinstance(layers, nn.ModuleList) or not all(
        hasattr(layer, "mlp") and hasattr(layer, "post_attention_layernorm") for layer in layers
    ):
        raise ConfigError(
            f"model.hf.model_type: {type(model).__name__} is not a decoder of "
            "model.layers[i].{post_attention_layernorm, mlp}; use a Llama-like family or a "
            "plugin (model.arch: 'module:build')"
        )
    # OLMo 2/3 and EXAONE 4 normalise the attention's output (post-norm) and Gemma 3 feeds the
    # MLP through pre_feedforward_layernorm: the MLP's input is not post_attention_layernorm(h),
    # so analyze would read the wrong tensor.
    odd = {"pre_feedforward_layernorm", "post_feedforward_layernorm"} & set(
        dict(layers[0].named_children())
    )
    if odd:
        family = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise ConfigError(
            f"model.hf.model_type: {family}'s decoder layer has {', '.join(sorted(odd))}: its "
            "MLP input is not post_attention_layernorm(h) as arch hf needs (h = h + "
            "mlp(post_attention_layernorm(h))); use a Llama-like family (llama, qwen2, mistral) "
            "or a plugin (model.arch: 'module:build')"
        )
    return layers


class HFCausalLM(ExternalLM):
    """A family model in the CausalLM protocol: ``model(idx)`` returns float logits."""

    def logits(self, idx: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=idx, use_cache=False).logits


def _sites(model: nn.Module) -> list[Site]:
    # A Llama-like layer is h = h + attn(norm1(h)); h = h + mlp(post_attention_layernorm(h)).
    return [(layer.post_attention_layernorm, layer.mlp) for layer in decoder_layers(model)]


def unit_dims(model: nn.Module) -> dict[str, int]:
    """Parameter name -> the dimension that indexes MLP hidden units, for every MLP weight."""
    out = {}
    for name, _ in model.named_parameters():
        *_, mlp, proj, _kind = ["", "", *name.split(".")]
        if mlp == "mlp" and proj in UNIT_DIMS:
            out[name] = UNIT_DIMS[proj]
    return out


def build_hf(
    model_cfg: ModelConfig, widths: Sequence[int], vocab_size: int, *, seed: int = 0
) -> HFCausalLM:
    """The family model of ``model.hf`` with MLP width widths[l] in layer l, keyed init."""
    with torch.random.fork_rng(devices=[]):  # the family's own init draws from it; redrawn below
        torch.manual_seed(seed)
        inner = family_model(model_cfg, widths, vocab_size)
    return HFCausalLM(
        inner,
        _sites(inner),
        widths,
        init_std=model_cfg.init_std,
        seed=seed,
        unit_dims=unit_dims(inner),
        head=inner.get_output_embeddings(),
        attention_flops=lambda seq_len: _attention_flops(inner.config, seq_len),
    )


def _attention_flops(cfg: Any, seq_len: int) -> int:
    """q.k and attention x v per token over the full T x T square, as budget.py counts it."""
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers * 4 * cfg.num_attention_heads * head_dim * seq_len
