"""The chunked next-token loss (tlmsearch/train/loss.py): the unchunked loss and gradients, in
pieces."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.config import ModelConfig
from tlmsearch.models import build_model
from tlmsearch.train.loss import linear_cross_entropy, next_token_nll, nll_sum

TINY = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 40), st.integers(1, 50), st.integers(2, 70), st.integers(0, 2**16))
def test_chunked_loss_and_grads_equal_the_unchunked_ones(
    n: int, chunk: int, vocab: int, seed: int
) -> None:
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, 8, generator=g, requires_grad=True)
    w = torch.randn(vocab, 8, generator=g, requires_grad=True)
    y = torch.randint(0, vocab, (n,), generator=g)
    want = F.cross_entropy(F.linear(h, w), y)
    want_h, want_w = torch.autograd.grad(3.0 * want, (h, w))  # a scale: backward multiplies
    got = linear_cross_entropy(h, w, y, chunk)
    got_h, got_w = torch.autograd.grad(3.0 * got, (h, w))
    assert torch.allclose(got, want, rtol=1e-6, atol=1e-6)
    assert torch.allclose(got_h, want_h, rtol=1e-4, atol=1e-6)  # fp32: softmax - 1 cancels
    assert torch.allclose(got_w, want_w, rtol=1e-4, atol=1e-6)  # fp32: softmax - 1 cancels


def test_the_model_loss_is_the_loss_of_its_logits_with_tied_weights() -> None:
    """Through the model (the head tied to the embedding): loss and every gradient, fp32."""
    torch.manual_seed(0)
    x, y = torch.randint(0, 96, (3, 16)), torch.randint(0, 96, (3, 16))
    grads = []
    for chunked in (False, True):
        model = build_model(TINY, (64, 48), 96, seed=1)
        assert model.lm_head.weight is model.wte.weight
        if chunked:
            loss = next_token_nll(model, x, y)
        else:
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        grads.append((loss.detach(), {n: p.grad for n, p in model.named_parameters()}))
    (plain, plain_g), (chunk, chunk_g) = grads
    assert torch.allclose(chunk, plain, rtol=1e-6)
    assert plain_g.keys() == chunk_g.keys()
    for name, g in plain_g.items():
        assert torch.allclose(chunk_g[name], g, rtol=1e-4, atol=1e-7), name


def test_chunks_smaller_than_the_batch_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a chunk of 5 tokens, no logits tensor holds more than 5 rows."""
    import tlmsearch.train.loss as loss_mod

    monkeypatch.setattr(loss_mod, "CHUNK_TOKENS", 5)
    rows: list[int] = []
    real = F.linear

    def linear(a: torch.Tensor, b: torch.Tensor, *rest: object) -> torch.Tensor:
        out = real(a, b, *rest)
        if out.size(-1) == 97:  # logits (tokens, vocab)
            rows.append(out.flatten(0, -2).size(0))
        return out

    monkeypatch.setattr(loss_mod.F, "linear", linear)
    model = build_model(TINY, (64, 48), 97, seed=1)
    x, y = torch.randint(0, 97, (2, 16)), torch.randint(0, 97, (2, 16))
    loss_mod.next_token_nll(model, x, y).backward()
    total = nll_sum(model, x, y)
    assert rows and max(rows) == 5 and sum(rows) == 2 * 32  # training, then eval: 32 tokens each
    monkeypatch.setattr(loss_mod.F, "linear", real)
    want = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")
    assert torch.allclose(total, want, rtol=1e-6)


def test_a_model_without_hidden_states_gets_the_plain_loss() -> None:
    class Logits(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(10, 10)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.emb(x)

    m = Logits()
    x, y = torch.randint(0, 10, (2, 4)), torch.randint(0, 10, (2, 4))
    want = F.cross_entropy(m(x).flatten(0, 1), y.flatten())
    assert torch.equal(next_token_nll(m, x, y), want)
    assert torch.allclose(nll_sum(m, x, y), want * 8)
