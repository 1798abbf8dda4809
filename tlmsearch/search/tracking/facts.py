"""What every tracker records of a trial, and where each writes by default (docs/tracking.md).

A leaf of the trackers (docs/contributing.md, rule 19): ``callbacks.py`` builds the callbacks of
``mlflow_tracker.py`` and ``wandb_tracker.py``, and all three, with ``study.py``,
need these names. Importing it imports no tracker package and no Ray (:func:`ended_as` reads
progress.outcome when it is called).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tlmsearch.config import EVAL_KEYS, StudyConfig
from tlmsearch.run_dir import RunDir
from tlmsearch.search.attrs import NUMBER, REPLAY, RESUME_FROM
from tlmsearch.search.records import finite
from tlmsearch.widths.profiles import QUANTITIES
from tlmsearch.widths.space import describe, is_baseline

# What a curve point carries besides the eval keys: the trial's size (the same at every eval).
COUNT_KEYS = ("params", "non_embedding_params", "flops_per_token")


@dataclass(frozen=True)
class TrialFacts:
    """What a tracker records about a trial before it reports: from its Ray config."""

    label: str  # the candidate's label (space.describe): the group of its seeds
    seed: int
    number: int | None  # the Optuna trial's number
    params: dict[str, Any]  # the candidate's parameters and the seed (flat, logged as params)
    tags: dict[str, str]

    @property
    def name(self) -> str:
        return f"{self.label} seed {self.seed}" + (
            f" #{self.number}" if self.number is not None else ""
        )


def trial_facts(config: dict[str, Any]) -> TrialFacts:
    """A Ray trial's config (candidate, seed, number; see samplers.py) -> :class:`TrialFacts`.

    >>> f = trial_facts({"candidate": {"shape": "cosine", "r_start": 1.5}, "seed": 1,
    ...                  "number": 4})
    >>> f.name, f.tags["candidate"]
    ('cosine 1.5->0.5 seed 1 #4', 'cosine 1.5->0.5')
    >>> f.params
    {'shape': 'cosine', 'r_start': 1.5, 'seed': 1}
    """
    candidate = dict(config.get("candidate") or {})
    seed, number = int(config.get("seed", 0)), config.get(NUMBER)
    label = describe(candidate)
    tags = {
        "candidate": label,
        "candidate_json": json.dumps(candidate, sort_keys=True),
        "seed": str(seed),
        "baseline": str(is_baseline(candidate)).lower(),
    }
    if number is not None:
        tags["trial"] = str(number)
    if config.get(RESUME_FROM):  # continues an interrupted trial from its checkpoint
        tags[RESUME_FROM] = str(config[RESUME_FROM])
    if config.get(REPLAY):  # the same model as a finished trial: its curve, not trained again
        tags["same_as"] = str(config[REPLAY].get("number"))
    params = {**candidate, "seed": seed}
    return TrialFacts(label, seed, None if number is None else int(number), params, tags)


def curve_point(result: dict[str, Any]) -> dict[str, float] | None:
    """The finite eval keys and counts of a Ray result; None when it has no token count.

    >>> curve_point({"tokens": 2048, "val_bpb": 2.5, "val_ppl": float("nan"), "widths": [1]})
    {'tokens': 2048.0, 'val_bpb': 2.5}
    """
    tokens = result.get("tokens")
    if not finite(tokens):
        return None
    keys = (*EVAL_KEYS, *COUNT_KEYS)
    return {k: float(result[k]) for k in keys if finite(result.get(k))}


class TokenSteps:
    """Each trial's curve once per token count: a trial retried from a checkpoint, or continuing
    an interrupted one, reports the evals before that checkpoint again (trainable.py), and the
    final report repeats the last eval's token count. Trials are told apart by Ray's trial id.

    >>> steps, trial = TokenSteps(), "a"
    >>> steps.new_point(trial, {"tokens": 2048, "val_bpb": 3.0})
    {'tokens': 2048.0, 'val_bpb': 3.0}
    >>> steps.new_point(trial, {"tokens": 2048, "val_bpb": 3.0, "final": True}) is None
    True
    """

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def new_point(self, trial_id: str, result: dict[str, Any]) -> dict[str, float] | None:
        """The result's curve point if its token count is past every one taken, else None."""
        point = curve_point(result)
        if point is None or point["tokens"] <= self._last.get(trial_id, -1.0):
            return None
        self._last[trial_id] = point["tokens"]
        return point

    def forget(self, trial_id: str) -> None:
        """Take this trial's points from the start again (a new tracker run of it)."""
        self._last.pop(trial_id, None)

    def first(self, trial_id: str) -> bool:
        """Whether no point of this trial was taken yet."""
        return trial_id not in self._last


def widths_param(result: dict[str, Any]) -> dict[str, Any]:
    """The per-layer widths a trial reports, as params: ``widths`` (JSON list) and ``n_layer``,
    its attention ``heads`` per layer and its depth profiles (``lr_profile``, JSON lists) when
    it reports them.

    >>> widths_param({"widths": [96, 32], "heads": [3, 1]})
    {'widths': '[96, 32]', 'n_layer': 2, 'heads': '[3, 1]'}
    >>> widths_param({"widths": [64, 64], "lr_profile": [1.5, 0.5]})["lr_profile"]
    '[1.5, 0.5]'
    """
    widths = result.get("widths")
    if not isinstance(widths, (list, tuple)) or not widths:
        return {}
    out: dict[str, Any] = {"widths": json.dumps([int(w) for w in widths]), "n_layer": len(widths)}
    heads = result.get("heads")
    if isinstance(heads, (list, tuple)) and heads:
        out["heads"] = json.dumps([int(h) for h in heads])
    for q in QUANTITIES.values():
        mults = result.get(q.profile_field)
        if isinstance(mults, (list, tuple)) and mults:
            out[q.profile_field] = json.dumps([round(float(m), 6) for m in mults])
    return out


def ended_as(trial: Any, failed: bool) -> str:
    """How a Ray trial ended, as the trackers tag it: complete, pruned or failed
    (progress.outcome; Ray calls the callbacks before it updates the trial's status)."""
    if failed:
        return "failed"
    from tlmsearch.search.progress import outcome

    return outcome(trial, ended=True)


def mlflow_uri(cfg: StudyConfig, run: Path) -> str:
    """The YAML's ``tracking.mlflow.uri``, else a SQLite file in the run dir."""
    opts = cfg.tracking.mlflow
    if opts is not None and opts.uri:
        return opts.uri
    return f"sqlite:///{RunDir(run).mlflow_sqlite.resolve()}"


def wandb_dir(cfg: StudyConfig, run: Path) -> Path:
    """Where W&B writes (``DIR/wandb/...``): ``tracking.wandb.dir``, else the run dir."""
    opts = cfg.tracking.wandb
    return Path(opts.dir).expanduser().resolve() if opts and opts.dir else run.resolve()
