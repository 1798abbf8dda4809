"""Data: corpora from packages or user files -> tokenizer -> token arrays; batches.

``prepare_data(cfg)`` returns a :class:`PreparedData` (cached by content hash); ``Batches`` draws
deterministic random windows from it. No ray, no optuna.
"""

from tlmsearch.data.prepare import PreparedData, prepare_data

__all__ = ["PreparedData", "prepare_data"]
