"""Models built by other code: transformers families (``arch: hf``, models/hf.py) and plugins
(``arch: "module:build"``, models/external.py). Tiny configs, offline: nothing is fetched."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from search_helpers import learnable_bytes
from torch import nn
from typer.testing import CliRunner

from tlmsearch.analysis import attention_diagnostics, layer_diagnostics, mlp_sites
from tlmsearch.cli import app
from tlmsearch.config import ModelConfig, TrainConfig, load_study
from tlmsearch.data.batches import val_windows
from tlmsearch.errors import ConfigError
from tlmsearch.models import build_model
from tlmsearch.train import checkpoints as ck
from tlmsearch.train.loop import train_proxy
from tlmsearch.widths import budget

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 256
TINY = dict(n_layer=2, d_model=32, n_head=2, d_ff=64, multiple_of=16)
FAMILIES = {
    "llama": dict(arch="hf", hf={"model_type": "llama"}),
    "qwen2": dict(arch="hf", hf={"model_type": "qwen2"}),  # q/k/v biases
    "plugin": dict(arch="plugin_model:build"),  # tests/plugin_model.py: LayerNorm, GELU, biases
}
WIDE_FIRST, UNIFORM = (80, 48), (64, 64)  # no width equals d_model: dims tell apart


def tiny(kind: str, **kw) -> ModelConfig:
    return ModelConfig(**{**TINY, **FAMILIES[kind], **kw})


def numel(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())  # tied weights once


@pytest.mark.parametrize("kind", FAMILIES)
def test_layer_widths_and_counts_on_the_built_model_equal_the_uniform_models(kind: str) -> None:
    cfg = tiny(kind)
    model, uniform = build_model(cfg, WIDE_FIRST, VOCAB), build_model(cfg, UNIFORM, VOCAB)
    out = model(torch.zeros(2, 8, dtype=torch.long))
    assert out.shape == (2, 8, VOCAB) and out.dtype == torch.float32
    sites = mlp_sites(model)
    assert [layer for layer, *_ in sites] == [0, 1]
    for (_, _, _, mlp), width in zip(sites, WIDE_FIRST, strict=True):
        hidden = {d for p in mlp.parameters() if p.ndim == 2 for d in p.shape} - {cfg.d_model}
        assert hidden == {width}
    assert numel(model) == numel(uniform)
    counts = budget.count_params(cfg, WIDE_FIRST, VOCAB)
    assert counts.total == numel(model) == budget.count_params(cfg, UNIFORM, VOCAB).total
    mlp = sum(p.numel() for *_, m in sites for p in m.parameters())
    assert counts.mlp == budget.mlp_params(cfg, WIDE_FIRST) == mlp
    assert counts.non_embedding == budget.non_embedding_params(cfg, WIDE_FIRST)
    flops = budget.flops_per_token(cfg, WIDE_FIRST, VOCAB, seq_len=16)
    assert flops == budget.flops_per_token(cfg, UNIFORM, VOCAB, seq_len=16)
    assert flops.training == 3 * flops.forward and flops.attention > 0


@pytest.mark.parametrize("tie", [True, False])
def test_hf_llama_counts_equal_the_analytic_counts_of_the_built_in_transformer(tie: bool) -> None:
    """The built-in transformer is Llama (export --format hf maps it so): same parameters,
    same FLOPs by budget.py's analytic formula and by the count on the built Llama."""
    ours = ModelConfig(**TINY, tie_embeddings=tie)
    llama = tiny("llama", tie_embeddings=tie)
    assert budget.count_params(ours, WIDE_FIRST, VOCAB) == budget.count_params(
        llama, WIDE_FIRST, VOCAB
    )
    assert budget.flops_per_token(ours, WIDE_FIRST, VOCAB, 32) == budget.flops_per_token(
        llama, WIDE_FIRST, VOCAB, 32
    )


def test_the_flops_of_a_plugin_match_torchs_flop_counter_on_a_real_forward() -> None:
    """On the math attention kernel (its matmuls are counted; CPU flash is not) as budget.py
    counts attention: 4 * d_model * seq_len per layer over the full square."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    cfg, seq = tiny("plugin"), 16
    model = build_model(cfg, WIDE_FIRST, VOCAB)
    with FlopCounterMode(display=False) as counter, sdpa_kernel(SDPBackend.MATH):
        model(torch.zeros(1, seq, dtype=torch.long))
    flops = budget.flops_per_token(cfg, WIDE_FIRST, VOCAB, seq)
    assert flops.forward == counter.get_total_flops() // seq
    assert flops.attention == cfg.n_layer * 4 * cfg.d_model * seq
    assert flops.head == 2 * cfg.d_model * VOCAB


@pytest.mark.parametrize("kind", FAMILIES)
def test_candidates_of_a_seed_share_every_common_parameter_and_mlp_unit(kind: str) -> None:
    cfg = tiny(kind)
    a = dict(build_model(cfg, WIDE_FIRST, VOCAB, seed=7).named_parameters())
    b = dict(build_model(cfg, UNIFORM, VOCAB, seed=7).named_parameters())
    assert a.keys() == b.keys()
    mlp = {n for n in a if ".mlp." in n}
    assert len(a) - len(mlp) >= 7
    for name in a.keys() - mlp:
        assert torch.equal(a[name], b[name]), name
    shared = 0
    for name in mlp:
        if a[name].ndim == 2:  # hidden units are rows (up, gate) or columns (down)
            dim = 0 if a[name].shape[0] != cfg.d_model else 1
            k = min(a[name].size(dim), b[name].size(dim))
            assert torch.equal(a[name].narrow(dim, 0, k), b[name].narrow(dim, 0, k)), name
            shared += 1
    assert shared == (3 if kind != "plugin" else 2) * cfg.n_layer


@pytest.mark.parametrize("kind", FAMILIES)
def test_init_is_keyed_by_the_seed_and_leaves_the_global_generator_alone(kind: str) -> None:
    cfg = tiny(kind, init_std=0.05)
    torch.manual_seed(123)
    a = build_model(cfg, WIDE_FIRST, VOCAB, seed=7)
    after = torch.randn(3)
    torch.manual_seed(123)
    assert torch.equal(torch.randn(3), after)  # building drew nothing from it
    torch.randn(1000)
    b = build_model(cfg, WIDE_FIRST, VOCAB, seed=7)
    c = build_model(cfg, WIDE_FIRST, VOCAB, seed=8)
    for (name, pa), pb in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        assert torch.equal(pa, pb), name
    for name, p in a.named_parameters():
        if p.ndim >= 2:
            assert not torch.equal(p, c.get_parameter(name)), name
            if p.numel() >= 4096:
                assert p.std().item() == pytest.approx(0.05, rel=0.1), name


# -------------------------------------------------------------------------------------------------
# Training, resume, checkpoints, analysis


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory):
    return learnable_bytes(tmp_path_factory.mktemp("tiny"), 300, 1024)


def _states(state: dict) -> dict:
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)  # what a checkpoint loads with


@pytest.mark.parametrize("kind", ["llama", "qwen2", "plugin"])
def test_a_few_steps_train_and_a_resumed_run_equals_an_uninterrupted_one(kind: str, data) -> None:
    cfg = tiny(kind)
    train = TrainConfig(
        tokens=4096,
        batch_tokens=256,
        micro_batch_size=8,
        lr=1e-2,
        warmup_tokens=256,
        eval_every_tokens=1024,
        checkpoint_every_tokens=2048,
        compile="off",
        dtype="fp32",
    )

    def run(**kw):
        return train_proxy(cfg, WIDE_FIRST, data, train, seed=3, threads=1, device="cpu", **kw)

    states: list[dict] = []
    straight = run(on_checkpoint=lambda s: states.append(_states(s)))
    assert straight.status == "completed"
    losses = [r["val_loss"] for r in straight.curve]
    assert losses[-1] < losses[0] - 0.3  # it learns
    assert straight.n_params == budget.count_params(cfg, WIDE_FIRST, 256).total
    resumed = run(resume=states[0])
    assert [r["val_loss"] for r in resumed.curve] == losses  # exactly


@pytest.mark.parametrize("kind", ["llama", "plugin"])
def test_a_checkpoint_rebuilds_the_model(kind: str, tmp_path: Path) -> None:
    cfg = tiny(kind, vocab_size=VOCAB)
    model = build_model(cfg, WIDE_FIRST, VOCAB, seed=5)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.01)  # not the init
    meta = {
        "number": 0,
        "seed": 5,
        "widths": list(WIDE_FIRST),
        "tokens": 1,
        "final": True,
        "model": cfg.model_dump(mode="json"),
        "arch": cfg.arch,
        "candidate": {},
    }
    folder = ck.write_checkpoint(tmp_path / "c", {"model": model.state_dict(), "tokens": 1}, meta)
    loaded, _ = ck.load_model(folder)
    idx = torch.randint(0, VOCAB, (2, 8))
    assert torch.equal(loaded(idx), model.eval()(idx))


@pytest.mark.parametrize("kind", ["llama", "plugin"])
def test_analysis_reads_each_layers_mlp_and_its_ablation(kind: str) -> None:
    model = build_model(tiny(kind), WIDE_FIRST, VOCAB, seed=0).eval()
    g = torch.Generator().manual_seed(0)
    vx, vy = val_windows(torch.randint(0, VOCAB, (81,), generator=g).numpy(), 16)
    rows = layer_diagnostics(model, vx, vy, batch=2)
    assert [(r["layer"], r["level"], r["width"]) for r in rows] == [(0, 0, 80), (1, 0, 48)]
    for layer, row in enumerate(rows):
        _, _, _, mlp = mlp_sites(model)[layer]
        handle = mlp.register_forward_hook(lambda m, a, out: torch.zeros_like(out))
        with torch.no_grad():
            ablated = F.cross_entropy(model(vx).flatten(0, 1), vy.flatten()).item()
        handle.remove()
        assert row["ablation_nats"] == pytest.approx(ablated - row["val_loss"], abs=1e-5)
        assert -1 <= row["cosine"] <= 1 and row["rel_norm"] > 0
    # their attention is the family's own code: no attention measures, and no error
    assert attention_diagnostics(model, vx, vy, batch=2) == ([], [])


# -------------------------------------------------------------------------------------------------
# Bad input: a ConfigError naming the field, exit 2 from validate


@pytest.mark.parametrize(
    ("model", "expect"),
    [
        (dict(arch="hf"), "model.arch: hf needs model.hf"),
        (dict(hf={"model_type": "llama"}), "model.hf is read only with model.arch: hf"),
        (dict(arch="hf", hf={"model_type": "lama"}), "model.hf.model_type: 'lama' is not"),
        (dict(arch="hf", hf={"model_type": "bert"}), "BertLMHeadModel is not a decoder of"),
        (dict(arch="hf", hf={"model_type": "llama", "num_kv_heads": 1}), "model.hf.num_kv_heads"),
        (dict(arch="hf", hf={"model_type": "llama", "hidden_size": 64}), "set by model.d_model"),
        # post-norm (OLMo 2/3, EXAONE 4) or pre_feedforward_layernorm (Gemma 3): analyze's hooks
        # on post_attention_layernorm would read a tensor that is not the MLP's input
        (dict(arch="hf", hf={"model_type": "olmo2"}), "olmo2's decoder layer has post_feed"),
        (dict(arch="hf", hf={"model_type": "olmo3"}), "olmo3's decoder layer has post_feed"),
        (dict(arch="hf", hf={"model_type": "exaone4"}), "exaone4's decoder layer has post_f"),
        (dict(arch="hf", hf={"model_type": "gemma3_text"}), "has post_feedforward_layernorm, pre"),
        (dict(arch="hf", hf={"model_type": "llama", "attention_dropout": "x"}), "refuses"),
        (dict(arch="hf", hf={"model_type": "llama"}, n_kv_head=3), "must divide"),
        (
            dict(arch="hf", hf={"model_type": "llama", "num_key_value_heads": 3}),
            "n_kv_head (3) must divide n_head",
        ),
        (dict(arch="hf", hf={"config": "/no/such/config.json"}), "cannot read"),
        (dict(arch="hf", hf={"model_type": "llama", "head_dim": 8}), "set by model.d_model and"),
        (
            dict(arch="hf", hf={"model_type": "llama", "rope_parameters": {"rope_theta": 5e5}}),
            "rope_parameters.rope_theta is set by model.rope_theta",
        ),
        (dict(arch="hf", hf={}), "give model_type"),
        (dict(arch="transformers"), "not one of transformer"),
        (dict(arch="no_such_module_xyz:build"), "failed to import"),
        (dict(arch="plugin_model:nothing"), "has no function 'nothing'"),
        (dict(arch="plugin_model:NOT_CALLABLE"), "has no function"),
        (dict(arch="plugin_model:not_a_module"), "not a torch nn.Module"),
        (dict(arch="plugin_model:no_mlp_layers"), "without mlp_layers()"),
        (dict(arch="plugin_model:one_site_short"), "must list 4 (norm, mlp) pairs"),
        (dict(arch="plugin_model:wrong_logits"), "returned (1, 8, 3)"),
        (dict(arch="plugin_model:raises"), "raised RuntimeError: out of ideas"),
    ],
)
def test_bad_models_exit_2_naming_the_field(model: dict, expect: str, tmp_path: Path) -> None:
    import yaml

    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    study["model"] = {**study["model"], **model}
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError) as err:
        load_study(path)
    text = str(err.value)
    assert expect in text and "model." in text, text
    result = CliRunner().invoke(app, ["validate", str(path), "--no-config"])
    assert result.exit_code == 2 and expect in " ".join(result.output.split()), result.output


def test_a_config_json_is_read_once_and_kept_inline(tmp_path: Path) -> None:
    from transformers import CONFIG_MAPPING

    CONFIG_MAPPING["qwen2"](num_key_value_heads=1, hidden_size=4096).save_pretrained(tmp_path)
    cfg = tiny("qwen2", hf={"config": str(tmp_path / "config.json")})
    assert cfg.hf.model_type == "qwen2" and cfg.hf.config is None
    assert cfg.n_kv_head == 1 and "num_key_value_heads" not in cfg.hf.model_extra  # the file's
    assert "hidden_size" not in cfg.hf.model_extra  # the proxy's shape is model.d_model's
    again = ModelConfig.model_validate(json.loads(cfg.model_dump_json()))  # as study.yaml
    model = build_model(again, WIDE_FIRST, VOCAB)
    attn = model.inner.model.layers[0].self_attn
    assert attn.k_proj.out_features == cfg.head_dim  # one kv head
    assert numel(model) == budget.count_params(again, WIDE_FIRST, VOCAB).total


def inv_freq(cfg: ModelConfig) -> torch.Tensor:
    return build_model(cfg, UNIFORM, VOCAB).inner.model.rotary_emb.inv_freq


def test_model_rope_theta_sets_the_theta_over_a_config_jsons_rope_parameters(
    tmp_path: Path,
) -> None:
    # transformers 5 saves rope_theta inside rope_parameters; before, the file's 500000 won over
    # model.rope_theta and a rope_theta dimension trained identical models.
    from transformers import LlamaConfig

    rope = {"rope_type": "default", "rope_theta": 500000.0}
    LlamaConfig(rope_parameters=rope, num_key_value_heads=2).save_pretrained(tmp_path)
    hf = {"config": str(tmp_path / "config.json")}
    low, high = (tiny("llama", hf=hf, rope_theta=t) for t in (100.0, 1e6))
    plain = tiny("llama", rope_theta=100.0)
    assert torch.equal(inv_freq(low), inv_freq(plain))
    assert not torch.equal(inv_freq(low), inv_freq(high))
    # the build leaves the kept keys as they were: the dumped config validates again
    again = ModelConfig.model_validate(json.loads(low.model_dump_json()))
    assert again.hf.model_extra["rope_parameters"] == {"rope_type": "default"}


def test_head_dim_of_a_config_json_follows_d_model_over_n_head(tmp_path: Path) -> None:
    # Llama's and Mistral's saved files carry head_dim (2048 / 16 = 128); before, it made the
    # proxy's attention 4 heads of 128 on a d_model of 32.
    from transformers import LlamaConfig

    LlamaConfig(hidden_size=2048, num_attention_heads=16, num_key_value_heads=2).save_pretrained(
        tmp_path / "ok"
    )
    cfg = tiny("llama", hf={"config": str(tmp_path / "ok/config.json")})
    assert "head_dim" not in cfg.hf.model_extra
    attn = build_model(cfg, UNIFORM, VOCAB).inner.model.layers[0].self_attn
    assert attn.q_proj.weight.shape == (TINY["d_model"], TINY["d_model"])
    LlamaConfig(hidden_size=2048, num_attention_heads=16, head_dim=64).save_pretrained(
        tmp_path / "odd"
    )
    with pytest.raises(ValueError, match="has head_dim 64, not hidden_size"):
        tiny("llama", hf={"config": str(tmp_path / "odd/config.json")})


@pytest.mark.parametrize("name", ["llama2_7b", "llama3_2_1b"])
def test_hub_config_files_with_rope_scaling_build(name: str) -> None:
    # Llama-2's "rope_scaling": null and Llama-3.2's llama3 rope_scaling dict, as on the Hub;
    # before, both were "not a key of LlamaConfig". transformers 5 reads rope_scaling as
    # rope_parameters; model.rope_theta sets the theta.
    path = ROOT / "tests/hf_configs" / f"{name}.json"
    scaling = json.loads(path.read_text())["rope_scaling"]
    cfg = tiny("llama", hf={"config": str(path)}, n_kv_head=2, rope_theta=1e5)
    assert "rope_scaling" not in cfg.hf.model_extra
    built = build_model(cfg, UNIFORM, VOCAB).inner.config.rope_parameters
    assert built == {**(scaling or {"rope_type": "default"}), "rope_theta": 1e5}


@pytest.mark.parametrize("family", ["llama", "qwen2", "mistral", "qwen3"])
def test_the_mlp_input_of_an_accepted_family_is_its_post_attention_norms_output(
    family: str,
) -> None:
    # what analyze hooks (post_attention_layernorm, mlp) read must be the MLP's input
    model = build_model(tiny("llama", hf={"model_type": family}), UNIFORM, VOCAB)
    seen = {}
    for _, _, norm, mlp in model.mlp_sites():
        norm.register_forward_hook(lambda mod, args, out: seen.setdefault("norm", out))
        mlp.register_forward_pre_hook(lambda mod, args: seen.setdefault("mlp", args[0]))
        break
    model(torch.randint(0, VOCAB, (1, 8)))
    assert torch.equal(seen["norm"], seen["mlp"])


def test_a_config_jsons_grouped_query_attention_is_n_kv_heads_default(tmp_path: Path) -> None:
    from transformers import LlamaConfig

    LlamaConfig(num_attention_heads=16, num_key_value_heads=2).save_pretrained(tmp_path / "gqa")
    cfg = tiny("llama", hf={"config": str(tmp_path / "gqa/config.json")})
    assert cfg.n_kv_head == 2 and cfg.kv_heads == (2,) * TINY["n_layer"]
    assert (
        tiny("llama", hf={"config": str(tmp_path / "gqa/config.json")}, n_kv_head=1).n_kv_head == 1
    )
    LlamaConfig(num_attention_heads=16, num_key_value_heads=4).save_pretrained(tmp_path / "odd")
    with pytest.raises(ValueError, match="num_key_value_heads 4, which does not divide"):
        tiny("llama", hf={"config": str(tmp_path / "odd/config.json")})
