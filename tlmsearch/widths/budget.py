"""Parameters and FLOPs per token, counted analytically from a model config and its widths.

No torch: ``tlmsearch validate`` uses it to show that every schedule keeps the budget exactly.
The counts mirror :mod:`tlmsearch.models` term by term; tests check them against the built
models (``sum(p.numel())``) and against ``torch.utils.flop_counter`` for every architecture.

>>> from tlmsearch.config import ModelConfig
>>> cfg = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64)
>>> count_params(cfg, [96, 32], vocab_size=256).total == count_params(cfg, [64, 64], 256).total
True
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # annotations only: the config plans heads with these counts (heads.py)
    from tlmsearch.config import ModelConfig


@dataclass(frozen=True)
class ParamCount:
    """Parameter counts. ``embedding`` is the token embedding plus an untied LM head;
    ``non_embedding = total - embedding`` (Kaplan et al. 2020, arXiv 2001.08361);
    ``mlp`` is every SwiGLU MLP weight (the part that tapering moves between layers)."""

    total: int
    non_embedding: int
    mlp: int
    embedding: int


@dataclass(frozen=True)
class FlopCount:
    """FLOPs per token (a multiply-add is 2 FLOPs).

    ``dense``: 2 x the weights of every projection a token passes through, LM head included.
    ``attention``: q.k and attention x v of causal softmax attention, counted over the full
    T x T square as ``F.scaled_dot_product_attention`` is counted by ``torch.utils.flop_counter``
    (the PaLM convention, arXiv 2204.02311): 4 * head_dim * seq_len per softmax attention head
    (4 * d_model * seq_len per layer of n_head heads).
    ``memory``: the Titans memory (reads, and writes: forward, closed-form gradients).
    ``mlp`` and ``head`` are the parts of ``dense`` spent in the MLPs (what a taper moves between
    layers) and in the LM head: at proxy sizes the head can outweigh the MLPs.
    ``forward`` is dense + attention + memory; ``training = 3 * forward`` (backward costs twice
    the forward, the convention behind 6N and MFU; the Titans write's second-order backward
    costs more than that, so its MFU is conservative). Norms, activations and softmax are not
    counted.
    """

    dense: int
    attention: int
    memory: int
    forward: int
    training: int
    mlp: int
    head: int


def _external(model: ModelConfig, widths: Sequence[int], vocab: int, seq_len: int = 1) -> dict:
    """hf and plugin models are counted on the model they build (on the meta device), not
    analytically: their code is not ours (models/external.py). Imports torch."""
    from tlmsearch.models.counting import built_counts

    return built_counts(model, widths, vocab, seq_len)


def _is_external(model: ModelConfig) -> bool:
    return model.arch == "hf" or ":" in model.arch  # a transformers family or a plugin


# hf and plugin parts that do not depend on the vocabulary are read at this size
_ANY_VOCAB = 256


def mlp_params(model: ModelConfig, widths: Sequence[int]) -> int:
    """Weights of all MLPs: a SwiGLU MLP of width w has 3 * d_model * w (no biases);
    hope_attention has ``hope.levels`` such MLPs per layer."""
    if _is_external(model):
        return _external(model, widths, _ANY_VOCAB)["mlp"]
    return _mlps_per_layer(model) * 3 * model.d_model * sum(widths)


def _mlps_per_layer(model: ModelConfig) -> int:
    return model.hope.levels if model.arch == "hope_attention" else 1


def memory_dims(head_dim: int, depth: int, expansion: int) -> list[int]:
    """Layer sizes of a Titans memory MLP: head_dim -> hidden ... -> head_dim."""
    hidden = expansion * head_dim
    return [head_dim] + [hidden] * (depth - 1) + [head_dim]


def _memory_dims(model: ModelConfig) -> list[int]:
    opt = model.titans
    return memory_dims(model.head_dim, opt.memory_depth, opt.memory_expansion)


def attention_weights(model: ModelConfig, heads: int) -> int:
    """Projection weights of one attention layer with ``heads`` query heads of size head_dim:
    q and the output projection (heads x head_dim each), k and v (heads / kv_group each).

    >>> from tlmsearch.config import ModelConfig
    >>> cfg = ModelConfig(n_layer=2, d_model=32, n_head=4, n_kv_head=2, d_ff=64)
    >>> attention_weights(cfg, 4), attention_weights(cfg, 2)  # d 32 x hd 8 x (2h + 2h/2)
    (3072, 1536)
    """
    kv = heads // model.kv_group
    return model.d_model * model.head_dim * (2 * heads + 2 * kv)


def _attention_mixer(model: ModelConfig, heads: int) -> tuple[int, int, int]:
    attention = attention_weights(model, heads)
    return model.d_model + attention, attention, heads  # + the mixer's norm gain


def _gated_mixer(model: ModelConfig, heads: int) -> tuple[int, int, int]:
    d, attention = model.d_model, attention_weights(model, heads)
    gate = d * (heads if model.gated_attention.gate == "headwise" else heads * model.head_dim)
    return d + attention + gate, attention + gate, heads


def _titans_mixer(model: ModelConfig, heads: int) -> tuple[int, int, int]:
    d, h = model.d_model, model.n_head  # the memory's heads: never scheduled
    attention = 4 * d * d
    dims = _memory_dims(model)
    memory_init = h * sum(a * b for a, b in pairwise(dims))  # W_0 per head
    gates = 3 * h * (d + 1)  # theta, eta, alpha logits: weights and biases
    params = d + 4 * d * d + gates + memory_init  # norm, q/k/v/output, gates, W_0
    linear, n_attn = 4 * d * d + 3 * h * d, 0
    if model.titans.with_attention:  # MAL: + a norm and an attention layer
        params, linear, n_attn = params + d + attention, linear + attention, h
    return params, linear, n_attn


# Architecture name -> for one layer with ``heads`` query heads, outside the MLPs: (parameters,
# projection weights a token uses, softmax attention heads). One entry per
# tlmsearch.config.model.ARCH_SPECS (tests/test_models.py); only an arch whose spec has
# ``heads`` gets other than model.n_head.
MIXERS: dict[str, Callable[[ModelConfig, int], tuple[int, int, int]]] = {
    "transformer": _attention_mixer,
    "gated_attention": _gated_mixer,
    "titans": _titans_mixer,
    "hope_attention": _attention_mixer,  # its CMS levels are MLPs: counted with the widths
}


def _mixers(model: ModelConfig) -> tuple[int, int, int]:
    """Summed over the layers, outside the MLPs: (parameters, projection weights a token uses,
    softmax attention heads)."""
    if model.arch not in MIXERS:
        raise ValueError(f"model.arch: {model.arch!r} is unknown")
    layers = [MIXERS[model.arch](model, h) for h in model.heads]
    return tuple(sum(x) for x in zip(*layers, strict=True))  # type: ignore[return-value]


def _check(model: ModelConfig, widths: Sequence[int], vocab_size: int) -> None:
    if len(widths) != model.n_layer:
        raise ValueError(f"widths has {len(widths)} entries but model.n_layer is {model.n_layer}")
    if vocab_size < 2:
        raise ValueError(f"vocab_size must be >= 2, but got {vocab_size=}")


def non_embedding_params(model: ModelConfig, widths: Sequence[int]) -> int:
    """Parameters outside the token embedding and LM head (independent of the vocabulary)."""
    if _is_external(model):
        counts = _external(model, widths, _ANY_VOCAB)
        return counts["total"] - counts["embedding"]
    mixers, _, _ = _mixers(model)
    norms = _mlps_per_layer(model) * model.d_model  # one norm gain per MLP
    return mixers + model.n_layer * norms + mlp_params(model, widths) + model.d_model


def count_params(model: ModelConfig, widths: Sequence[int], vocab_size: int) -> ParamCount:
    """Exact parameter counts of ``build_model(model, widths, vocab_size)``."""
    _check(model, widths, vocab_size)
    if _is_external(model):
        counts = _external(model, widths, vocab_size)
        return ParamCount(
            total=counts["total"],
            non_embedding=counts["total"] - counts["embedding"],
            mlp=counts["mlp"],
            embedding=counts["embedding"],
        )
    embedding = vocab_size * model.d_model * (1 if model.tie_embeddings else 2)
    non_emb = non_embedding_params(model, widths)
    return ParamCount(
        total=non_emb + embedding,
        non_embedding=non_emb,
        mlp=mlp_params(model, widths),
        embedding=embedding,
    )


def _memory_flops(model: ModelConfig, seq_len: int) -> int:
    """Titans memory FLOPs for one sequence of one batch row, all layers (see titans.py)."""
    dims = _memory_dims(model)
    m = [a * b for a, b in pairwise(dims)]
    size = min(model.titans.chunk_size, seq_len)
    n_chunks = -(-seq_len // size)
    read = 2 * sum(m)  # M(q), per token
    # A written chunk also runs M(k) (2 sum m), the two weighted weight gradients (4 sum m) and
    # the backward through the hidden layers (2 m_i for every layer but the first).
    write = 2 * sum(m) + 4 * sum(m) + 2 * sum(m[1:])
    per_head = n_chunks * size * read + (n_chunks - 1) * size * write
    return model.n_layer * model.n_head * per_head


def flops_per_token(
    model: ModelConfig, widths: Sequence[int], vocab_size: int, seq_len: int
) -> FlopCount:
    """Forward and training FLOPs per token of a sequence of ``seq_len`` tokens."""
    _check(model, widths, vocab_size)
    if seq_len < 1:
        raise ValueError(f"seq_len must be >= 1, but got {seq_len=}")
    if _is_external(model):
        c = _external(model, widths, vocab_size, seq_len)
        forward = c["dense"] + c["attention"]
        return FlopCount(
            dense=c["dense"],
            attention=c["attention"],
            memory=0,
            forward=forward,
            training=3 * forward,
            mlp=c["mlp_flops"],
            head=c["head"],
        )
    d = model.d_model
    _, linear, attn_heads = _mixers(model)
    mlp, head = 2 * mlp_params(model, widths), 2 * d * vocab_size
    dense = 2 * linear + mlp + head
    attention = attn_heads * 4 * model.head_dim * seq_len
    memory = 0
    if model.arch == "titans":
        total = _memory_flops(model, seq_len)
        if total % seq_len:  # keep integers exact: report the ceiling
            total += seq_len - total % seq_len
        memory = total // seq_len
    forward = dense + attention + memory
    return FlopCount(
        dense=dense,
        attention=attention,
        memory=memory,
        forward=forward,
        training=3 * forward,
        mlp=mlp,
        head=head,
    )


def trial_counts(
    model: ModelConfig, widths: Sequence[int], vocab_size: int, seq_len: int
) -> dict[str, int]:
    """What every trial records: total and non-embedding parameters, training FLOPs per token."""
    params = count_params(model, widths, vocab_size)
    return {
        "n_params": int(params.total),
        "n_params_nonemb": int(params.non_embedding),
        "flops_per_token": int(flops_per_token(model, widths, vocab_size, seq_len).training),
    }
