"""Search spaces over width schedules: YAML in, candidates and width vectors out.

A space is an ordered mapping of *dimensions*, each named after a schedule parameter
(:func:`tlmsearch.widths.schedules.schedule_params`, read from the registry of shapes)::

    name: paper
    dimensions:
      shape:   {type: categorical, choices: [linear, cosine, sigmoid]}
      r_start: {type: float, low: 1.25, high: 1.75, step: 0.125}   # r_end = 2 - r_start
      k:       {type: fixed, value: 10.0, when: {shape: sigmoid}}

A dimension with ``when`` exists only where earlier dimensions take the listed values
(conditional, as Optuna's define-by-run spaces). A dimension named ``train.FIELD`` or
``model.FIELD`` is a *setting*: a scalar of the study's training or model config searched beside
the schedule (``train.lr: {type: float, low: 1e-3, high: 1e-2, log: true}``). Settings cross
every schedule (no ``when`` on either side), so the uniform baseline exists at each setting value;
tlmsearch/config/ checks the field and its values (docs/search_dimensions.md).

One :class:`SearchSpace` can enumerate a finite space as a grid, be sampled by an Optuna trial
(:meth:`SearchSpace.suggest`), and turn a candidate into its exact-budget width vector
(:meth:`SearchSpace.widths`). No torch, no ray.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_validator

from tlmsearch.errors import ConfigError, Strict, problems_from, read_yaml, short
from tlmsearch.widths import profiles
from tlmsearch.widths.schedules import (
    MAX_PARAM,
    SHAPES,
    ScheduleError,
    check_params,
    given_label,
    profile,
    schedule_params,
    searchable_shapes,
    shape_spec,
)

Scalar = str | int | float | bool
# The config sections a setting dimension (``train.lr``) may name a scalar field of.
SETTING_SECTIONS = ("train", "model")
SPACES_DIR = Path(__file__).resolve().parents[2] / "search_spaces"  # beside the package
# Candidates a space may enumerate (its grid, or a continuous space's corners), counted before
# any list of them is built: each is checked for the proxy and the target model and, on a grid,
# trained once per seed. The paper's grid has 15.
MAX_CANDIDATES = 10_000


def value_names() -> dict[str, tuple[str, ...]]:
    """The names each name-valued parameter takes (shape, blocks' preset); the others take
    numbers. Read from the registry at each call, so a shape added to it is searchable at once.

    >>> value_names()["shape"]
    ('uniform', 'linear', 'cosine', 'sigmoid', 'blocks')
    """
    names = {"shape": searchable_shapes()}  # not custom: its ratios are no scalar
    for spec in SHAPES.values():
        names.update(spec.names)
    return names


class Dimension(Strict):
    """One searchable (or fixed) schedule parameter."""

    # categorical (choices), float / int (low, high), fixed (value)
    type: Literal["categorical", "float", "int", "fixed"]
    choices: list[Scalar] | None = None  # categorical: the values
    low: float | None = Field(None, ge=-MAX_PARAM, le=MAX_PARAM)  # float / int: the range
    high: float | None = Field(None, ge=-MAX_PARAM, le=MAX_PARAM)  # float / int: the range
    step: float | None = Field(None, le=MAX_PARAM)  # float / int: grid spacing (a grid needs it)
    log: bool = False  # float / int: sample on a log scale
    value: Scalar | None = None  # fixed: the value
    # only when these dimensions take these values
    when: dict[str, Scalar | list[Scalar]] | None = None

    @model_validator(mode="after")
    def _check(self) -> Dimension:
        if self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical dimension needs a non-empty 'choices' list")
        elif self.type == "fixed":
            if self.value is None:
                raise ValueError("a fixed dimension needs 'value'")
        else:
            if self.low is None or self.high is None or not self.low <= self.high:
                raise ValueError(f"needs low <= high, but got low={self.low}, high={self.high}")
            if self.log and (self.step is not None or self.low <= 0):
                raise ValueError("log scale needs low > 0 and no step")
            if self.step is not None:
                if self.step <= 0:
                    raise ValueError(f"step must be > 0, but got {self.step}")
                n = (self.high - self.low) / self.step
                if not n < MAX_CANDIDATES:  # before round(n): a tiny step makes n huge or inf
                    least = (self.high - self.low) / (MAX_CANDIDATES - 1)
                    raise ValueError(
                        f"(high - low) / step gives {n:.3g} grid values, more than "
                        f"{MAX_CANDIDATES:,}; raise step to at least {least:.3g}, or drop step "
                        "to sample the range (sampler random, tpe, gp or nsga2)"
                    )
                if abs(n - round(n)) > 1e-9:
                    raise ValueError(
                        f"high - low ({self.high - self.low:g}) must be a multiple of "
                        f"step ({self.step:g})"
                    )
            if self.type == "int" and not all(
                float(v).is_integer() for v in (self.low, self.high, self.step or 1)
            ):
                raise ValueError("an int dimension needs integer low, high and step")
        if self.finite and self.count() > MAX_CANDIDATES:
            fix = (
                "drop choices"
                if self.type == "categorical"
                else "give a step, narrow low..high, or set log: true (low > 0) to sample it "
                "(sampler random, tpe, gp or nsga2)"
            )
            raise ValueError(f"{self.count():,} grid values, more than {MAX_CANDIDATES:,}; {fix}")
        return self

    def count(self, corners: bool = False) -> int:
        """``len(self.values(corners))``, without building the list."""
        if self.type == "categorical":
            return len(self.choices or ())
        if self.type == "fixed":
            return 1
        assert self.low is not None and self.high is not None
        if corners or not self.finite:
            return 1 if self.low == self.high else 2
        return round((self.high - self.low) / (self.step or 1)) + 1

    @property
    def finite(self) -> bool:
        return (
            self.type in ("categorical", "fixed")
            or self.step is not None
            or (self.type == "int" and not self.log)
        )

    def values(self, corners: bool = False) -> list[Scalar]:
        """Grid values; with ``corners`` a continuous range gives just its two ends."""
        if self.type == "categorical":
            return list(self.choices or [])
        if self.type == "fixed":
            return [self.value]  # type: ignore[list-item]
        assert self.low is not None and self.high is not None
        cast = int if self.type == "int" else float
        if corners or not self.finite:
            return [cast(self.low)] if self.low == self.high else [cast(self.low), cast(self.high)]
        step = self.step or 1
        n = round((self.high - self.low) / step)
        return [cast(round(self.low + i * step, 12)) for i in range(n + 1)]

    def active(self, partial: Mapping[str, Any]) -> bool:
        if not self.when:
            return True
        for name, allowed in self.when.items():
            allowed_list = allowed if isinstance(allowed, list) else [allowed]
            if name not in partial or partial[name] not in allowed_list:
                return False
        return True


class SearchSpace(Strict):
    """An ordered set of schedule dimensions. See the module docstring for the YAML format."""

    name: str = "inline"  # shown in validate and the report
    description: str = ""  # free text
    # schedule parameter -> its dimension; shape is required
    dimensions: dict[str, Dimension] = Field(min_length=1)

    @field_validator("dimensions")
    @classmethod
    def _known(cls, dims: dict[str, Dimension]) -> dict[str, Dimension]:
        seen: list[str] = []
        for name, dim in dims.items():
            setting = is_setting(name)
            searchable = schedule_params(searchable=True)
            known = (*searchable, *heads_params(True), *profiles.profile_params(True))
            if not setting and name not in known:
                valid = ", ".join(searchable)
                raise ValueError(
                    f"{name!r} is not a schedule parameter; valid: {valid}, the same with "
                    "heads. for the attention heads (heads.shape, heads.r_start, ..., "
                    "heads.share), with lr. or init. for a depth profile of the learning rate "
                    "or init (lr.shape, lr.r_start, ..., lr.part), or a setting train.FIELD / "
                    "model.FIELD (e.g. train.lr)"
                )
            if setting and dim.when:
                raise ValueError(
                    f"{name}.when: a setting crosses every schedule, so the uniform baseline "
                    "exists at each of its values; remove when"
                )
            for dep in dim.when or {}:
                if dep not in seen:
                    raise ValueError(
                        f"{name}.when refers to {dep!r}, which must be a dimension listed "
                        f"before {name!r}"
                    )
                if is_setting(dep):
                    raise ValueError(
                        f"{name}.when refers to the setting {dep!r}: a schedule must exist at "
                        "every setting value (the comparison with uniform is within one); "
                        "remove it from when"
                    )
            problem = None if setting else _type_problem(name, dim)
            if problem:
                raise ValueError(problem)
            seen.append(name)
        if "shape" not in dims and any(
            is_heads_key(n) or profiles.is_profile_key(n) for n in dims
        ):
            dims = {"shape": Dimension(type="fixed", value="uniform"), **dims}
        if "shape" not in dims:
            raise ValueError(
                "needs a 'shape' dimension (a space without one would train only the uniform "
                "model); e.g. shape: {type: fixed, value: cosine}"
            )
        return dims

    @model_validator(mode="after")
    def _bounded(self) -> SearchSpace:
        # Counted lazily, so a space of 10**30 candidates costs MAX_CANDIDATES steps, not memory;
        # paths, not distinct candidates, or choices repeated 10,000 times would take forever.
        corners = not self.finite
        for n, _ in enumerate(self._paths(corners), start=1):
            if n > MAX_CANDIDATES:
                sizes = " x ".join(
                    f"{name} {dim.count(corners)}" for name, dim in self.dimensions.items()
                )
                what = "continuous space has" if corners else "grid has"
                raise ValueError(
                    f"the {what} more than {MAX_CANDIDATES:,} candidates ({sizes}, less any "
                    "`when`); raise a step, narrow a range or drop choices"
                )
        return self

    # -- finite enumeration -------------------------------------------------------------------

    @property
    def finite(self) -> bool:
        return all(d.finite for d in self.dimensions.values())

    @property
    def settings(self) -> list[str]:
        """The setting dimensions (``train.lr``, ...), in YAML order."""
        return [name for name in self.dimensions if is_setting(name)]

    def _paths(self, corners: bool) -> Iterator[dict[str, Any]]:
        """Every combination of values, in YAML order; repeated choices repeat candidates."""

        def rec(i: int, partial: dict[str, Any]) -> Iterator[dict[str, Any]]:
            if i == len(names):
                yield dict(partial)
                return
            dim = self.dimensions[names[i]]
            if not dim.active(partial):
                yield from rec(i + 1, partial)
                return
            for value in dim.values(corners):
                partial[names[i]] = value
                yield from rec(i + 1, partial)
                del partial[names[i]]

        names = list(self.dimensions)
        yield from rec(0, {})

    def _expand(self, corners: bool) -> Iterator[dict[str, Any]]:
        seen: set[tuple] = set()
        for cand in self._paths(corners):
            key = tuple(sorted(cand.items()))
            if key not in seen:
                seen.add(key)
                yield cand

    def grid(self) -> list[dict[str, Any]]:
        """Every candidate of a finite space, in YAML order. Raises if the space is continuous."""
        if not self.finite:
            cont = [n for n, d in self.dimensions.items() if not d.finite]
            raise ConfigError(
                f"space {self.name!r} is continuous ({', '.join(cont)} have no step): "
                "it has no grid; use sampler random, tpe, gp or nsga2, or give a step"
            )
        return list(self._expand(corners=False))

    def corners(self) -> list[dict[str, Any]]:
        """Candidates at the ends of every range: enough to check a space's feasibility."""
        return list(self._expand(corners=True))

    def size(self) -> int | None:
        """Number of grid candidates, or None for a continuous space."""
        return len(self.grid()) if self.finite else None

    # -- Optuna -------------------------------------------------------------------------------

    def suggest(self, trial: Any) -> dict[str, Any]:
        """Sample a candidate define-by-run from an ``optuna.Trial`` (fixed values not sampled)."""
        cand: dict[str, Any] = {}
        for name, dim in self.dimensions.items():
            if not dim.active(cand):
                continue
            if dim.type == "fixed":
                cand[name] = dim.value
            elif dim.type == "categorical":
                cand[name] = trial.suggest_categorical(name, dim.choices)
            elif dim.type == "float":
                cand[name] = trial.suggest_float(
                    name, dim.low, dim.high, step=dim.step, log=dim.log
                )
            else:
                cand[name] = trial.suggest_int(
                    name, int(dim.low), int(dim.high), step=int(dim.step or 1), log=dim.log
                )
        return cand

    def fixed_values(self, sampled: Mapping[str, Any]) -> dict[str, Any]:
        """The fixed dimensions active for ``sampled`` (what a define-by-run function returns)."""
        out: dict[str, Any] = {}
        for name, dim in self.dimensions.items():
            if dim.active({**sampled, **out}) and dim.type == "fixed":
                out[name] = dim.value
        return out


def _type_problem(name: str, dim: Dimension) -> str | None:
    """Why ``dim``'s values cannot be values of parameter ``name``, or None.

    >>> _type_problem("r_start", Dimension(type="categorical", choices=[1.5, "median"]))
    "r_start.choices[1]: 'median' is not a number; r_start takes numbers, e.g. 1.5"
    """
    field = {"categorical": "choices", "fixed": "value"}.get(dim.type)
    names = value_names()
    names.update({q.prefix + k: v for q in profiles.QUANTITIES.values() for k, v in names.items()})
    names.update({PREFIX + k: v for k, v in value_names().items()})
    names.update(profiles.value_names())
    if name in names:
        valid = ", ".join(names[name])
        if field is None:
            return f"{name} takes names ({valid}), so its type is categorical or fixed"
        for i, v in enumerate(dim.values()):
            if not isinstance(v, str) or v not in names[name]:
                where = f"{name}.choices[{i}]" if field == "choices" else f"{name}.value"
                return f"{where}: {short(v)} is not one of {valid}"
        return None
    if field is None:
        return None  # float and int ranges hold numbers
    bare = name.partition(".")[2] if "." in name else name
    example = {"k": 10.0, "midpoint": 0.5, "b1": 0.25, "b2": 0.75}.get(bare, 1.5)
    for i, v in enumerate(dim.values()):
        where = f"{name}.choices[{i}]" if field == "choices" else f"{name}.value"
        if isinstance(v, bool) or not isinstance(v, int | float):
            return f"{where}: {short(v)} is not a number; {name} takes numbers, e.g. {example}"
        if not abs(v) <= MAX_PARAM:
            return (
                f"{where}: {short(v)} is out of range; {name} takes numbers within "
                f"+-{MAX_PARAM:,.0f}, e.g. {example}"
            )
    return None


UNIFORM: dict[str, Any] = {"shape": "uniform"}

# -------------------------------------------------------------------------------------------------
# A candidate's parts: the MLP schedule, the heads schedule (``heads.``-prefixed keys, planned by
# tlmsearch/widths/heads.py) and the settings (``train.lr``)

PREFIX = "heads."
SHARE = "heads.share"


def is_heads_key(name: str) -> bool:
    """Whether a candidate / dimension key belongs to the heads schedule (``heads.shape``).

    >>> is_heads_key("heads.r_start"), is_heads_key("r_start"), is_heads_key("train.lr")
    (True, False, False)
    """
    return name.startswith(PREFIX) and len(name) > len(PREFIX)


def heads_params(searchable: bool = False) -> tuple[str, ...]:
    """Every key a heads schedule takes: ``heads.`` + each schedule parameter, and
    ``heads.share``.

    >>> heads_params(searchable=True)[:3]
    ('heads.shape', 'heads.r_start', 'heads.r_end')
    """
    return (*(PREFIX + p for p in schedule_params(searchable)), SHARE)


def heads_schedule(candidate: Mapping[str, Any]) -> dict[str, Any] | None:
    """The heads schedule of ``candidate`` without its prefix (``{"shape": "linear", ...}``),
    or None when it has none (every layer keeps ``model.n_head``). ``heads.share`` is not part
    of it (:func:`share_of`); a share alone schedules uniform heads.

    >>> heads_schedule({"shape": "cosine", "heads.shape": "linear", "heads.r_start": 0.5})
    {'shape': 'linear', 'r_start': 0.5}
    >>> heads_schedule({"shape": "cosine"}) is None
    True
    """
    keys = {k[len(PREFIX) :]: v for k, v in candidate.items() if is_heads_key(k) and k != SHARE}
    if not keys and SHARE not in candidate:
        return None
    return {"shape": "uniform", **keys} if "shape" not in keys else keys


def mlp_schedule(candidate: Mapping[str, Any]) -> dict[str, Any]:
    """The MLP schedule of ``candidate``: its keys without settings (``train.lr``), heads or
    depth profiles (``lr.shape``).

    >>> mlp_schedule({"shape": "cosine", "heads.shape": "linear", "lr.shape": "linear"})
    {'shape': 'cosine'}
    """
    return {
        k: v
        for k, v in candidate.items()
        if not is_setting(k) and not is_heads_key(k) and not profiles.is_profile_key(k)
    }


def heads_label(candidate: Mapping[str, Any]) -> str:
    """The heads part of a candidate's label (``heads linear 0.5->1.5``, ``share=1.25``), or
    ``""`` without a heads schedule.

    >>> heads_label({"shape": "uniform", "heads.shape": "linear", "heads.r_start": 0.5})
    'heads linear 0.5->1.5'
    >>> heads_label({"shape": "cosine", "heads.share": 0.75})
    'heads uniform share=0.75'

    Uniform heads at share 1 are the model without a heads schedule, but a distinct candidate
    keeps a distinct label (the report groups trials by it):

    >>> heads_label({"shape": "cosine", "heads.shape": "uniform"})
    'heads uniform'
    """
    sched = heads_schedule(candidate)
    share = candidate.get(SHARE)
    if sched is None:
        return ""
    shape = sched.get("shape")
    if isinstance(shape, str) and shape in SHAPES:
        text = SHAPES[shape].label_of(sched)
    else:
        text = f"{shape} {given_label(sched, sorted(k for k in sched if k != 'shape'))}".rstrip()
    if share is not None and share != 1:
        number = isinstance(share, int | float) and not isinstance(share, bool)
        text += f" share={share:g}" if number else f" share={share!r}"
    return f"heads {text}"


def is_setting(name: str) -> bool:
    """Whether a dimension / candidate key names a config scalar (``train.lr``), not a schedule
    parameter.

    >>> is_setting("train.lr"), is_setting("r_start")
    (True, False)
    """
    section, dot, field = name.partition(".")
    return bool(dot) and section in SETTING_SECTIONS and bool(field)


def schedule_of(candidate: Mapping[str, Any]) -> dict[str, Any]:
    """The schedule part of a candidate (what widths are planned from), settings dropped."""
    return {k: v for k, v in candidate.items() if not is_setting(k)}


def settings_of(candidate: Mapping[str, Any]) -> dict[str, Any]:
    """The setting part of a candidate: ``{"train.lr": 0.003}``; ``{}`` in most studies."""
    return {k: v for k, v in candidate.items() if is_setting(k)}


def setting_label(candidate: Mapping[str, Any], exact: bool = False) -> str:
    """``lr=0.003`` for a candidate with settings (the field names, in key order); ``""``.

    ``exact``: floats in full (``repr``), so two sampled values never share a label (the
    trials table's ``setting`` column, which pairs a candidate with its uniform).

    >>> setting_label({"shape": "cosine", "train.lr": 0.003, "model.init_std": 0.01})
    'init_std=0.01, lr=0.003'
    >>> lr = {"train.lr": 0.00123456789}
    >>> setting_label(lr), setting_label(lr, exact=True)
    ('lr=0.00123457', 'lr=0.00123456789')
    """
    parts = []
    for name, value in sorted(settings_of(candidate).items()):
        if isinstance(value, float):
            shown = repr(value) if exact else f"{value:g}"
        else:
            shown = str(value)
        parts.append(f"{name.partition('.')[2]}={shown}")
    return ", ".join(parts)


def is_flat(candidate: Mapping[str, Any], n_layers: Sequence[int]) -> bool:
    """Whether ``candidate``'s ratio profile is constant (the uniform model) at every depth given.

    A parameter its shape does not read makes it no candidate at all, so not the baseline either
    (dropped as one, ``uniform`` with an ``r_start`` would pass validation unseen):

    >>> is_flat({"shape": "blocks", "preset": "uniform"}, [4, 24])
    True
    >>> is_flat({"shape": "cosine"}, [4]), is_flat({"shape": "uniform", "r_start": 1.5}, [4])
    (False, False)

    A depth profile that is not flat makes another training of the same widths:

    >>> is_flat({"shape": "uniform", "lr.shape": "cosine", "lr.r_start": 1.5}, [4])
    False
    """
    try:
        if any(profiles.train_update(candidate, n) for n in n_layers):
            return False  # the uniform widths trained with other steps or init: a candidate
    except ScheduleError:
        return False
    heads = heads_schedule(candidate)
    if heads is not None and (candidate.get(SHARE, 1) != 1 or not is_flat(heads, n_layers)):
        return False  # attention capacity moves: not the baseline
    shape = candidate.get("shape", "uniform")
    rest = {k: v for k, v in mlp_schedule(candidate).items() if k != "shape"}
    try:
        check_params(shape, rest)
        ratios = [profile(shape, n, **rest) for n in n_layers]
    except ScheduleError:  # not a valid candidate, so not the baseline: the width check says why
        return False
    return all(max(prof) == min(prof) for prof in ratios)


def is_baseline(candidate: Mapping[str, Any]) -> bool:
    """Whether ``candidate`` is the uniform baseline (:data:`UNIFORM`, at any setting): its MLP
    shape is ``uniform`` and it has no heads schedule. The one test of "is this the baseline"
    that the search, the trials table and the analysis share. A candidate with uniform heads
    at share 1 is the same model but not the baseline: a flat candidate (the grid drops it as
    a copy, :func:`is_flat`; a sampler's draw of it replays the baseline's curve), as blocks'
    uniform preset is; one baseline per seed keeps one row per seed to pair against.

    An attention-only taper keeps uniform MLPs but is a candidate, never the baseline:

    >>> is_baseline({"shape": "uniform", "train.lr": 0.003}), is_baseline({"shape": "cosine"})
    (True, False)
    >>> is_baseline({"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5})
    False
    >>> is_baseline({"shape": "uniform", "heads.share": 1.25})
    False

    Nor is a depth profile on uniform widths (the taper's steps without its capacity):

    >>> is_baseline({"shape": "uniform", "lr.shape": "cosine", "lr.r_start": 1.5})
    False
    """
    return (
        candidate.get("shape", "uniform") == "uniform"
        and heads_schedule(candidate) is None
        and not profiles.has_profile(candidate)
    )


def describe(candidate: Mapping[str, Any]) -> str:
    """A short human label, distinct for distinct candidates (reports group trials by it).

    >>> describe({"shape": "cosine", "r_start": 1.5})
    'cosine 1.5->0.5'
    >>> describe({"shape": "blocks", "preset": "wider_early"})
    'blocks wider_early @0.333/0.667'
    >>> describe({"shape": "uniform", "train.lr": 0.003})
    'uniform @ lr=0.003'
    """
    setting = setting_label(candidate)
    label = schedule_label(candidate)
    return f"{label} @ {setting}" if setting else label


def schedule_label(candidate: Mapping[str, Any]) -> str:
    """:func:`describe` without the settings: the trials table's ``schedule`` column.

    The shape's registry entry makes the label; a shape it does not know (a record written by
    another version) shows its name and every parameter, so it still names one candidate.

    >>> schedule_label({"shape": "zigzag", "r_start": 1.5, "train.lr": 0.01})
    'zigzag r_start=1.5'
    """
    shape = candidate.get("shape", "uniform")
    extra = [x for x in (heads_label(candidate), profiles.profile_label(candidate)) if x]
    if isinstance(shape, str) and shape in SHAPES:
        label = SHAPES[shape].label_of(mlp_schedule(candidate))
    else:
        rest = {k: v for k, v in mlp_schedule(candidate).items() if k != "shape"}
        label = f"{shape} {given_label(rest, sorted(rest))}".rstrip()
    return " | ".join([label, *extra])


def taper_strength(candidate: Mapping[str, Any]) -> float:
    """First minus last requested ratio of the *profile*: 0 for uniform, > 0 tapers, < 0 grows.

    A shape the registry does not know raises :class:`ScheduleError` (field ``shape``, naming
    the valid shapes): a 0.0 would pass it off as uniform.

    >>> taper_strength({"shape": "cosine", "r_start": 1.25})
    0.5
    """
    first, last = shape_spec(candidate.get("shape", "uniform")).ends_of(candidate)
    return first - last


def find_space(ref: str, base: Path | None = None) -> Path:
    """Resolve ``paper``, ``paper.yaml`` or a path, trying ``base``, the cwd and the repo."""
    candidates = []
    names = [ref] if ref.endswith((".yaml", ".yml")) else [ref, f"{ref}.yaml"]
    for name in names:
        try:
            p = Path(name).expanduser()
        except RuntimeError:  # ~nosuchuser/...: not a home directory, so not a path either
            continue
        if p.is_absolute():
            candidates.append(p)
            continue
        for root in (base, base.parent if base else None, Path.cwd(), SPACES_DIR.parent):
            if root is not None:
                candidates += [root / p, root / "search_spaces" / p]
        candidates.append(SPACES_DIR / p)
    for c in candidates:
        try:
            if c.is_file():
                return c
        except OSError:  # a name too long for the file system is not a file
            continue
    shipped = ", ".join(sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))
    raise ConfigError(f"space: {short(ref)} not found; shipped spaces: {shipped}, or give a path")


def space_from_mapping(data: Any, source: str = "space") -> SearchSpace:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{source}: expected a mapping with 'dimensions', but got {short(data)}")
    try:
        return SearchSpace.model_validate(data)
    except ValidationError as err:
        raise ConfigError(problems_from(err, source, SearchSpace)) from None


def load_space(path: str | Path) -> SearchSpace:
    """Load and validate a search-space YAML file."""
    path = Path(path)
    data = read_yaml(path)
    data = dict(data) if isinstance(data, Mapping) else data
    if isinstance(data, dict):
        data.setdefault("name", path.stem)
    try:
        return space_from_mapping(data, "space")
    except ConfigError as err:
        raise ConfigError(err.problems, source=str(path)) from None
