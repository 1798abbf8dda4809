"""The trainer: one proxy run's whole state as an object (:class:`Trainer`).

``loop.train_proxy`` is the short loop around it; checkpoints hold its :meth:`Trainer.state_dict`
and a resumed run loads it (:meth:`Trainer.load_state_dict`), on one worker or N
(:mod:`tlmsearch.train.distributed`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from tlmsearch.config import ModelConfig, TrainConfig
from tlmsearch.data.batches import Batches, Prefetch, pinned, val_windows
from tlmsearch.data.prepare import PreparedData
from tlmsearch.errors import ConfigError
from tlmsearch.train import parametrization
from tlmsearch.train.averaging import load_average, weight_average
from tlmsearch.train.distributed import DistInfo
from tlmsearch.train.divergence import DivergenceMonitor
from tlmsearch.train.loss import next_token_nll
from tlmsearch.train.runtime import (
    TrainSummary,
    attention_context,
    attention_kernel,
    autocast_context,
    batch_shape,
    enable_tf32,
    evaluate,
    lr_at,
    resolve_compile,
    resolve_device,
    resolve_dtype,
)
from tlmsearch.widths import budget

if TYPE_CHECKING:
    from torch.nn.parallel import DistributedDataParallel


def rng_states() -> dict[str, Any]:
    """Every random generator a training step may read (torch's CPU and CUDA generators)."""
    out: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class _Clock:
    """Seconds of training between evals: CUDA events, read at the eval (no synchronize per
    step), or wall time on a CPU."""

    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"
        self.running = False
        self._t0: Any = None

    def start(self) -> None:
        self.running = True
        if self.cuda:
            self._t0 = torch.cuda.Event(enable_timing=True)
            self._t0.record()
        else:
            self._t0 = time.perf_counter()

    def stop(self) -> float:
        if not self.running:
            return 0.0
        self.running = False
        if not self.cuda:
            return time.perf_counter() - self._t0
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        end.synchronize()
        return self._t0.elapsed_time(end) / 1000


class _Loss(torch.nn.Module):
    """The training loss of a micro-batch as a module, so that DDP and torch.compile wrap the
    whole of it (autocast, the attention kernel, the chunked loss)."""

    def __init__(
        self, model: torch.nn.Module, device: torch.device, dtype: torch.dtype, kernel: str
    ) -> None:
        super().__init__()
        self.model = model
        self.device, self.dtype, self.kernel = device, dtype, kernel

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with autocast_context(self.device, self.dtype), attention_context(self.kernel):
            return next_token_nll(self.model, x, y)


def _vocab_size(model_cfg: ModelConfig, data: PreparedData) -> int:
    """The model's vocabulary: ``model.vocab_size`` (never below the data's), else the data's."""
    vocab = data.vocab_size
    if model_cfg.vocab_size is not None and model_cfg.vocab_size < vocab:
        raise ConfigError(
            f"model.vocab_size ({model_cfg.vocab_size}) is below the data's vocabulary "
            f"({vocab}); remove model.vocab_size or raise it"
        )
    return model_cfg.vocab_size or vocab


def _optimizer(
    model: torch.nn.Module,
    model_cfg: ModelConfig,
    cfg: TrainConfig,
    vocab: int,
    dev: torch.device,
) -> torch.optim.AdamW:
    """AdamW over the parametrization's groups."""
    # The fused AdamW kernel exists for CPU and CUDA; on this CPU it was 3-9% faster per step.
    # train.parametrization (tlmsearch/train/parametrization.py): under mup each MLP down
    # projection's init is rescaled here and its group carries an lr_scale that set_lr applies.
    return torch.optim.AdamW(
        parametrization.param_groups(model, model_cfg, cfg, vocab_size=vocab),
        lr=cfg.lr,
        betas=tuple(cfg.betas),
        fused=dev.type in ("cpu", "cuda") or None,
    )


def _ddp(net: torch.nn.Module, dev: torch.device) -> DistributedDataParallel:
    """``net`` in torch's DistributedDataParallel (this rank's device on CUDA)."""
    from torch.nn.parallel import DistributedDataParallel

    # forward_sync_buffers off: every rank builds the same buffers and none changes them.
    # find_unused_parameters: a parameter may get no gradient (titans: the memory's last
    # write is never read, so at seq_len <= its chunk its k, v and gates get none); such a
    # parameter keeps .grad None on every rank, as on one worker, and AdamW skips it.
    ids = None
    if dev.type == "cuda":
        ids = [dev.index if dev.index is not None else torch.cuda.current_device()]
    return DistributedDataParallel(
        net, device_ids=ids, forward_sync_buffers=False, find_unused_parameters=True
    )


class Trainer:
    """One proxy run: the model, optimizer, LR schedule, batch cursor, token count, RNG states,
    divergence monitor and averaged weights, with :meth:`step`, :meth:`evaluate` and
    :meth:`state_dict` / :meth:`load_state_dict` (what a checkpoint holds).

    The hot loop reads nothing back from the device: each step's loss stays there until the
    eval, which feeds the window's losses to the divergence monitor (a run that diverged inside
    the window ends there, reported at the step that diverged, as if it had stopped on it),
    and step times come from CUDA events read at the eval. On N ranks (``dist``) the model is
    wrapped in torch's DistributedDataParallel: the gradient all-reduce overlaps the last
    micro-batch's backward (``no_sync`` on the others), and each rank trains its share of
    the global step (:mod:`tlmsearch.train.distributed`).

    Example::

        t = Trainer(cfg.model, widths, data, cfg.train, seed=0)
        while not t.done:
            t.step()
            if t.eval_due:
                row = t.evaluate()  # None: diverged (t.status, t.reason)
        t.close()
    """

    def __init__(
        self,
        model_cfg: ModelConfig,
        widths: Sequence[int],
        data: PreparedData,
        cfg: TrainConfig,
        *,
        seed: int,
        threads: int | None = None,
        device: str = "auto",
        dist: DistInfo | None = None,
    ) -> None:
        self.t_start = time.perf_counter()
        self.cfg, self.dist, self.data = cfg, dist, data
        n_threads = threads or cfg.threads
        tf32 = self._init_device(device, n_threads)
        vocab = _vocab_size(model_cfg, data)
        self._init_model(model_cfg, widths, vocab, seed)
        self._init_data(seed)
        peak, use_compile = self._compile_plan(n_threads)
        self.optimizer = _optimizer(self.model, model_cfg, cfg, vocab, self.device)
        kernel = attention_kernel(cfg, self.device, data.seq_len)
        self._init_steps(peak)
        self._init_net(kernel, use_compile)
        self.setup: dict[str, Any] = self._setup_info(tf32, use_compile, kernel)
        self._init_state()

    # -- construction, in this order (the model's init and the data order depend on it) ---------

    def _init_device(self, device: str, n_threads: int | None) -> bool:
        """The device, CPU threads and training dtype; whether TF32 is on."""
        dev = self.device = resolve_device(device)
        if n_threads and dev.type == "cpu":
            torch.set_num_threads(n_threads)
        self.dtype = resolve_dtype(self.cfg, dev)
        return enable_tf32(dev, self.dtype)

    def _init_model(
        self, model_cfg: ModelConfig, widths: Sequence[int], vocab: int, seed: int
    ) -> None:
        """The model on the device (training mode) and its parameter and FLOP counts."""
        from tlmsearch.models import build_model

        # The same data order and the same initial weights (keyed by seed and parameter name, MLP
        # units by index: build_model) for every candidate of a seed. The model does not read the
        # global generator; it is seeded for anything else random.
        torch.manual_seed(seed)
        self.model = build_model(model_cfg, widths, vocab, seed=seed).to(self.device)
        self.model.train()
        self.counts = budget.trial_counts(model_cfg, widths, vocab, self.data.seq_len)

    def _init_data(self, seed: int) -> None:
        """The training batch cursor (seeded) and the validation windows, pinned."""
        data, dev, seq = self.data, self.device, self.data.seq_len
        self.batches = Batches(data.train_tokens(), seq, seed=seed)
        self.vx, self.vy = (pinned(t, dev) for t in val_windows(data.val_tokens(), seq))

    def _compile_plan(self, n_threads: int | None) -> tuple[float, bool]:
        """(this worker's peak FLOP/s at the precision that runs, whether to torch.compile)."""
        from tlmsearch.train.mfu import peak_flops

        peak = peak_flops(self.device, n_threads, dtype=self.dtype)  # the precision that runs
        fpt = float(self.counts["flops_per_token"])
        return peak, resolve_compile(self.cfg, self.device, fpt, peak)

    def _init_steps(self, peak: float) -> None:
        """The step's shape (global and this rank's share), the step count and the peak."""
        cfg, dist, seq = self.cfg, self.dist, self.data.seq_len
        self.micro, self.accum = batch_shape(cfg, seq)
        self.step_tokens = self.micro * self.accum * seq  # the global step, whatever the workers
        # this rank's share of every step (all of it for one worker)
        self.local_micro, self.local_accum = (
            dist.local_shape(self.micro, self.accum, cfg.micro_batch_size)
            if dist
            else (self.micro, self.accum)
        )
        self.n_steps = max(1, math.ceil(cfg.tokens / self.step_tokens))
        self.interval = cfg.eval_interval
        self.peak = peak * (dist.world if dist else 1)  # tokens/s counts every worker's tokens

    def _init_net(self, kernel: str, use_compile: bool) -> None:
        """The loss module the steps call: wrapped in DDP on N ranks, then maybe compiled."""
        net: torch.nn.Module = _Loss(self.model, self.device, self.dtype, kernel)
        self._ddp: DistributedDataParallel | None = None
        if self.dist:
            net = self._ddp = _ddp(net, self.device)
        self.net = torch.compile(net) if use_compile else net

    def _setup_info(self, tf32: bool, use_compile: bool, kernel: str) -> dict[str, Any]:
        """How this run trains (the summary's ``setup``)."""
        dev, dist = self.device, self.dist
        return {
            "device": str(dev),
            "dtype": str(self.dtype).removeprefix("torch."),
            "tf32": tf32,
            "compile": use_compile,
            "attention": kernel,
            "threads": torch.get_num_threads() if dev.type == "cpu" else None,
            "micro_batch": self.local_micro,
            "accum": self.local_accum,
            "workers": dist.world if dist else 1,
            "step_tokens": self.step_tokens,
            "steps": self.n_steps,
            "peak_flops": self.peak,
            "first_step_s": None,  # the first step's wall time, the compile included
        }

    def _init_state(self) -> None:
        """The monitor, the averaged weights and the counters (what a checkpoint keeps)."""
        cfg = self.cfg
        # ln V of the data's vocabulary: a padded model.vocab_size would hide a run stuck at it
        self.monitor = DivergenceMonitor(cfg.divergence_nats, self.data.vocab_size)
        # train.eval_weights ema / lawa: averages kept in copies of the model, evaluated eagerly
        self.average = weight_average(cfg, self.model, self.step_tokens)
        # the counters a checkpoint keeps ("loop")
        self.steps, self.tokens = 0, 0
        self.next_eval, self.next_checkpoint = self.interval, cfg.checkpoint_every_tokens
        self.curve: list[dict[str, float]] = []
        self.status, self.reason, self.lr = "completed", "", 0.0
        # since the last eval
        self._losses: list[torch.Tensor] = []  # each step's loss, on the device
        self._clock, self._timed_tokens = _Clock(self.device), 0
        self._first: int | None = None  # this process's first step (the compile's)
        self._prefetch: Prefetch | None = None

    # -- training -------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.steps >= self.n_steps or self.status != "completed"

    @property
    def eval_due(self) -> bool:
        return self.tokens >= self.next_eval or self.steps == self.n_steps

    def _draw(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """One step's micro-batches (a rank draws the whole step and keeps its share)."""
        if self.dist:
            return list(
                self.dist.step_batches(
                    self.batches, self.micro, self.accum, self.local_micro, self.device
                )
            )
        return [self.batches.next(self.micro, self.device) for _ in range(self.accum)]

    def step(self) -> None:
        """One optimizer step (its micro-batches, clipping, AdamW, the averages)."""
        if self._prefetch is None:
            self._prefetch = Prefetch(self._draw, self.batches)
        first = self._first is None
        if first:
            self._first = self.steps
        elif not self._clock.running:
            self._clock.start()
        t0 = time.perf_counter()
        self.lr = lr_at(self.tokens + self.step_tokens, self.cfg)
        parametrization.set_lr(self.optimizer, self.lr)
        micro_batches = self._prefetch.next()
        losses = []
        for i, (x, y) in enumerate(micro_batches):
            # DDP all-reduces during the last micro-batch's backward only
            last = i == len(micro_batches) - 1
            with self._ddp.no_sync() if self._ddp and not last else contextlib.nullcontext():
                loss = self.net(x, y)
                (loss / self.local_accum).backward()
            losses.append(loss.detach())
        self._losses.append(torch.stack(losses).sum())  # fp32, read at the eval
        if self.cfg.grad_clip > 0:  # under mup the norm is MuReadout's (parametrization.py)
            parametrization.clip_grad_norm_(
                self.model, self.optimizer.param_groups, self.cfg.grad_clip
            )
        self.model.before_optimizer_step(self.steps)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.tokens += self.step_tokens
        self.steps += 1
        if self.average is not None:  # part of the step's time, so tokens/s shows its cost
            self.average.update(self.model, self.tokens)
        if first:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)  # once: the compile's time
            self.setup["first_step_s"] = time.perf_counter() - t0
        else:
            self._timed_tokens += self.step_tokens

    def _diverged(self, why: str, tokens: int) -> None:
        self.status, self.reason = "diverged", f"diverged: {why} at {tokens:,} tokens"

    def _drain(self) -> list[float] | None:
        """The window's step losses (one read; across ranks one all-reduce), fed to the
        monitor in order; None when one of them diverged (the count rewinds to before it)."""
        values = [v / self.local_accum for v in torch.stack(self._losses).tolist()]
        self._losses = []
        if self.dist:  # the one-worker loss on every rank
            values = self.dist.mean_each(values)
        start = self.tokens - len(values) * self.step_tokens
        for i, value in enumerate(values):
            why = self.monitor.step(value)
            if why:
                self.tokens = start + i * self.step_tokens
                self._diverged(why, self.tokens)
                return None
        return values

    # -- evaluation -----------------------------------------------------------------------------

    def _val_nll(self, m: torch.nn.Module) -> float:
        batch = self.cfg.eval_batch_size or self.local_micro
        dev, dtype = self.device, self.dtype
        if self.dist:  # each rank a slice of the windows, summed
            rows = self.dist.rows(self.vx.size(0))
            return self.dist.sum(evaluate(m, self.vx[rows], self.vy[rows], batch, dev, dtype))
        return evaluate(m, self.vx, self.vy, batch, dev, dtype)

    def _bpb(self, nll: float) -> float:
        val_bytes = self.data.val_bytes
        return nll / (math.log(2) * val_bytes) if val_bytes else float("nan")

    def evaluate(self) -> dict[str, float] | None:
        """The eval due now: its row (tokens, train and val losses, tokens/s, MFU, LR), added
        to :attr:`curve`. None when the run diverged (:attr:`status`, :attr:`reason`)."""
        elapsed = self._clock.stop()
        losses = self._drain()
        if losses is None:
            return None
        while self.next_eval <= self.tokens:
            self.next_eval += self.interval
        nll_raw = self._val_nll(self.model)
        # Before LAWA's first checkpoint there is nothing to average: the raw weights stand in,
        # and the row's metric equals its _raw one.
        averaged = self.average.eval_model() if self.average is not None else None
        nll = self._val_nll(averaged) if averaged is not None else nll_raw
        n_pred = self.vx.numel()
        val_loss = nll / n_pred
        tps = self._timed_tokens / elapsed if elapsed > 0 else float("nan")
        self._timed_tokens = 0
        row = {
            "tokens": self.tokens,
            "train_loss": sum(losses) / max(1, len(losses)),
            "val_loss": val_loss,
            "val_ppl": math.exp(min(val_loss, 700.0)),
            "val_bpb": self._bpb(nll),
        }
        if self.average is not None:
            row["val_loss_raw"] = nll_raw / n_pred
            row["val_bpb_raw"] = self._bpb(nll_raw)
        fpt = float(self.counts["flops_per_token"])
        row |= {
            "tokens_per_s": tps,
            "mfu": tps * fpt / self.peak if self.peak else float("nan"),
            "lr": self.lr,
            "wall_s": time.perf_counter() - self.t_start,
        }
        self.curve.append(row)
        # the trained weights diverge, not their (lagging) average
        why = self.monitor.eval(nll_raw / n_pred, warmed_up=self.tokens >= self.cfg.warmup_tokens)
        if why:
            self._diverged(why, self.tokens)
            return None
        return row

    def checkpoint_due(self) -> bool:
        """Whether this eval takes a checkpoint (the first at or after every
        ``checkpoint_every_tokens``); moves the next one on."""
        every = self.cfg.checkpoint_every_tokens
        if not (every and self.next_checkpoint and self.tokens >= self.next_checkpoint):
            return False
        while self.next_checkpoint <= self.tokens:
            self.next_checkpoint += every
        return True

    def stop_asked(self, answer: object) -> bool:
        """Whether the caller's answer to an eval (True or "stop") ends the run; on N ranks,
        rank 0's answer is every rank's."""
        stop = answer is True or answer == "stop"
        if self.dist:
            stop = self.dist.agree(stop and self.dist.main)
        if stop:
            self.status = "stopped"
            self.reason = f"stopped by the caller at {self.tokens:,} tokens"
        return stop

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The run's whole state at an eval: ``"model"`` (its state_dict: the raw weights), the
        optimizer, data position, monitor, RNGs, ``"loop"`` (step, tokens, next eval and
        checkpoint, ``curve``), ``"tokens"``, and ``"average"`` with ``train.eval_weights`` ema
        or lawa. Its tensors are the live ones (no copy): save it before training goes on."""
        assert not self._losses, "a state is taken at an eval, whose window is drained"
        extra = {"average": self.average.state_dict()} if self.average is not None else {}
        position = self._prefetch.position if self._prefetch else self.batches.state_dict()
        loop = {
            "step": self.steps,
            "tokens": self.tokens,
            "next_eval": self.next_eval,
            "next_checkpoint": self.next_checkpoint,
            "curve": [dict(r) for r in self.curve],
        }
        return {
            **extra,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "batches": position,
            "monitor": self.monitor.state_dict(),
            "rng": rng_states(),
            "loop": loop,
            "tokens": self.tokens,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Go on from a :meth:`state_dict` (before the first step): on a CPU exactly as if the
        run had never stopped."""
        assert self._prefetch is None, "a state is loaded before the first step"
        load_average(self.average, state)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.batches.load_state_dict(state["batches"])
        self.monitor.load_state_dict(state["monitor"])
        set_rng_states(state["rng"])
        loop = state["loop"]
        self.steps, self.tokens = loop["step"], loop["tokens"]
        self.next_eval, self.next_checkpoint = loop["next_eval"], loop["next_checkpoint"]
        self.curve = self.evals_of(state)

    @staticmethod
    def evals_of(state: dict[str, Any]) -> list[dict[str, float]]:
        """The eval rows a :meth:`state_dict` holds, in order (a resumed trial reports them)."""
        return [dict(r) for r in state["loop"]["curve"]]

    def close(self) -> None:
        if self._prefetch is not None:
            self._prefetch.close()

    def summary(self) -> TrainSummary:
        return TrainSummary(
            status=self.status,
            reason=self.reason or f"trained {self.tokens:,} tokens",
            tokens=self.tokens,
            metrics=dict(self.curve[-1]) if self.curve else {},
            curve=self.curve,
            wall_s=time.perf_counter() - self.t_start,
            n_params=self.counts["n_params"],
            n_params_nonemb=self.counts["n_params_nonemb"],
            flops_per_token=float(self.counts["flops_per_token"]),
            setup=self.setup,
        )
