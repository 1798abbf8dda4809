"""Width schedules: how the MLP hidden width d_ff changes with depth, at an exact budget.

A *profile* is a real-valued ratio per layer (1.0 = the uniform width). :func:`plan_widths`
renormalises it to mean exactly 1 and rounds it to integers that are positive multiples of
``multiple_of``, sum to exactly ``n_layer * d_ff`` and keep the profile's order (so a tapering
profile stays non-increasing). This module is pure Python: no torch, ray or optuna.

Shapes follow Bayat, Behrouz, Courville, "Tapered Language Models" (arXiv 2606.23670), with
t = l / (L - 1). Each is one :class:`Shape` entry of :data:`SHAPES` (its formula is the entry's
``doc``): validation, widths, labels, taper strength, the names a space's ``shape`` takes, the
CLI's ``--shape`` and the docs table all read that entry, so a new shape is one entry, its
profile function and a test.

With r_start > r_end the profile tapers (wider early); with r_start < r_end it grows
(wider late, as in OpenELM's layer-wise scaling), so both directions live in one study.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

# The block-partition allocations of the paper's motivating experiment (multipliers per group).
# The paper names the allocations, not these multipliers: 1.5 / 1 / 0.5 is this project's choice.
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
# The ramps' default first ratio; their r_end defaults to 2 - r_start (mean exactly 1).
R_START = 1.5

Candidate = Mapping[str, Any]
Profile = Callable[[int, Mapping[str, Any]], list[float]]


class ScheduleError(ValueError):
    """A width request that cannot be met. ``field`` names the offending parameter."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


# ---------------------------------------------------------------------------------------------
# The registry of shapes


@dataclass(frozen=True)
class Shape:
    """One schedule shape: the single place the package learns what it reads and does.

    Register one as ``SHAPES[name] = Shape(name, ...)``. ``profile(n_layer, params)`` gets the
    given parameters over the defaults of ``params`` and returns a ratio per layer at any scale
    (:func:`plan_widths` renormalises), raising :class:`ScheduleError` naming the bad parameter.
    """

    name: str
    profile: Profile
    doc: str  # one line, its formula: the docs table
    # The parameters it reads -> their defaults, in the order messages list them. Any other one
    # given with it is an error: a parameter the shape ignores would make two labels for one
    # model, or hide a typo of the shape.
    params: Mapping[str, Any] = field(default_factory=dict)
    names: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # name-valued params
    # candidate -> its label after the shape's name ("1.5->0.5"); None: name=value for each
    # of its parameters the candidate gives
    label: Callable[[Candidate], str] | None = None
    # candidate -> its requested (first, last) ratio, before renormalising (taper strength is
    # their difference); None: the ends of its profile over MAX_LAYERS layers (t near 0 and 1)
    ends: Callable[[Candidate], tuple[float, float]] | None = None
    check: Callable[[Candidate], None] | None = None  # rules beyond which parameters it reads
    example: Mapping[str, Any] = field(default_factory=dict)  # `tlmsearch widths` fills these in
    # False where a parameter is no scalar (custom's list): a space's shape dimension cannot
    # name it and `tlmsearch widths` has no option for it
    searchable: bool = True
    # Whether the trials table's r_start / r_end columns show ``ends``; blocks' and custom's
    # ends are multipliers or list items, not ratio parameters, so their columns stay empty.
    ratio_columns: bool = True

    def __post_init__(self) -> None:
        # read-only copies: entries are shared by every caller, and linear and cosine share one
        for name in ("params", "names", "example"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        stray = sorted((set(self.names) | set(self.example)) - set(self.params))
        if stray:
            raise ValueError(f"shape {self.name!r}: names / example give {stray}, not in params")

    def label_of(self, candidate: Candidate) -> str:
        """``cosine 1.5->0.5``: the shape's name, then what tells its candidates apart."""
        text = self.label(candidate) if self.label else given_label(candidate, self.params)
        return f"{self.name} {text}" if text else self.name

    def ends_of(self, candidate: Candidate) -> tuple[float, float]:
        """The requested first and last ratio of ``candidate``, before renormalising."""
        if self.ends is not None:
            first, last = self.ends(candidate)
        else:
            given = {k: v for k, v in candidate.items() if k in self.params and v is not None}
            prof = self.profile(MAX_LAYERS, {**self.params, **given})
            first, last = prof[0], prof[-1]
        return float(first), float(last)


def given_label(candidate: Candidate, names: Sequence[str] | Mapping[str, Any]) -> str:
    """``k=10 midpoint=0.3``: each of ``names`` that ``candidate`` gives, in that order.

    >>> given_label({"shape": "step", "r_start": 1.25, "at": None}, ["r_start", "at"])
    'r_start=1.25'
    """
    parts = []
    for name in names:
        value = candidate.get(name)
        if value is None:
            continue
        if isinstance(value, Sequence) and not isinstance(value, str):
            shown = "/".join(_shown(v) for v in value)
        else:
            shown = _shown(value)
        parts.append(f"{name}={shown}")
    return " ".join(parts)


def _shown(value: Any) -> str:
    return f"{value:g}" if _is_number(value) else str(value)


def shape_spec(shape: Any) -> Shape:
    """The registry entry of ``shape``, or a :class:`ScheduleError` naming the valid shapes.

    >>> dict(shape_spec("cosine").params)
    {'r_start': 1.5, 'r_end': None}
    >>> try:
    ...     shape_spec("zigzag")
    ... except ScheduleError as err:
    ...     print(err)
    shape: 'zigzag' is not one of uniform, linear, cosine, sigmoid, blocks, custom
    """
    if not isinstance(shape, str) or shape not in SHAPES:
        raise ScheduleError("shape", f"{shape!r} is not one of {', '.join(SHAPES)}")
    return SHAPES[shape]


def schedule_params(searchable: bool = False) -> tuple[str, ...]:
    """``shape`` and every parameter a shape reads, first use first; with ``searchable`` only
    those a space may search (read by a searchable shape).

    >>> schedule_params(searchable=True)[-3:]
    ('m_early', 'm_middle', 'm_late')
    """
    shapes = [s for s in SHAPES.values() if s.searchable or not searchable]
    return ("shape", *dict.fromkeys(p for s in shapes for p in s.params))


def searchable_shapes() -> tuple[str, ...]:
    """The shapes a space's ``shape`` dimension and ``tlmsearch widths --shape`` may name."""
    return tuple(s.name for s in SHAPES.values() if s.searchable)


def shapes_table() -> str:
    """The markdown table of the registry that docs/concepts.md shows (a test keeps it equal)."""
    rows = ["| shape | parameters (default) | profile |", "|---|---|---|"]
    for s in SHAPES.values():
        params = ", ".join(
            f"`{k}`" if v is None else f"`{k}` ({f'{v:.3g}' if _is_number(v) else v})"
            for k, v in s.params.items()
        )
        rows.append(f"| `{s.name}` | {params or '-'} | {s.doc} |")
    return "\n".join(rows)


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


def ramp_ends(params: Candidate) -> tuple[float, float]:
    """(r_start, r_end) of a linear/cosine/sigmoid candidate, with the defaults applied.

    >>> ramp_ends({"r_start": 1.25})
    (1.25, 0.75)
    """
    rs = params.get("r_start")
    rs = float(R_START if rs is None else rs)
    re_ = params.get("r_end")
    return rs, 2.0 - rs if re_ is None else float(re_)


def ramp(
    curve: Callable[[list[float], Mapping[str, Any]], list[float]], exact: bool = False
) -> Profile:
    """The profile r_start + (r_end - r_start) * g(t), ``curve`` giving g (0 at t=0, 1 at t=1).

    Not ``exact``: made monotone against float wiggles (an exact closed form keeps its values).
    """

    def ramp_profile(n_layer: int, p: Mapping[str, Any]) -> list[float]:
        _positive("r_start", p["r_start"])
        if p["r_end"] is not None:
            _positive("r_end", p["r_end"])
        rs, re_ = ramp_ends(p)
        _positive("r_end", re_)  # 2 - r_start must stay positive too
        values = [rs + (re_ - rs) * x for x in curve(_depth(n_layer), p)]
        return values if exact else _monotone(values, increasing=re_ > rs)

    return ramp_profile


def _cosine_curve(t: list[float], p: Mapping[str, Any]) -> list[float]:
    return [(1.0 - math.cos(math.pi * x)) / 2.0 for x in t]


def _sigmoid_curve(t: list[float], p: Mapping[str, Any]) -> list[float]:
    k, mid = _positive("k", p["k"]), p["midpoint"]
    if not K_RANGE[0] <= k <= K_RANGE[1]:
        raise ScheduleError("k", f"must lie in [{K_RANGE[0]:g}, {K_RANGE[1]:g}], but got {k!r}")
    if not (_is_number(mid) and 0.0 < mid < 1.0):
        raise ScheduleError("midpoint", f"must lie in (0, 1), but got {mid!r}")
    s = [1.0 / (1.0 + math.exp(-k * (x - mid))) for x in (*t, 0.0, 1.0)]
    s0, s1 = s[-2], s[-1]
    return [(v - s0) / (s1 - s0) for v in s[:-2]]


def _block_groups(n_layer: int, b1: float, b2: float) -> list[int]:
    if not (_is_number(b1) and _is_number(b2) and 0.0 < b1 < b2 < 1.0):
        raise ScheduleError("b1/b2", f"need 0 < b1 < b2 < 1, but got b1={b1!r}, b2={b2!r}")
    # Layer l sits at the centre of its depth slot, (l + 0.5) / L; equal thirds for 1/3, 2/3.
    groups = []
    for layer in range(n_layer):
        x = (layer + 0.5) / n_layer
        groups.append(0 if x < b1 else 1 if x < b2 else 2)
    return groups


def _blocks(n_layer: int, p: Mapping[str, Any]) -> list[float]:
    if p["preset"] is not None:
        if not isinstance(p["preset"], str) or p["preset"] not in BLOCK_PRESETS:
            raise ScheduleError(
                "preset", f"{p['preset']!r} is not one of {', '.join(BLOCK_PRESETS)}"
            )
        mults = BLOCK_PRESETS[p["preset"]]
    else:
        mults = tuple(_positive(name, p[name]) for name in ("m_early", "m_middle", "m_late"))
    return [mults[g] for g in _block_groups(n_layer, p["b1"], p["b2"])]


def _custom(n_layer: int, p: Mapping[str, Any]) -> list[float]:
    ratios = p["ratios"]
    if not isinstance(ratios, Sequence) or isinstance(ratios, str) or len(ratios) != n_layer:
        got = len(ratios) if isinstance(ratios, Sequence) else ratios
        raise ScheduleError("ratios", f"needs one ratio per layer ({n_layer}), but got {got!r}")
    return [_positive(f"ratios[{i}]", r) for i, r in enumerate(ratios)]


# -- labels, ends and extra checks: what a candidate of each shape says about itself


def _ramp_label(candidate: Candidate) -> str:
    rs, re_ = ramp_ends(candidate)
    return f"{rs:g}->{re_:g}"


def _sigmoid_label(candidate: Candidate) -> str:
    # every searched parameter shows, so distinct candidates never share a label
    label = f"{_ramp_label(candidate)} k={float(candidate.get('k', 10.0)):g}"
    if float(candidate.get("midpoint", 0.5)) != 0.5:
        label += f" mid={float(candidate['midpoint']):g}"
    return label


def _blocks_label(candidate: Candidate) -> str:
    if candidate.get("preset"):
        mults = candidate["preset"]
    else:
        mults = "/".join(f"{candidate.get(k, 1.0):g}" for k in ("m_early", "m_middle", "m_late"))
    b1, b2 = candidate.get("b1", 1 / 3), candidate.get("b2", 2 / 3)
    return f"{mults} @{b1:.3g}/{b2:.3g}"


def _blocks_ends(candidate: Candidate) -> tuple[float, float]:
    preset = candidate.get("preset")
    if preset:
        first, _, last = BLOCK_PRESETS[preset]
        return first, last
    return candidate.get("m_early", 1.0), candidate.get("m_late", 1.0)


def _check_blocks(params: Candidate) -> None:
    if params.get("preset") is not None:
        mults = [k for k in ("m_early", "m_middle", "m_late") if params.get(k) is not None]
        if mults:
            raise ScheduleError(
                mults[0],
                "blocks takes a preset or the multipliers m_early/m_middle/m_late, not both",
            )


def _custom_label(candidate: Candidate) -> str:
    return "/".join(f"{float(r):g}" for r in candidate.get("ratios") or [])


def _custom_ends(candidate: Candidate) -> tuple[float, float]:
    ratios = candidate.get("ratios") or [1.0]
    return ratios[0], ratios[-1]


_RAMP = {"r_start": R_START, "r_end": None}  # r_end None: 2 - r_start

# Every shape, in the order messages list them. A new shape is one entry here.
SHAPES: dict[str, Shape] = {
    s.name: s
    for s in (
        Shape("uniform", lambda n_layer, p: [1.0] * n_layer, "1 everywhere: the baseline"),
        Shape(
            "linear",
            ramp(lambda t, p: t, exact=True),  # an exact ramp: the paper's closed form
            "r_start + (r_end - r_start) t",
            params=_RAMP,
            label=_ramp_label,
            ends=ramp_ends,
        ),
        Shape(
            "cosine",
            ramp(_cosine_curve),
            "r_end + (r_start - r_end) (1 + cos(pi t)) / 2, the paper's main method",
            params=_RAMP,
            label=_ramp_label,
            ends=ramp_ends,
        ),
        Shape(
            "sigmoid",
            ramp(_sigmoid_curve),
            "a logistic step of steepness k centred at midpoint, rescaled to hit r_start at "
            "t=0 and r_end at t=1 exactly (the paper does not state k)",
            params={**_RAMP, "k": 10.0, "midpoint": 0.5},
            label=_sigmoid_label,
            ends=ramp_ends,
        ),
        Shape(
            "blocks",
            _blocks,
            "early / middle / late groups split at depth fractions b1, b2, one multiplier "
            f"each, or a preset ({', '.join(BLOCK_PRESETS)})",
            params={
                "b1": 1 / 3,
                "b2": 2 / 3,
                "preset": None,
                "m_early": 1.0,
                "m_middle": 1.0,
                "m_late": 1.0,
            },
            names={"preset": tuple(BLOCK_PRESETS)},
            label=_blocks_label,
            ends=_blocks_ends,
            check=_check_blocks,
            example={"preset": "wider_early"},
            ratio_columns=False,
        ),
        Shape(
            "custom",
            _custom,
            "an explicit ratio per layer",
            params={"ratios": None},
            label=_custom_label,
            ends=_custom_ends,
            searchable=False,
            ratio_columns=False,
        ),
    )
}


def profile(shape: str, n_layer: int, **params: Any) -> list[float]:
    """The real-valued ratio profile of ``shape`` over ``n_layer`` layers (not yet normalised)."""
    spec = shape_spec(shape)
    _check_layers(n_layer)
    given = {k: v for k, v in params.items() if v is not None}
    return spec.profile(n_layer, {**spec.params, **given})


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
    # attention query heads per layer (tlmsearch/widths/heads.py fills it in; None: not planned
    # here)
    heads: tuple[int, ...] | None = None
    # the heads total over uniform's, as realised (heads.share, rounded to an exact budget)
    heads_share: float = 1.0

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

    ``params`` are the shape's parameters (its entry's ``params`` in :data:`SHAPES`). Raises
    :class:`ScheduleError` naming the field to change when the request cannot be met.

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

    def too_narrow(layer: int, smallest: float) -> str:
        return (
            f"layer {layer} would get no width: less than one unit of {multiple_of} "
            f"(its normalised ratio is {smallest:.3f} of d_ff={d_ff}); raise the smallest "
            f"ratio to at least {multiple_of / d_ff:.3f}, lower multiple_of, or raise d_ff"
        )

    units = plan_units(shape, n_layer, n_layer * (d_ff // multiple_of), too_narrow, **params)
    return WidthPlan(tuple(u * multiple_of for u in units), d_ff, multiple_of)


def plan_units(
    shape: str,
    n_layer: int,
    total_units: int,
    too_narrow: Callable[[int, float], str],
    **params: Any,
) -> list[int]:
    """``n_layer`` positive integers in ``shape``'s profile that sum to ``total_units`` exactly.

    The rounding behind every exact budget: MLP widths (in units of ``multiple_of``) and
    attention heads per layer (in groups of query heads, :mod:`tlmsearch.widths.heads`) alike.
    ``too_narrow(layer, normalised ratio)`` words the error for a layer left with no unit.

    >>> plan_units("linear", 3, 7, lambda layer, ratio: "too narrow", r_start=1.5)
    [4, 2, 1]
    """
    _check_layers(n_layer)
    check_params(shape, params)
    prof = profile(shape, n_layer, **params)
    units = _round_exact(prof, total_units) if total_units > 0 else [0] * n_layer
    if min(units) < 1:
        layer = units.index(min(units))
        smallest = min(prof) / (sum(prof) / n_layer)
        # a shape with end ratios names the narrow end; any other names itself
        ramp = {"r_start", "r_end"} <= set(SHAPES[shape].params)
        field = ("r_end" if prof[-1] <= prof[0] else "r_start") if ramp else shape
        raise ScheduleError(field, too_narrow(layer, smallest))
    return units


def check_params(shape: Any, params: Mapping[str, Any]) -> None:
    """Raise :class:`ScheduleError` unless every given parameter is one ``shape`` reads.

    >>> try:
    ...     check_params("cosine", {"r_start": 1.5, "k": 10})
    ... except ScheduleError as err:
    ...     print(err.field)
    k
    """
    known = schedule_params()
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ScheduleError(unknown[0], f"is not a schedule parameter; valid: {', '.join(known)}")
    spec = shape_spec(shape)
    given = [k for k, v in params.items() if v is not None and k != "shape"]
    for name in given:
        if name not in spec.params:
            reads = ", ".join(spec.params) or "no parameters"
            users = ", ".join(s.name for s in SHAPES.values() if name in s.params)
            raise ScheduleError(
                name,
                f"is not a parameter of shape {shape!r} (it reads {reads}); remove it, or use "
                f"a shape that reads it ({users})",
            )
    if spec.check is not None:
        spec.check(params)


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
