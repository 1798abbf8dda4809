"""Width schedules: how the MLP hidden width d_ff changes with depth, at an exact budget.

A *profile* is a real-valued ratio per layer (1.0 = the uniform width). :func:`plan_widths`
renormalises it to mean exactly 1 and rounds it to integers that are positive multiples of
``multiple_of``, sum to exactly ``n_layer * d_ff`` and keep the profile's order (so a tapering
profile stays non-increasing). This module is pure Python: no torch, ray or optuna.

Shapes follow Bayat, Behrouz, Courville, "Tapered Language Models" (arXiv 2606.23670), with
t = l / (L - 1):

- ``uniform``: 1 everywhere.
- ``linear``: r_start + (r_end - r_start) * t.
- ``cosine``: r_end + (r_start - r_end) * (1 + cos(pi t)) / 2 (the paper's main method).
- ``sigmoid``: a logistic step of steepness ``k`` centred at ``midpoint``, rescaled so that it
  hits r_start at t=0 and r_end at t=1 exactly (the paper does not state k).
- ``blocks``: early / middle / late groups split at two depth fractions, one multiplier each.
- ``custom``: an explicit per-layer ratio list.

With r_start > r_end the profile tapers (wider early); with r_start < r_end it grows
(wider late, as in OpenELM's layer-wise scaling), so both directions live in one study.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

SHAPES = ("uniform", "linear", "cosine", "sigmoid", "blocks", "custom")

# The block-partition allocations of the paper's motivating experiment (multipliers per group).
BLOCK_PRESETS: dict[str, tuple[float, float, float]] = {
    "uniform": (1.0, 1.0, 1.0),
    "wider_early": (1.5, 1.0, 0.5),
    "wider_middle": (0.75, 1.5, 0.75),
    "wider_late": (0.5, 1.0, 1.5),
}

# Sizes are checked against these before any per-layer list is built (a study's n_layer of 2**63
# made `tlmsearch validate` allocate until the machine ran out of memory). They are generous:
# 8x the depth and 14x the MLP width of the largest public dense LMs (Llama-3 405B has 126
# layers, PaLM 540B d_ff 73,728).
MAX_LAYERS = 1024
MAX_D_FF = 2**20
# Ratios, depth fractions and the sigmoid's steepness are O(1) numbers; past this they are typos
# (and float() of a 400-digit integer is an OverflowError, not a ratio).
MAX_PARAM = 1e6
# The sigmoid's steepness: exp(k) must stay finite (k < 709), and below 0.001 it is a straight
# line to 7 digits (use linear).
K_RANGE = (1e-3, 500.0)

# Every schedule parameter a candidate may carry, with its default.
DEFAULTS: dict[str, Any] = {
    "shape": "cosine",
    "r_start": 1.5,
    "r_end": None,  # None: 2 - r_start, the symmetric pair whose mean is exactly 1
    "k": 10.0,
    "midpoint": 0.5,
    "b1": 1 / 3,
    "b2": 2 / 3,
    "preset": None,
    "m_early": 1.0,
    "m_middle": 1.0,
    "m_late": 1.0,
    "ratios": None,
}
PARAMS = tuple(DEFAULTS)

# The parameters each shape reads; any other one given with it is an error (a parameter the
# shape ignores would make two labels for one model, or hide a typo of the shape).
SHAPE_PARAMS: dict[str, tuple[str, ...]] = {
    "uniform": (),
    "linear": ("r_start", "r_end"),
    "cosine": ("r_start", "r_end"),
    "sigmoid": ("r_start", "r_end", "k", "midpoint"),
    "blocks": ("preset", "b1", "b2", "m_early", "m_middle", "m_late"),
    "custom": ("ratios",),
}


def ramp_ends(params: Mapping[str, Any]) -> tuple[float, float]:
    """(r_start, r_end) of a linear/cosine/sigmoid candidate, with the defaults applied.

    >>> ramp_ends({"r_start": 1.25})
    (1.25, 0.75)
    """
    rs = params.get("r_start")
    rs = float(DEFAULTS["r_start"] if rs is None else rs)
    re_ = params.get("r_end")
    return rs, 2.0 - rs if re_ is None else float(re_)


class ScheduleError(ValueError):
    """A width request that cannot be met. ``field`` names the offending parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class WidthPlan:
    """An exact-budget width vector and what it realises.

    >>> plan = plan_widths("cosine", n_layer=4, d_ff=64, multiple_of=8, r_start=1.5)
    >>> plan.widths, sum(plan.widths) == 4 * 64
    ((96, 80, 48, 32), True)
    """

    widths: tuple[int, ...]
    d_ff: int
    multiple_of: int

    @property
    def n_layer(self) -> int:
        return len(self.widths)

    @property
    def total(self) -> int:
        return sum(self.widths)

    @property
    def realised_start(self) -> float:
        return self.widths[0] / self.d_ff

    @property
    def realised_end(self) -> float:
        return self.widths[-1] / self.d_ff

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(w / self.d_ff for w in self.widths)


# ---------------------------------------------------------------------------------------------
# Profiles (real-valued, any scale; plan_widths renormalises)


def _depth(n_layer: int) -> list[float]:
    return [0.0] * n_layer if n_layer == 1 else [i / (n_layer - 1) for i in range(n_layer)]


def _monotone(values: list[float], increasing: bool) -> list[float]:
    # The closed forms are monotone in exact arithmetic; a running max/min removes ULP-level
    # wiggles of cos/exp so that rounding cannot turn float noise into a one-unit inversion.
    out, best = [], values[0]
    for v in values:
        best = max(best, v) if increasing else min(best, v)
        out.append(best)
    return out


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)  # True is not a ratio


def _positive(field: str, value: float) -> float:
    if not (_is_number(value) and 0 < value <= MAX_PARAM):  # NaN fails both comparisons
        raise ScheduleError(
            field, f"must be a finite number > 0 (at most {MAX_PARAM:,.0f}), but got {value!r}"
        )
    return float(value)


def _check_layers(n_layer: Any) -> None:
    if not (isinstance(n_layer, int) and not isinstance(n_layer, bool)):
        raise ScheduleError("n_layer", f"must be an integer, but got {n_layer!r}")
    if not 1 <= n_layer <= MAX_LAYERS:
        raise ScheduleError("n_layer", f"must lie in [1, {MAX_LAYERS}], but got {n_layer!r}")


def _block_groups(n_layer: int, b1: float, b2: float) -> list[int]:
    if not (_is_number(b1) and _is_number(b2) and 0.0 < b1 < b2 < 1.0):
        raise ScheduleError("b1/b2", f"need 0 < b1 < b2 < 1, but got b1={b1!r}, b2={b2!r}")
    # Layer l sits at the centre of its depth slot, (l + 0.5) / L; equal thirds for 1/3, 2/3.
    groups = []
    for layer in range(n_layer):
        x = (layer + 0.5) / n_layer
        groups.append(0 if x < b1 else 1 if x < b2 else 2)
    return groups


def profile(shape: str, n_layer: int, **params: Any) -> list[float]:
    """The real-valued ratio profile of ``shape`` over ``n_layer`` layers (not yet normalised)."""
    p = {**DEFAULTS, **{k: v for k, v in params.items() if v is not None}}
    if not isinstance(shape, str) or shape not in SHAPES:
        raise ScheduleError("shape", f"{shape!r} is not one of {', '.join(SHAPES)}")
    _check_layers(n_layer)
    t = _depth(n_layer)
    if shape == "uniform":
        return [1.0] * n_layer
    if shape in ("linear", "cosine", "sigmoid"):
        _positive("r_start", p["r_start"])
        if p["r_end"] is not None:
            _positive("r_end", p["r_end"])
        rs, re_ = ramp_ends(p)
        _positive("r_end", re_)  # 2 - r_start must stay positive too
        if shape == "linear":
            g = t
        elif shape == "cosine":
            g = [(1.0 - math.cos(math.pi * x)) / 2.0 for x in t]
        else:
            k, mid = _positive("k", p["k"]), p["midpoint"]
            if not K_RANGE[0] <= k <= K_RANGE[1]:
                raise ScheduleError(
                    "k", f"must lie in [{K_RANGE[0]:g}, {K_RANGE[1]:g}], but got {k!r}"
                )
            if not (_is_number(mid) and 0.0 < mid < 1.0):
                raise ScheduleError("midpoint", f"must lie in (0, 1), but got {mid!r}")
            s = [1.0 / (1.0 + math.exp(-k * (x - mid))) for x in (*t, 0.0, 1.0)]
            s0, s1 = s[-2], s[-1]
            g = [(v - s0) / (s1 - s0) for v in s[:-2]]
        values = [rs + (re_ - rs) * x for x in g]
        if shape == "linear":  # linear must stay an exact ramp (the paper's closed form)
            return values
        return _monotone(values, increasing=re_ > rs)
    if shape == "blocks":
        if p["preset"] is not None:
            if not isinstance(p["preset"], str) or p["preset"] not in BLOCK_PRESETS:
                raise ScheduleError(
                    "preset", f"{p['preset']!r} is not one of {', '.join(BLOCK_PRESETS)}"
                )
            mults = BLOCK_PRESETS[p["preset"]]
        else:
            mults = tuple(_positive(name, p[name]) for name in ("m_early", "m_middle", "m_late"))
        return [mults[g] for g in _block_groups(n_layer, p["b1"], p["b2"])]
    ratios = p["ratios"]  # custom
    if not isinstance(ratios, Sequence) or isinstance(ratios, str) or len(ratios) != n_layer:
        got = len(ratios) if isinstance(ratios, Sequence) else ratios
        raise ScheduleError("ratios", f"needs one ratio per layer ({n_layer}), but got {got!r}")
    return [_positive(f"ratios[{i}]", r) for i, r in enumerate(ratios)]


# ---------------------------------------------------------------------------------------------
# Exact-budget rounding: the one place where widths become integers.


def _round_exact(profile_: list[float], total_units: int) -> list[int]:
    """Largest-remainder rounding of ``profile_`` scaled to sum exactly ``total_units``.

    Exact rational arithmetic makes the targets sum to ``total_units`` exactly; floors keep the
    order of the profile and the remainders go to the largest fractional parts, so the result
    keeps the order too (ties go to the earlier layer in a tapering profile, the later one in a
    growing profile, which keeps both monotone).
    """
    exact = [Fraction(v) for v in profile_]
    scale = Fraction(total_units) / sum(exact)
    targets = [v * scale for v in exact]
    units = [math.floor(x) for x in targets]
    left = total_units - sum(units)
    growing = profile_[-1] > profile_[0]
    order = sorted(
        range(len(targets)),
        key=lambda i: (-(targets[i] - units[i]), -i if growing else i),
    )
    for i in order[:left]:
        units[i] += 1
    return units


def plan_widths(
    shape: str,
    *,
    n_layer: int,
    d_ff: int,
    multiple_of: int = 1,
    **params: Any,
) -> WidthPlan:
    """Integer per-layer widths for ``shape`` that keep ``n_layer * d_ff`` exactly.

    ``params`` are the shape's parameters (see :data:`DEFAULTS`). Raises :class:`ScheduleError`
    naming the field to change when the request cannot be met.

    >>> plan_widths("linear", n_layer=3, d_ff=32, multiple_of=8, r_start=1.5).widths
    (48, 32, 16)
    """
    _check_layers(n_layer)
    if not isinstance(multiple_of, int) or not 1 <= multiple_of <= MAX_D_FF:
        raise ScheduleError(
            "multiple_of", f"must be an integer in [1, {MAX_D_FF}], but got {multiple_of!r}"
        )
    if isinstance(d_ff, int) and d_ff > MAX_D_FF:
        raise ScheduleError("d_ff", f"must be at most {MAX_D_FF}, but got {d_ff!r}")
    if not isinstance(d_ff, int) or d_ff < multiple_of or d_ff % multiple_of:
        raise ScheduleError(
            "d_ff",
            f"must be a positive multiple of multiple_of={multiple_of}, but got {d_ff!r}; "
            f"try {max(multiple_of, round(d_ff / multiple_of) * multiple_of)}"
            if isinstance(d_ff, int)
            else f"must be an integer, but got {d_ff!r}",
        )
    check_params(shape, params)
    prof = profile(shape, n_layer, **params)
    units = _round_exact(prof, n_layer * (d_ff // multiple_of))
    if min(units) < 1:
        layer = units.index(min(units))
        smallest = min(prof) / (sum(prof) / n_layer)
        ramp = shape in ("linear", "cosine", "sigmoid")
        field = ("r_end" if prof[-1] <= prof[0] else "r_start") if ramp else shape
        raise ScheduleError(
            field,
            f"layer {layer} would get no width: less than one unit of {multiple_of} "
            f"(its normalised ratio is {smallest:.3f} of d_ff={d_ff}); raise the smallest "
            f"ratio to at least {multiple_of / d_ff:.3f}, lower multiple_of, or raise d_ff",
        )
    return WidthPlan(tuple(u * multiple_of for u in units), d_ff, multiple_of)


def check_params(shape: Any, params: Mapping[str, Any]) -> None:
    """Raise :class:`ScheduleError` unless every given parameter is one ``shape`` reads.

    >>> try:
    ...     check_params("cosine", {"r_start": 1.5, "k": 10})
    ... except ScheduleError as err:
    ...     print(err.field)
    k
    """
    unknown = sorted(set(params) - set(PARAMS) - {"shape"})
    if unknown:
        raise ScheduleError(unknown[0], f"is not a schedule parameter; valid: {', '.join(PARAMS)}")
    if not isinstance(shape, str) or shape not in SHAPES:
        raise ScheduleError("shape", f"{shape!r} is not one of {', '.join(SHAPES)}")
    given = [k for k, v in params.items() if v is not None and k != "shape"]
    for name in given:
        if name not in SHAPE_PARAMS[shape]:
            reads = ", ".join(SHAPE_PARAMS[shape]) or "no parameters"
            users = ", ".join(s for s, ps in SHAPE_PARAMS.items() if name in ps)
            raise ScheduleError(
                name,
                f"is not a parameter of shape {shape!r} (it reads {reads}); remove it, or use "
                f"a shape that reads it ({users})",
            )
    if shape == "blocks" and params.get("preset") is not None:
        mults = [k for k in ("m_early", "m_middle", "m_late") if params.get(k) is not None]
        if mults:
            raise ScheduleError(
                mults[0],
                "blocks takes a preset or the multipliers m_early/m_middle/m_late, not both",
            )


def plan_from_params(
    params: Mapping[str, Any], *, n_layer: int, d_ff: int, multiple_of: int = 1
) -> WidthPlan:
    """:func:`plan_widths` for a candidate given as a mapping (``shape`` plus its parameters).

    ``shape`` is required: a candidate without one is an error, never a silent uniform model.
    """
    if "shape" not in params:
        raise ScheduleError(
            "shape",
            f"is required (one of {', '.join(SHAPES)}), but the candidate {dict(params)} has "
            'none; e.g. {"shape": "cosine", "r_start": 1.5}',
        )
    rest = {k: v for k, v in params.items() if k != "shape"}
    return plan_widths(
        params["shape"],
        n_layer=n_layer,
        d_ff=d_ff,
        multiple_of=multiple_of,
        **rest,
    )


def uniform_widths(n_layer: int, d_ff: int) -> tuple[int, ...]:
    """The homogeneous baseline: every layer ``d_ff`` wide."""
    return (d_ff,) * n_layer
