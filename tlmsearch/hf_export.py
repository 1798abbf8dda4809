"""``tlmsearch export RUN --format hf``: the best candidate's target as a Hugging Face folder.

A transformers family has one ``intermediate_size`` for every layer, so the folder carries a small
subclass of the family (``configuration_tapered.py``, ``modeling_tapered.py``, wired through
``auto_map``) whose config takes a list, one MLP width per layer; transformers loads it with
``trust_remote_code=True``::

    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=True)

The built-in ``transformer`` arch is exactly Llama (pre-norm RMSNorm, RoPE in the halves layout,
SwiGLU MLP as silu(gate) * up -> down, multi-head attention, no biases; tests/test_hf_export.py
checks the logits), so it exports as Llama; ``arch: hf`` exports as its own family. Beside the
model: ``intermediate_sizes.json`` (the plain list) and ``block_configs.json``, the DeciLM /
Nemotron-NAS form (``ffn_mult`` per block; served by vLLM) with the layers whose width is off
its lattice named. No weights: the target is trained elsewhere.
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

CONFIGURATION = '''"""A {family} config whose intermediate_size may be a list: a width per layer.

Written by tlmsearch (export --format hf)."""

from huggingface_hub.dataclasses import strict
from transformers import {config}


@strict
class Tapered{config}({config}):
    model_type = "tapered_{family}"
    intermediate_size: int | list[int] = 11008

    def validate_intermediate_sizes(self):
        sizes = self.intermediate_size
        if isinstance(sizes, list) and len(sizes) != self.num_hidden_layers:
            raise ValueError(
                f"intermediate_size has {{len(sizes)}} entries for "
                f"{{self.num_hidden_layers}} layers"
            )
'''

MODELING = '''"""{model} whose layer i has an MLP of width intermediate_size[i].

Written by tlmsearch (export --format hf)."""

import copy

from transformers import {model}

from .configuration_tapered import Tapered{config}


class Tapered{model}({model}):
    config_class = Tapered{config}

    def __init__(self, config):
        sizes = config.intermediate_size
        if not isinstance(sizes, list):
            sizes = [sizes] * config.num_hidden_layers
        flat = copy.deepcopy(config)
        flat.intermediate_size = min(sizes)
        super().__init__(flat)
        mlp_class = type(self.model.layers[0].mlp)
        for layer, size in zip(self.model.layers, sizes, strict=True):
            one = copy.deepcopy(flat)
            one.intermediate_size = size
            layer.mlp = mlp_class(one)
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
    """model.hf for a built-in transformer: Llama with multi-head attention, no biases."""
    return {"model_type": "llama", "hidden_act": "silu", "attention_bias": False,
            "mlp_bias": False, "num_key_value_heads": model.n_head}  # fmt: skip


def deci_blocks(
    widths: Sequence[int], d_model: int, n_head: int, n_kv_head: int
) -> tuple[list[dict[str, Any]], list[str]]:
    """DeciLM / Nemotron-NAS ``block_configs`` for the widths, and one line per layer whose
    width is off the lattice (a multiple of 256), naming the nearest lattice widths."""
    blocks, off = [], []
    for layer, w in enumerate(widths):
        mult = round(3 * w / (2 * d_model), 6)
        if deci_width(mult, d_model) != w:
            lo = max(DECI_MULTIPLE, w // DECI_MULTIPLE * DECI_MULTIPLE)
            hi = lo + DECI_MULTIPLE if lo < w else lo
            near = f"{lo} ({lo - w:+d})" + (f" or {hi} ({hi - w:+d})" if hi != lo else "")
            off.append(f"layer {layer}: width {w} is off the lattice; nearest {near}")
            mult = round(3 * min((lo, hi), key=lambda v: abs(v - w)) / (2 * d_model), 6)
        blocks.append(
            {
                "attention": {"n_heads_in_group": n_head // n_kv_head, "no_op": False,
                              "replace_with_linear": False},
                "ffn": {"ffn_mult": mult, "no_op": False, "replace_with_linear": False},
            }
        )  # fmt: skip
    return blocks, off


def deci_width(ffn_mult: float, d_model: int) -> int:
    """DeciLM's ``_ffn_mult_to_intermediate_size``: int(2 * mult * d / 3) up to a multiple of
    256 (transformers' remote DeciLM code, llama.cpp's and vLLM's DeciLM loaders)."""
    size = int(2 * ffn_mult * d_model / 3)
    return size if size % DECI_MULTIPLE == 0 else size + DECI_MULTIPLE - size % DECI_MULTIPLE


def write_hf_folder(
    folder: str | Path, model: ModelConfig, widths: Sequence[int], vocab_size: int,
    *, max_positions: int,
) -> dict[str, Any]:  # fmt: skip
    """Write the Hugging Face folder for ``model`` at ``widths``; returns a summary (files,
    family, block_configs lines off the lattice)."""
    from transformers import CONFIG_MAPPING
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from tlmsearch.models.hf import family_config

    family = family_of(model)
    if model.arch == "transformer":
        model = ModelConfig.model_validate(
            {**model.model_dump(exclude={"hf"}), "arch": "hf", "hf": llama_keys(model)}
        )
    widths = [int(w) for w in widths]
    base = family_config(model, vocab_size, max(widths))
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
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "config.json": json.dumps(doc, indent=2, sort_keys=True) + "\n",
        "configuration_tapered.py": CONFIGURATION.format(family=family, config=config_cls),
        "modeling_tapered.py": MODELING.format(model=model_cls, config=config_cls),
        "intermediate_sizes.json": json.dumps(widths) + "\n",
    }
    kv = int(getattr(base, "num_key_value_heads", None) or model.n_head)
    blocks, off = deci_blocks(widths, model.d_model, model.n_head, kv)
    files["block_configs.json"] = (
        json.dumps(
            {
                "model_type": "nemotron-nas",
                "architectures": ["DeciLMForCausalLM"],
                "hidden_size": model.d_model,
                "num_attention_heads": model.n_head,
                "num_hidden_layers": model.n_layer,
                "block_configs": blocks,
                "exact": not off,
                "off_lattice": off,
            },
            indent=2,
        )
        + "\n"
    )
    for name, text in files.items():
        (out / name).write_text(text)
    return {"folder": out, "family": family, "files": [out / n for n in files], "off": off}


def export_best(run: Path, cfg: Any, best: Mapping[str, Any], out: str | Path | None) -> dict:
    """The best candidate of best.yaml (its first entry) at target scale, or at proxy scale
    when the study has no target, as a Hugging Face folder (default RUN/hf)."""
    if not best.get("best"):
        raise ConfigError(f"--format hf: {run} has no best candidate yet (no completed trial)")
    entry = best["best"][0]
    # the candidate's model settings (model.rope_theta, ...) are part of the model it found
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
    return {**summary, "scale": scale, "widths": widths}


def off_lattice(folder: str | Path) -> list[str]:
    """The lines of an exported folder's block_configs.json that name layers off its lattice."""
    path = Path(folder) / "block_configs.json"
    return list(json.loads(path.read_text()).get("off_lattice", [])) if path.is_file() else []
