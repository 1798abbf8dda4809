"""Attention read from its own weights (probabilities that reproduce the module's output, exact
entropies of uniform attention, grouped-query heads), and ablations that leave no trace."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from tlmsearch.analysis.probes import (
    ablated,
    ablated_head,
    attention_entropy,
    attention_probs,
    attention_sites,
)
from tlmsearch.config import ModelConfig
from tlmsearch.models import build_model
from tlmsearch.models.common import CausalSelfAttention, Rotary
from tlmsearch.models.gated_attention import GatedSelfAttention

D, T = 32, 12


def values(attn: CausalSelfAttention, x: torch.Tensor) -> torch.Tensor:
    """v (B, nh, T, hs): each query head's key/value head, as ``attend`` repeats them."""
    B = x.size(0)
    h, kv, hs = attn.n_head, attn.n_kv_head, attn.head_dim
    v = attn.qkv(x)[..., (h + kv) * hs :].view(B, T, kv, hs).transpose(1, 2)
    return v.repeat_interleave(h // kv, dim=1)


ATTENTIONS = {
    "multi-head": lambda: CausalSelfAttention(D, 4),
    "grouped 4/2": lambda: CausalSelfAttention(D, 4, 2),
    "grouped 6/1, head 4": lambda: CausalSelfAttention(D, 6, 1, head_dim=4),
    "gated": lambda: GatedSelfAttention(D, 2, n_kv_head=1),
}


@pytest.mark.parametrize("kind", ATTENTIONS)
def test_probabilities_reproduce_the_modules_heads(kind: str) -> None:
    torch.manual_seed(0)
    attn = ATTENTIONS[kind]()
    x, rope = torch.randn(3, T, D), Rotary(attn.head_dim)(T)
    with torch.no_grad():
        p = attention_probs(attn, x, rope)  # (B, nh, T, T)
        y = attn.attend(x, rope)  # (B, T, nh, hs)
        got = (p @ values(attn, x)).transpose(1, 2)
    assert p.shape == (3, attn.n_head, T, T)
    assert torch.allclose(got, y, atol=1e-5)
    assert torch.allclose(p.sum(-1), torch.ones(3, attn.n_head, T), atol=1e-5)
    assert (p.triu(1) == 0).all()  # causal: nothing from later positions
    entropy = -(p * p.clamp_min(1e-30).log()).sum(-1)
    assert torch.allclose(attention_entropy(attn, x, rope), entropy, atol=1e-5)


def test_uniform_attention_has_the_entropy_log_t_plus_one() -> None:
    """q = 0: every score is 0, so position t spreads evenly over its t + 1 keys."""
    attn = CausalSelfAttention(D, 4, 2)
    with torch.no_grad():
        attn.qkv.weight[: 4 * attn.head_dim].zero_()
    x = torch.randn(2, T, D)
    h = attention_entropy(attn, x, Rotary(attn.head_dim)(T))
    want = torch.log(torch.arange(1, T + 1, dtype=torch.float32)).expand(2, 4, T)
    assert torch.allclose(h, want, atol=1e-6)
    assert math.isclose(h.mean().item(), math.lgamma(T + 1) / T, rel_tol=1e-6)


def test_query_head_i_reads_key_head_i_over_group() -> None:
    """Key head 0 zeroed: query heads 0-2 (group 3) attend uniformly, heads 3-5 do not."""
    torch.manual_seed(1)
    attn = CausalSelfAttention(D, 6, 2, head_dim=8)
    with torch.no_grad():
        attn.qkv.weight.mul_(20)  # sharp attention where the keys are not zero
        k0 = 6 * 8  # the k rows start after the q rows
        attn.qkv.weight[k0 : k0 + 8].zero_()
    h = attention_entropy(attn, torch.randn(2, T, D), Rotary(8)(T)).mean((0, 2))
    uniform = math.lgamma(T + 1) / T
    assert torch.allclose(h[:3], torch.full((3,), uniform), atol=1e-6)
    assert (h[3:] < uniform - 0.1).all()


def tiny(**kw) -> torch.nn.Module:
    cfg = ModelConfig(**{**dict(n_layer=2, d_model=D, n_head=2, d_ff=64, multiple_of=16), **kw})
    return build_model(cfg, [96, 32], 256, seed=0).eval()


def test_ablated_zeroes_the_output_and_leaves_no_hook() -> None:
    model = tiny()
    attn = model.blocks[0].mixers[0]
    idx = torch.randint(0, 256, (2, T))
    x = torch.randn(2, T, D)
    with torch.no_grad(), ablated(attn):
        assert (attn(x, model.rotary(T)) == 0).all()
    assert not attn._forward_hooks
    with pytest.raises(RuntimeError, match="inside"), ablated(attn):
        raise RuntimeError("inside")
    assert not attn._forward_hooks
    with torch.no_grad():
        assert torch.equal(model(idx), tiny()(idx))  # same seed, untouched


def test_ablated_head_equals_zeroing_its_output_columns() -> None:
    model = tiny(n_head=4, n_kv_head=2, layer_heads=[4, 2])
    idx = torch.randint(0, 256, (2, T))
    for layer, attn in attention_sites(model):
        for head in range(attn.n_head):
            zeroed = copy.deepcopy(model)
            hs = attn.head_dim
            with torch.no_grad():
                zeroed.blocks[layer].mixers[0].proj.weight[:, head * hs : (head + 1) * hs] = 0
                with ablated_head(attn, head):
                    got = model(idx)
                assert torch.allclose(got, zeroed(idx), atol=1e-6)
        assert not attn.proj._forward_pre_hooks
    first = attention_sites(model)[0][1]
    with (
        pytest.raises(ValueError, match=r"head must be in \[0, 4\), but got head=4"),
        ablated_head(first, 4),
    ):
        pass


@pytest.mark.parametrize(
    ("arch", "extra", "layers"),
    [
        ("transformer", {}, [0, 1]),
        ("gated_attention", {}, [0, 1]),
        ("hope_attention", {"hope": {"levels": 2, "periods": [1, 2]}}, [0, 1]),
        ("titans", {"titans": {"chunk_size": 4, "with_attention": True}}, [0, 1]),
        ("titans", {"titans": {"chunk_size": 4, "with_attention": False}}, []),
    ],
)
def test_attention_sites(arch: str, extra: dict, layers: list[int]) -> None:
    sites = attention_sites(tiny(arch=arch, **extra))
    assert [layer for layer, _ in sites] == layers
    assert all(isinstance(a, CausalSelfAttention) for _, a in sites)
