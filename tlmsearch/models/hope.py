"""``hope_attention``: softmax attention followed by a continuum memory system (CMS).

Source: Behrouz et al., "Nested Learning: The Illusion of Deep Learning Architectures"
(arXiv 2512.24695), the Hope-attention variant: the Transformer's single MLP is replaced by a
chain of MLP blocks ``MLP^(f_k)(... MLP^(f_1)(x))`` whose parameters are updated at different
frequencies; level i's parameters change only every C_i steps, with the gradient accumulated
over those C_i steps (the paper's update rule ``theta_{i+C} = theta_i - eta * sum_{t} grad_t``
when i is a multiple of C, else no change). No official code exists; this is our reading.

What is built, per layer l (``model.hope``: ``levels``, ``periods``):

- ``x = x + attn(norm(x))``: the same causal softmax attention as ``transformer``.
- then for each level i = 0..levels-1: ``x = x + mlp_i(norm_i(x))``, a pre-norm residual SwiGLU
  MLP of hidden width ``widths[l]``. Every level of layer l has the layer's width: tapering
  applies to all CMS MLPs of a layer alike, and the budget counts ``levels`` MLPs per layer.
  The residual form keeps the chain trainable at any depth (the paper writes plain nesting).

What is updated when (the frequency is counted in optimizer steps, i.e. in training tokens:
the CMS stores knowledge at different time scales of the training stream):

- attention, embeddings and norms outside the CMS: every step (ordinary training).
- level i (its MLP and its norm gain): one optimizer step every ``periods[i]`` steps. The
  trainer calls ``model.before_optimizer_step(step)`` after backward and clipping; for a level
  with period C > 1 the hook adds the step's gradient to a buffer, and
    * on steps where ``(step + 1) % C != 0`` it sets the level's ``.grad`` to None: AdamW
      skips parameters without a gradient (no update, no weight decay, no moment change);
    * on steps where ``(step + 1) % C == 0`` it puts the summed gradient of the last C steps
      into ``.grad`` (so AdamW takes one step on it) and clears the buffer.
  With period 1 the level is an ordinary MLP. The buffers are persistent (they live in the
  state dict), so a checkpoint resumes mid-period exactly. They are buffers, not parameters:
  parameter counts are those of the MLPs.

Why the sum and not the mean: it is the paper's rule; AdamW is nearly invariant to the scale
of the gradient, so the choice mostly matters for SGD-like optimizers.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tlmsearch.config import ModelConfig
from tlmsearch.models.common import Block, CausalSelfAttention, SwiGLU


class HopeBlock(Block):
    """Attention, then ``levels`` residual SwiGLU MLPs updated at their own periods."""

    def __init__(
        self, d_model: int, n_head: int, width: int, periods: Sequence[int], eps: float
    ) -> None:
        mlps = [SwiGLU(d_model, width) for _ in periods]
        super().__init__([CausalSelfAttention(d_model, n_head)], mlps, d_model, eps)
        self.periods = tuple(int(c) for c in periods)
        if any(c < 1 for c in self.periods):
            raise ValueError(f"periods must all be >= 1, but got {self.periods}")
        for i, period in enumerate(self.periods):
            if period > 1:
                for j, p in enumerate(self._level_params(i)):
                    self.register_buffer(f"grad_sum_{i}_{j}", torch.zeros_like(p))

    def _level_params(self, i: int) -> list[torch.nn.Parameter]:
        """Level i: its MLP and the gain of the norm in front of it."""
        return [*self.mlp_norms[i].parameters(), *self.mlps[i].parameters()]

    @torch.no_grad()
    def before_optimizer_step(self, step: int) -> None:
        for i, period in enumerate(self.periods):
            if period == 1:
                continue
            due = (step + 1) % period == 0
            for j, p in enumerate(self._level_params(i)):
                acc = getattr(self, f"grad_sum_{i}_{j}")
                if p.grad is not None:
                    acc.add_(p.grad)
                if due:
                    p.grad = acc.clone()
                    acc.zero_()
                else:
                    p.grad = None


def hope_blocks(cfg: ModelConfig, widths: Sequence[int]) -> list[Block]:
    """One Hope-attention block per layer; every CMS level of layer l has width widths[l]."""
    return [HopeBlock(cfg.d_model, cfg.n_head, w, cfg.hope.periods, cfg.norm_eps) for w in widths]
