"""Per-layer attention heads and grouped-query attention: the models build what
budget.py counts, GQA is MHA with shared key/value heads, and a head's initial weights do not
depend on how many heads its layer has (common random numbers across heads schedules)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from tlmsearch.config import ModelConfig
from tlmsearch.models import build_model
from tlmsearch.models.common import CausalSelfAttention
from tlmsearch.models.gated_attention import GatedSelfAttention

VOCAB = 256
HEADED = ("transformer", "gated_attention")  # the archs whose spec has heads=True
HS = 8  # head size of every config below: d_model 32 / n_head 4


def tiny(arch: str = "transformer", **kw) -> ModelConfig:
    base = dict(arch=arch, n_layer=2, d_model=32, n_head=4, d_ff=64, multiple_of=16)
    return ModelConfig(**{**base, **kw})


def _attn(model: nn.Module, layer: int) -> CausalSelfAttention:
    return model.blocks[layer].mixers[0]


@pytest.mark.parametrize("arch", HEADED)
@pytest.mark.parametrize(
    "kw",
    [{"layer_heads": [2, 6]}, {"n_kv_head": 2, "layer_heads": [6, 2]}, {"n_kv_head": 1}],
    ids=["heads", "heads+gqa", "mqa"],
)
def test_layers_are_built_with_their_heads_and_train(arch: str, kw: dict) -> None:
    cfg = tiny(arch, **kw)
    model = build_model(cfg, (96, 32), VOCAB, seed=1)
    for layer, (h, kv) in enumerate(zip(cfg.heads, cfg.kv_heads, strict=True)):
        att = _attn(model, layer)
        assert (att.n_head, att.n_kv_head, att.head_dim) == (h, kv, HS)
        assert att.qkv.weight.shape == ((h + 2 * kv) * HS, 32)
        assert att.proj.weight.shape == (32, h * HS)
        if arch == "gated_attention":
            assert att.gate.weight.shape == (h * HS, 32)
    idx = torch.randint(0, VOCAB, (2, 12))
    logits = model(idx)
    assert logits.shape == (2, 12, VOCAB)
    targets = torch.randint(0, VOCAB, (2, 12))
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
    assert abs(loss.item() - math.log(VOCAB)) < 0.1
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().sum() > 0, name


@pytest.mark.parametrize("arch", HEADED)
def test_explicit_uniform_heads_build_exactly_the_plain_model(arch: str) -> None:
    """layer_heads all n_head (and n_kv_head = n_head) is the model without them, bit for bit."""
    plain = build_model(tiny(arch), (96, 32), VOCAB, seed=5)
    idx = torch.randint(0, VOCAB, (2, 10))
    for kw in ({"layer_heads": [4, 4]}, {"n_kv_head": 4}, {"layer_heads": [4, 4], "n_kv_head": 4}):
        same = build_model(tiny(arch, **kw), (96, 32), VOCAB, seed=5)
        want = plain.state_dict()
        assert list(same.state_dict()) == list(want)
        assert all(torch.equal(v, want[k]) for k, v in same.state_dict().items())
        assert torch.equal(same(idx), plain(idx))


def _as_mha(att: CausalSelfAttention) -> CausalSelfAttention:
    """The multi-head attention that ``att`` (grouped-query) stands for: every key/value head's
    rows copied for each query head of its group, head i reading kv head i // group."""
    h, kv, hs = att.n_head, att.n_kv_head, att.head_dim
    d = att.qkv.in_features
    mha = CausalSelfAttention(d, h, head_dim=hs)
    q, k, v = att.qkv.weight.detach().split((h * hs, kv * hs, kv * hs))
    k, v = (t.view(kv, hs, d).repeat_interleave(h // kv, dim=0).reshape(h * hs, d) for t in (k, v))
    with torch.no_grad():
        mha.qkv.weight.copy_(torch.cat((q, k, v)))
        mha.proj.weight.copy_(att.proj.weight)
    return mha


@pytest.mark.parametrize("kv", [1, 2])
def test_grouped_query_attention_is_mha_with_duplicated_key_value_heads(kv: int) -> None:
    model = build_model(tiny(n_kv_head=kv), (64, 64), VOCAB, seed=2)
    att = _attn(model, 0)
    assert att.qkv.weight.size(0) == (4 + 2 * kv) * HS  # the k/v weights really are fewer
    x = torch.randn(2, 9, 32)
    rope = model.rotary(9)
    torch.testing.assert_close(att(x, rope), _as_mha(att)(x, rope), rtol=1e-5, atol=1e-6)
    # and the grouping is Llama's repeat_kv (i // group), not tiling (i % group)
    h, hs = 4, HS
    tiled = _as_mha(att)
    with torch.no_grad():
        k = att.qkv.weight[h * hs : (h + kv) * hs]
        tiled.qkv.weight[h * hs : 2 * h * hs] = (
            k.view(kv, hs, 32).repeat(h // kv, 1, 1).flatten(0, 1)
        )
    if kv > 1:
        assert not torch.allclose(att(x, rope), tiled(x, rope), rtol=1e-4, atol=1e-5)


def test_gated_gqa_layer_gates_its_own_heads() -> None:
    """The gate follows the layer's query heads: headwise has one row per head."""
    att = GatedSelfAttention(32, 6, "headwise", n_kv_head=3, head_dim=HS)
    assert att.gate.weight.shape == (6, 32) and att.proj.in_features == 6 * HS
    x = torch.randn(1, 5, 32)
    rope = (torch.ones(5, HS // 2), torch.zeros(5, HS // 2))
    assert att(x, rope).shape == (1, 5, 32)
    with pytest.raises(ValueError, match="n_kv_head"):
        CausalSelfAttention(32, 6, n_kv_head=4, head_dim=HS)


# -------------------------------------------------------------------------------------------------
# Keyed init per head: candidates of a seed share the heads they have in common


@st.composite
def _two_layouts(draw: st.DrawFn) -> tuple[int, int, int, int]:
    """(n_kv_head, heads of the narrow layer, heads of the wide one, the other layer's heads)."""
    kv = draw(st.sampled_from([4, 2, 1]))
    group = 4 // kv
    h = group * draw(st.integers(1, 4))
    wider = h + group * draw(st.integers(1, 4))
    other = group * draw(st.integers(1, 3))
    return kv, h, wider, other


def _head_rows(att: CausalSelfAttention, part: str, heads: int) -> torch.Tensor:
    """The rows of the first ``heads`` heads of section q, k or v of ``att.qkv``."""
    h, kv, hs = att.n_head, att.n_kv_head, att.head_dim
    start = {"q": 0, "k": h * hs, "v": (h + kv) * hs}[part]
    return att.qkv.weight[start : start + heads * hs]


@settings(max_examples=25, deadline=None)
@given(layouts=_two_layouts(), arch=st.sampled_from(HEADED), seed=st.integers(0, 2**16))
def test_a_head_has_the_same_initial_weights_whatever_its_layers_heads(
    layouts: tuple[int, int, int, int], arch: str, seed: int
) -> None:
    """Layer 0 with h and with h' > h heads, one seed: the first h heads' q rows, the common
    key/value heads' k and v rows, proj columns and gate rows are equal; layer 1 (the same heads
    in both) and everything else equal; the MLPs share their common units as before."""
    kv, h, wider, other = layouts
    narrow_cfg = tiny(arch, n_kv_head=kv, layer_heads=[h, other])
    wide_cfg = tiny(arch, n_kv_head=kv, layer_heads=[wider, other])
    narrow = build_model(narrow_cfg, (96, 32), VOCAB, seed=seed)
    wide = build_model(wide_cfg, (64, 64), VOCAB, seed=seed)
    a, b = _attn(narrow, 0), _attn(wide, 0)
    group = 4 // kv
    for part, heads in (("q", h), ("k", h // group), ("v", h // group)):
        assert torch.equal(_head_rows(a, part, heads), _head_rows(b, part, heads)), part
    assert torch.equal(a.proj.weight, b.proj.weight[:, : h * HS])
    if arch == "gated_attention":
        assert torch.equal(a.gate.weight, b.gate.weight[: a.gate.weight.size(0)])
    pa, pb = dict(narrow.named_parameters()), dict(wide.named_parameters())
    for name, p in pa.items():
        if ".blocks.0.mixers." in f".{name}":
            continue
        q = pb[name]
        if ".mlps." in name:  # MLP units: rows of w1/w3, columns of w2
            dim = 1 if name.endswith("w2.weight") else 0
            k = min(p.size(dim), q.size(dim))
            p, q = p.narrow(dim, 0, k), q.narrow(dim, 0, k)
        assert torch.equal(p, q), name


def test_query_heads_do_not_depend_on_the_key_value_heads() -> None:
    """q rows and proj columns are keyed apart from k and v: MHA and GQA models of a seed
    share them; the k/v heads they have in common too."""
    mha = _attn(build_model(tiny(), (64, 64), VOCAB, seed=3), 0)
    gqa = _attn(build_model(tiny(n_kv_head=2), (64, 64), VOCAB, seed=3), 0)
    assert torch.equal(_head_rows(mha, "q", 4), _head_rows(gqa, "q", 4))
    assert torch.equal(mha.proj.weight, gqa.proj.weight)
    for part in "kv":
        assert torch.equal(_head_rows(mha, part, 2), _head_rows(gqa, part, 2)), part
    # the sections are distinct draws (not one stream cut three ways)
    assert not torch.equal(_head_rows(mha, "q", 1), _head_rows(mha, "k", 1))


def test_attention_matrices_are_not_tagged_as_mlp_units() -> None:
    """muP and trial arrays read ``unit_dim`` as "an MLP matrix": attention must not carry it."""
    from tlmsearch.train.trial_array import unit_dims

    model = build_model(tiny("gated_attention", layer_heads=[2, 6]), (96, 32), VOCAB)
    dims = unit_dims(model)
    assert dims and all(".mlps." in name for name in dims)
    assert all(
        getattr(m, "head_units", None) is None
        for name, m in model.named_modules()
        if ".mlps." in name
    )
