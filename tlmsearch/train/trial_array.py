"""Trial arrays: K proxy runs of one architecture trained in one process as one fused model.

A study's proxy trials are small (the quickstart's: 5.2M parameters, 2,048-token steps): alone
on a GPU one is launch-bound (0.4% MFU), and three of them share two CPU cores as three
processes. Fusing K same-operator models into one (HFTA, Wang et al., MLSys 2021, arXiv
2102.02344) runs every member's step as one set of batched kernels. Our members share all but
the MLP hidden width per layer (and the seed and the train scalars), which makes them
unusually fusable:

- **Padding.** In each layer every member's SwiGLU is padded to the layer's widest member with
  exact zeros: zero rows of ``w1``/``w3`` and zero columns of ``w2``. A padded unit's output is
  ``silu(0) * 0 = 0``, the gradient of its ``w2`` column is ``dL/dy * 0 = 0`` and that of its
  ``w1``/``w3`` rows goes through its ``w2`` column (0), so its gradient is exactly 0; AdamW
  then keeps it 0 (zero moments, ``0 * (1 - lr wd) = 0``, an update ``0 / (0 + eps) = 0``).
  That holds for a bias-free SwiGLU only (a bias on the hidden units, or a norm over them,
  would move the padding): :func:`check_fusable` refuses anything else.
- **Stacking.** The padded parameters of all members live in one flat ``(K, P)`` buffer; the
  model's body runs once, under ``torch.vmap`` of ``torch.func.functional_call`` over a
  template module at the padded widths, on ``(K, B, T)`` tokens, and the output layer and loss
  run as the solo chunked loss batched over members (``loss.batched_linear_cross_entropy``: the
  solo one is an autograd.Function vmap cannot enter). The loss is the sum of the members'
  mean losses, so each member's gradient is its own. The gradients land in a ``(K, P)`` buffer
  too: per-member clipping is one norm over each row, and AdamW is torch's own fused kernel
  (``torch._fused_adamw_``, what ``AdamW(fused=True)`` runs alone) called once per member and
  param group on contiguous runs of its row (the layout puts matrices, MLP down projections and
  vectors in blocks), with the group's LR, betas and decay as the member's optimizer holds them
  (its schedule, muP's ``lr_scale``): the member's numbers, at K x groups calls a step.
- **Attention.** The fused kernels (flash, memory-efficient) have no vmap batching rule (vmap
  would run them member by member), so the fused step uses the math kernel, batched matmuls
  and a softmax; evals use the member's kernel.
- **Reuse.** Each member is a :class:`tlmsearch.train.trainer.Trainer` (compile off) whose
parameters
  are views into the flat buffer: its batches (its seed's windows), divergence monitor,
  averaged weights, evals, curve, summary and ``state_dict`` are the Trainer's own, reading
  live weights with no copy per step. Only the optimizer moments are copied, into the member's
  ``torch.optim.AdamW`` state, when a state is taken (:meth:`TrialArray.state_dict`), in the
  solo format: a solo Trainer resumes from it and an array resumes from a solo state.
- **Dropping.** A member that diverges, is stopped (pruned) or finishes leaves the fused step:
  the array is re-packed at its next step from the remaining members' live state (narrower
  padding where the widest member left). The others' numbers do not depend on who else is in
  the array beyond float rounding (the batched kernels' shapes change).

Why not explicit batched matmuls: vmap reuses the model code as written (attention, RoPE,
norms, the MLP), so an array member is the solo model by construction. Why not copy back only
at evals: the averaged weights (EMA) read the weights after every step. Why one kernel call
per member and group rather than one elementwise AdamW over (K, P): a hand-written AdamW with
per-element LR and decay maps took ~15 passes over the buffers (20% of a CPU step at the
quickstart size) and rounds differently from torch's.

What is not exact: the batched matmuls sum in another order than the solo ones (and the
padding changes the shapes), so curves agree to float tolerance, not bit for bit
(tests/test_trial_array.py states it). Where it applies: the ``transformer`` and
``gated_attention`` archs (:data:`FUSABLE_ARCHS`); titans, hope_attention, hf and plugin
models train one process per trial.

Example::

    members = [Member(cfg.model, widths, cfg.train, seed) for widths in candidates]
    summaries = train_array(members, data, on_eval=lambda i, row: print(i, row))
"""

from __future__ import annotations

import math
import re
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tlmsearch.config import ModelConfig, TrainConfig
from tlmsearch.config.model import FUSABLE_ARCHS
from tlmsearch.data.batches import Prefetch, to_device
from tlmsearch.data.prepare import PreparedData
from tlmsearch.errors import ConfigError
from tlmsearch.models.common import SwiGLU
from tlmsearch.train import parametrization
from tlmsearch.train.loss import CHUNK_TOKENS, batched_linear_cross_entropy
from tlmsearch.train.runtime import TrainSummary, attention_context, autocast_context, lr_at
from tlmsearch.train.trainer import Trainer

# Architectures whose every module is vmappable and whose only width-dependent part is a
# bias-free SwiGLU. titans (its memory recurrence runs under torch.compiler.disable) and
# hope_attention (levels that skip optimizer steps: before_optimizer_step rewrites gradients)
# train one process per trial, as do hf and plugin models (modules we do not know): the
# ``fusable`` flag of ARCH_SPECS, :data:`tlmsearch.config.model.FUSABLE_ARCHS`.
CLIP_EPS = 1e-6  # torch.nn.utils.clip_grad_norm_'s


@dataclass(frozen=True)
class Member:
    """One run of an array: the model (shared by all members), its widths, train settings and
    seed, exactly what :class:`Trainer` takes."""

    model: ModelConfig
    widths: tuple[int, ...]
    train: TrainConfig
    seed: int


# -------------------------------------------------------------------------------------------------
# Pure helpers: padding


def padded_widths(widths: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """Each layer's widest width among the members.

    >>> padded_widths([(96, 32), (64, 64)])
    (96, 64)
    """
    return tuple(max(layer) for layer in zip(*widths, strict=True))


def pad_units(t: torch.Tensor, width: int, unit_dim: int) -> torch.Tensor:
    """``t`` with zero units appended along ``unit_dim`` up to ``width`` units."""
    extra = width - t.size(unit_dim)
    if extra < 0:
        raise ValueError(f"cannot pad {t.size(unit_dim)} units to {width=}")
    pad = [0, 0] * t.ndim  # F.pad's order: (left, right) of the last dimension first
    pad[2 * (t.ndim - 1 - unit_dim) + 1] = extra
    return F.pad(t, pad)


def unit_slice(padded: torch.Tensor, width: int, unit_dim: int | None) -> torch.Tensor:
    """The first ``width`` units of a padded tensor (a view); the whole tensor without units."""
    return padded if unit_dim is None else padded.narrow(unit_dim, 0, width)


def unit_dims(model: nn.Module) -> dict[str, int]:
    """Parameter name -> the dimension indexing MLP hidden units (SwiGLU's ``unit_dim`` tags)."""
    return {
        f"{name}.weight": m.unit_dim
        for name, m in model.named_modules()
        if getattr(m, "unit_dim", None) in (0, 1)
    }


def check_fusable(members: Sequence[Member]) -> None:
    """Refuse members that one fused model cannot train exactly as alone (ConfigError)."""
    if not members:
        raise ValueError("a trial array needs at least one member")
    first = members[0]
    if first.model.arch not in FUSABLE_ARCHS:
        raise ConfigError(
            f"model.arch: {first.model.arch!r} does not run as a trial array (fused: "
            f"{', '.join(FUSABLE_ARCHS)}); train it one process per trial"
        )
    base = first.model.model_dump()
    for i, m in enumerate(members):
        diff = [k for k, v in m.model.model_dump().items() if base[k] != v]
        if diff:
            k = diff[0]
            raise ConfigError(
                f"members[{i}].model.{k} ({m.model.model_dump()[k]!r}) differs from members[0]'s "
                f"({base[k]!r}): an array's members share the model; only widths, seed and "
                "train settings may differ"
            )
        if len(m.widths) != first.model.n_layer:
            raise ConfigError(
                f"members[{i}].widths has {len(m.widths)} entries but model.n_layer is "
                f"{first.model.n_layer}"
            )


def _check_template(model: nn.Module) -> None:
    """Every width-carrying module is a bias-free SwiGLU, whose zero padding stays zero."""
    for name in unit_dims(model):
        owner = model.get_submodule(name.removesuffix(".weight").rpartition(".")[0])
        swiglu = type(owner) is SwiGLU
        if not swiglu or any(getattr(owner, c).bias is not None for c in ("w1", "w2", "w3")):
            what = "SwiGLU with a bias" if swiglu else type(owner).__name__
            raise ConfigError(
                f"trial arrays pad MLP hidden units with zeros, which stay zero only in a "
                f"bias-free SwiGLU; {name} belongs to a {what}"
            )


# -------------------------------------------------------------------------------------------------
# The fused step's pieces


@torch.no_grad()
def clip_rows_(
    grad: torch.Tensor, max_norm: torch.Tensor, frame: torch.Tensor | None = None
) -> torch.Tensor:
    """Clip each member's gradient (a row of ``grad``, (K, P)) on its own global norm, as
    the member's Trainer does alone (:func:`tlmsearch.train.parametrization.clip_grad_norm_`):
    ``coef = min(1, max / (norm + 1e-6))``; ``max_norm`` (K,) with ``inf`` for a member that
    does not clip; ``frame`` (K, P) or None: each element's factor to the MuReadout frame the
    norm is taken in under muP (1/m on an output weight, 1 elsewhere). Returns the norms (K,)."""
    norms = torch.linalg.vector_norm(grad if frame is None else grad * frame, dim=1)
    coef = (max_norm / (norms + CLIP_EPS)).clamp(max=1.0)
    grad.mul_(coef[:, None])
    return norms


@torch.no_grad()
def fused_adamw_(
    tensors: Sequence[Sequence[torch.Tensor]], step: torch.Tensor, group: dict[str, Any]
) -> None:
    """One AdamW step of one member's parameter group, in torch's own fused kernel (what the
    member's ``torch.optim.AdamW(fused=True)`` runs alone, so the numbers are its numbers):
    ``tensors`` are (params, grads, exp_avgs, exp_avg_sqs) segments of the flat buffers,
    ``step`` the member's step count (a 0-d float tensor, already incremented), ``group``
    the member's param group (its LR as ``parametrization.set_lr`` set it, betas, decay)."""
    params, grads, exp_avgs, exp_avg_sqs = (list(t) for t in tensors)
    beta1, beta2 = group["betas"]
    torch._fused_adamw_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        [step] * len(params),
        amsgrad=False,
        lr=group["lr"],
        beta1=beta1,
        beta2=beta2,
        weight_decay=group["weight_decay"],
        eps=group["eps"],
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


class _Hidden(nn.Module):
    """``model.hidden`` as a module's forward (what ``functional_call`` calls)."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.lm.hidden(idx)


class _Positions:
    """The data positions of the members being drawn for (what :class:`Prefetch` records)."""

    def __init__(self, trainers: Sequence[Trainer]) -> None:
        self.trainers = trainers

    def state_dict(self) -> list[dict]:
        return [t.batches.state_dict() for t in self.trainers]


@dataclass
class _Pack:
    """The fused state of the active members: flat (K, P) buffers and the stacked views."""

    ids: list[int]  # member indices, row order
    template: nn.Module  # the model at the padded widths (its parameters are never used)
    layout: list[tuple[str, int, tuple[int, ...], int | None]]  # name, offset, shape, unit dim
    flat: torch.Tensor  # (K, P) parameters
    grad: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    clip: torch.Tensor  # (K,) max norm, inf: no clipping
    frame: torch.Tensor | None  # (K, P) factors to the MuReadout frame (muP), None: all 1
    steps: list[int]  # AdamW's step count per member
    step_t: torch.Tensor  # (K,) the same, on the device, for the fused kernel
    # per member row: (index of the member's param group, [(start, end) of its segments])
    segments: list[list[tuple[int, list[tuple[int, int]]]]]
    head: str  # the name of the output layer's weight (the embedding's when tied)
    stacked: dict[str, torch.Tensor]  # name -> (K, *shape) leaf, a view of flat
    loss_fn: Callable[..., torch.Tensor]


# -------------------------------------------------------------------------------------------------
# The array


class TrialArray:
    """K :class:`Trainer` members trained by one fused step (see the module docstring).

    Example::

        arr = TrialArray(members, data, device="cpu")
        while not arr.done:
            arr.step()
            for i in arr.evals_due():
                row = arr.evaluate(i)  # None: diverged, and dropped
                if row is not None and prune(row):
                    arr.drop(i, "pruned")
        arr.close()
        arr.summary(0)
    """

    def __init__(
        self,
        members: Sequence[Member],
        data: PreparedData,
        *,
        device: str = "auto",
        threads: int | None = None,
        compile: bool = False,
        states: Sequence[dict[str, Any] | None] | None = None,
    ) -> None:
        check_fusable(members)
        self.members = list(members)
        self.data = data
        self.trainers = [
            Trainer(
                m.model,
                m.widths,
                data,
                m.train.model_copy(update={"compile": "off"}),
                seed=m.seed,
                threads=threads,
                device=device,
            )
            for m in members
        ]
        for t, state in zip(self.trainers, states or [None] * len(members), strict=True):
            if state is not None:
                t.load_state_dict(state)
        self._pack: _Pack | None = None
        self._prefetch: Prefetch | None = None
        first = self.trainers[0]
        for field, of in (
            (
                "batch_tokens / micro_batch_size (micro batch, accumulation)",
                lambda t: (t.micro, t.accum),
            ),
            ("dtype", lambda t: t.dtype),
        ):
            values = [of(t) for t in self.trainers]
            if len(set(values)) > 1:
                self.close()
                raise ConfigError(
                    f"train.{field} resolves to {values} across the members: an array's "
                    "members share the batch shape and precision"
                )
        self.device, self.dtype = first.device, first.dtype
        # Under vmap the fused kernels (flash, memory-efficient) have no batching rule and
        # would run member by member: the math kernel (batched matmuls and a softmax, fused by
        # torch.compile) is one kernel for all. Ops that still fall back are recorded here.
        self.kernel = "math"
        self.fallbacks: set[str] = set()
        self.micro, self.accum = first.micro, first.accum
        self.compile = compile
        if compile:
            import torch._dynamo.config as dynamo_config

            # Each pack (a member set, its padded widths) compiles the fused step anew, and
            # dynamo keeps 8 compilations of a function by default before it runs it eagerly.
            dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
        for t in self.trainers:
            t.setup["compile"] = compile
            t.setup["array"] = len(members)
            t.setup["attention_array"] = "math"  # the fused step's (evals: the member's)
        self._dirty = True  # the active set changed: re-pack before the next step
        self._fresh = True  # the next step is the first of a pack (a compile, untimed)

    # -- members ----------------------------------------------------------------------------

    @property
    def active(self) -> list[int]:
        """The members still training."""
        return [i for i, t in enumerate(self.trainers) if not t.done]

    @property
    def done(self) -> bool:
        return not self.active

    def evals_due(self) -> list[int]:
        """Members with an eval due now (call :meth:`evaluate` for each)."""
        packed = self._pack.ids if self._pack else []
        return [i for i in packed if self.trainers[i].eval_due]

    def evaluate(self, i: int) -> dict[str, float] | None:
        """Member i's eval row (:meth:`Trainer.evaluate`); None when it diverged (it leaves
        the array at the next step)."""
        t = self.trainers[i]
        row = t.evaluate()
        if t.done:
            self._dirty = True
        return row

    def drop(self, i: int, reason: str = "stopped by the caller") -> None:
        """Stop member i (pruned, or decided): it leaves the fused step from the next step."""
        t = self.trainers[i]
        if t.status == "completed" and not t.done:
            t.status, t.reason = "stopped", f"{reason} at {t.tokens:,} tokens"
        self._dirty = True

    def summary(self, i: int) -> TrainSummary:
        return self.trainers[i].summary()

    # -- packing ----------------------------------------------------------------------------

    def _unpack(self) -> None:
        """Give every packed member its own storage again (weights and AdamW state)."""
        if self._prefetch is not None:  # batches drawn ahead are put back
            positions = self._prefetch.position
            self._prefetch.close()
            self._prefetch = None
            assert self._pack is not None
            for i, pos in zip(self._pack.ids, positions, strict=True):
                self.trainers[i].batches.load_state_dict(pos)
        if self._pack is None:
            return
        for row, i in enumerate(self._pack.ids):
            t = self.trainers[i]
            views = dict(t.model.named_parameters())
            _rebind(t.model, {n: p.detach().clone() for n, p in views.items()})
            _swap_optimizer_params(t.optimizer, views, dict(t.model.named_parameters()))
            self._write_optimizer(row, i)
        self._pack = None

    def _write_optimizer(self, row: int, i: int) -> None:
        """The packed AdamW state of member i into its ``torch.optim.AdamW`` (solo format)."""
        pk, t = self._pack, self.trainers[i]
        assert pk is not None
        if pk.steps[row] == 0:
            return
        params = dict(t.model.named_parameters())
        dims = unit_dims(t.model)
        for entry in pk.layout:
            name = entry[0]
            p = params[name]
            w = p.size(dims[name]) if name in dims else 0
            state = t.optimizer.state[p]
            state["step"] = torch.tensor(
                float(pk.steps[row]), dtype=torch.float32, device=p.device
            )
            for key, buf in (("exp_avg", pk.exp_avg), ("exp_avg_sq", pk.exp_avg_sq)):
                block = unit_slice(_block(buf, row, entry), w, dims.get(name))
                state[key] = block.clone(memory_format=torch.contiguous_format)

    def _repack(self) -> None:
        self._unpack()
        ids = self.active
        self._dirty, self._fresh = False, True
        if not ids:
            return
        first = self.members[0]
        widths = padded_widths([self.members[i].widths for i in ids])
        from tlmsearch.models import build_model

        vocab = self.trainers[0].model.wte.num_embeddings
        template = build_model(first.model, widths, vocab, seed=0).to(self.device)
        _check_template(template)
        dims = unit_dims(template)
        named = list(template.named_parameters())
        head = next(n for n, p in named if p is template.lm_head.weight)
        # Matrices, then MLP down projections (muP gives them groups of their own), then
        # vectors: each member's AdamW groups become a few contiguous runs of its row.
        order = sorted(
            range(len(named)), key=lambda j: (named[j][1].ndim < 2, dims.get(named[j][0]) == 1, j)
        )
        layout, off = [], 0
        for j in order:
            name, p = named[j]
            layout.append((name, off, tuple(p.shape), dims.get(name)))
            off += p.numel()
        K, dev = len(ids), self.device

        def zeros() -> torch.Tensor:
            return torch.zeros(K, off, device=dev)

        flat, grad, exp_avg, exp_avg_sq = zeros(), zeros(), zeros(), zeros()
        steps, segments = [], []
        for row, i in enumerate(ids):
            t = self.trainers[i]
            params = dict(t.model.named_parameters())
            group_of = {
                id(p): g
                for g, group in enumerate(t.optimizer.param_groups)
                for p in group["params"]
            }
            step = 0
            views = {}
            runs: dict[int, list[tuple[int, int]]] = {}
            for entry in layout:
                name, _, _, dim = entry
                p = params[name]
                w = p.size(dim) if dim is not None else 0
                view = unit_slice(_block(flat, row, entry), w, dim)
                if view.shape != p.shape:
                    raise ConfigError(
                        f"members[{i}]: {name} has shape {tuple(p.shape)}, the "
                        f"array's {tuple(view.shape)}"
                    )
                view.copy_(p.detach())
                views[name] = view
                state = t.optimizer.state.get(p, {})
                if state:
                    step = int(state["step"])
                    for key, buf in (("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)):
                        unit_slice(_block(buf, row, entry), w, dim).copy_(state[key])
                g, start, end = group_of[id(p)], entry[1], entry[1] + math.prod(entry[2])
                spans = runs.setdefault(g, [])
                if spans and spans[-1][1] == start:  # extends the group's last run
                    spans[-1] = (spans[-1][0], end)
                else:
                    spans.append((start, end))
            steps.append(step)
            segments.append(sorted(runs.items()))
            _rebind(t.model, views)
            _swap_optimizer_params(t.optimizer, params, dict(t.model.named_parameters()))
        stacked = {}
        for entry in layout:
            name, o, shape, _ = entry
            leaf = flat[:, o : o + math.prod(shape)].view(K, *shape).requires_grad_()
            leaf.grad = grad[:, o : o + math.prod(shape)].view(K, *shape)  # summed into in place
            stacked[name] = leaf
        frame = _norm_frame([self.trainers[i].optimizer for i in ids], segments, off, dev)
        cfgs = [self.members[i].train for i in ids]
        clip = [c.grad_clip if c.grad_clip > 0 else math.inf for c in cfgs]
        self._pack = _Pack(
            ids=ids,
            template=template,
            layout=layout,
            flat=flat,
            grad=grad,
            exp_avg=exp_avg,
            exp_avg_sq=exp_avg_sq,
            clip=torch.tensor(clip, dtype=torch.float32, device=dev),
            frame=frame,
            steps=steps,
            step_t=torch.tensor(steps, dtype=torch.float32, device=dev),
            segments=segments,
            head=head,
            stacked=stacked,
            loss_fn=self._loss_fn(template, head, K),
        )

    def _loss_fn(self, template: nn.Module, head: str, k: int) -> Callable[..., torch.Tensor]:
        """(stacked params, x (K, B, T), y (K, B, T)) -> each member's mean loss (K,): the
        final states of every member under vmap, then the output layer and the loss chunk by
        chunk for all members at once (the solo run's chunked loss, batched)."""
        hidden = _Hidden(template)
        # Tokens of each member per chunk of the loss: on a CPU the solo run's chunk shared
        # by the K members (logits of K x 2048 x 16384 fp32 ran the loss's elementwise passes
        # 2.7x slower per element than the solo run's one-member chunks at the quickstart size);
        # a GPU takes 16 such chunks at once (4.3 GB of logits at K = 64 there).
        rows = CHUNK_TOKENS * (16 if self.device.type == "cuda" else 1)
        chunk = max(1, rows // k)
        batched = torch.vmap(lambda params, x: torch.func.functional_call(hidden, params, (x,)))

        def losses(
            params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
        ) -> torch.Tensor:
            with autocast_context(self.device, self.dtype), attention_context(self.kernel):
                h = batched({f"lm.{n}": p for n, p in params.items()}, x)  # (K, B, T, d)
                return batched_linear_cross_entropy(
                    h.flatten(1, 2), params[head], y.flatten(1), chunk
                )

        return torch.compile(losses) if self.compile else losses

    # -- training ---------------------------------------------------------------------------

    def _draw(self, trainers: list[Trainer]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One step's micro-batches for ``trainers``, each from its own windows: (x, y) pairs
        of shape (K, B, T), one copy to the device each (on the prefetch thread)."""
        per_member = [[t.batches.next(t.micro) for _ in range(t.accum)] for t in trainers]
        out = []
        for j in range(self.accum):
            x = torch.stack([steps[j][0] for steps in per_member])
            y = torch.stack([steps[j][1] for steps in per_member])
            out.append((to_device(x, self.device), to_device(y, self.device)))
        return out

    def step(self) -> None:
        """One optimizer step of every active member."""
        if self._dirty:
            self._repack()
        pk = self._pack
        if pk is None:
            return
        trainers = [self.trainers[i] for i in pk.ids]
        if self._prefetch is None:
            self._prefetch = Prefetch(lambda: self._draw(trainers), _Positions(trainers))  # type: ignore[arg-type]
        first = self._fresh
        for t in trainers:
            if first:
                t._first = t.steps if t._first is None else t._first
            elif not t._clock.running:
                t._clock.start()
        t0 = time.perf_counter()
        for t in trainers:
            t.lr = lr_at(t.tokens + t.step_tokens, t.cfg)
            parametrization.set_lr(t.optimizer, t.lr)  # the groups' LRs the fused step reads
        step_loss = None
        with warnings.catch_warnings(record=first) as caught:
            if first:  # a fallback's warning comes once per process: see every one
                warnings.simplefilter("always")
            # the grads are strided views of the (K, P) buffer, summed into in place
            warnings.filterwarnings("ignore", message=".*gradient layout contract.*")
            for x, y in self._prefetch.next():
                losses = pk.loss_fn(pk.stacked, x, y)  # (K,)
                (losses.sum() / self.accum).backward()
                step_loss = losses.detach() if step_loss is None else step_loss + losses.detach()
        for w in caught or []:  # "performance drop ... batching rule for aten::op"
            op = re.search(r"batching rule for (\S+?)\.", str(w.message))
            if op:
                self.fallbacks.add(op.group(1))
        assert step_loss is not None
        self._optimizer_step(pk)
        for row, t in enumerate(trainers):
            t._losses.append(step_loss[row])
            t.tokens += t.step_tokens
            t.steps += 1
            if t.average is not None:
                t.average.update(t.model, t.tokens)
            if t.done:
                self._dirty = True
        if first:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            for t in trainers:
                if t.setup["first_step_s"] is None:
                    t.setup["first_step_s"] = time.perf_counter() - t0
            self._fresh = False
        else:
            for t in trainers:
                t._timed_tokens += t.step_tokens

    @torch.no_grad()
    def _optimizer_step(self, pk: _Pack) -> None:
        """Clip each member on its own norm, then each member's groups' AdamW step."""
        clip_rows_(pk.grad, pk.clip, pk.frame)
        pk.steps = [s + 1 for s in pk.steps]
        pk.step_t.add_(1)
        for row, i in enumerate(pk.ids):
            groups = self.trainers[i].optimizer.param_groups
            for g, spans in pk.segments[row]:
                tensors = [
                    [buf[row, a:b] for a, b in spans]
                    for buf in (pk.flat, pk.grad, pk.exp_avg, pk.exp_avg_sq)
                ]
                fused_adamw_(tensors, pk.step_t[row], groups[g])
        pk.grad.zero_()

    # -- state ------------------------------------------------------------------------------

    def state_dict(self, i: int) -> dict[str, Any]:
        """Member i's state at its eval, in :meth:`Trainer.state_dict`'s format (a solo Trainer
        or an array resumes from it), its tensors copied out of the array's buffers."""
        t = self.trainers[i]
        pk = self._pack
        position = None
        if pk is not None and i in pk.ids:
            self._write_optimizer(pk.ids.index(i), i)
            if self._prefetch is not None:
                position = self._prefetch.position[pk.ids.index(i)]
        state = t.state_dict()
        if position is not None:
            state["batches"] = position
        state = _copy_tensors(state)
        if pk is not None and i in pk.ids:
            t.optimizer.state.clear()  # the array's buffers hold it
        return state

    def close(self) -> None:
        self._unpack()
        for t in self.trainers:
            t.close()


# -------------------------------------------------------------------------------------------------
# Helpers on modules


def _norm_frame(
    optimizers: list[torch.optim.Optimizer],
    segments: list[list[tuple[int, list]]],
    size: int,
    device: Any,
) -> torch.Tensor | None:
    """The gradient norm's frame: each row's param groups' lr_scale (1/m under muP) over the
    spans of the flat row they cover; None where every group's is 1."""
    frame = None
    for row, optimizer in enumerate(optimizers):
        groups = optimizer.param_groups
        for g, spans in segments[row]:
            f = groups[g].get(parametrization.LR_SCALE, 1.0)
            if f != 1.0:
                if frame is None:
                    frame = torch.ones(len(optimizers), size, device=device)
                for a, b in spans:
                    frame[row, a:b] = f
    return frame


def _block(buf: torch.Tensor, row: int, entry: tuple) -> torch.Tensor:
    _, off, shape, _ = entry
    return buf[row, off : off + math.prod(shape)].view(shape)


def _rebind(model: nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Make ``model``'s parameters (tied ones once) the given tensors (views or copies)."""
    old = dict(model.named_parameters())
    new = {
        id(old[n]): nn.Parameter(t, requires_grad=old[n].requires_grad) for n, t in tensors.items()
    }
    for module in model.modules():
        for key, p in list(module._parameters.items()):
            if p is not None and id(p) in new:
                module._parameters[key] = new[id(p)]


def _swap_optimizer_params(
    opt: torch.optim.Optimizer, old: dict[str, nn.Parameter], new: dict[str, nn.Parameter]
) -> None:
    """Point the optimizer's groups at the rebound parameters (its state is written at a
    :meth:`TrialArray.state_dict`; the array steps them)."""
    by_id = {id(old[n]): new[n] for n in old}
    for group in opt.param_groups:
        group["params"] = [by_id.get(id(p), p) for p in group["params"]]
    opt.state.clear()


def _copy_tensors(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone(memory_format=torch.contiguous_format)
    if isinstance(obj, dict):
        return type(obj)((k, _copy_tensors(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_copy_tensors(v) for v in obj]
    return obj


# -------------------------------------------------------------------------------------------------
# The loop


def train_array(
    members: Sequence[Member],
    data: PreparedData,
    *,
    device: str = "auto",
    threads: int | None = None,
    compile: bool = False,
    on_eval: Callable[[int, dict], object] | None = None,
    resume: Sequence[dict[str, Any] | None] | None = None,
    on_checkpoint: Callable[[int, dict[str, Any]], None] | None = None,
) -> list[TrainSummary]:
    """Train every member (``train_proxy`` for K runs at once); ``on_eval(i, row)`` returning
    True or "stop" drops member i; ``on_checkpoint(i, state)`` at member i's checkpoint evals.

    Example::

        summaries = train_array(members, data, device="cpu")
    """
    arr = TrialArray(members, data, device=device, threads=threads, compile=compile, states=resume)
    try:
        while not arr.done:
            arr.step()
            for i in arr.evals_due():
                row = arr.evaluate(i)
                t = arr.trainers[i]
                if row is None:
                    continue
                if t.checkpoint_due() and on_checkpoint is not None:
                    on_checkpoint(i, arr.state_dict(i))
                if t.stop_asked(on_eval(i, dict(row)) if on_eval is not None else None):
                    arr.drop(i)
    finally:
        arr.close()
    return [arr.summary(i) for i in range(len(members))]


__all__ = [
    "FUSABLE_ARCHS",
    "Member",
    "TrialArray",
    "check_fusable",
    "clip_rows_",
    "fused_adamw_",
    "pad_units",
    "padded_widths",
    "train_array",
    "unit_slice",
]
