"""The checks a study gets after its sections validate, each returning one line per problem.

Every candidate's widths can be met for the proxy and the target (:func:`check_widths`), the
data can measure the objectives, the trackers' packages are installed, an hf or plugin model
builds on the meta device (torch is imported only then, inside :func:`external_problems`), and
each ladder rung is a valid study with the same candidates. :func:`study_problems` runs them in
order; ``config/study.py`` raises them as one :class:`~tlmsearch.errors.ConfigError`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING

from pydantic import ValidationError

from tlmsearch.config.model import ARCHS
from tlmsearch.config.planning import RUNG_SECTIONS, rung_mapping
from tlmsearch.constants import SCHEDULE_FAMILIES, TRACKER_PACKAGES
from tlmsearch.errors import ConfigError, problems_from, short
from tlmsearch.widths.candidate import Candidate
from tlmsearch.widths.heads import check_heads, mlp_schedule
from tlmsearch.widths.profiles import QUANTITIES, check_profile
from tlmsearch.widths.schedules import ScheduleError, check_params
from tlmsearch.widths.space import describe

if TYPE_CHECKING:  # study.py imports this module: no import back
    from tlmsearch.config.study import StudyConfig


def study_problems(cfg: StudyConfig) -> list[str]:
    """Every problem of a study whose sections validated; the slow checks only when the quick
    ones pass (an hf or plugin model is built, each rung validated)."""
    problems = check_widths(cfg) or profile_problems(cfg)
    candidates_valid = not problems  # a contrast's schedules are checked on valid labels only
    problems += data_problems(cfg) + tracking_problems(cfg)
    problems += contrast_problems(cfg, candidates_valid)
    if not problems:
        problems = external_problems(cfg)
    if not problems and cfg.ladder:
        problems = ladder_problems(cfg)
    return problems


def check_widths(cfg: StudyConfig) -> list[str]:
    """Every grid (or corner) candidate must give valid widths for the proxy and the target."""
    problems = []
    for cand in cfg.candidates():
        try:
            check_params(cand.get("shape"), mlp_schedule(cand))
            check_heads(cfg.model, cand)
            for q in QUANTITIES.values():
                check_profile(cand, q)
        except ScheduleError as err:
            hint = ""
            if "is not a parameter of shape" in err.message:
                prefix = err.field.partition(".")[0] + "." if "." in err.field else ""
                shape = f"{prefix}shape"
                hint = (
                    f"; give {err.field} a `when: {{{shape}: [...]}}` naming the shapes that "
                    "read it"
                )
            return [f"space: candidate {Candidate.of(cand).identity}: {err}{hint}"]
    models = [("model", cfg.model)] + ([("target", cfg.target)] if cfg.target else [])
    for section, model in models:
        for cand in cfg.candidates():
            try:
                model.plan(cand)  # widths, heads and the profiles over those widths
            except ScheduleError as err:
                problems.append(
                    f"space: candidate {_label(cand)} cannot be met for {section} "
                    f"(n_layer={model.n_layer}, d_ff={model.d_ff_uniform}, "
                    f"multiple_of={model.multiple_of}, n_head={model.n_head}): {err}"
                )
                break
    return problems


def profile_problems(cfg: StudyConfig) -> list[str]:
    """Depth profiles (``lr.*``, ``init.*``, ``train.lr_profile``) need the built-in models'
    blocks, one multiplier per proxy layer, and one source: the study's or its candidates'."""
    problems = []
    sets: dict[str, str] = {}  # train field -> the first candidate key that sets it
    for cand in cfg.candidates():
        update = cfg.model.plan(cand).train_update
        tied = _tied_conflict(cfg, cand)
        if tied:
            problems.append(f"candidate {_label(cand)}: {tied}")
        for q in QUANTITIES.values():  # which train fields the candidates' keys set
            for field, _, key in q.train_fields():
                if field in update or (field == q.part_field and q.profile_field in update):
                    sets.setdefault(field, key)
    # the fields the study fixes for every candidate: set away from their defaults, or a
    # setting dimension
    defaults = {f: d for q in QUANTITIES.values() for f, d, _ in q.train_fields()}
    fixed = [f"train.{f}" for f, d in defaults.items() if getattr(cfg.train, f) != d]
    fixed += [d for d in cfg.space.settings if d.removeprefix("train.") in sets]
    for name in fixed:
        field = name.removeprefix("train.")
        if field in sets:
            problems.append(
                f"{name} fixes it for every candidate, but the study's candidates set it too "
                f"({sets[field]} in the space or search.candidates); remove one of them"
            )
        given = getattr(cfg.train, field)
        if isinstance(given, list) and len(given) != cfg.model.n_layer:
            problems.append(
                f"{name} has {len(given)} multipliers but model.n_layer is "
                f"{cfg.model.n_layer}; give one per layer, or a shape in the space (lr.shape, "
                "planned at any depth)"
            )
    if cfg.model.arch not in ARCHS:
        for name in [*fixed, *(f"{v} (train.{k})" for k, v in sets.items())][:1]:
            problems.append(
                f"{name}: depth profiles and LR multipliers scale the built-in models' blocks "
                f"and embedding ({', '.join(ARCHS)}), not model.arch {cfg.model.arch}; remove it"
            )
    return problems


def _tied_conflict(cfg: StudyConfig, cand: Candidate) -> str | None:
    """Why ``cand`` asks two LRs of a tied model's one embedding / output matrix, or None: each
    end's multiplier as given (by the candidate's key, else the study's field when set)."""
    if not cfg.model.tie_embeddings:
        return None
    given = {}
    for extra, field in (("embedding", "embedding_lr_mult"), ("head", "head_lr_mult")):
        key = QUANTITIES["lr"].key(extra)
        if key in cand:
            given[key] = cand[key]
        elif getattr(cfg.train, field) != 1.0:
            given[f"train.{field}"] = getattr(cfg.train, field)
    if len(given) == 2 and len(set(map(str, given.values()))) == 2:
        (a, x), (b, y) = given.items()
        return (
            f"{a} ({x}) and {b} ({y}) differ, but model.tie_embeddings makes the embedding "
            "and the output layer one matrix; give one of them, or untie them"
        )
    return None


def contrast_problems(cfg: StudyConfig, candidates_valid: bool = True) -> list[str]:
    """``stats.contrasts`` names schedules of the space (in a finite one whose candidates are
    valid: its labels, as the trials table says them, or a family) and setting dimensions of
    the space."""
    from tlmsearch.widths.space import schedule_of

    problems: list[str] = []
    if not cfg.stats.contrasts:
        return problems
    no_margin = cfg.stats.equivalence is None and cfg.objectives[0].min_effect is None
    if cfg.stats.two_by_two is not None and no_margin:
        problems.append(
            "stats.two_by_two reads equivalence: give stats.equivalence or "
            "objectives[0].min_effect (the margin d of 'equivalent within +-d')"
        )
    dims = list(cfg.space.settings)
    labels: list[str] = []
    if cfg.space.finite and candidates_valid:
        labels = list(dict.fromkeys(describe(schedule_of(c)) for c in cfg.candidates()))
    valid = ", ".join([*labels, *SCHEDULE_FAMILIES]) if labels else ""
    for i, c in enumerate(cfg.stats.contrasts):
        where = f"stats.contrasts[{i}]"
        for field, names in (
            ("schedules", c.schedules),
            ("vs", c.vs),
            ("terms", list(c.terms or ())),
        ):
            for j, name in enumerate(names):
                if labels and name not in labels and name not in SCHEDULE_FAMILIES:
                    problems.append(
                        f"{where}.{field}[{j}]: {name!r} is not a schedule of the "
                        f"space; give one of {valid}"
                    )
        for field, dim in [("by", c.by), *(("where", d) for d in c.where)]:
            if dim is not None and dim not in dims:
                problems.append(
                    f"{where}.{field}: {dim!r} is not a setting dimension of the "
                    f"space; its settings: {', '.join(dims) or 'none'}"
                )
    return problems


def _label(candidate: Candidate) -> str:
    """``describe(candidate)``, or its JSON when a value is no number where one is read (the
    problem being reported may be exactly that)."""
    try:
        return describe(candidate)
    except (TypeError, ValueError):
        return json.dumps(dict(candidate), sort_keys=True, default=str)


def data_problems(cfg: StudyConfig) -> list[str]:
    """An objective the data cannot measure would train every trial and then fail them all."""
    if not any(o.metric == "val_bpb" for o in cfg.objectives):
        return []
    if not all(src.lower().endswith((".bin", ".npy")) for src in cfg.data.sources):
        return []  # text always knows its bytes (and keeps torch-free validation fast)
    from tlmsearch.data.tokens import val_bytes_problem

    problem = val_bytes_problem(cfg.data.sources, cfg.data.tokenizer.kind)
    return [f"objectives: {problem}"] if problem else []


def tracking_problems(cfg: StudyConfig) -> list[str]:
    """A tracker turned on whose package is not installed (found without importing it, so
    ``validate`` stays fast)."""
    from importlib.util import find_spec

    problems = []
    for name in cfg.tracking.enabled():
        module, extra = TRACKER_PACKAGES[name]
        if find_spec(module) is None:
            problems.append(
                f"tracking.{name}: the {module} package is not installed; "
                f"pip install 'tlmsearch[{extra}]', or remove tracking.{name}"
            )
    return problems


def external_problems(cfg: StudyConfig) -> list[str]:
    """An hf or plugin model is built once on the meta device (models/external.py): an import
    or protocol failure is a problem of the study, not of its first trial."""
    problems = []
    for section, model in [("model", cfg.model), ("target", cfg.target)]:
        if model is None or model.arch in ARCHS:
            continue
        from tlmsearch.models.counting import check_external

        try:
            check_external(model)
        except ConfigError as err:
            problems += [re.sub(r"^model\.", f"{section}.", p) for p in err.problems]
    return problems


def ladder_problems(cfg: StudyConfig) -> list[str]:
    """Each rung, applied to the study, must be a valid study with the same candidates.

    A rung may change model, train and data only: a different space, search, objectives or
    seeds would break the pairing of candidates across rungs that fidelity measures. A rung
    whose model changes which candidates exist (a profile flat at one depth and not at another)
    is refused for the same reason.
    """
    problems: list[str] = []
    want = [c.identity for c in cfg.candidates()]
    for i, rung in enumerate(cfg.ladder or []):
        where = f"ladder[{i}]"
        bad = [k for k in rung if k not in RUNG_SECTIONS]
        if bad:
            problems.append(
                f"{where}.{bad[0]}: a rung may override {', '.join(RUNG_SECTIONS)} only "
                "(the candidates, search and objectives stay those of the study, so rungs pair)"
            )
            continue
        wrong = [k for k, v in rung.items() if not isinstance(v, Mapping)]
        if wrong:
            problems.append(
                f"{where}.{wrong[0]}: {short(rung[wrong[0]])} is not a mapping of "
                f"{wrong[0]} fields, e.g. {{model: {{d_model: 64}}}}"
            )
            continue
        try:
            sub = type(cfg).model_validate(rung_mapping(cfg.to_dict(), rung))
        except ValidationError as err:
            problems += problems_from(err, prefix=where, model=type(cfg))
            continue
        more = check_widths(sub) + data_problems(sub)
        if more:
            problems += [f"{where}: {p}" for p in more]
            continue
        got = [c.identity for c in sub.candidates()]
        if got != want:
            lost = sorted(set(want) - set(got)) or sorted(set(got) - set(want))
            problems.append(
                f"{where}.model: at n_layer {sub.model.n_layer} the candidates differ from the "
                f"study's (e.g. {lost[0]} is flat at one size and not the other), so rungs "
                "cannot be paired; keep n_layer or drop that candidate from the space"
            )
    return problems
