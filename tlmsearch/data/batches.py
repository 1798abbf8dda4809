"""Batches: random windows from a memory-mapped token array, and the fixed validation windows.

The window starts come from a NumPy generator seeded by the trial's seed alone, so every candidate
of a seed sees the same data in the same order (paired comparisons). Bound for a CUDA device, a
batch goes through page-locked (pinned) memory and an asynchronous copy (:func:`to_device`);
:class:`Prefetch` draws the next steps' batches on a thread while the current one trains.
"""

from __future__ import annotations

import queue
import threading
from typing import Any

import numpy as np
import torch


class Batches:
    """Random (x, y) windows of ``seq_len`` tokens; deterministic per ``seed``.

    Example: ``x, y = Batches(tokens, 256, seed=0).next(16)`` gives two (16, 256) int64 tensors,
    y shifted by one.
    """

    def __init__(self, tokens: np.ndarray, seq_len: int, *, seed: int) -> None:
        if tokens.ndim != 1 or tokens.size < seq_len + 1:
            raise ValueError(f"need >= seq_len + 1 = {seq_len + 1} tokens, got {tokens.size}")
        self.tokens = tokens
        self.seq_len = seq_len
        self.rng = np.random.default_rng(seed)
        self._offsets = np.arange(seq_len + 1)

    def next(
        self, batch_size: int, device: torch.device | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The next windows, on ``device`` when given (one copy of the (B, T + 1) windows: x and
        y are views of it there)."""
        return self.windows(self.starts(batch_size), device)

    def starts(self, batch_size: int) -> np.ndarray:
        """The next ``batch_size`` window starts (what ``next`` draws, without reading them)."""
        return self.rng.integers(0, self.tokens.size - self.seq_len, size=batch_size)

    def windows(
        self, starts: np.ndarray, device: torch.device | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        win = torch.from_numpy(self.tokens[starts[:, None] + self._offsets].astype(np.int64))
        if device is not None:
            win = to_device(win, device)
        return win[:, :-1], win[:, 1:]  # (B, T), (B, T)

    def state_dict(self) -> dict:
        """The data position: the generator's state (the next window it draws)."""
        return {"bit_generator": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["bit_generator"]


def pinned(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` in page-locked memory when it is bound for a CUDA device, else ``t`` itself.

    A copy from pinned memory with ``non_blocking=True`` is asynchronous: it overlaps the kernels
    still queued (from pageable memory it waits for them). A CPU device needs no copy at all.
    """
    return t.pin_memory() if device.type == "cuda" else t


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``t`` on ``device``: through pinned memory and an asynchronous copy on CUDA, ``t`` itself
    on a CPU. PyTorch's pinned-memory cache keeps the source block until the copy is done."""
    return pinned(t, device).to(device, non_blocking=True)


def val_windows(tokens: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Consecutive windows overlapping by one token: every token but the first is predicted once.

    ``tokens`` has ``1 + k * seq_len`` entries; returns (k, T) inputs and targets.
    """
    k = (tokens.size - 1) // seq_len
    arr = torch.from_numpy(np.asarray(tokens[: 1 + k * seq_len]).astype(np.int64))
    x = arr[:-1].view(k, seq_len)
    y = arr[1:].view(k, seq_len)
    return x, y


class Prefetch:
    """The next steps' batches, drawn ahead on a thread so loading never sits in the step.

    ``draw()`` returns one optimizer step's micro-batches (on their device: pinned and
    non-blocking on CUDA, :func:`to_device`); it is called on the thread, in order, ``depth``
    steps ahead. :meth:`next` hands them out in the order drawn. The generator behind ``draw``
    runs ahead of what was handed out, so the data position of a checkpoint is
    :attr:`position`: ``batches``' state after the last step handed out, recorded with it.

    Example::

        ahead = Prefetch(lambda: [batches.next(8, dev) for _ in range(4)], batches)
        xs = ahead.next()  # the step's 4 (x, y) pairs
        ahead.close()
    """

    def __init__(self, draw: Any, batches: Batches, depth: int = 2) -> None:
        self._draw = draw
        self._batches = batches
        self.position = batches.state_dict()
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._fill, name="tlmsearch-prefetch", daemon=True)
        self._thread.start()

    def _fill(self) -> None:
        try:
            while not self._stop.is_set():
                self._put((self._draw(), self._batches.state_dict()))
        except BaseException as err:  # handed to the consumer, raised there
            self._put(err)

    def _put(self, item: Any) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.05)
                return
            except queue.Full:
                continue

    def next(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        step, self.position = item
        return step

    def close(self) -> None:
        """Stop the thread (the batches it drew ahead are dropped)."""
        self._stop.set()
        self._thread.join()
