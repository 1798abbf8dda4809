"""Attention capacity across depth: a heads schedule per candidate, at an exact budget.

The MLP schedule moves hidden width between layers; a *heads schedule* moves attention heads
(the head size ``d_model // model.n_head`` stays fixed, as in OpenELM's layer-wise scaling,
arXiv 2404.14619). A candidate gives it with ``heads.``-prefixed keys: the same shapes and
parameters as its MLP schedule (the registry :data:`tlmsearch.widths.schedules.SHAPES`)::

    {"shape": "cosine", "r_start": 1.5, "heads.shape": "linear", "heads.r_start": 0.5}

is a cosine MLP taper with heads growing linearly over depth (0.5x -> 1.5x of ``n_head``).

Heads come in groups of ``kv_group = n_head // n_kv_head`` query heads sharing one key/value
head (grouped-query attention; a group is one head without ``n_kv_head``), so layer l has h_l
query heads and h_l / kv_group key/value heads, and the rounding of
:func:`tlmsearch.widths.schedules.plan_units` runs over groups: the heads sum to ``n_layer *
n_head`` exactly and keep the profile's order, as MLP widths do.

**Moving capacity between attention and the MLPs.** ``heads.share`` (default 1) sets the
candidate's heads total to ``share * n_layer * n_head``, and its MLP widths absorb the
difference so that the whole block budget stays uniform's *exactly*: the parameters
(``model.attention.hold: params``, the default) or the training FLOPs per token at
``model.attention.seq_len`` (``hold: flops``). Both sides are integers: a group of heads costs
``c_g`` and a unit of MLP width (``multiple_of`` hidden units in one layer) costs ``c_u``, so
only a heads total that differs from uniform's by a multiple of ``c_u / gcd(c_g, c_u)`` groups
is exactly payable; the nearest such total to the share is taken, and the realised share is the
plan's ``heads_share``. With share 1 each half keeps its own budget, and then parameters and
FLOPs both stay equal (attention's FLOPs are linear in its heads).

Pure Python (no torch): ``tlmsearch validate`` plans every candidate with it.

>>> from tlmsearch.config import ModelConfig
>>> cfg = ModelConfig(n_layer=4, d_model=64, n_head=4, d_ff=128)
>>> plan = cfg.plan({"shape": "uniform", "heads.shape": "linear", "heads.r_start": 0.5})
>>> plan.heads, plan.widths
((2, 3, 5, 6), (128, 128, 128, 128))
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tlmsearch.widths.schedules import (
    ScheduleError,
    WidthPlan,
    check_params,
    plan_from_params,
    plan_units,
)
from tlmsearch.widths.space import (  # a candidate's parts: re-exported for the planning's callers
    PREFIX,
    SHARE,
    heads_label,
    heads_params,
    heads_schedule,
    is_heads_key,
    mlp_schedule,
)

if TYPE_CHECKING:  # config/model.py imports this module inside ModelConfig.plan
    from tlmsearch.config import ModelConfig

# heads.share is an O(1) ratio of attention capacity; past these it is a typo
SHARE_RANGE = (0.05, 20.0)


def share_of(candidate: Mapping[str, Any]) -> float:
    """The requested heads total over uniform's (``heads.share``, default 1), checked."""
    share = candidate.get(SHARE)
    if share is None:
        return 1.0
    lo, hi = SHARE_RANGE
    if isinstance(share, bool) or not isinstance(share, int | float) or not lo <= share <= hi:
        raise ScheduleError(SHARE, f"must be a number in [{lo:g}, {hi:g}], but got {share!r}")
    return float(share)


def check_heads(model: ModelConfig, candidate: Mapping[str, Any]) -> None:
    """Raise :class:`ScheduleError` (field ``heads.*``) for a heads schedule ``model`` cannot
    take: an architecture without per-layer heads, or parameters its shape does not read."""
    sched = heads_schedule(candidate)
    if sched is None:
        return
    if model.arch not in model.heads_archs:
        able = ", ".join(model.heads_archs)
        raise ScheduleError(
            "heads.shape",
            f"arch {model.arch} has the same heads in every layer; heads schedules are built "
            f"by {able}: remove the heads.* dimensions or change model.arch",
        )
    try:
        check_params(sched["shape"], {k: v for k, v in sched.items() if k != "shape"})
    except ScheduleError as err:
        raise ScheduleError(PREFIX + err.field, err.message) from None


def costs(model: ModelConfig) -> tuple[int, int]:
    """(c_g, c_u): what one group of query heads and one unit of MLP width (``multiple_of``
    hidden units in one layer) cost in the quantity ``model.attention.hold`` keeps equal.

    >>> from tlmsearch.config import ModelConfig
    >>> costs(ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64))  # 4 d hd, 3 d m
    (2048, 1536)
    """
    from tlmsearch.widths.budget import MIXERS, mlp_params

    mixer = MIXERS[model.arch]
    h, g = model.n_head, model.kv_group
    params, linear, attn = (
        b - a for a, b in zip(mixer(model, h), mixer(model, h + g), strict=True)
    )
    unit = mlp_params(
        model.model_copy(update={"n_layer": 1, "layer_heads": None}), [model.multiple_of]
    )
    if model.attention.hold == "params":
        return params, unit
    seq = model.attention.seq_len
    if seq is None:
        raise ScheduleError(
            "model.attention.seq_len",
            "hold: flops counts FLOPs at a sequence length; give one (a study fills in "
            "data.seq_len)",
        )
    # training FLOPs per token: 3 x (2 x weights + attention's 4 x head_dim x seq per head)
    return 3 * (2 * linear + 4 * model.head_dim * seq * attn), 3 * 2 * unit


def _total_groups(model: ModelConfig, share: float) -> tuple[int, int]:
    """(heads total in groups, MLP width units it frees (+) or takes (-)) nearest ``share``."""
    uniform = model.n_layer * model.n_head // model.kv_group
    if share == 1.0:
        return uniform, 0
    c_g, c_u = costs(model)
    step = c_u // math.gcd(c_g, c_u)  # groups per exactly payable move
    k = round((share - 1.0) * uniform / step)
    k = max(k, -((uniform - model.n_layer) // step))  # every layer keeps one group
    total = uniform + k * step
    return total, -k * step * c_g // c_u


def plan_candidate(model: ModelConfig, candidate: Mapping[str, Any]) -> WidthPlan:
    """``candidate``'s exact-budget MLP widths and attention heads for ``model``
    (:meth:`tlmsearch.config.ModelConfig.plan`).

    Without a heads schedule the heads are the model's own (``layer_heads`` or ``n_head``).
    """
    mlp = mlp_schedule(candidate)
    sched = heads_schedule(candidate)
    if sched is None:
        plan = plan_from_params(
            mlp, n_layer=model.n_layer, d_ff=model.d_ff_uniform, multiple_of=model.multiple_of
        )
        return WidthPlan(plan.widths, plan.d_ff, plan.multiple_of, heads=model.heads)
    check_heads(model, candidate)
    group, L = model.kv_group, model.n_layer
    total, freed = _total_groups(model, share_of(candidate))

    def too_few(layer: int, ratio: float) -> str:
        return (
            f"layer {layer} would get no head (its normalised ratio is {ratio:.3f} of "
            f"{total * group / L:g} heads a layer, in groups of {group}); raise the smallest "
            f"ratio to at least {L / total:.3f}, raise heads.share or model.n_head"
        )

    rest = {k: v for k, v in sched.items() if k != "shape"}
    try:
        groups = plan_units(sched["shape"], L, total, too_few, **rest)
    except ScheduleError as err:
        raise ScheduleError(PREFIX + err.field, err.message) from None
    heads = tuple(g * group for g in groups)
    if "shape" not in mlp:
        plan_from_params(mlp, n_layer=L, d_ff=model.d_ff_uniform)  # names the missing shape
    units = L * (model.d_ff_uniform // model.multiple_of) + freed
    m = model.multiple_of

    def too_narrow(layer: int, ratio: float) -> str:
        return (
            f"layer {layer} would get no MLP width after heads.share took "
            f"{-freed * m} hidden units for attention (its normalised ratio is {ratio:.3f}); "
            "lower heads.share or raise the smallest MLP ratio"
        )

    if units < L:
        raise ScheduleError(
            SHARE,
            f"{share_of(candidate):g} gives attention more than the MLPs can pay: "
            f"{-freed * m} hidden units of {L * model.d_ff_uniform}; lower heads.share",
        )
    shape = mlp["shape"]
    widths = plan_units(
        shape, L, units, too_narrow, **{k: v for k, v in mlp.items() if k != "shape"}
    )
    share = total / (L * model.n_head // group)
    return WidthPlan(
        tuple(u * m for u in widths), model.d_ff_uniform, m, heads=heads, heads_share=share
    )


__all__ = [
    "PREFIX",
    "SHARE",
    "check_heads",
    "costs",
    "heads_label",
    "heads_params",
    "heads_schedule",
    "is_heads_key",
    "mlp_schedule",
    "plan_candidate",
    "share_of",
]
