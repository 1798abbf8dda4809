"""budget: analytic parameters and FLOPs equal the built models'; tapering keeps them exactly."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.config import ARCHS, ModelConfig
from tlmsearch.widths.budget import count_params, flops_per_token, mlp_params, non_embedding_params
from tlmsearch.widths.schedules import ScheduleError, plan_widths, uniform_widths

VOCAB = 256
ROOT = Path(__file__).resolve().parent.parent


def tiny(arch: str, **kw) -> ModelConfig:
    base = dict(n_layer=2, d_model=32, n_head=2, d_ff=64, titans={"chunk_size": 4})
    return ModelConfig(arch=arch, **{**base, **kw})


def test_budget_imports_no_torch() -> None:
    code = "import sys, tlmsearch.widths.budget; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("widths", [(64, 64), (112, 16)])
@pytest.mark.parametrize("seq_len", [8, 16])
def test_forward_flops_equal_torch_flop_counter(arch: str, widths, seq_len: int) -> None:
    """Every matmul of the forward pass, counted by torch.utils.flop_counter (SDPA through its
    math backend, which the counter sees as two batched matmuls)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from tlmsearch.models import build_model

    cfg = tiny(arch)
    model = build_model(cfg, widths, VOCAB)
    idx = torch.randint(0, VOCAB, (3, seq_len))
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        model(idx)
    flops = flops_per_token(cfg, widths, VOCAB, seq_len)
    assert fc.get_total_flops() == flops.forward * idx.numel()
    assert flops.training == 3 * flops.forward
    assert flops.forward == flops.dense + flops.attention + flops.memory


def test_titans_flops_round_up_when_the_last_chunk_is_padded() -> None:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from tlmsearch.models import build_model

    cfg = tiny("titans", titans={"chunk_size": 4, "with_attention": False})
    model = build_model(cfg, (64, 64), VOCAB)
    idx = torch.randint(0, VOCAB, (1, 10))  # chunks 4 + 4 + 2 (padded to 4)
    with torch.no_grad(), FlopCounterMode(display=False) as fc:
        model(idx)
    per_token = fc.get_total_flops() / idx.numel()
    forward = flops_per_token(cfg, (64, 64), VOCAB, 10).forward
    assert per_token <= forward < per_token + 1


def test_counts_by_hand_for_a_transformer() -> None:
    cfg = tiny("transformer")
    d, v = 32, VOCAB
    per_layer = 4 * d * d + 2 * d  # attention, two norm gains
    count = count_params(cfg, (96, 32), v)
    assert count.mlp == 3 * d * (96 + 32) == mlp_params(cfg, (96, 32))
    assert count.non_embedding == 2 * per_layer + count.mlp + d  # + final norm
    assert count.embedding == v * d
    untied = count_params(tiny("transformer", tie_embeddings=False), (96, 32), v)
    assert untied.embedding == 2 * v * d and untied.non_embedding == count.non_embedding
    flops = flops_per_token(cfg, (96, 32), v, seq_len=16)
    assert flops.dense == 2 * (2 * 4 * d * d + count.mlp + d * v)
    assert flops.attention == 2 * 4 * d * 16
    assert flops.mlp == 2 * count.mlp and flops.head == 2 * d * v
    assert flops.dense == flops.mlp + flops.head + 2 * 2 * 4 * d * d


def test_hope_counts_every_level_of_the_continuum_memory() -> None:
    cfg = tiny("hope_attention", hope={"levels": 3, "periods": [1, 2, 4]})
    assert mlp_params(cfg, (96, 32)) == 3 * 3 * 32 * (96 + 32)


@settings(max_examples=60, deadline=None)
@given(
    arch=st.sampled_from(ARCHS),
    n_layer=st.integers(2, 12),
    units=st.integers(2, 16),
    shape=st.sampled_from(["linear", "cosine", "sigmoid"]),
    r_start=st.floats(1.05, 1.9),
    seq_len=st.sampled_from([16, 100, 256]),
    vocab=st.integers(2, 5000),
)
def test_taper_has_exactly_the_uniform_params_and_flops(
    arch, n_layer, units, shape, r_start, seq_len, vocab
) -> None:
    """The paper's claim, exactly: no extra parameters or compute at any budget-exact taper."""
    d_ff = 16 * units
    cfg = ModelConfig(arch=arch, n_layer=n_layer, d_model=64, n_head=4, d_ff=d_ff)
    try:
        taper = plan_widths(shape, n_layer=n_layer, d_ff=d_ff, multiple_of=16, r_start=r_start)
    except ScheduleError:
        return  # a request the rounding cannot meet is the schedules' business, tested there
    uniform = uniform_widths(n_layer, d_ff)
    assert count_params(cfg, taper.widths, vocab) == count_params(cfg, uniform, vocab)
    assert flops_per_token(cfg, taper.widths, vocab, seq_len) == flops_per_token(
        cfg, uniform, vocab, seq_len
    )
    assert non_embedding_params(cfg, taper.widths) == non_embedding_params(cfg, uniform)


@settings(max_examples=40, deadline=None)
@given(arch=st.sampled_from(ARCHS), extra=st.integers(1, 64), seq_len=st.integers(1, 512))
def test_counts_grow_with_width_and_context(arch, extra, seq_len) -> None:
    cfg = tiny(arch)
    small, wide = (64, 64), (64 + extra, 64)
    grown = count_params(cfg, wide, VOCAB).total - count_params(cfg, small, VOCAB).total
    assert grown == mlp_params(cfg, wide) - mlp_params(cfg, small)
    assert grown % (3 * 32 * extra) == 0 and grown > 0
    shorter = flops_per_token(cfg, small, VOCAB, seq_len).forward
    assert flops_per_token(cfg, small, VOCAB, seq_len + 16).forward >= shorter


def test_bad_arguments_are_value_errors() -> None:
    cfg = tiny("transformer")
    with pytest.raises(ValueError, match="widths has 1 entries"):
        count_params(cfg, (64,), VOCAB)
    with pytest.raises(ValueError, match="vocab_size"):
        count_params(cfg, (64, 64), 1)
    with pytest.raises(ValueError, match="seq_len"):
        flops_per_token(cfg, (64, 64), VOCAB, 0)


@pytest.mark.parametrize("arch", ARCHS)
def test_validate_table_shows_exact_totals_for_every_arch(arch: str) -> None:
    from rich.console import Console

    from tlmsearch.config import load_study
    from tlmsearch.config.summary import candidates_table

    cfg = load_study(ROOT / "studies/quickstart.yaml", [f"model.arch={arch}"])
    console = Console(width=200, record=True)
    console.print(candidates_table(cfg, cfg.model, title="proxy"))
    text = console.export_text()
    title = " ".join(text.split())  # the title wraps at the table's width
    widths = uniform_widths(cfg.model.n_layer, cfg.model.d_ff_uniform)
    count = count_params(cfg.model, widths, cfg.vocab_size)
    assert f"total params {count.total:,}" in title
    assert f"non-embedding {count.non_embedding:,}" in title
    rows = [line for line in text.splitlines() if "->" in line]
    assert len(rows) == len(cfg.candidates())
    assert all(f"{count.total:,}" in r and r.rstrip(" │").endswith("equal") for r in rows)
    flops = flops_per_token(cfg.model, widths, cfg.vocab_size, cfg.data.seq_len)
    assert (
        f"the MLPs (what a taper moves) take {flops.mlp / flops.forward:.0%}, "
        f"the LM head {flops.head / flops.forward:.0%}"
    ) in title


def test_validate_table_without_a_known_vocabulary_shows_non_embedding() -> None:
    from rich.console import Console

    from tlmsearch.config import load_study
    from tlmsearch.config.summary import candidates_table

    cfg = load_study(
        ROOT / "studies/quickstart.yaml",
        ["data.tokenizer.kind=file", "data.tokenizer.path=tok.json"],
    )
    assert cfg.vocab_size is None
    console = Console(width=200, record=True)
    console.print(candidates_table(cfg, cfg.model, title="proxy"))
    text = console.export_text()
    widths = uniform_widths(cfg.model.n_layer, cfg.model.d_ff_uniform)
    title = " ".join(text.split())
    assert "vocabulary from the data" in title
    assert f"non-embedding {non_embedding_params(cfg.model, widths):,}" in title
    assert all(line.rstrip(" │").endswith("equal") for line in text.splitlines() if "->" in line)


# -------------------------------------------------------------------------------------------------
# Per-layer heads and grouped-query attention: the models build what the counts say

HEADS_CFGS = [
    {"layer_heads": [2, 6]},
    {"n_kv_head": 2, "layer_heads": [6, 2]},
    {"n_kv_head": 1},
    {"n_kv_head": 2, "layer_heads": [8, 2], "gated_attention": {"gate": "headwise"}},
]


def _flop_count(model, idx) -> int:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
        model(idx)
    return fc.get_total_flops()


@pytest.mark.parametrize("arch", ["transformer", "gated_attention"])
@pytest.mark.parametrize("kw", HEADS_CFGS, ids=["heads", "heads+gqa", "mqa", "headwise+gqa"])
def test_heads_and_gqa_counts_equal_the_built_model(arch: str, kw: dict) -> None:
    """Parameters (sum of numel) and forward FLOPs (torch.utils.flop_counter) of models with
    per-layer heads and fewer key/value heads are budget's, term by term."""
    import torch

    from tlmsearch.models import build_model

    cfg = tiny(arch, n_head=4, **kw)
    widths = (96, 32)
    for tie in (True, False):
        c = cfg.model_copy(update={"tie_embeddings": tie})
        model = build_model(c, widths, VOCAB)
        count = count_params(c, widths, VOCAB)
        assert count.total == sum(p.numel() for p in model.parameters())
        assert count.mlp == sum(p.numel() for b in model.blocks for p in b.mlps.parameters())
    idx = torch.randint(0, VOCAB, (2, 12))
    assert _flop_count(model, idx) == flops_per_token(cfg, widths, VOCAB, 12).forward * idx.numel()


@pytest.mark.parametrize("hold", ["params", "flops"])
@pytest.mark.parametrize("arch", ["transformer", "gated_attention"])
def test_a_planned_heads_candidate_builds_uniforms_budget_exactly(hold: str, arch: str) -> None:
    """heads.share moves capacity between attention and the MLPs at the held budget: the built
    model of such a candidate has uniform's parameters (hold params) or its counted forward
    FLOPs (hold flops), measured on the models themselves."""
    import torch

    from tlmsearch.models import build_model

    cfg = ModelConfig(
        arch=arch,
        n_layer=4,
        d_model=32,
        n_head=4,
        n_kv_head=2,
        d_ff=64,
        attention={"hold": hold, "seq_len": 16},
    )
    idx = torch.randint(0, VOCAB, (1, 16))
    measured = {}
    for share in (1.0, 0.5, 1.5):
        candidate = {"shape": "uniform", "heads.share": share}
        plan = cfg.plan(candidate)
        model = build_model(cfg.built_for(candidate), plan.widths, VOCAB)
        measured[share] = (sum(p.numel() for p in model.parameters()), _flop_count(model, idx))
    assert measured[0.5] != measured[1.0] != measured[1.5]  # capacity did move
    k = 0 if hold == "params" else 1
    assert measured[0.5][k] == measured[1.0][k] == measured[1.5][k], measured
