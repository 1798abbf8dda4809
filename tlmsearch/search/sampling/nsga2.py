"""NSGA-II that survives pickling: Ray pickles the searcher, and with it the sampler.

Optuna's genetic samplers hold a ``threading.Lock`` (optuna/samplers/_ga/_base.py), which cannot
be pickled; this drops it on the way out and makes a new one on the way in.
"""

from __future__ import annotations

import threading
from typing import Any

from optuna.samplers import NSGAIISampler


class PicklableNSGAIISampler(NSGAIISampler):
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_thread_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._thread_lock = threading.Lock()
