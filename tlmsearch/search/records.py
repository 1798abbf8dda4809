"""A run's Optuna trials -> trial rows and curve rows: the one reader the race, the runner and
the export share.

A leaf (docs/contributing.md, rule 19): apart from the modules that read trials, so none of
them imports another to reach it; of the search package it imports only the keys (:mod:`.attrs`,
:data:`.execution.failures.RETRIES`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tlmsearch.config import EVAL_KEYS
from tlmsearch.search.attrs import (
    CANDIDATE,
    INTERRUPTED,
    INTERRUPTED_TRIAL,
    RACE_DECISION,
    RESTART_OF,
    RETRY_OF,
    SAME_AS,
    SEED,
    STAGE,
    STANDS_FOR,
    UNPRUNED,
    WEIGHTS,
)
from tlmsearch.search.execution.failures import RETRIES
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.profiles import LAYERED
from tlmsearch.widths.space import describe

# A trial's final metrics: its last eval, less the bookkeeping keys.
METRIC_KEYS = tuple(k for k in EVAL_KEYS if k not in ("tokens", "lr", "wall_s"))
# What a trial is, recorded by the pruning scheduler (it adds the widths and heads).
STATIC_KEYS = ("n_params", "n_params_nonemb", "flops_per_token", "heads_share", "node")


def trial_records(study: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(trial rows, curve rows) in the columns of docs/run_dir.md (run_dir/tables.py fills the
    rest)."""
    trials, curves = [], []
    again = requeued(study) | interrupted(study)
    decided = {
        k[len(RACE_DECISION) :]: v
        for k, v in study.user_attrs.items()
        if k.startswith(RACE_DECISION) and v
    }  # a decision of None was cleared by a retry
    for ft in study.get_trials(deepcopy=False):
        state = ft.state.name
        attrs = ft.user_attrs
        if state == "WAITING" or ft.number in again:
            continue  # queued, or run again: its other trial stands for it
        if CANDIDATE not in attrs:
            continue
        trial_id = attrs.get("ray_trial_id") or f"optuna-{ft.number}"
        seed = attrs.get(SEED)
        last = attrs.get("metrics") or {}
        row: dict[str, Any] = {
            "trial_id": trial_id,
            "number": ft.number,
            "seed": seed,
            "params": Candidate.from_identity(attrs[CANDIDATE]),
            "state": state,
            "reason": attrs.get("reason", "") if state != "COMPLETE" else "",
            "retries": attrs.get(RETRIES, 0),  # started again after a lost worker
            "tokens": last.get("tokens"),
            "wall_s": last.get("wall_s"),
        }
        # per-layer lists: MLP widths, attention heads (a heads schedule's, or n_head each) and
        # each depth profile's multipliers (lr_profile)
        for e in LAYERED.values():
            if attrs.get(e.record):
                row[e.record] = attrs[e.record]
        if attrs[CANDIDATE] in decided:  # the race decided its candidate: recorded, for good
            row["race_decision"] = json.dumps(decided[attrs[CANDIDATE]], sort_keys=True)
        if attrs.get(UNPRUNED):  # the pruner could not stop it (search.unpruned_candidates)
            row["unpruned"] = True
        if attrs.get(STAGE):  # the confirmation stage's (search.confirm): evidence of its own
            row["stage"] = attrs[STAGE]
        if attrs.get(SAME_AS) is not None:  # replayed a finished twin's curve (same widths, seed)
            row["same_as"] = attrs[SAME_AS]
        if attrs.get(STANDS_FOR):  # grid candidates with the same proxy widths, trained once
            row["stands_for"] = json.dumps([describe(c) for c in json.loads(attrs[STANDS_FOR])])
        if attrs.get(WEIGHTS) and Path(attrs[WEIGHTS]).is_dir():
            # the folder of its kept final weights (search.keep_weights), while it exists
            # (keep_weights: best removes the others at the end; a finished trial's attributes
            # cannot change)
            row["weights"] = attrs[WEIGHTS]
        for k in METRIC_KEYS:
            row[k] = _num(last.get(k))
        for k in STATIC_KEYS:
            if k in attrs:
                row[k] = attrs[k]
        trials.append(row)
        for ev in attrs.get("curve") or []:
            curves.append({"trial_id": trial_id, "seed": seed, **ev})
    return trials, curves


def finite(x: Any) -> bool:
    """A real number that is neither NaN nor infinite (a bool is no number here)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def clean(x: Any) -> Any:
    """JSON-safe scalars for Optuna user attributes (NaN -> None)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):  # numpy scalar
        return clean(x.item())
    return x


def _num(x: Any) -> float:
    return float("nan") if x is None else float(x)


def requeued(study: Any) -> set[int]:
    """Numbers of the failed trials that ``resume --retry-failed`` queued again."""
    trials = study.get_trials(deepcopy=False)
    return {ft.user_attrs[RETRY_OF] for ft in trials if RETRY_OF in ft.user_attrs}


def interrupted(study: Any) -> set[int]:
    """Numbers of the trials a dead driver left running, which ``tlmsearch resume`` queued
    again (the new trial names its predecessor; runs recorded before that marked the old one)."""
    trials = study.get_trials(deepcopy=False)
    never_drawn = {
        int(k[len(INTERRUPTED_TRIAL) :])
        for k, v in study.user_attrs.items()
        if k.startswith(INTERRUPTED_TRIAL) and v
    }
    return (
        {ft.user_attrs[RESTART_OF] for ft in trials if RESTART_OF in ft.user_attrs}
        | {ft.number for ft in trials if ft.user_attrs.get(INTERRUPTED)}
        | never_drawn
    )
