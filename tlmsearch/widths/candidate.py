"""A candidate, typed: one point of a search, parsed once, and the one plan of its layers.

A candidate arrives as a mapping (a sampler's params, a YAML ``search.candidates`` entry, a
trials table's ``params_json``)::

    {"shape": "cosine", "r_start": 1.5, "heads.shape": "linear", "lr.shape": "cosine",
     "train.lr": 0.003}

:class:`Candidate` is that mapping frozen, with its parts named (the MLP schedule, the heads
schedule, each depth profile, the settings) and one stable :attr:`Candidate.identity`: the
canonical JSON every consumer keys it by (the trials table's ``params_json``, Optuna's trial
attribute, the Evidence, best.yaml, twins and resume). It is a read-only ``dict``, so the schedule
functions that read keys, JSON, YAML and pickle take it as they take any dict.

:func:`plan` turns a candidate into its :class:`LayerPlan` for a model: every per-layer
quantity at once (MLP widths and attention heads at an exact budget, the depth profiles'
multipliers, the ``train`` fields those set) and :attr:`LayerPlan.key`, what makes its training
on a seed the one it is. Grouping trainings, finding a sampler's twin and deciding whether a
candidate is the baseline read the plan, not the keys.

>>> from tlmsearch.config import ModelConfig
>>> model = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64)
>>> cand = Candidate({"shape": "uniform", "lr.shape": "linear", "lr.r_start": 1.5})
>>> cand.identity
'{"lr.r_start": 1.5, "lr.shape": "linear", "shape": "uniform"}'
>>> p = plan(model, cand)
>>> p.widths, p.profiles["lr"], p.is_baseline
((64, 64), (1.5, 0.5), False)

Pure Python: no torch, no ray.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

import yaml

from tlmsearch.widths import profiles as _profiles
from tlmsearch.widths.heads import plan_candidate
from tlmsearch.widths.schedules import WidthPlan
from tlmsearch.widths.space import (
    SHARE,
    describe,
    heads_schedule,
    is_baseline,
    mlp_schedule,
    schedule_label,
    settings_of,
)

if TYPE_CHECKING:  # config/model.py calls plan() from ModelConfig.plan
    from tlmsearch.config import ModelConfig

# the trials table's column of each candidate's identity (its storage form, a JSON string):
# every reader of the table names it by this constant and reads it with Candidate.from_identity
IDENTITY = "params_json"


class Candidate(dict[str, Any]):
    """One candidate, frozen: its keys as given, its parts by name and its :attr:`identity`.

    A read-only ``dict`` (JSON, YAML and pickle take it as one, and ``Candidate(d) == d``),
    hashed by its identity, so it keys dicts and sets; changing it raises.

    >>> c = Candidate({"shape": "cosine", "r_start": 1.25, "train.lr": 0.01})
    >>> c.mlp, c.settings, c.label
    ({'shape': 'cosine', 'r_start': 1.25}, {'train.lr': 0.01}, 'cosine 1.25->0.75 @ lr=0.01')
    >>> c == {"train.lr": 0.01, "r_start": 1.25, "shape": "cosine"}
    True
    >>> Candidate.from_identity(c.identity) == c
    True
    >>> c["r_start"] = 2.0
    Traceback (most recent call last):
    TypeError: a Candidate is frozen: make a new one, Candidate({**old, key: value})
    """

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        params = {} if params is None else params
        if not isinstance(params, Mapping):
            kind = type(params).__name__
            raise TypeError(f"a candidate is a mapping of keys to values, not a {kind}")
        super().__init__(params)

    @classmethod
    def of(cls, candidate: Mapping[str, Any]) -> Candidate:
        """``candidate`` itself when it is one already, else parsed."""
        return candidate if isinstance(candidate, Candidate) else cls(candidate)

    @classmethod
    def from_identity(cls, identity: str) -> Candidate:
        """The candidate a stored :attr:`identity` names (``""``: the empty candidate, as a
        record written before candidates were stored says)."""
        data = json.loads(identity) if identity else {}
        if not isinstance(data, dict):
            raise ValueError(f"a candidate's identity is a JSON object, not {identity[:80]!r}")
        return cls(data)

    def _frozen(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("a Candidate is frozen: make a new one, Candidate({**old, key: value})")

    __setitem__ = __delitem__ = __ior__ = _frozen
    clear = pop = popitem = setdefault = update = _frozen  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        # equal candidates hash equal: {"r": 1} == {"r": 1.0}, as for the dicts they are
        return hash(_frozen(self))

    def __repr__(self) -> str:
        return f"Candidate({dict(self)!r})"

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and deepcopy (Ray ships it): its keys
        return (Candidate, (dict(self),))

    @cached_property
    def identity(self) -> str:
        """The canonical JSON of its keys: one string per candidate, stable across runs and
        versions (the trials table's ``params_json``, Optuna's ``candidate`` attribute)."""
        return json.dumps(self, sort_keys=True)

    def as_dict(self) -> dict[str, Any]:
        """A plain, mutable copy of its keys (for YAML and JSON writers)."""
        return dict(self)

    @cached_property
    def mlp(self) -> dict[str, Any]:
        """The MLP schedule: every key that is not a setting, heads or a depth profile."""
        return mlp_schedule(self)

    @cached_property
    def heads(self) -> dict[str, Any] | None:
        """The heads schedule without its prefix, or None (every layer keeps its heads)."""
        return heads_schedule(self)

    @property
    def share(self) -> Any:
        """``heads.share`` as given (1: attention keeps its budget)."""
        return self.get(SHARE, 1)

    @cached_property
    def settings(self) -> dict[str, Any]:
        """The config scalars it sets (``{"train.lr": 0.003}``)."""
        return settings_of(self)

    @cached_property
    def profiles(self) -> dict[str, dict[str, Any]]:
        """Each depth profile it names, by quantity, without its prefix
        (``{"lr": {"shape": "cosine", "r_start": 1.5}}``)."""
        out = {}
        for q in _profiles.QUANTITIES.values():
            sched = _profiles.profile_schedule(self, q)
            if sched is not None:
                out[q.name] = sched
        return out

    @cached_property
    def is_baseline(self) -> bool:
        """Whether it is the uniform baseline (:func:`tlmsearch.widths.space.is_baseline`)."""
        return is_baseline(self)

    @cached_property
    def label(self) -> str:
        """A short human label, distinct for distinct candidates (the trials table's
        ``candidate``)."""
        return describe(self)

    @cached_property
    def schedule_label(self) -> str:
        """:attr:`label` without the settings (the trials table's ``schedule``)."""
        return schedule_label(self)


def _frozen(value: Any) -> Any:
    """A hashable copy of a candidate's value (a custom shape's ratios are a list)."""
    if isinstance(value, Mapping):
        return frozenset((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    return value


# YAML writers (best.yaml, a run's study.yaml) take a candidate as the dict it is
yaml.SafeDumper.add_representer(Candidate, yaml.SafeDumper.represent_dict)


@dataclass(frozen=True)
class LayerPlan(WidthPlan):
    """Every per-layer quantity of one candidate in one model: the MLP widths and attention
    heads (a :class:`~tlmsearch.widths.schedules.WidthPlan`) and the depth profiles."""

    candidate: Candidate = field(default_factory=lambda: Candidate({}))
    # each non-flat depth profile's multipliers by quantity: {"lr": (1.5, ..., 0.5)}
    profiles: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    # the train fields the profiles set, sorted by name, lists as tuples (train_update)
    train: tuple[tuple[str, Any], ...] = ()

    @property
    def train_update(self) -> dict[str, Any]:
        """The ``train`` fields the candidate's profiles set (``{"lr_profile": [...], ...}``):
        what :meth:`tlmsearch.config.StudyConfig.for_candidate` applies."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.train}

    @property
    def is_baseline(self) -> bool:
        return self.candidate.is_baseline

    @property
    def layers(self) -> dict[str, tuple[Any, ...]]:
        """Every per-layer quantity it plans, by :data:`~tlmsearch.widths.profiles.LAYERED`
        name, in the registry's order: ``mlp`` (the widths) and ``heads`` always, each depth
        profile where it is not flat.

        >>> from tlmsearch.config import ModelConfig
        >>> m = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64)
        >>> plan(m, {"shape": "uniform", "init.shape": "linear", "init.r_start": 1.5}).layers
        {'mlp': (64, 64), 'heads': (2, 2), 'init': (1.5, 0.5)}
        """
        out = {}
        for e in _profiles.LAYERED.values():
            values = e.of_plan(self)
            if values is not None:
                out[e.name] = tuple(values)
        return out

    @property
    def key(self) -> tuple[Any, ...]:
        """What makes this candidate's training on a seed the one it is: widths, heads,
        settings and profiles. Two candidates with one key train the same model the same way
        (the grid trains it once a seed; a sampler's second draw replays the first's curve)."""
        setting = json.dumps(self.candidate.settings, sort_keys=True)
        return (self.widths, self.heads, setting, json.dumps(self.train_update, sort_keys=True))


def plan(model: ModelConfig, candidate: Mapping[str, Any]) -> LayerPlan:
    """``candidate``'s :class:`LayerPlan` in ``model`` (its exact-budget widths and heads,
    tlmsearch/widths/heads.py, and its depth profiles over those widths). Raises
    :class:`~tlmsearch.widths.schedules.ScheduleError` naming the key it cannot plan."""
    cand = Candidate.of(candidate)
    width = plan_candidate(model, cand)
    update = _profiles.train_update(cand, model.n_layer, width.widths)
    mults = {
        q.name: tuple(update[q.profile_field])
        for q in _profiles.QUANTITIES.values()
        if q.profile_field in update
    }
    train = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in update.items()))
    return LayerPlan(
        width.widths,
        width.d_ff,
        width.multiple_of,
        heads=width.heads,
        heads_share=width.heads_share,
        candidate=cand,
        profiles=mults,
        train=train,
    )


__all__ = ["IDENTITY", "Candidate", "LayerPlan", "plan"]
