"""Depth profiles: a per-layer multiplier of a training quantity, planned from a schedule shape.

MLP widths and attention heads move *capacity* over depth at an exact budget
(:mod:`tlmsearch.widths.schedules`, :mod:`tlmsearch.widths.heads`). A depth profile moves a
*training* quantity instead: layer i's learning rate (``lr.``) or init scale (``init.``) is the
study's times a multiplier p_i. A candidate gives one with prefixed keys, the same shapes and
parameters as its MLP schedule (the registry :data:`~tlmsearch.widths.schedules.SHAPES`)::

    {"shape": "uniform", "lr.shape": "cosine", "lr.r_start": 1.5, "lr.part": "mlp"}

is the uniform model whose early MLPs step 1.5x harder and late ones 0.5x: the taper's larger
effective steps without its capacity (the step-or-capacity experiment). Besides the shape's
parameters a profile takes:

- ``part``: where in layer i it applies: ``block`` (every parameter of the block), ``mlp``
  (the MLP's matrices, the default) or ``down`` (the MLP's down projection, the matrix muP
  scales).
- ``width_power`` (default 0): a factor m_i ** power, m_i the layer's MLP width over uniform's.
  ``lr.width_power: -1`` with ``lr.part: down`` is muP's learning-rate rule without its init
  (the taper's capacity without its larger steps); ``init.width_power: -1`` muP's init alone.
- ``lr.embedding`` / ``lr.head`` (default 1): the token embedding's / output layer's LR
  multiplier, as a candidate (compared with uniform) rather than a setting (which gives every
  schedule, uniform too, the value). A tied model (``model.tie_embeddings``) has one matrix
  for both: give the same value or only ``lr.embedding``.

**The mean.** A profile is renormalised to mean exactly 1, weighted by each layer's MLP width
for parts ``mlp`` and ``down`` (their parameters: the budget's sense, so m_i ** -1 stays
exactly 1 / m_i, muP's factors) and unweighted for ``block``. On uniform widths both are the
layer mean: a profile moves steps between layers, it does not raise them all.

A candidate's profile reaches its trial as ``train.lr_profile`` / ``train.init_profile`` (one
number per layer), ``train.lr_profile_part`` / ``train.init_profile_part`` and
``train.embedding_lr_mult`` (:func:`train_update`,
:meth:`tlmsearch.config.StudyConfig.for_candidate`); :mod:`tlmsearch.train.parametrization`
applies them (an AdamW group per layer, composed with muP's own multipliers; gradient
clipping's frame is muP's alone).

Each quantity is one entry of :data:`QUANTITIES`: the space, validation, planning, labels,
twins and the trials table read it, so a new per-layer multiplier is one entry, the site that
applies it and its tests. Pure Python: no torch, no ray.

>>> plan_profile({"lr.shape": "linear", "lr.r_start": 1.5}, QUANTITIES["lr"], 3)
(1.5, 1.0, 0.5)
>>> plan_profile({"lr.width_power": -1, "lr.part": "down"}, QUANTITIES["lr"], 2, (96, 32))
(0.6666666666666666, 2.0)
>>> profile_label({"shape": "uniform", "lr.shape": "cosine", "lr.r_start": 1.5})
'lr cosine 1.5->0.5'
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tlmsearch.widths.schedules import (
    MAX_PARAM,
    SHAPES,
    ScheduleError,
    check_params,
    given_label,
    profile,
    schedule_params,
)

# Where a profile applies within layer i's block, in the order messages list them.
PARTS: dict[str, str] = {
    "block": "every parameter of the layer's block (attention, MLP, norms)",
    "mlp": "the MLP's matrices (gate, up and down projections)",
    "down": "the MLP's down projection only (the output weight muP scales)",
}
DEFAULT_PART = "mlp"
# A multiplier past these is a typo, not a profile (an LR 100x the study's diverges).
MULT_RANGE = (1e-3, 100.0)
POWER_RANGE = (-4.0, 4.0)  # width_power: muP's rules are -1 and -1/2


@dataclass(frozen=True)
class Quantity:
    """One per-layer multiplier: its candidate prefix and the ``train`` fields it lands in."""

    name: str  # the prefix without its dot: lr, init
    doc: str  # one line: what p_i multiplies
    profile_field: str  # TrainConfig's per-layer list: lr_profile
    part_field: str  # TrainConfig's part: lr_profile_part
    column: str  # the trials table's column: the realised profile as JSON
    # scalar keys of this quantity beside the shape's parameters -> their TrainConfig field
    # (None: read by the planning itself) and default
    extras: Mapping[str, tuple[str | None, Any]]

    @property
    def prefix(self) -> str:
        return f"{self.name}."

    @property
    def part_key(self) -> str:
        return f"{self.name}.part"

    def key(self, extra: str) -> str:
        return f"{self.prefix}{extra}"

    def train_fields(self) -> tuple[tuple[str, Any, str], ...]:
        """(train field, its default, the candidate key that sets it) of every field this
        quantity fills: its per-layer list, its part and its scalar extras.

        >>> [f for f, _, _ in QUANTITIES["init"].train_fields()]
        ['init_profile', 'init_profile_part']
        """
        out = [
            (self.profile_field, None, f"{self.prefix}*"),
            (self.part_field, DEFAULT_PART, self.part_key),
        ]
        out += [(f, d, self.key(e)) for e, (f, d) in self.extras.items() if f is not None]
        return tuple(out)


_COMMON = {"part": (None, DEFAULT_PART), "width_power": (None, 0.0)}
QUANTITIES: dict[str, Quantity] = {
    q.name: q
    for q in (
        Quantity(
            "lr",
            "layer i's parameters step at train.lr x p_i (AdamW group LR)",
            "lr_profile",
            "lr_profile_part",
            "lr_profile_json",
            {**_COMMON, "embedding": ("embedding_lr_mult", 1.0), "head": ("head_lr_mult", 1.0)},
        ),
        Quantity(
            "init",
            "layer i's matrices start at their init std x p_i",
            "init_profile",
            "init_profile_part",
            "init_profile_json",
            _COMMON,
        ),
    )
}


@dataclass(frozen=True)
class PerLayer:
    """One per-layer quantity of a trial, whatever moves it: MLP widths and attention heads
    (capacity, planned together at an exact budget by :func:`tlmsearch.widths.heads.
    plan_candidate`) and the depth profiles of :data:`QUANTITIES` (training multipliers).
    Every reader of a trial's per-layer arrays (its record, the trials table, the report's
    per-layer figure, :attr:`tlmsearch.widths.candidate.LayerPlan.layers`) iterates
    :data:`LAYERED`, so a new per-layer quantity is one entry here."""

    name: str  # mlp, heads, lr, init
    prefix: str  # its candidate keys' prefix: "" (the MLP schedule's bare keys), "heads.", "lr."
    default: str  # what a layer gets from a candidate that names none of its keys
    record: str  # the trial's key of its per-layer list (the Optuna attribute, the record)
    column: str  # the trials table's column: the list as JSON
    number: type  # int (widths, heads) or float (multipliers)
    applies: str  # where it reaches the model or the optimizer
    # its per-layer values in a candidate's plan (a LayerPlan); None: every layer at the default
    of_plan: Callable[[Any], tuple[Any, ...] | None]

    def uniform(self, values: Sequence[Any] | None) -> bool:
        """Whether ``values`` are the same in every layer (None: the default in each)."""
        return values is None or len(set(values)) <= 1

    def as_json(self, values: Sequence[Any]) -> str:
        """``values`` as the trials table's column holds them (``[96, 32]``, ``[1.5, 0.5]``)."""
        return json.dumps([self.number(v) for v in values])


def _profile_entry(q: Quantity) -> PerLayer:
    return PerLayer(
        q.name,
        q.prefix,
        "x1 (the study's own)",
        q.profile_field,
        q.column,
        float,
        f"train.{q.profile_field}: {q.doc}",
        lambda plan: plan.profiles.get(q.name),
    )


LAYERED: dict[str, PerLayer] = {
    e.name: e
    for e in (
        PerLayer(
            "mlp",
            "",
            "model.d_ff (uniform)",
            "widths",
            "widths_json",
            int,
            "each layer's MLP hidden width (the model built)",
            lambda plan: plan.widths,
        ),
        PerLayer(
            "heads",
            "heads.",
            "model.n_head (or model.layer_heads)",
            "heads",
            "heads_json",
            int,
            "each layer's attention query heads (model.layer_heads)",
            lambda plan: plan.heads,
        ),
        *(_profile_entry(q) for q in QUANTITIES.values()),
    )
}


def quantity_of(key: str) -> Quantity | None:
    """The quantity a candidate / dimension key belongs to (``lr.r_start`` -> lr), or None.

    >>> quantity_of("lr.shape").name, quantity_of("r_start"), quantity_of("train.lr")
    ('lr', None, None)
    """
    head, dot, rest = key.partition(".")
    return QUANTITIES.get(head) if dot and rest else None


def is_profile_key(key: str) -> bool:
    """Whether ``key`` belongs to a depth profile (``lr.shape``, ``init.part``)."""
    return quantity_of(key) is not None


def profile_params(searchable: bool = False) -> tuple[str, ...]:
    """Every key a depth profile takes: each quantity's prefix + each schedule parameter, and
    its extras (``part``, ``width_power``, ``lr.embedding``).

    >>> profile_params(searchable=True)[:3]
    ('lr.shape', 'lr.r_start', 'lr.r_end')
    """
    keys: list[str] = []
    for q in QUANTITIES.values():
        keys += [q.prefix + p for p in schedule_params(searchable)]
        keys += [q.key(e) for e in q.extras]
    return tuple(keys)


def value_names() -> dict[str, tuple[str, ...]]:
    """The names each name-valued profile key takes (``lr.part``: block, mlp, down)."""
    return {q.part_key: tuple(PARTS) for q in QUANTITIES.values()}


def profile_schedule(candidate: Mapping[str, Any], q: Quantity) -> dict[str, Any] | None:
    """``candidate``'s shape of ``q`` without its prefix or extras, or None when it names no
    key of ``q`` (a part or a power alone shapes a uniform profile).

    >>> profile_schedule({"shape": "cosine", "lr.shape": "linear", "lr.part": "down"},
    ...                  QUANTITIES["lr"])
    {'shape': 'linear'}
    """
    named = {k[len(q.prefix) :]: v for k, v in candidate.items() if k.startswith(q.prefix)}
    if not named:
        return None
    keys = {k: v for k, v in named.items() if k not in q.extras}
    return {"shape": "uniform", **keys} if "shape" not in keys else keys


def part_of(candidate: Mapping[str, Any], q: Quantity) -> str:
    """Where ``q``'s profile applies (``lr.part``, default ``mlp``), checked."""
    part = candidate.get(q.part_key, DEFAULT_PART)
    if not isinstance(part, str) or part not in PARTS:
        raise ScheduleError(q.part_key, f"{part!r} is not one of {', '.join(PARTS)}")
    return part


def _number(
    candidate: Mapping[str, Any], key: str, default: float, bounds: tuple[float, float]
) -> float:
    value = candidate.get(key, default)
    lo, hi = bounds
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not (math.isfinite(value) and lo <= value <= hi):
        raise ScheduleError(key, f"must be a number in [{lo:g}, {hi:g}], but got {value!r}")
    return float(value)


def check_profile(candidate: Mapping[str, Any], q: Quantity) -> None:
    """Raise :class:`ScheduleError` (field ``lr.*``) for a profile its shape cannot plan."""
    sched = profile_schedule(candidate, q)
    if sched is None:
        return
    part_of(candidate, q)
    _number(candidate, q.key("width_power"), 0.0, POWER_RANGE)
    for extra, (field, default) in q.extras.items():
        if field is not None:
            _number(candidate, q.key(extra), default, MULT_RANGE)
    try:
        check_params(sched["shape"], {k: v for k, v in sched.items() if k != "shape"})
    except ScheduleError as err:
        raise ScheduleError(q.prefix + err.field, err.message) from None


def plan_profile(
    candidate: Mapping[str, Any],
    q: Quantity,
    n_layer: int,
    widths: Sequence[int] | None = None,
) -> tuple[float, ...] | None:
    """``candidate``'s multipliers of ``q`` over ``n_layer`` layers of MLP ``widths`` (None:
    uniform widths), renormalised to mean 1 (see the module docstring), or None when it has
    none or a flat one (every layer x1: the study's own quantity).

    >>> plan_profile({"init.shape": "blocks", "init.preset": "wider_late"}, QUANTITIES["init"], 3)
    (0.5, 1.0, 1.5)
    >>> plan_profile({"lr.shape": "uniform"}, QUANTITIES["lr"], 4) is None
    True
    """
    sched = profile_schedule(candidate, q)
    if sched is None:
        return None
    check_profile(candidate, q)
    if widths is not None and len(widths) != n_layer:
        raise ValueError(f"widths has {len(widths)} layers, not {n_layer}")
    rest = {k: v for k, v in sched.items() if k != "shape"}
    try:
        raw = profile(sched["shape"], n_layer, **rest)
    except ScheduleError as err:
        raise ScheduleError(q.prefix + err.field, err.message) from None
    ws = [float(w) for w in widths] if widths is not None else [1.0] * n_layer
    base = sum(ws) / n_layer
    power = _number(candidate, q.key("width_power"), 0.0, POWER_RANGE)
    if power:
        raw = [r * (w / base) ** power for r, w in zip(raw, ws, strict=True)]
    weights = ws if part_of(candidate, q) in ("mlp", "down") else [1.0] * n_layer
    mean = sum(r * w for r, w in zip(raw, weights, strict=True)) / sum(weights)
    if not (mean > 0 and math.isfinite(mean)) or min(raw) <= 0:
        raise ScheduleError(q.prefix + "shape", "its ratios must all be > 0")
    mults = tuple(r / mean for r in raw)
    lo, hi = MULT_RANGE
    for i, m in enumerate(mults):
        if not lo <= m <= hi:
            raise ScheduleError(
                q.prefix + "shape",
                f"layer {i} would get a multiplier of {m:.3g}, outside [{lo:g}, {hi:g}]; use "
                "ratios nearer 1",
            )
    if max(mults) - min(mults) < 1e-12 and abs(mults[0] - 1) < 1e-12:
        return None
    return mults


def train_update(
    candidate: Mapping[str, Any], n_layer: int, widths: Sequence[int] | None = None
) -> dict[str, Any]:
    """The ``train`` fields ``candidate``'s profiles set for a model of ``n_layer`` layers of
    MLP ``widths``: ``{"lr_profile": [...], "lr_profile_part": "mlp"}``; ``{}`` without one.

    >>> train_update({"shape": "uniform", "lr.shape": "linear", "lr.r_start": 1.5}, 2)
    {'lr_profile': [1.5, 0.5], 'lr_profile_part': 'mlp'}
    >>> train_update({"shape": "uniform", "lr.embedding": 4}, 2)
    {'embedding_lr_mult': 4.0}
    """
    out: dict[str, Any] = {}
    for q in QUANTITIES.values():
        mults = plan_profile(candidate, q, n_layer, widths)
        if mults is not None:
            out[q.profile_field] = list(mults)
            out[q.part_field] = part_of(candidate, q)
        for extra, (field, default) in q.extras.items():
            if field is not None and q.key(extra) in candidate:
                value = _number(candidate, q.key(extra), default, MULT_RANGE)
                if value != default:
                    out[field] = value
    return out


def has_profile(candidate: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` names any depth-profile key (flat or not): then it is no baseline."""
    return any(is_profile_key(k) for k in candidate)


def profile_label(candidate: Mapping[str, Any]) -> str:
    """The profiles part of a candidate's label (``lr cosine 1.5->0.5 down``), ``""`` without.

    >>> profile_label({"lr.shape": "linear", "lr.r_start": 1.25, "lr.part": "block"})
    'lr linear 1.25->0.75 block'
    >>> profile_label({"lr.width_power": -1, "lr.part": "down", "lr.embedding": 2})
    'lr down x width^-1 embedding x2'
    """
    parts = []
    for q in QUANTITIES.values():
        sched = profile_schedule(candidate, q)
        if sched is None:
            continue
        shape = sched.get("shape")
        if isinstance(shape, str) and shape in SHAPES:
            text = SHAPES[shape].label_of(sched)
        else:
            text = f"{shape} {given_label(sched, sorted(k for k in sched if k != 'shape'))}"
        words = [q.name, text.rstrip()]
        part = candidate.get(q.part_key)
        if part is not None and part != DEFAULT_PART:
            words.append(str(part))
        power = candidate.get(q.key("width_power"))
        if power not in (None, 0):
            words.append(f"x width^{_shown(power)}")
        for extra, (field, default) in q.extras.items():
            value = candidate.get(q.key(extra))
            if field is not None and value not in (None, default):
                words.append(f"{extra} x{_shown(value)}")
        if len(words) > 2 and words[1] == "uniform":
            del words[1]  # a flat shape says nothing beside a part, a power or a multiplier
        parts.append(" ".join(words))
    return " | ".join(parts)


def _shown(value: Any) -> str:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return f"{value:g}" if number and abs(value) <= MAX_PARAM else repr(value)


__all__ = [
    "DEFAULT_PART",
    "LAYERED",
    "MULT_RANGE",
    "PARTS",
    "POWER_RANGE",
    "QUANTITIES",
    "PerLayer",
    "Quantity",
    "check_profile",
    "has_profile",
    "is_profile_key",
    "part_of",
    "plan_profile",
    "profile_label",
    "profile_params",
    "profile_schedule",
    "quantity_of",
    "train_update",
    "value_names",
]
