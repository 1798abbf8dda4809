"""``titans``: a neural long-term memory written at test time, as a layer (optionally MAL).

Source: Behrouz, Zhong, Mirrokni, "Titans: Learning to Memorize at Test Time" (arXiv
2501.00663). Per head, the memory M is an MLP of depth ``memory_depth`` >= 2 (hidden width
``memory_expansion * head_dim``, SiLU) whose weights W are a state that the sequence writes:

    loss_t = ||M_W(k_t) - v_t||^2                 (associative memory loss)
    S_t = eta_t S_{t-1} - theta_t grad loss_t     (surprise with momentum)
    W_t = (1 - alpha_t) W_{t-1} + S_t             (forgetting)

with data-dependent theta_t (learning rate, ``max_lr * sigmoid``), eta_t (momentum) and alpha_t
(forgetting), each a per-head projection of the token. Keys and queries are L2-normalised
(Sec. 3.1). The learned initial weights W_0 are the layer's parameters (meta-learned by the
outer training loop, which differentiates through the writes).

Chunk-parallel training (Sec. 3.2): a sequence is cut into chunks of ``chunk_size`` tokens.
Inside a chunk every token's gradient is taken at the chunk-start weights, so the chunk is
parallel; momentum and decay are linear recurrences, so the chunk-end weights are the
chunk-start weights plus a *weighted sum* of the tokens' gradients, and a weighted sum of
gradients is the gradient of a weighted loss: it is computed in closed form by batched
matmuls (a hand-written backward through M; outer autograd differentiates it again). The only
Python loop is over chunks, never over tokens.

Strict causality: tokens of chunk c read (q -> M(q)) the memory as it stood at the start of
chunk c, i.e. written by earlier chunks only; a token never sees memory written by itself or
by later tokens. The last chunk's write is never read, so it is skipped. A sequence no longer
than ``chunk_size`` therefore only reads W_0: keep ``chunk_size`` well below ``seq_len``.

torch.compile: the model compiles, but the memory recurrence runs eagerly inside it (a graph
break per layer) unless ``titans.compile_memory``. Compiling the recurrence with its
hand-written backward took 375 s at 6 layers, d_model 256, seq 256 (bf16, a busy 2-core CPU,
torch 2.13) against 49 s with the eager recurrence, whose compiled step was as fast as eager.

MAL (memory as a layer, Sec. 4.3) with ``with_attention``: the block runs
``x += memory(norm(x)); x += attention(norm(x)); x += mlp(norm(x))``. The paper's MAL uses
sliding-window attention; at proxy context lengths full causal attention is used (a window
at least as long as the sequence). Left out: persistent memory tokens and the 1-D depthwise
convolutions of the reference design; they do not change what tapering is tested against.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import nn

from tlmsearch.config import ModelConfig
from tlmsearch.models.common import Block, CausalSelfAttention, Normal, SwiGLU
from tlmsearch.widths.budget import memory_dims

# Initial gate values: momentum ~0.9 and forgetting ~0.01 per token (logits of the sigmoids).
_ETA_LOGIT = math.log(0.9 / 0.1)
_ALPHA_LOGIT = math.log(0.01 / 0.99)


def _silu_grad(z: torch.Tensor) -> torch.Tensor:
    s = torch.sigmoid(z)
    return s * (1 + z * (1 - s))


class NeuralMemory(nn.Module):
    """Multi-head long-term memory mixer: write k -> v per chunk, read M(q)."""

    def __init__(
        self,
        d_model: int,
        n_head: int,
        depth: int = 2,
        expansion: int = 2,
        chunk_size: int = 64,
        max_lr: float = 0.01,
        compile_memory: bool = False,
    ) -> None:
        super().__init__()
        if depth < 2:
            raise ValueError(f"memory depth must be >= 2, but got {depth=}")
        self.n_head, self.head_dim = n_head, d_model // n_head
        self.chunk_size, self.max_lr, self.compile_memory = chunk_size, max_lr, compile_memory
        self.q = nn.Linear(d_model, d_model, bias=False)
        self.k = nn.Linear(d_model, d_model, bias=False)
        self.v = nn.Linear(d_model, d_model, bias=False)
        self.gates = nn.Linear(d_model, 3 * n_head)  # theta, eta, alpha logits per head
        self.proj = nn.Linear(d_model, d_model, bias=False)
        self.proj.residual_out = True
        dims = memory_dims(self.head_dim, depth, expansion)
        self.memory = nn.ParameterList(
            nn.Parameter(torch.empty(n_head, a, b)) for a, b in pairwise(dims)
        )

    @torch.no_grad()
    def init_extra(self, std: float, normal_: Normal) -> None:
        """The memory's initial weights W_0 and the gates' bias; ``normal_(param, std)`` is the
        model's keyed draw (see ``CausalLM.init_weights``)."""
        # Keys are unit vectors, so the first layer gets std 1 (pre-activations ~ N(0, 1)).
        for i, w in enumerate(self.memory):
            normal_(w, 1.0 if i == 0 else 1 / math.sqrt(w.size(1)))
        h = self.n_head
        self.gates.bias[h : 2 * h].fill_(_ETA_LOGIT)
        self.gates.bias[2 * h :].fill_(_ALPHA_LOGIT)

    def forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        # rope is unused: order enters through the recurrence, not through positions.
        B, T, C = x.shape
        H, hs = self.n_head, self.head_dim

        def heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(B, T, H, hs).transpose(1, 2)  # (B, nh, T, hs)

        q = F.normalize(heads(self.q(x)), dim=-1)
        k = F.normalize(heads(self.k(x)), dim=-1)
        v = heads(self.v(x))
        z = self.gates(x).float().view(B, T, 3, H).permute(2, 0, 3, 1)  # (3, B, nh, T)
        theta = self.max_lr * torch.sigmoid(z[0])
        log_eta = F.logsigmoid(z[1])  # log eta_t
        log_keep = F.logsigmoid(-z[2])  # log(1 - alpha_t)

        recurrence = _recurrence if self.compile_memory else _recurrence_eager
        y = recurrence(list(self.memory), q, k, v, theta, log_eta, log_keep, self.chunk_size)
        return self.proj(y.transpose(1, 2).reshape(B, T, C).type_as(x))


def _recurrence(
    memory: list[torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    log_eta: torch.Tensor,
    log_keep: torch.Tensor,
    chunk_size: int,
) -> torch.Tensor:
    """Read and write the memory chunk by chunk; returns the reads M(q), (B, nh, T, hs)."""
    B, T = q.size(0), q.size(2)
    size = min(chunk_size, T)
    n_chunks = -(-T // size)
    pad = n_chunks * size - T  # only the last chunk is padded, and it is never written
    if pad:
        q = F.pad(q, (0, 0, 0, pad))
    weights = [w.unsqueeze(0).expand(B, *w.shape) for w in memory]
    momentum = [torch.zeros_like(w) for w in weights]  # S_0 = 0
    ys = []
    for c in range(n_chunks):
        sl = slice(c * size, (c + 1) * size)
        if c == n_chunks - 1:  # nothing reads the last write
            ys.append(_run(weights, q[:, :, sl])[0][-1])
            break
        y, weights, momentum = _read_write(
            weights,
            momentum,
            q[:, :, sl],
            k[:, :, sl],
            v[:, :, sl],
            theta[..., sl],
            log_eta[..., sl],
            log_keep[..., sl],
        )
        ys.append(y)
    return torch.cat(ys, dim=2)[:, :, :T]


def _run(
    weights: list[torch.Tensor], x: torch.Tensor
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """M_W(x) for x (B, nh, N, hs): every layer's input (and the output) and pre-activation."""
    acts, pre = [x], []
    for i, w in enumerate(weights):
        z = x @ w  # (B, nh, N, n_out)
        if i < len(weights) - 1:
            pre.append(z)
            z = F.silu(z)
        acts.append(z)
        x = z
    return acts, pre


def _write(
    weights: list[torch.Tensor],
    momentum: list[torch.Tensor],
    acts: list[torch.Tensor],
    pre: list[torch.Tensor],
    v: torch.Tensor,
    theta: torch.Tensor,
    log_eta: torch.Tensor,
    log_keep: torch.Tensor,
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Weights and momentum at the end of a chunk (all gradients at the chunk-start W).

    Unrolled over the chunk (t, j index its tokens, u_j = grad loss_j at W_0):
      S_end = P_eta S_0 - sum_j g_j theta_j u_j,      g_j = prod_{i>j} eta_i
      W_end = P_keep W_0 + s S_0 - sum_j c_j theta_j u_j,
      c_j = sum_{t>=j} beta_t prod_{j<i<=t} eta_i,   beta_t = prod_{s>t} (1 - alpha_s),
      s = sum_t beta_t prod_{i<=t} eta_i.
    The coefficients are computed in log space, in fp32.
    """
    n = v.size(2)
    cum_eta = log_eta.cumsum(-1)  # (B, nh, C)
    cum_keep = log_keep.cumsum(-1)
    log_beta = cum_keep[..., -1:] - cum_keep
    pair = cum_eta[..., :, None] - cum_eta[..., None, :] + log_beta[..., :, None]  # [t, j]
    causal = torch.ones(n, n, dtype=torch.bool, device=v.device).tril()
    log_c = pair.masked_fill(~causal, float("-inf")).logsumexp(-2)  # over t -> (B, nh, C)
    w_mom = (cum_eta[..., -1:] - cum_eta).exp() * theta
    w_write = log_c.exp() * theta

    # Weighted gradients of sum_j w_j ||M(k_j) - v_j||^2, both weightings in one matmul.
    delta = 2 * (acts[-1] - v)  # (B, nh, C, hs)
    grads_mom, grads_write = [], []
    for i in reversed(range(len(weights))):
        both = torch.cat((delta * w_mom[..., None], delta * w_write[..., None]), dim=-1)
        g = acts[i].transpose(-1, -2) @ both  # (B, nh, n_in, 2 n_out)
        g_mom, g_write = g.split(delta.size(-1), dim=-1)
        grads_mom.insert(0, g_mom)
        grads_write.insert(0, g_write)
        if i > 0:
            delta = (delta @ weights[i].transpose(-1, -2)) * _silu_grad(pre[i - 1])

    keep_all = cum_keep[..., -1].exp()[..., None, None]  # (B, nh, 1, 1)
    eta_all = cum_eta[..., -1].exp()[..., None, None]
    s = (log_beta + cum_eta).logsumexp(-1).exp()[..., None, None]
    new_w = [
        keep_all * w + s * m - g for w, m, g in zip(weights, momentum, grads_write, strict=True)
    ]
    new_m = [eta_all * m - g for m, g in zip(momentum, grads_mom, strict=True)]
    return new_w, new_m


def _read_write(
    weights: list[torch.Tensor],
    momentum: list[torch.Tensor],
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    theta: torch.Tensor,
    log_eta: torch.Tensor,
    log_keep: torch.Tensor,
) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor]]:
    """One chunk: read M(q) at the chunk-start weights, then write the chunk's k -> v."""
    size = q.size(2)
    acts, pre = _run(weights, torch.cat((q, k), dim=2))  # reads and writes in one pass
    y = acts[-1][:, :, :size]
    acts = [a[:, :, size:] for a in acts]
    pre = [p[:, :, size:] for p in pre]
    weights, momentum = _write(weights, momentum, acts, pre, v, theta, log_eta, log_keep)
    return y, weights, momentum


# Under torch.compile the recurrence runs eagerly unless ``titans.compile_memory`` (a graph
# break per layer): compiling it through its hand-written backward took minutes even for one
# tiny layer on the 2-core CPU (measured, torch 2.13), longer than a proxy trial.
_recurrence_eager = torch.compiler.disable(_recurrence)


def titans_blocks(cfg: ModelConfig, widths: Sequence[int]) -> list[Block]:
    """Per layer: the memory layer (then attention with MAL), then a SwiGLU of width widths[l]."""
    opt = cfg.titans
    blocks = []
    for w in widths:
        mixers: list[nn.Module] = [
            NeuralMemory(
                cfg.d_model,
                cfg.n_head,
                depth=opt.memory_depth,
                expansion=opt.memory_expansion,
                chunk_size=opt.chunk_size,
                max_lr=opt.max_lr,
                compile_memory=opt.compile_memory,
            )
        ]
        if opt.with_attention:
            mixers.append(CausalSelfAttention(cfg.d_model, cfg.n_head))
        blocks.append(Block(mixers, [SwiGLU(cfg.d_model, w)], cfg.d_model, cfg.norm_eps))
    return blocks
