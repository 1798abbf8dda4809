"""Objective metrics: which trials column holds each, and the objectives a study dict names.

A leaf (docs/contributing.md, rule 19): the results tables, the evidence and the report all need
these names, and none of them should import another to reach them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tlmsearch.constants import METRICS

# Objective metric names (METRICS) whose trials column is named differently.
_METRIC_COLUMN = {"params": "n_params", "non_embedding_params": "n_params_nonemb"}


def metric_column(metric: str) -> str:
    """The trials column holding an objective metric: ``params`` -> ``n_params``.

    >>> metric_column("params"), metric_column("val_bpb")
    ('n_params', 'val_bpb')
    """
    return _METRIC_COLUMN.get(metric, metric)


def objectives_of(config: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``[(metric, 'minimize'|'maximize'), ...]`` from a study dict (default: val_bpb, min)."""
    out = []
    for obj in config.get("objectives") or [{"metric": "val_bpb"}]:
        metric = obj.get("metric", "val_bpb")
        out.append((metric, obj.get("direction") or METRICS.get(metric, "minimize")))
    return out
