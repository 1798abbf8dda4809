"""Next-token cross-entropy without the full fp32 logits: the output layer and the loss in chunks.

At paper_440m's micro batch (4 x 4096 tokens, vocab 128256) the fp32 logits are 8.4 GB, and their
gradient as much again. :func:`linear_cross_entropy` computes the logits of ``chunk`` tokens at a
time, takes their loss, and (when training) their gradients at once, the way Liger's fused
linear cross-entropy does (arXiv 2410.10989): the backward then only scales the gradients it
kept, so no chunk is computed twice and at most one chunk's logits exist at any time.

A model that exposes ``hidden(idx)`` (the final-normed states, (B, T, d)) and ``lm_head`` gets
this loss from :func:`next_token_nll`; any other model (``model(idx)`` -> logits) the plain one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK_TOKENS = 4096  # tokens per chunk: (4096, 128256) fp32 logits are 2.1 GB, (4096, 4096) 64 MB


class _LinearCrossEntropy(torch.autograd.Function):
    """Mean NLL of ``targets`` under ``h @ weight.T``, computed chunk by chunk."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        h: torch.Tensor,  # (N, d)
        weight: torch.Tensor,  # (V, d)
        targets: torch.Tensor,  # (N,)
        chunk: int,
    ) -> torch.Tensor:
        n = h.size(0)
        want_grad = h.requires_grad or weight.requires_grad
        total = torch.zeros((), dtype=torch.float32, device=h.device)
        grad_h = torch.empty_like(h) if want_grad else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for i in range(0, n, chunk):
            hc, yc = h[i : i + chunk], targets[i : i + chunk]
            logits = F.linear(hc, weight).float()  # (c, V): the only logits alive
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(1, yc[:, None]).squeeze(1)).sum()
            if want_grad:  # d(mean NLL)/d logits = (softmax - onehot) / N
                g = logits.sub_(lse[:, None]).exp_()
                g[torch.arange(yc.numel(), device=g.device), yc] -= 1.0
                g = g.div_(n).to(h.dtype)  # under autocast, F.linear casts it as it casts hc
                grad_h[i : i + chunk] = F.linear(g, weight.t()).to(h.dtype)  # (c, d)
                grad_w += F.linear(g.t(), hc.t()).float()  # (V, d)
        if want_grad:
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        return total / n

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_out, grad_w * grad_out, None, None


def linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """``F.cross_entropy(F.linear(h, weight).float(), targets)`` (mean over tokens) computed
    ``chunk`` tokens (default :data:`CHUNK_TOKENS`) at a time; ``h`` (..., d), ``targets`` (...).

    >>> h, w, y = torch.randn(6, 4), torch.randn(10, 4), torch.randint(0, 10, (6,))
    >>> torch.allclose(linear_cross_entropy(h, w, y, 4), F.cross_entropy(h @ w.T, y))
    True
    """
    n = chunk or CHUNK_TOKENS
    return _LinearCrossEntropy.apply(h.flatten(0, -2), weight, targets.flatten(), n)


def chunked(model: torch.nn.Module) -> bool:
    """Whether ``model`` exposes its final states and output layer (``hidden``, ``lm_head``)."""
    head = getattr(model, "lm_head", None)
    return hasattr(model, "hidden") and isinstance(head, torch.nn.Linear)


def next_token_nll(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token NLL of ``y`` given ``x`` (both (B, T)), chunked where the model allows."""
    if chunked(model):
        head = model.lm_head
        return linear_cross_entropy(model.hidden(x), head.weight, y)
    return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten())


@torch.inference_mode()
def nll_sum(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Summed next-token NLL (a device scalar, fp32) of ``y`` given ``x``: no host read."""
    if chunked(model):
        h = model.hidden(x).flatten(0, 1)
        w, t = model.lm_head.weight, y.flatten()
        parts = [
            F.cross_entropy(
                F.linear(h[i : i + CHUNK_TOKENS], w).float(),
                t[i : i + CHUNK_TOKENS],
                reduction="sum",
            )
            for i in range(0, h.size(0), CHUNK_TOKENS)
        ]
        return torch.stack(parts).sum()
    return F.cross_entropy(model(x).float().flatten(0, 1), y.flatten(), reduction="sum")


class _BatchedLinearCrossEntropy(torch.autograd.Function):
    """:class:`_LinearCrossEntropy` for K models at once (a trial array,
    tlmsearch/train/trial_array.py): the same chunks and formula, with batched matmuls; each
    model's mean NLL, (K,)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx,
        h: torch.Tensor,  # (K, N, d)
        weight: torch.Tensor,  # (K, V, d)
        targets: torch.Tensor,  # (K, N)
        chunk: int,
    ) -> torch.Tensor:
        k, n = h.shape[:2]
        want_grad = h.requires_grad or weight.requires_grad
        total = torch.zeros(k, dtype=torch.float32, device=h.device)
        grad_h = torch.empty_like(h) if want_grad else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        w_t = weight.transpose(1, 2)  # (K, d, V)
        for i in range(0, n, chunk):
            hc, yc = h[:, i : i + chunk], targets[:, i : i + chunk, None]
            logits = torch.bmm(hc, w_t).float()  # (K, c, V): the only logits alive
            lse = torch.logsumexp(logits, dim=-1)
            total += (lse - logits.gather(2, yc).squeeze(2)).sum(1)
            if want_grad:  # d(mean NLL)/d logits = (softmax - onehot) / N
                g = logits.sub_(lse[..., None]).exp_()
                g.scatter_add_(2, yc, torch.full(yc.shape, -1.0, device=g.device))
                g = g.div_(n).to(h.dtype)  # under autocast, bmm casts it as it casts hc
                grad_h[:, i : i + chunk] = torch.bmm(g, weight).to(h.dtype)  # (K, c, d)
                grad_w += torch.bmm(g.transpose(1, 2), hc).float()  # (K, V, d)
        if want_grad:
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        return total / n

    @staticmethod
    def backward(  # type: ignore[override]
        ctx: torch.autograd.function.FunctionCtx, grad_out: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, None, None]:
        grad_h, grad_w = ctx.saved_tensors
        scale = grad_out[:, None, None]
        return grad_h * scale, grad_w * scale, None, None


def batched_linear_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk: int | None = None
) -> torch.Tensor:
    """Each of K models' mean next-token NLL: ``h`` (K, N, d), ``weight`` (K, V, d), ``targets``
    (K, N) -> (K,), ``chunk`` tokens of every model at a time (default :data:`CHUNK_TOKENS`).

    >>> h, w, y = torch.randn(2, 6, 4), torch.randn(2, 10, 4), torch.randint(0, 10, (2, 6))
    >>> got = batched_linear_cross_entropy(h, w, y, 4)
    >>> torch.allclose(got, torch.stack([linear_cross_entropy(h[k], w[k], y[k]) for k in (0, 1)]))
    True
    """
    return _BatchedLinearCrossEntropy.apply(h, weight, targets, chunk or CHUNK_TOKENS)
