"""export --format hf: a Hugging Face folder that transformers loads with best.yaml's widths;
the built-in transformer is Llama; DeciLM block_configs and its lattice (offline)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import tiny_config

from tlmsearch.budget import count_params
from tlmsearch.config import ModelConfig
from tlmsearch.errors import ConfigError
from tlmsearch.hf_export import DECI_MULTIPLE, deci_blocks, deci_width, export_best
from tlmsearch.models import build_model
from tlmsearch.results import add_deltas, trials_frame
from tlmsearch.search.export import best_document

VOCAB = 256

# Loads a folder in a fresh process (trust_remote_code copies its modules into HF_HOME), checks
# per-layer widths and parameters, and with a state dict given, writes the logits of idx.
LOAD = """
import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
folder, state, out = sys.argv[1:4]
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForCausalLM.from_config(config, trust_remote_code=True)
widths = [layer.mlp.up_proj.out_features for layer in model.model.layers]
assert widths == [layer.mlp.gate_proj.out_features for layer in model.model.layers]
assert widths == [layer.mlp.down_proj.in_features for layer in model.model.layers]
result = {"widths": widths, "numel": sum(p.numel() for p in model.parameters()),
          "class": type(model).__name__, "model_type": config.model_type}
if state != "-":
    loaded = torch.load(state)
    model.load_state_dict(loaded["weights"])
    model.config._attn_implementation = "sdpa"
    with torch.no_grad():
        logits = model.eval()(input_ids=loaded["idx"], use_cache=False).logits
    torch.save(logits, out + ".pt")
json.dump(result, open(out, "w"))
"""


def load_in_fresh_process(folder: Path, tmp: Path, state: dict | None = None) -> dict:
    script = tmp / "load.py"
    script.write_text(LOAD)
    if state is not None:
        torch.save(state, tmp / "state.pt")
    env = {**os.environ, "HF_HOME": str(tmp / "hf_home"), "HF_HUB_OFFLINE": "1"}
    args = [sys.executable, str(script), str(folder), str(tmp / "state.pt") if state else "-"]
    proc = subprocess.run(
        [*args, str(tmp / "out.json")], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads((tmp / "out.json").read_text())
    if state is not None:
        out["logits"] = torch.load(tmp / "out.json.pt")
    return out


def _best(cfg) -> dict:
    rows = [
        {"trial_id": f"{p['shape']}{seed}", "seed": seed, "params": p, "state": "COMPLETE",
         "val_bpb": v + 0.01 * seed}
        for seed in (0, 1)
        for p, v in (({"shape": "uniform"}, 2.0), ({"shape": "cosine", "r_start": 1.25}, 1.9))
    ]  # fmt: skip
    return best_document(add_deltas(trials_frame(rows), ["val_bpb"]), cfg)


@pytest.mark.slow  # a fresh process imports transformers: ~10-20 s on a busy CPU
def test_an_hf_family_target_loads_with_best_yamls_widths_and_parameters(tmp_path: Path) -> None:
    target = {"n_layer": 4, "d_model": 64, "n_head": 4, "d_ff": 256, "multiple_of": 16,
              "arch": "hf", "hf": {"model_type": "qwen2", "num_key_value_heads": 2},
              "tie_embeddings": False}  # fmt: skip
    cfg = tiny_config(tmp_path, target=target)
    doc = _best(cfg)
    widths = doc["best"][0]["target"]["widths"]
    assert len(set(widths)) > 1  # a taper, not the uniform model
    summary = export_best(tmp_path, cfg, doc, tmp_path / "folder")
    folder = summary["folder"]
    got = load_in_fresh_process(folder, tmp_path)
    assert got["model_type"] == "tapered_qwen2" and got["class"] == "TaperedQwen2ForCausalLM"
    assert got["widths"] == widths
    assert got["numel"] == count_params(cfg.target, widths, cfg.vocab_size).total
    # proxy-sized widths (below 1024) sit between DeciLM's multiples of 256: every layer is named
    assert [line.split(":")[0] for line in summary["off"]] == [f"layer {i}" for i in range(4)]


def test_the_transformer_target_exports_as_llama_with_best_yamls_widths_and_logits(
    tmp_path: Path,
) -> None:
    """The built-in transformer is exactly Llama: best.yaml's target exports as a Llama folder
    whose model has the target's widths and parameters, and our weights in it give our logits."""
    target = {"n_layer": 3, "d_model": 32, "n_head": 2, "d_ff": 64, "multiple_of": 16,
              "init_std": 0.2}  # fmt: skip
    cfg = tiny_config(tmp_path, target=target)
    doc = _best(cfg)
    widths = doc["best"][0]["target"]["widths"]
    assert len(set(widths)) > 1  # a taper, not the uniform model
    folder = export_best(tmp_path, cfg, doc, None)["folder"]
    assert folder == tmp_path / "hf"
    assert sorted(p.name for p in folder.iterdir()) == [
        "block_configs.json", "config.json", "configuration_tapered.py",
        "intermediate_sizes.json", "modeling_tapered.py",
    ]  # fmt: skip
    assert json.loads((folder / "intermediate_sizes.json").read_text()) == widths
    ours = build_model(cfg.target, widths, cfg.vocab_size, seed=3).eval()
    d = cfg.target.d_model
    weights = {
        "model.embed_tokens.weight": ours.wte.weight,
        "model.norm.weight": ours.norm_f.weight,
        "lm_head.weight": ours.lm_head.weight,
    }
    for i, block in enumerate(ours.blocks):
        pre = f"model.layers.{i}."
        q, k, v = block.mixers[0].qkv.weight.split(d)
        mlp = block.mlps[0]
        weights |= {
            pre + "input_layernorm.weight": block.mixer_norms[0].weight,
            pre + "self_attn.q_proj.weight": q,
            pre + "self_attn.k_proj.weight": k,
            pre + "self_attn.v_proj.weight": v,
            pre + "self_attn.o_proj.weight": block.mixers[0].proj.weight,
            pre + "post_attention_layernorm.weight": block.mlp_norms[0].weight,
            pre + "mlp.gate_proj.weight": mlp.w1.weight,
            pre + "mlp.up_proj.weight": mlp.w3.weight,
            pre + "mlp.down_proj.weight": mlp.w2.weight,
        }
    idx = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(0))
    state = {"weights": {k: w.detach().clone() for k, w in weights.items()}, "idx": idx}
    got = load_in_fresh_process(folder, tmp_path, state)
    with torch.no_grad():
        want = ours(idx)
    assert got["model_type"] == "tapered_llama" and got["widths"] == widths
    assert got["numel"] == count_params(cfg.target, widths, cfg.vocab_size).total
    assert torch.allclose(got["logits"], want, atol=1e-5), (got["logits"] - want).abs().max()


def test_archs_without_a_family_and_runs_without_a_best_are_config_errors(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, model={"arch": "gated_attention"})
    with pytest.raises(ConfigError, match=r"--format hf: model\.arch 'gated_attention'"):
        export_best(tmp_path, cfg, _best(cfg), None)
    from tlmsearch.hf_export import family_of

    with pytest.raises(ConfigError, match="use --format yaml"):
        family_of(ModelConfig(arch="plugin_model:build", n_layer=2, d_model=32, n_head=2))
    with pytest.raises(ConfigError, match="no best candidate"):
        export_best(tmp_path, tiny_config(tmp_path), {"best": []}, None)


def test_block_configs_name_the_layers_off_the_lattice() -> None:
    d = 1024
    on = [2816, 2560, 2304]  # multiples of 256
    blocks, off = deci_blocks(on, d, n_head=8, n_kv_head=2)
    assert off == []
    assert [deci_width(b["ffn"]["ffn_mult"], d) for b in blocks] == on
    assert {b["attention"]["n_heads_in_group"] for b in blocks} == {4}
    blocks, off = deci_blocks([2816, 2624, 2240], d, n_head=8, n_kv_head=8)
    assert off == [
        "layer 1: width 2624 is off the lattice; nearest 2560 (-64) or 2816 (+192)",
        "layer 2: width 2240 is off the lattice; nearest 2048 (-192) or 2304 (+64)",
    ]
    assert [deci_width(b["ffn"]["ffn_mult"], d) for b in blocks] == [2816, 2560, 2304]


@given(st.integers(1, 64), st.sampled_from([256, 768, 1024, 2048, 4096, 5120]))
def test_every_lattice_width_round_trips_through_its_ffn_mult(units: int, d_model: int) -> None:
    w = units * DECI_MULTIPLE
    (block,), off = deci_blocks([w], d_model, n_head=1, n_kv_head=1)
    assert off == [] and deci_width(block["ffn"]["ffn_mult"], d_model) == w


def test_the_export_has_the_best_candidates_model_settings(tmp_path: Path) -> None:
    rope = {"type": "categorical", "choices": [10000.0, 500000.0]}
    space = {"dimensions": {"shape": {"type": "fixed", "value": "cosine"},
                            "r_start": {"type": "categorical", "choices": [1.5]},
                            "model.rope_theta": rope}}  # fmt: skip
    cfg = tiny_config(tmp_path, space=space)  # no target: the proxy is exported
    params = {"shape": "cosine", "r_start": 1.5, "model.rope_theta": 500000.0}
    widths = list(cfg.model.plan(params).widths)
    best = {"best": [{"params": params, "proxy": {"widths": widths}}]}
    folder = export_best(tmp_path, cfg, best, None)["folder"]
    config = json.loads((folder / "config.json").read_text())
    assert 500000.0 in (config.get("rope_theta"), config.get("rope_parameters", {}).get(
        "rope_theta"))  # fmt: skip
