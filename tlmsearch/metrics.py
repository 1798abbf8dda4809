"""Objective metrics: which trials column holds each, and the objectives a study names.

A leaf (docs/contributing.md, rule 19): the results tables, the evidence and the report all need
these names, and none of them should import another to reach them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tlmsearch.config import StudyConfig

# Objective metric names (METRICS) whose trials column is named differently.
_METRIC_COLUMN = {"params": "n_params", "non_embedding_params": "n_params_nonemb"}


def metric_column(metric: str) -> str:
    """The trials column holding an objective metric: ``params`` -> ``n_params``.

    >>> metric_column("params"), metric_column("val_bpb")
    ('n_params', 'val_bpb')
    """
    return _METRIC_COLUMN.get(metric, metric)


def objectives_of(study: StudyConfig) -> list[tuple[str, str]]:
    """``[(metric, 'minimize'|'maximize'), ...]`` of a study's objectives (a run dir's study:
    :func:`tlmsearch.config.frozen_study`; its model's default when it names none).

    >>> from tlmsearch.config import PartialStudy
    >>> objectives_of(PartialStudy())
    [('val_bpb', 'minimize')]
    """
    return [(o.metric, o.sense) for o in study.objectives]
