"""When a training run has diverged: rules against the run's own best, not its first loss.

A rule of "loss above 3x its first value" never fires at a large vocabulary: the first loss is
about ln V (9.7 nats at V = 16384), so it waits for ~29 nats, while a run that blows up after a
good start and climbs back towards ln V, or one that never leaves ln V, trains on uselessly.
:class:`DivergenceMonitor` ends a run when

- a loss is not finite;
- the smoothed training loss (an exponential moving average) rises more than ``margin_nats``
  above its running minimum, tracked from step ``min_steps`` on (a blow-up after a good start;
  single-batch spikes are smoothed, and the first steps' overshoot sets no minimum);
- at an eval after the LR warm-up and ``min_steps`` steps, the validation loss is still within
  ``stuck_nats`` of ln V, the loss of predicting every token uniformly (a run that learned
  nothing; learning only the unigram frequencies already brings it well below).
Pure Python: testable on synthetic curves.
"""

from __future__ import annotations

import math


class DivergenceMonitor:
    """Feed every step's loss to :meth:`step` and every eval's to :meth:`eval`; each returns
    the reason the run has diverged, or None.

    >>> m = DivergenceMonitor(margin_nats=1.0, vocab_size=256)
    >>> [m.step(x) for x in [5.5, 4.0, 3.0, 2.5]]
    [None, None, None, None]
    >>> m.step(float("nan"))
    'loss is nan'
    """

    def __init__(
        self,
        margin_nats: float,
        vocab_size: int,
        *,
        beta: float = 0.9,
        min_steps: int = 10,
        stuck_nats: float = 0.05,
    ) -> None:
        if margin_nats <= 0:
            raise ValueError(f"margin_nats must be > 0, but got {margin_nats=}")
        if not 0 <= beta < 1:
            raise ValueError(f"beta must lie in [0, 1), but got {beta=}")
        if vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, but got {vocab_size=}")
        self.margin = margin_nats
        self.beta = beta
        self.min_steps = min_steps
        self.ln_v = math.log(vocab_size)
        self.stuck = stuck_nats
        self.steps = 0
        self._ema = 0.0
        self.best = math.inf  # running minimum of the smoothed loss

    @property
    def smoothed(self) -> float:
        """The bias-corrected moving average (Adam's correction: early values are not damped)."""
        return self._ema / (1 - self.beta**self.steps) if self.steps else math.nan

    def step(self, loss: float) -> str | None:
        if not math.isfinite(loss):
            return f"loss is {loss}"
        self.steps += 1
        self._ema = self.beta * self._ema + (1 - self.beta) * loss
        smooth = self.smoothed
        if self.steps < self.min_steps:
            return None  # the first steps may overshoot and recover: no minimum from them
        self.best = min(self.best, smooth)
        if smooth > self.best + self.margin:
            return (
                f"smoothed loss {smooth:.3f} rose {smooth - self.best:.2f} nats above its "
                f"minimum {self.best:.3f} (limit {self.margin:g})"
            )
        return None

    def state_dict(self) -> dict:
        """What the rules remember: steps seen, the moving average and its minimum."""
        return {"steps": self.steps, "ema": self._ema, "best": self.best}

    def load_state_dict(self, state: dict) -> None:
        self.steps, self._ema, self.best = int(state["steps"]), state["ema"], state["best"]

    def eval(self, val_loss: float, *, warmed_up: bool = True) -> str | None:
        """``warmed_up``: the LR warm-up is over (inside it, a low LR may not have moved yet)."""
        if not math.isfinite(val_loss):
            return f"val loss is {val_loss}"
        if warmed_up and self.steps >= self.min_steps and val_loss > self.ln_v - self.stuck:
            return (
                f"not learning: val loss {val_loss:.3f} after {self.steps} steps is still "
                f"ln V = {self.ln_v:.3f} (every token equally likely)"
            )
        return None
