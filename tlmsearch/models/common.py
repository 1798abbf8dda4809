"""Parts every tlmsearch model shares: RMSNorm, RoPE, the SwiGLU MLP, the block and the causal LM.

A block is ``x = x + mixer(norm(x))`` for each of its mixers, then ``x = x + mlp(norm(x))``
for each of its MLPs (Llama-style pre-norm residual blocks). The MLP hidden width changes with
depth (Tapered Language Models, arXiv 2606.23670), and so may an attention layer's heads (a
heads schedule, tlmsearch/widths/heads.py; the head size stays the model's): a block receives its
final widths and never rescales them. Mixers take ``(x, rope)`` and return a tensor shaped like
``x``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

# -------------------------------------------------------------------------------------------------
# Keyed initialisation (common random numbers)
#
# Candidates of one seed are compared paired against that seed's uniform model (docs/running.md,
# "Seeds are paired"), so their initial weights should differ only where the architectures
# differ. Drawing in module order from one global stream breaks that: a wider first MLP consumes
# more numbers and shifts every later draw. Instead every parameter gets its own generator keyed
# by (seed, qualified name), and MLP hidden units come in fixed-size chunks keyed by (seed, name,
# chunk), so unit j of a layer depends only on (seed, name, j): a narrower and a wider candidate
# share their first min(width) units exactly, and the units one of them lacks are the only init
# difference. Attention heads are drawn the same way (a heads schedule varies them per layer):
# the q, k and v row sections of ``qkv`` are each keyed by their own name and drawn by row
# (``head_sections``), the output projection by column and the gate by row (``head_units``),
# so head i has the same initial weights in a layer of 2 heads as in one of 8, whatever
# n_kv_head. Draws are made on the CPU in fp32, so the model is the same on every device.
#
# The two tags are separate on purpose: ``unit_dim`` marks MLP matrices, which muP scales by
# their width and trial arrays pad with zeros (tlmsearch/train/parametrization.py, trial_array.py);
# ``head_units`` marks attention matrices, which neither may take for an MLP.

UNIT_CHUNK = 64  # units drawn per keyed chunk; changing it changes every seed's MLP/attention init

# ``normal_(param, std)``: fill a parameter of the model with its keyed N(0, std) draw.
Normal = Callable[[torch.Tensor, float], None]


def keyed_generator(seed: int, key: str) -> torch.Generator:
    """A CPU generator seeded from sha256 of (seed, key): independent of every other key."""
    digest = hashlib.sha256(f"tlmsearch-init/{seed}/{key}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest[:8], "little"))


def _keyed_draw(shape: Sequence[int], std: float, seed: int, key: str) -> torch.Tensor:
    """N(0, std) from the generator of (seed, key), on the CPU in fp32 whatever torch's
    default device and dtype: the same numbers wherever the model then lives."""
    w = torch.empty(tuple(shape), device="cpu", dtype=torch.float32)
    return w.normal_(0.0, std, generator=keyed_generator(seed, key))


@torch.no_grad()
def keyed_normal_(
    param: torch.Tensor, std: float, *, seed: int, name: str, unit_dim: int | None = None
) -> None:
    """Fill ``param`` with N(0, std) from the generator keyed by (seed, name).

    With ``unit_dim`` (0: units are rows, 1: units are columns of a 2-D matrix), unit j is
    row j of chunk j // UNIT_CHUNK, a (UNIT_CHUNK, fan) draw keyed by (seed, name, chunk):
    the first k units of a matrix are the same at every width >= k. A parameter on the meta
    device (a model built for its shapes: counts, muP's base model) is left undrawn.
    """
    if param.is_meta:
        return
    if unit_dim is None:
        param.copy_(_keyed_draw(param.shape, std, seed, name))
        return
    assert param.ndim == 2 and unit_dim in (0, 1), (param.shape, unit_dim)
    n_units, fan = param.size(unit_dim), param.size(1 - unit_dim)
    n_chunks = -(-n_units // UNIT_CHUNK)
    chunks = [
        _keyed_draw((UNIT_CHUNK, fan), std, seed, f"{name}/units{c}") for c in range(n_chunks)
    ]
    w = torch.cat(chunks)[:n_units]  # (units, fan)
    param.copy_(w if unit_dim == 0 else w.T)


@torch.no_grad()
def keyed_weight_(module: nn.Module, std: float, *, seed: int, name: str) -> None:
    """Draw ``module.weight`` (named ``name``) by its tags: MLP units by index (``unit_dim``),
    attention channels by index (``head_units``) in the named sections of ``head_sections``
    (q, k, v of a fused projection, each keyed ``name/section``), anything else whole.

    The sections are keyed apart so that a section's rows do not shift when another section
    grows: the k rows of a layer with more query heads are still its k rows.
    """
    w = module.weight
    dim = getattr(module, "unit_dim", None)
    dim = getattr(module, "head_units", None) if dim is None else dim
    sections = getattr(module, "head_sections", None)
    if not sections:
        keyed_normal_(w, std, seed=seed, name=name, unit_dim=dim)
        return
    assert dim is not None and sum(n for _, n in sections) == w.size(dim), (name, sections)
    start = 0
    for key, size in sections:
        part = w.narrow(dim, start, size)
        keyed_normal_(part, std, seed=seed, name=f"{name}/{key}", unit_dim=dim)
        start += size


def keyed_normal(module: nn.Module, seed: int) -> Normal:
    """``normal_(param, std)`` for the parameters of ``module``, keyed by their names in it."""
    names = {id(p): n for n, p in module.named_parameters()}

    def normal_(param: torch.Tensor, std: float) -> None:
        keyed_normal_(param, std, seed=seed, name=names[id(param)])

    return normal_


class RMSNorm(nn.Module):
    """Root-mean-square norm with a learned gain (Zhang & Sennrich 2019, arXiv 1910.07467)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.size(-1),), self.weight, self.eps)


class Rotary(nn.Module):
    """Rotary position embedding tables (Su et al. 2021, arXiv 2104.09864), computed per length."""

    def __init__(self, head_dim: int, theta: float = 10000.0) -> None:
        super().__init__()
        inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
        t = torch.arange(seq_len, device=self.inv_freq.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq)  # (T, hs/2)
        return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate ``x`` (B, nh, T, hs) by position; the halves layout of Llama / GPT-NeoX."""
    cos, sin = rope
    x1, x2 = x.float().chunk(2, dim=-1)
    out = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return out.type_as(x)


class SwiGLU(nn.Module):
    """``w2(silu(w1 x) * w3 x)``, hidden width ``width`` (Shazeer 2020, arXiv 2002.05202).

    3 * d_model * width weights, no biases: equal mean width means equal parameters and FLOPs.
    """

    def __init__(self, d_model: int, width: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, width, bias=False)
        self.w3 = nn.Linear(d_model, width, bias=False)
        self.w2 = nn.Linear(width, d_model, bias=False)
        self.w2.residual_out = True  # scaled at init (GPT-2)
        # Which weight dimension indexes the hidden units (rows of w1/w3, columns of w2): the
        # init draws them by unit, so candidates of one seed share the units they have in common.
        self.w1.unit_dim = self.w3.unit_dim = 0
        self.w2.unit_dim = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class CausalSelfAttention(nn.Module):
    """Causal softmax attention with RoPE through ``F.scaled_dot_product_attention``.

    Llama-style (Touvron et al. 2023, arXiv 2302.13971): fused q/k/v projection, no biases.
    ``n_head`` query heads of size ``head_dim`` (default ``d_model // n_head``; a heads schedule
    keeps the model's head size whatever a layer's heads) and ``n_kv_head`` key/value heads
    (grouped-query attention, Ainslie et al. 2023, arXiv 2305.13245; default ``n_head``).

    Weight layout (tlmsearch/models/hf_export.py writes Llama's q/k/v/o_proj from it): ``qkv`` rows
    are [q heads 0..h-1 | k heads 0..kv-1 | v heads 0..kv-1], head_dim contiguous rows per
    head; ``proj`` columns are the query heads' outputs in order. Query head i reads key/value
    head i // (h / kv), as Llama's ``repeat_kv``.
    """

    def __init__(
        self, d_model: int, n_head: int, n_kv_head: int | None = None, head_dim: int | None = None
    ) -> None:
        super().__init__()
        n_kv_head = n_head if n_kv_head is None else n_kv_head
        head_dim = d_model // n_head if head_dim is None else head_dim
        if n_head < 1 or n_kv_head < 1 or n_head % n_kv_head or head_dim < 1:
            raise ValueError(
                "n_head must be a positive multiple of n_kv_head and head_dim positive, but got "
                f"{n_head=}, {n_kv_head=}, {head_dim=}"
            )
        self.n_head, self.n_kv_head, self.head_dim = n_head, n_kv_head, head_dim
        q, kv = n_head * head_dim, n_kv_head * head_dim
        self.qkv = nn.Linear(d_model, q + 2 * kv, bias=False)
        self.proj = nn.Linear(q, d_model, bias=False)
        self.proj.residual_out = True
        # Drawn by head channel (see "Keyed initialisation"): q, k, v rows each keyed on their
        # own; the output projection's columns are its fan-in, the heads (muP scales it).
        self.qkv.head_units, self.qkv.head_sections = 0, (("q", q), ("k", kv), ("v", kv))
        self.proj.head_units = 1

    def attend(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """The heads' outputs before the output projection, (B, T, nh, hs)."""
        B, T, _ = x.shape
        h, kv, hs = self.n_head, self.n_kv_head, self.head_dim
        q, k, v = self.qkv(x).split((h * hs, kv * hs, kv * hs), dim=-1)
        q = q.view(B, T, h, hs).transpose(1, 2)  # (B, nh, T, hs)
        k, v = (t.view(B, T, kv, hs).transpose(1, 2) for t in (k, v))  # (B, nkv, T, hs)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        if kv < h:
            # Each key/value head serves h / kv consecutive query heads (Llama's repeat_kv).
            # Repeated rather than SDPA's enable_gqa: that needs torch >= 2.5 and on CUDA only
            # the flash and math kernels take it; a repeat runs on every kernel and under vmap.
            k, v = (t.repeat_interleave(h // kv, dim=1) for t in (k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return y.transpose(1, 2)  # (B, T, nh, hs)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        y = self.attend(x, rope)
        return self.proj(y.flatten(2))  # (B, T, nh * hs) -> (B, T, d)


class Block(nn.Module):
    """Pre-norm residual block: every mixer, then every MLP, each ``x = x + f(norm(x))``."""

    def __init__(
        self, mixers: Sequence[nn.Module], mlps: Sequence[nn.Module], d_model: int, eps: float
    ) -> None:
        super().__init__()
        self.mixer_norms = nn.ModuleList(RMSNorm(d_model, eps) for _ in mixers)
        self.mixers = nn.ModuleList(mixers)
        self.mlp_norms = nn.ModuleList(RMSNorm(d_model, eps) for _ in mlps)
        self.mlps = nn.ModuleList(mlps)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        for norm, mixer in zip(self.mixer_norms, self.mixers, strict=True):
            x = x + mixer(norm(x), rope)
        for norm, mlp in zip(self.mlp_norms, self.mlps, strict=True):
            x = x + mlp(norm(x))
        return x

    def before_optimizer_step(self, step: int) -> None:
        """A no-op: most blocks need nothing from the trainer (see CausalLM)."""


class CausalLM(nn.Module):
    """Token embedding, blocks, final RMSNorm, LM head (optionally tied to the embedding).

    ``model(idx)`` with ``idx`` (B, T) returns float logits (B, T, vocab_size). The initial
    weights are a function of ``seed`` (and the shapes) alone: see ``init_weights``.
    """

    def __init__(
        self,
        blocks: Sequence[Block],
        *,
        vocab_size: int,
        d_model: int,
        head_dim: int,
        rope_theta: float = 10000.0,
        norm_eps: float = 1e-5,
        tie_embeddings: bool = True,
        init_std: float = 0.02,
        seed: int = 0,
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.rotary = Rotary(head_dim, rope_theta)
        self.blocks = nn.ModuleList(blocks)
        self.norm_f = RMSNorm(d_model, norm_eps)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)
        if tie_embeddings:
            self.lm_head.weight = self.wte.weight  # Press & Wolf 2017, arXiv 1608.05859
        self.init_weights(init_std, seed)

    @torch.no_grad()
    def init_weights(self, std: float, seed: int) -> None:
        """N(0, std) for matrices and embeddings; residual output projections get
        std / sqrt(number of residual branches) so the stream's variance does not grow with
        depth (GPT-2). Modules with their own ``init_extra(std, normal_)`` set their special
        parameters. Every draw is keyed by (seed, parameter name), MLP units and attention
        head channels by their index (see ``keyed_weight_``): the global RNG is never used, and
        candidates of one seed share every parameter, unit and head they have in common."""
        branches = sum(len(b.mixers) + len(b.mlps) for b in self.blocks)
        for name, module in self.named_modules():
            if module is self.lm_head and self.lm_head.weight is self.wte.weight:
                continue  # tied: already drawn as the embedding
            if isinstance(module, (nn.Linear, nn.Embedding)):
                scale = 1 / math.sqrt(branches) if getattr(module, "residual_out", False) else 1
                keyed_weight_(module, std * scale, seed=seed, name=f"{name}.weight")
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        normal_ = keyed_normal(self, seed)
        for module in self.modules():  # after the generic pass, which they may override
            if hasattr(module, "init_extra"):
                module.init_extra(std, normal_)

    def hidden(self, idx: torch.Tensor) -> torch.Tensor:
        """The final-normed states (B, T, d) that ``lm_head`` maps to logits: the trainer takes
        the loss from them in chunks (:mod:`tlmsearch.train.loss`), never holding all the
        logits."""
        x = self.wte(idx)  # (B, T, d)
        rope = self.rotary(idx.size(1))
        for block in self.blocks:
            x = block(x, rope)
        return self.norm_f(x)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.hidden(idx)).float()

    def before_optimizer_step(self, step: int) -> None:
        """Call after backward and gradient clipping, right before ``optimizer.step()``.

        ``step`` is the 0-based index of the optimizer step about to be taken; the trainer then
        calls ``optimizer.zero_grad(set_to_none=True)``. A no-op except for architectures whose
        parameters update at their own frequency (hope_attention: levels that skip steps set
        their ``.grad`` to None, which AdamW skips, and keep the gradient for later).
        """
        for block in self.blocks:
            block.before_optimizer_step(step)

    def param_groups(self, weight_decay: float) -> list[dict]:
        """AdamW groups: decay on matrices and embeddings (ndim >= 2), none on norm gains,
        biases and other vectors or scalars."""
        decay, no_decay = [], []
        for p in self.parameters():  # tied weights appear once
            if p.requires_grad:
                (decay if p.ndim >= 2 else no_decay).append(p)
        return [
            {"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ]
