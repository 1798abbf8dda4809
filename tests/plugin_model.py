"""A plugin model for the tests (``model.arch: "plugin_model:build"``, tests/ on the path): a
small pre-norm causal LM written without tlmsearch, as a user's own code would be; and plugins
that break the protocol in one way each."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d: int, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(d, width)  # biases: a plugin need not be bias-free
        self.down = nn.Linear(width, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Layer(nn.Module):
    def __init__(self, d: int, n_head: int, width: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.out = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = MLP(d, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.n_head, C // self.n_head).unbind(2)
        y = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), is_causal=True)
        x = x + self.out(y.transpose(1, 2).reshape(B, T, C))
        return x + self.mlp(self.ln2(x))


class TinyLM(nn.Module):
    def __init__(self, d: int, n_head: int, widths: list[int], vocab_size: int) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab_size, d)
        self.pos = nn.Embedding(1024, d)
        self.layers = nn.ModuleList(Layer(d, n_head, w) for w in widths)
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.size(1), device=idx.device)
        x = self.emb(idx) + self.pos(pos)  # (B, T, d)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.ln_f(x))

    def mlp_layers(self) -> list[tuple[nn.Module, nn.Module]]:
        return [(layer.ln2, layer.mlp) for layer in self.layers]


def build(model_cfg, widths: list[int], vocab_size: int) -> TinyLM:
    return TinyLM(model_cfg.d_model, model_cfg.n_head, widths, vocab_size)


def not_a_module(model_cfg, widths, vocab_size):
    return {"d": model_cfg.d_model}


def no_mlp_layers(model_cfg, widths, vocab_size):
    return nn.Linear(model_cfg.d_model, vocab_size)


def one_site_short(model_cfg, widths, vocab_size):
    model = build(model_cfg, widths, vocab_size)
    model.mlp_layers = lambda: [(model.layers[0].ln2, model.layers[0].mlp)]
    return model


def wrong_logits(model_cfg, widths, vocab_size):
    model = build(model_cfg, widths, vocab_size)
    model.head = nn.Linear(model_cfg.d_model, 3, bias=False)
    return model


def raises(model_cfg, widths, vocab_size):
    raise RuntimeError("out of ideas")


NOT_CALLABLE = 3
