"""Averaged weights for evaluation (``train.eval_weights``): an EMA or LAWA beside the raw ones.

An average of recent weights is a lower-variance estimate of where the run is heading than the
last step's weights (the noise of the last few minibatches averages out), so its val metric may
compare candidates with less seed noise; ``benchmarks/noise.py`` measures whether it does.

- ``ema``: an exponential moving average with a half-life in tokens, updated after every
  optimizer step with decay ``0.5 ** (step_tokens / half_life)``; the bookkeeping is
  ``torch.optim.swa_utils.AveragedModel``. It starts from the weights after the first step.
- ``lawa``: the mean of the last ``k`` checkpoints spaced ``every`` tokens (LAWA,
  arXiv 2306.03241), taken after the first step at or past each multiple of ``every``; fewer
  than ``k`` are averaged while fewer exist.

The trainer calls :meth:`update` after each optimizer step and evaluates :meth:`eval_model`
(None before there is anything to average: the raw weights stand in). Its state goes into the
run's checkpoint (``Trainer.state_dict``), so a resumed run averages exactly as a straight one.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from tlmsearch.config import TrainConfig
from tlmsearch.errors import ConfigError


def ema_decay(step_tokens: int, half_life_tokens: float) -> float:
    """The per-step decay of an EMA whose weight on old steps halves every ``half_life_tokens``.

    >>> ema_decay(512, 1024)
    0.7071067811865476
    """
    return 0.5 ** (step_tokens / half_life_tokens)


class EMA:
    """An exponential moving average of a model's parameters and buffers."""

    kind = "ema"

    def __init__(self, model: torch.nn.Module, decay: float) -> None:
        # use_buffers: the average's buffers are averaged too (a frozen copy of the model's
        # buffers at construction would evaluate a mix of old buffers and new parameters).
        self.avg = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=True)
        self.decay = decay

    @torch.no_grad()
    def update(self, model: torch.nn.Module, tokens: int) -> None:
        self.avg.update_parameters(model)

    def eval_model(self) -> torch.nn.Module | None:
        return self.avg.module if int(self.avg.n_averaged) > 0 else None

    def state_dict(self) -> dict[str, Any]:
        """Live tensors (the EMA's parameters and ``n_averaged``), as a trainer state's are."""
        return {"kind": self.kind, "averaged": self.avg.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.avg.load_state_dict(state["averaged"])


class LAWA:
    """The mean of the last ``k`` snapshots of a model's state, one every ``every`` tokens."""

    kind = "lawa"

    def __init__(self, model: torch.nn.Module, k: int, every: int) -> None:
        self.k, self.every = k, every
        self.next = every  # tokens at (or after) which the next snapshot is taken
        self.snapshots: list[dict[str, torch.Tensor]] = []
        self._shadow = copy.deepcopy(model)  # the module the mean is loaded into to evaluate
        self._stale = True

    @torch.no_grad()
    def update(self, model: torch.nn.Module, tokens: int) -> None:
        if tokens < self.next:
            return
        while self.next <= tokens:
            self.next += self.every
        snap = {name: t.detach().clone() for name, t in model.state_dict().items()}
        self.snapshots = [*self.snapshots, snap][-self.k :]
        self._stale = True

    @torch.no_grad()
    def mean(self) -> dict[str, torch.Tensor]:
        """Each tensor's mean over the snapshots held (non-float tensors: the newest)."""
        last = self.snapshots[-1]
        return {
            name: torch.stack([s[name] for s in self.snapshots]).mean(0)
            if t.is_floating_point()
            else t
            for name, t in last.items()
        }

    def eval_model(self) -> torch.nn.Module | None:
        if not self.snapshots:
            return None
        if self._stale:
            self._shadow.load_state_dict(self.mean())
            self._stale = False
        return self._shadow

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "snapshots": list(self.snapshots), "next": self.next}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.snapshots = [dict(s) for s in state["snapshots"]][-self.k :]
        self.next = int(state["next"])
        self._stale = True


WeightAverage = EMA | LAWA


def weight_average(
    cfg: TrainConfig, model: torch.nn.Module, step_tokens: int
) -> WeightAverage | None:
    """The average ``cfg.eval_weights`` asks for over ``model`` (None for ``raw``).

    Example::

        avg = weight_average(cfg, model, step_tokens)
        ...  # after each optimizer step:
        avg.update(model, tokens)
        evaluate(avg.eval_model() or model, ...)
    """
    if cfg.eval_weights == "ema":
        return EMA(model, ema_decay(step_tokens, cfg.ema_half_life))
    if cfg.eval_weights == "lawa":
        return LAWA(model, cfg.lawa_k, cfg.lawa_spacing)
    return None


def load_average(average: WeightAverage | None, state: dict[str, Any]) -> None:
    """Load a checkpoint's averaged state (``state.get("average")``) into ``average``."""
    saved = state.get("average")
    kind = saved["kind"] if saved else "raw"
    if average is None and saved is None:
        return
    if average is None or saved is None or saved["kind"] != average.kind:
        want = average.kind if average is not None else "raw"
        raise ConfigError(
            f"train.eval_weights: the checkpoint was written with {kind} but this run asks for "
            f"{want}; resume with train.eval_weights: {kind}"
        )
    average.load_state_dict(saved)
