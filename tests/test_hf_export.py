"""export --format hf: a Hugging Face folder that transformers loads with best.yaml's widths and
heads; the built-in transformer is Llama (grouped-query and per-layer heads too); DeciLM
block_configs, its lattice and the heads it cannot express (offline)."""

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

from tlmsearch.config import ModelConfig
from tlmsearch.errors import ConfigError
from tlmsearch.models import build_model
from tlmsearch.models.hf_export import (
    DECI_MULTIPLE,
    deci_blocks,
    deci_heads,
    deci_width,
    export_best,
    llama_weights,
    off_lattice,
)
from tlmsearch.run_dir.tables import add_deltas, trials_frame
from tlmsearch.search.best import best_document
from tlmsearch.widths.budget import count_params

VOCAB = 256

# Loads a folder in a fresh process (trust_remote_code copies its modules into HF_HOME), checks
# per-layer widths, heads and parameters, and with a state dict given, writes the logits of idx
# and those of its last position again, decoded with the key/value cache.
LOAD = """
import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM
folder, state, out = sys.argv[1:4]
config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
model = AutoModelForCausalLM.from_config(config, trust_remote_code=True)
layers = model.model.layers
widths = [layer.mlp.up_proj.out_features for layer in layers]
assert widths == [layer.mlp.gate_proj.out_features for layer in layers]
assert widths == [layer.mlp.down_proj.in_features for layer in layers]
hd = config.head_dim
heads = [layer.self_attn.q_proj.out_features // hd for layer in layers]
assert heads == [layer.self_attn.o_proj.in_features // hd for layer in layers]
kv_heads = [layer.self_attn.k_proj.out_features // hd for layer in layers]
assert kv_heads == [layer.self_attn.v_proj.out_features // hd for layer in layers]
result = {"widths": widths, "heads": heads, "kv_heads": kv_heads,
          "numel": sum(p.numel() for p in model.parameters()),
          "class": type(model).__name__, "model_type": config.model_type}
if state != "-":
    loaded = torch.load(state)
    model.load_state_dict(loaded["weights"])
    model.config._attn_implementation = "sdpa"
    idx = loaded["idx"]
    with torch.no_grad():
        logits = model.eval()(input_ids=idx, use_cache=False).logits
        past = model(input_ids=idx[:, :-1], use_cache=True)
        cache = past.get("cache") or past.get("past_key_values")
        step = model(input_ids=idx[:, -1:], cache=cache, use_cache=True).logits[:, -1]
    torch.save({"logits": logits, "step": step}, out + ".pt")
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
        out |= torch.load(tmp / "out.json.pt")
    return out


def _best(cfg, best: dict | None = None) -> dict:
    """best.yaml of uniform against a better ``best`` (default a cosine taper), two seeds."""
    best = best or {"shape": "cosine", "r_start": 1.25}
    rows = [
        {
            "trial_id": f"{i}/{seed}",
            "seed": seed,
            "params": p,
            "state": "COMPLETE",
            "val_bpb": v + 0.01 * seed,
        }
        for seed in (0, 1)
        for i, (p, v) in enumerate((({"shape": "uniform"}, 2.0), (best, 1.9)))
    ]
    return best_document(add_deltas(trials_frame(rows), ["val_bpb"]), cfg)


# a cosine MLP taper with heads growing linearly over depth (0.5x -> 1.5x of n_head)
HEADS_SPACE = {
    "dimensions": {
        "shape": {"type": "fixed", "value": "cosine"},
        "r_start": {"type": "categorical", "choices": [1.5]},
        "heads.shape": {"type": "fixed", "value": "linear"},
        "heads.r_start": {"type": "categorical", "choices": [0.5]},
    }
}
HEADS = {"shape": "cosine", "r_start": 1.5, "heads.shape": "linear", "heads.r_start": 0.5}


def _ours_against_the_folder(cfg, doc: dict, tmp_path: Path) -> tuple[dict, Path]:
    """Export best.yaml's target, load it in transformers with our weights, and check its
    shape, parameters and logits (full and cached) against our model's."""
    target = doc["best"][0]["target"]
    widths = target["widths"]
    model = cfg.target_for(doc["best"][0]["params"])
    folder = export_best(tmp_path, cfg, doc, None)["folder"]
    ours = build_model(model, widths, cfg.vocab_size, seed=3).eval()
    idx = torch.randint(0, VOCAB, (2, 24), generator=torch.Generator().manual_seed(0))
    weights = llama_weights(ours, model)
    state = {"weights": {k: w.clone() for k, w in weights.items()}, "idx": idx}
    got = load_in_fresh_process(folder, tmp_path, state)
    with torch.no_grad():
        want = ours(idx)
    assert got["model_type"] == "tapered_llama" and got["widths"] == widths
    assert got["heads"] == list(model.heads) and got["kv_heads"] == list(model.kv_heads)
    assert got["numel"] == count_params(model, widths, cfg.vocab_size).total
    assert torch.allclose(got["logits"], want, atol=1e-5), (got["logits"] - want).abs().max()
    assert torch.allclose(got["step"], want[:, -1], atol=1e-5)
    return got, folder


@pytest.mark.slow  # a fresh process imports transformers: ~10-20 s on a busy CPU
def test_an_hf_family_target_loads_with_best_yamls_widths_and_parameters(tmp_path: Path) -> None:
    target = {
        "n_layer": 4,
        "d_model": 64,
        "n_head": 4,
        "n_kv_head": 2,
        "d_ff": 256,
        "multiple_of": 16,
        "arch": "hf",
        "hf": {"model_type": "qwen2"},
        "tie_embeddings": False,
    }
    cfg = tiny_config(tmp_path, target=target)
    doc = _best(cfg)
    widths = doc["best"][0]["target"]["widths"]
    assert len(set(widths)) > 1  # a taper, not the uniform model
    summary = export_best(tmp_path, cfg, doc, tmp_path / "folder")
    folder = summary["folder"]
    got = load_in_fresh_process(folder, tmp_path)
    assert got["model_type"] == "tapered_qwen2" and got["class"] == "TaperedQwen2ForCausalLM"
    assert got["widths"] == widths and got["kv_heads"] == [2] * 4  # model.n_kv_head
    assert got["numel"] == count_params(cfg.target, widths, cfg.vocab_size).total
    # proxy-sized widths (below 1024) sit between DeciLM's multiples of 256: every layer is named
    assert [line.split(":")[0] for line in summary["off"]] == [f"layer {i}" for i in range(4)]


def test_the_transformer_target_exports_as_llama_with_best_yamls_widths_and_logits(
    tmp_path: Path,
) -> None:
    """The built-in transformer is exactly Llama: best.yaml's target exports as a Llama folder
    whose model has the target's widths and parameters, and our weights in it give our logits."""
    target = {
        "n_layer": 3,
        "d_model": 32,
        "n_head": 2,
        "d_ff": 64,
        "multiple_of": 16,
        "init_std": 0.2,
    }
    cfg = tiny_config(tmp_path, target=target)
    doc = _best(cfg)
    widths = doc["best"][0]["target"]["widths"]
    assert len(set(widths)) > 1  # a taper, not the uniform model
    got, folder = _ours_against_the_folder(cfg, doc, tmp_path)
    assert folder == tmp_path / "hf"
    assert sorted(p.name for p in folder.iterdir()) == [
        "block_configs.json",
        "config.json",
        "configuration_tapered.py",
        "intermediate_sizes.json",
        "modeling_tapered.py",
    ]
    assert json.loads((folder / "intermediate_sizes.json").read_text()) == widths
    assert got["heads"] == got["kv_heads"] == [2, 2, 2]  # multi-head attention
    assert "num_attention_heads_per_layer" not in json.loads((folder / "config.json").read_text())


def test_per_layer_heads_with_grouped_query_attention_export_with_our_logits(
    tmp_path: Path,
) -> None:
    """A heads schedule over grouped-query attention (4 heads, 2 key/value heads: groups of 2)
    exports as per-layer lists the Llama subclass builds; our weights, the fused qkv split by
    heads, give our logits, and block_configs names the heads DeciLM cannot hold."""
    model = {
        "n_layer": 3,
        "d_model": 32,
        "n_head": 4,
        "n_kv_head": 2,
        "d_ff": 64,
        "multiple_of": 16,
    }
    cfg = tiny_config(tmp_path, model=model, target={**model, "init_std": 0.2}, space=HEADS_SPACE)
    doc = _best(cfg, HEADS)
    target = doc["best"][0]["target"]
    assert (target["heads"], target["kv_heads"]) == ([2, 4, 6], [1, 2, 3])
    got, folder = _ours_against_the_folder(cfg, doc, tmp_path)
    assert (got["heads"], got["kv_heads"]) == ([2, 4, 6], [1, 2, 3])
    config = json.loads((folder / "config.json").read_text())
    assert config["num_attention_heads_per_layer"] == [2, 4, 6]
    assert config["num_key_value_heads_per_layer"] == [1, 2, 3]
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 2)
    assert config["head_dim"] == 8  # d_model // n_head in every layer
    blocks = json.loads((folder / "block_configs.json").read_text())
    assert [b["attention"]["n_heads_in_group"] for b in blocks["block_configs"]] == [4, 2, 1]
    assert not blocks["exact"]
    assert [line.split(":")[0] for line in blocks["heads_not_expressed"]] == ["layer 0", "layer 2"]
    assert off_lattice(folder)[-2:] == blocks["heads_not_expressed"]


def test_grouped_query_attention_with_the_same_heads_everywhere_is_a_plain_config(
    tmp_path: Path,
) -> None:
    target = {
        "n_layer": 2,
        "d_model": 64,
        "n_head": 4,
        "n_kv_head": 1,
        "d_ff": 128,
        "multiple_of": 16,
    }
    cfg = tiny_config(tmp_path, target=target)
    doc = _best(cfg)
    assert doc["best"][0]["target"]["kv_heads"] == [1, 1]  # GQA: best.yaml says so
    summary = export_best(tmp_path, cfg, doc, None)
    config = json.loads((summary["folder"] / "config.json").read_text())
    assert (config["num_attention_heads"], config["num_key_value_heads"]) == (4, 1)
    assert not {"num_attention_heads_per_layer", "num_key_value_heads_per_layer"} & set(config)
    blocks = json.loads((summary["folder"] / "block_configs.json").read_text())
    assert [b["attention"]["n_heads_in_group"] for b in blocks["block_configs"]] == [4, 4]
    assert summary["heads_off"] == blocks["heads_not_expressed"] == []


def test_archs_without_a_family_and_runs_without_a_best_are_config_errors(tmp_path: Path) -> None:
    cfg = tiny_config(tmp_path, model={"arch": "gated_attention"})
    with pytest.raises(ConfigError, match=r"--format hf: model\.arch 'gated_attention'"):
        export_best(tmp_path, cfg, _best(cfg), None)
    from tlmsearch.models.hf_export import family_of

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


def test_block_configs_keep_each_layers_kv_heads_and_name_the_heads_they_cannot_hold() -> None:
    kv, lines = deci_heads(8, [8, 8, 8], [8, 2, 1])  # one query head count: all expressible
    assert kv == [8, 2, 1] and lines == []
    kv, lines = deci_heads(4, [2, 4, 6], [1, 2, 3])
    assert kv == [1, 2, 4]
    assert lines == [
        "layer 0: 2 query heads, 1 key/value head: num_attention_heads is 4 in every DeciLM "
        "block; written as 4 query heads, 1 key/value head",
        "layer 2: 6 query heads, 3 key/value heads: num_attention_heads is 4 in every DeciLM "
        "block, and 3 key/value heads do not divide num_attention_heads (4); written as 4 "
        "query heads, 4 key/value heads",
    ]
    blocks, _ = deci_blocks([256, 256, 256], 256, n_head=4, n_kv_head=kv)
    assert [b["attention"]["n_heads_in_group"] for b in blocks] == [4, 2, 1]


@given(st.integers(1, 16), st.lists(st.tuples(st.integers(1, 8), st.integers(1, 24)), max_size=6))
def test_deci_heads_write_divisors_and_name_exactly_the_layers_they_change(
    n_head: int, layers: list[tuple[int, int]]
) -> None:
    kv_heads = [kv for kv, _ in layers]
    heads = [kv * group for kv, group in layers]
    written, lines = deci_heads(n_head, heads, kv_heads)
    assert all(n_head % kv == 0 for kv in written)
    changed = [
        i
        for i, (h, kv) in enumerate(zip(heads, kv_heads, strict=True))
        if h != n_head or written[i] != kv
    ]
    assert [int(line.split(":")[0].split()[1]) for line in lines] == changed


def test_the_export_has_the_best_candidates_model_settings(tmp_path: Path) -> None:
    rope = {"type": "categorical", "choices": [10000.0, 500000.0]}
    space = {
        "dimensions": {
            "shape": {"type": "fixed", "value": "cosine"},
            "r_start": {"type": "categorical", "choices": [1.5]},
            "model.rope_theta": rope,
        }
    }
    cfg = tiny_config(tmp_path, space=space)  # no target: the proxy is exported
    params = {"shape": "cosine", "r_start": 1.5, "model.rope_theta": 500000.0}
    widths = list(cfg.model.plan(params).widths)
    best = {"best": [{"params": params, "proxy": {"widths": widths}}]}
    folder = export_best(tmp_path, cfg, best, None)["folder"]
    config = json.loads((folder / "config.json").read_text())
    assert 500000.0 in (
        config.get("rope_theta"),
        config.get("rope_parameters", {}).get("rope_theta"),
    )
