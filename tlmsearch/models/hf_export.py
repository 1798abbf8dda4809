"""``tlmsearch export RUN --format hf``: the best candidate's target as a Hugging Face folder.

A transformers family has one ``intermediate_size`` and one ``num_attention_heads`` for every
layer, so the folder carries a small subclass of the family (``configuration_tapered.py``,
``modeling_tapered.py``, wired through ``auto_map``) whose config takes a list, one MLP width per
layer, and with a heads schedule (``model.layer_heads``) two more lists,
``num_attention_heads_per_layer`` and ``num_key_value_heads_per_layer`` (the head size
``head_dim`` is the same in every layer); transformers loads it with ``trust_remote_code=True``::

    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=True)

The built-in ``transformer`` arch is exactly Llama (pre-norm RMSNorm, RoPE in the halves layout,
SwiGLU MLP as silu(gate) * up -> down, grouped-query attention as Llama's ``repeat_kv``, no
biases; tests/test_hf_export.py checks the logits), so it exports as Llama; ``arch: hf`` exports
as its own family. ``model.n_kv_head`` is the family's ``num_key_value_heads``: grouped-query
attention with the same heads in every layer is a plain family config (only the widths need the
subclass). :func:`llama_weights` renames a built-in transformer's weights to the folder's.

Which loader reads what:

- ``config.json`` with the two modules (transformers, ``trust_remote_code=True``): everything,
  per-layer widths and per-layer query and key/value heads.
- ``config.json`` without the remote code: nothing; its ``model_type`` (``tapered_llama``) is
  no family such a loader knows, and its ``intermediate_size`` is a list.
- ``block_configs.json``, the DeciLM / Nemotron-NAS form (``DeciLMForCausalLM``: transformers'
  remote DeciLM code, vLLM, llama.cpp): per block an FFN width (``ffn_mult``, reachable only on
  a lattice of multiples of 256) and key/value heads (``num_attention_heads //
  n_heads_in_group``); its ``num_attention_heads`` holds for every block (and sets its
  ``head_dim``), so per-layer query heads cannot be written. ``off_lattice`` names each layer
  whose width is off the lattice (the block holds the nearest lattice width),
  ``heads_not_expressed`` each layer whose query heads differ from ``num_attention_heads`` or
  whose key/value heads do not divide it (the block holds what is written there).
- ``intermediate_sizes.json``: the plain list of widths.

No weights: the target is trained elsewhere.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tlmsearch.config import ModelConfig
from tlmsearch.config.model import ARCH_SPECS
from tlmsearch.errors import ConfigError

DECI_MULTIPLE = 256  # DeciLM's _find_multiple(int(2 * ffn_mult * d_model / 3), 256)
NO_FAMILY = (
    ", ".join(a.name for a in ARCH_SPECS.values() if not a.hf_family)
    + " and plugins have no transformers family"
)

CONFIGURATION = '''"""A {family} config whose intermediate_size may be a list (a width per layer)
and whose query and key/value heads may be given per layer (num_attention_heads_per_layer,
num_key_value_heads_per_layer; head_dim is the same in every layer).

Written by tlmsearch (export --format hf)."""

from huggingface_hub.dataclasses import strict
from transformers import {config}


@strict
class Tapered{config}({config}):
    model_type = "tapered_{family}"
    intermediate_size: int | list[int] = 11008
    num_attention_heads_per_layer: list[int] | None = None
    num_key_value_heads_per_layer: list[int] | None = None

    def validate_intermediate_sizes(self):
        sizes = self.intermediate_size
        if isinstance(sizes, list) and len(sizes) != self.num_hidden_layers:
            raise ValueError(
                f"intermediate_size has {{len(sizes)}} entries for "
                f"{{self.num_hidden_layers}} layers"
            )

    def validate_heads_per_layer(self):
        heads = self.num_attention_heads_per_layer
        kv_heads = self.num_key_value_heads_per_layer
        if (heads is None) != (kv_heads is None):
            raise ValueError(
                "give num_attention_heads_per_layer and num_key_value_heads_per_layer together"
            )
        if heads is None:
            return
        for name, values in (("num_attention_heads_per_layer", heads),
                             ("num_key_value_heads_per_layer", kv_heads)):
            if len(values) != self.num_hidden_layers:
                raise ValueError(
                    f"{{name}} has {{len(values)}} entries for {{self.num_hidden_layers}} layers"
                )
        for i, (h, kv) in enumerate(zip(heads, kv_heads)):
            if kv < 1 or h % kv:
                raise ValueError(
                    f"layer {{i}}: {{kv}} key/value heads must divide its {{h}} query heads"
                )
'''

MODELING = '''"""{model} whose layer i has an MLP of width intermediate_size[i] and, with
per-layer heads, attention of num_attention_heads_per_layer[i] query heads and
num_key_value_heads_per_layer[i] key/value heads of head_dim each.

Written by tlmsearch (export --format hf)."""

import copy

from transformers import {model}

from .configuration_tapered import Tapered{config}


class Tapered{model}({model}):
    config_class = Tapered{config}

    def __init__(self, config):
        n = config.num_hidden_layers
        sizes = config.intermediate_size
        if not isinstance(sizes, list):
            sizes = [sizes] * n
        heads = config.num_attention_heads_per_layer or [config.num_attention_heads] * n
        kv_heads = config.num_key_value_heads_per_layer or [config.num_key_value_heads] * n
        flat = copy.deepcopy(config)
        flat.intermediate_size = min(sizes)
        flat.num_attention_heads_per_layer = flat.num_key_value_heads_per_layer = None
        super().__init__(flat)
        first = self.model.layers[0]
        mlp_class, attention_class = type(first.mlp), type(first.self_attn)
        layers = zip(self.model.layers, sizes, heads, kv_heads, strict=True)
        for i, (layer, size, h, kv) in enumerate(layers):
            one = copy.deepcopy(flat)
            one.intermediate_size = size
            layer.mlp = mlp_class(one)
            if (h, kv) != (flat.num_attention_heads, flat.num_key_value_heads):
                # head_dim stays flat's: only the number of heads changes
                one.num_attention_heads, one.num_key_value_heads = h, kv
                layer.self_attn = attention_class(one, layer_idx=i)
                # the attention reads its kernel (config._attn_implementation) when it runs:
                # the model's shared config, so set_attn_implementation reaches every layer
                layer.self_attn.config = flat
        self.config = config
        self.post_init()
'''


def family_of(model: ModelConfig) -> str:
    """The transformers family a model exports as: llama for the built-in transformer."""
    if model.arch == "transformer":
        return "llama"
    if model.arch == "hf" and model.hf is not None and model.hf.model_type:
        return model.hf.model_type
    raise ConfigError(f"--format hf: model.arch {model.arch!r}: {NO_FAMILY}; use --format yaml")


def llama_keys(model: ModelConfig) -> dict[str, Any]:
    """model.hf for a built-in transformer: Llama without biases (its key/value heads are
    model.n_kv_head's: ``num_key_value_heads``)."""
    return {
        "model_type": "llama",
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
    }


def as_family(model: ModelConfig) -> ModelConfig:
    """``model`` as ``arch: hf`` of its family, its per-layer heads left out (the family's
    config has one ``num_attention_heads``; :func:`write_hf_folder` writes the lists)."""
    if model.arch != "transformer":
        return model
    data = model.model_dump(exclude={"hf", "layer_heads"})
    return ModelConfig.model_validate({**data, "arch": "hf", "hf": llama_keys(model)})


def deci_blocks(
    widths: Sequence[int], d_model: int, n_head: int, n_kv_head: int | Sequence[int]
) -> tuple[list[dict[str, Any]], list[str]]:
    """DeciLM / Nemotron-NAS ``block_configs`` for the widths (and key/value heads: one count,
    or one per layer, each dividing ``n_head``: :func:`deci_heads`), and one line per layer
    whose width is off the lattice (a multiple of 256), naming the nearest lattice widths."""
    kv_heads = [n_kv_head] * len(widths) if isinstance(n_kv_head, int) else list(n_kv_head)
    assert len(kv_heads) == len(widths) and all(n_head % kv == 0 for kv in kv_heads), kv_heads
    blocks, off = [], []
    for layer, (w, kv) in enumerate(zip(widths, kv_heads, strict=True)):
        mult = round(3 * w / (2 * d_model), 6)
        if deci_width(mult, d_model) != w:
            lo = max(DECI_MULTIPLE, w // DECI_MULTIPLE * DECI_MULTIPLE)
            hi = lo + DECI_MULTIPLE if lo < w else lo
            near = f"{lo} ({lo - w:+d})" + (f" or {hi} ({hi - w:+d})" if hi != lo else "")
            off.append(f"layer {layer}: width {w} is off the lattice; nearest {near}")
            mult = round(3 * min((lo, hi), key=lambda v: abs(v - w)) / (2 * d_model), 6)
        blocks.append(
            {
                "attention": {
                    "n_heads_in_group": n_head // kv,
                    "no_op": False,
                    "replace_with_linear": False,
                },
                "ffn": {"ffn_mult": mult, "no_op": False, "replace_with_linear": False},
            }
        )
    return blocks, off


def deci_heads(
    n_head: int, heads: Sequence[int], kv_heads: Sequence[int]
) -> tuple[list[int], list[str]]:
    """The key/value heads DeciLM's ``block_configs`` can give each layer, and one line per
    layer it cannot express.

    Every DeciLM block has ``num_attention_heads`` query heads (``n_head``, which also sets its
    head size) and ``num_attention_heads // n_heads_in_group`` key/value heads: a layer keeps
    its key/value heads when they divide ``n_head``, else takes the nearest count that does
    (the larger on a tie); a layer whose query heads are not ``n_head`` is named too.

    >>> kv, lines = deci_heads(4, [2, 4, 6], [1, 2, 3])
    >>> kv
    [1, 2, 4]
    >>> [line.split(":")[0] for line in lines]
    ['layer 0', 'layer 2']
    """
    divisors = [kv for kv in range(1, n_head + 1) if n_head % kv == 0]
    written, lines = [], []
    for layer, (h, kv) in enumerate(zip(heads, kv_heads, strict=True)):
        near = min(divisors, key=lambda d: (abs(d - kv), -d))
        written.append(near)
        if (h, kv) == (n_head, near):
            continue
        why = [f"num_attention_heads is {n_head} in every DeciLM block"] if h != n_head else []
        if near != kv:
            why.append(f"{kv} key/value heads do not divide num_attention_heads ({n_head})")
        lines.append(
            f"layer {layer}: {_count(h, 'query')}, {_count(kv, 'key/value')}: "
            f"{', and '.join(why)}; written as {_count(n_head, 'query')}, "
            f"{_count(near, 'key/value')}"
        )
    return written, lines


def _count(n: int, kind: str) -> str:
    return f"{n} {kind} head{'s' if n != 1 else ''}"


def deci_width(ffn_mult: float, d_model: int) -> int:
    """DeciLM's ``_ffn_mult_to_intermediate_size``: int(2 * mult * d / 3) up to a multiple of
    256 (transformers' remote DeciLM code, llama.cpp's and vLLM's DeciLM loaders)."""
    size = int(2 * ffn_mult * d_model / 3)
    return size if size % DECI_MULTIPLE == 0 else size + DECI_MULTIPLE - size % DECI_MULTIPLE


def _block_configs(model: ModelConfig, widths: Sequence[int]) -> tuple[str, list[str], list[str]]:
    """block_configs.json's text, and its lines naming the widths and heads it cannot express."""
    kv, heads_off = deci_heads(model.n_head, model.heads, model.kv_heads)
    blocks, off = deci_blocks(widths, model.d_model, model.n_head, kv)
    doc = {
        "model_type": "nemotron-nas",
        "architectures": ["DeciLMForCausalLM"],
        "hidden_size": model.d_model,
        "num_attention_heads": model.n_head,
        "num_hidden_layers": model.n_layer,
        "block_configs": blocks,
        "exact": not off and not heads_off,
        "off_lattice": off,
        "heads_not_expressed": heads_off,
    }
    return json.dumps(doc, indent=2) + "\n", off, heads_off


def write_hf_folder(
    folder: str | Path,
    model: ModelConfig,
    widths: Sequence[int],
    vocab_size: int,
    *,
    max_positions: int,
) -> dict[str, Any]:
    """Write the Hugging Face folder for ``model`` (its per-layer heads: ``model.heads``) at
    ``widths``; returns a summary (files, family, block_configs lines: ``off`` for widths off
    the lattice, ``heads_off`` for heads it cannot express)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from tlmsearch.models.hf import family_config

    family = family_of(model)
    widths = [int(w) for w in widths]
    base = family_config(as_family(model), vocab_size, max(widths))
    config_cls = type(base).__name__
    model_cls = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[family]
    assert type(base) is CONFIG_MAPPING[family]
    doc = base.to_dict()
    doc.pop("_attn_implementation", None)
    doc.update(
        model_type=f"tapered_{family}",
        intermediate_size=widths,
        max_position_embeddings=max_positions,
        architectures=[f"Tapered{model_cls}"],
        auto_map={
            "AutoConfig": f"configuration_tapered.Tapered{config_cls}",
            "AutoModelForCausalLM": f"modeling_tapered.Tapered{model_cls}",
        },
    )
    if model.heads != (model.n_head,) * model.n_layer:  # else num_key_value_heads says it all
        doc.update(
            num_attention_heads_per_layer=list(model.heads),
            num_key_value_heads_per_layer=list(model.kv_heads),
        )
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    blocks, off, heads_off = _block_configs(model, widths)
    files = {
        "config.json": json.dumps(doc, indent=2, sort_keys=True) + "\n",
        "configuration_tapered.py": CONFIGURATION.format(family=family, config=config_cls),
        "modeling_tapered.py": MODELING.format(model=model_cls, config=config_cls),
        "intermediate_sizes.json": json.dumps(widths) + "\n",
        "block_configs.json": blocks,
    }
    for name, text in files.items():
        (out / name).write_text(text)
    return {
        "folder": out,
        "family": family,
        "files": [out / n for n in files],
        "off": off,
        "heads_off": heads_off,
    }


def llama_weights(lm: Any, model: ModelConfig) -> dict[str, Any]:
    """The weights of ``lm``, a built-in ``transformer`` built from ``model``, under the names
    of the exported Llama folder (``model.layers.{i}.self_attn.q_proj.weight``, ...).

    The fused ``qkv`` of layer i holds ``[q heads 0..h-1 | k heads 0..kv-1 | v heads 0..kv-1]``,
    head_dim rows per head, and query head j reads key/value head j // (h // kv), as Llama's
    ``repeat_kv``: so its rows split into q_proj, k_proj and v_proj as they are.
    """
    hd = model.head_dim
    out = {
        "model.embed_tokens.weight": lm.wte.weight,
        "model.norm.weight": lm.norm_f.weight,
        "lm_head.weight": lm.lm_head.weight,
    }
    layers = zip(lm.blocks, model.heads, model.kv_heads, strict=True)
    for i, (block, h, kv) in enumerate(layers):
        (attn,), (mlp,) = block.mixers, block.mlps
        assert attn.qkv.weight.size(0) == (h + 2 * kv) * hd, (i, attn.qkv.weight.shape, h, kv)
        q, k, v = attn.qkv.weight.split([h * hd, kv * hd, kv * hd])  # (heads * hd, d) each
        pre = f"model.layers.{i}."
        out |= {
            pre + "input_layernorm.weight": block.mixer_norms[0].weight,
            pre + "self_attn.q_proj.weight": q,
            pre + "self_attn.k_proj.weight": k,
            pre + "self_attn.v_proj.weight": v,
            pre + "self_attn.o_proj.weight": attn.proj.weight,
            pre + "post_attention_layernorm.weight": block.mlp_norms[0].weight,
            pre + "mlp.gate_proj.weight": mlp.w1.weight,
            pre + "mlp.up_proj.weight": mlp.w3.weight,
            pre + "mlp.down_proj.weight": mlp.w2.weight,
        }
    return {name: w.detach() for name, w in out.items()}


def export_best(run: Path, cfg: Any, best: Mapping[str, Any], out: str | Path | None) -> dict:
    """The best candidate of best.yaml (its first entry) at target scale, or at proxy scale
    when the study has no target, as a Hugging Face folder (default RUN/hf)."""
    if not best.get("best"):
        raise ConfigError(f"--format hf: {run} has no best candidate yet (no completed trial)")
    entry = best["best"][0]
    # the candidate's model settings (model.rope_theta, ...) and heads schedule are part of
    # the model it found
    params = entry.get("params") or {}
    if cfg.target is not None:
        model, scale = cfg.target_for(params), "target"
    else:
        model, scale = cfg.for_candidate(params).model, "proxy"
    family_of(model)
    vocab = model.vocab_size or cfg.vocab_size
    if vocab is None:
        raise ConfigError(
            "--format hf: the vocabulary comes from a tokenizer file; set target.vocab_size "
            "(or model.vocab_size) to the tokenizer's size"
        )
    try:
        import transformers  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--format hf needs transformers (>= 5): pip install 'tlmsearch[hf]'"
        ) from None
    widths = entry[scale]["widths"]
    folder = Path(out) if out is not None else run / "hf"
    summary = write_hf_folder(folder, model, widths, vocab, max_positions=cfg.data.seq_len)
    recipe = entry.get("training_recipe")
    if recipe:  # per-layer LR / init multipliers: how it trained, which no config.json holds
        import yaml

        path = folder / "training_recipe.yaml"
        path.write_text(
            yaml.safe_dump({"note": recipe["note"], "train": recipe.get(scale)}, sort_keys=False)
        )
        summary = {**summary, "files": [*summary["files"], path]}
    return {**summary, "scale": scale, "widths": widths, "heads": list(model.heads)}


def off_lattice(folder: str | Path) -> list[str]:
    """The lines of an exported folder's block_configs.json that name what it cannot express:
    layers whose width is off its lattice, then layers whose heads it cannot hold."""
    path = Path(folder) / "block_configs.json"
    if not path.is_file():
        return []
    doc = json.loads(path.read_text())
    return [*doc.get("off_lattice", []), *doc.get("heads_not_expressed", [])]
