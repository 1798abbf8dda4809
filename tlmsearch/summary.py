"""Terminal tables (rich) for ``tlmsearch validate``: candidates, widths, budgets. No torch."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich.table import Table

from tlmsearch.budget import count_params, flops_per_token, mlp_params, non_embedding_params
from tlmsearch.config import ModelConfig, StudyConfig
from tlmsearch.schedules import uniform_widths
from tlmsearch.space import describe

_NAMES = ("MLP", "total", "non-emb", "FLOPs")


def candidates_table(cfg: StudyConfig, model: ModelConfig, title: str, limit: int = 40) -> Table:
    """One row per candidate: its widths, its exact parameter counts (total, non-embedding, MLP)
    and training FLOPs per token (:mod:`tlmsearch.budget`), against the uniform baseline."""
    d_ff = model.d_ff_uniform
    uniform = uniform_widths(model.n_layer, d_ff)
    vocab = model.vocab_size or cfg.vocab_size  # None: the data's tokenizer decides
    seq_len = cfg.data.seq_len

    def budget(widths: tuple[int, ...]) -> tuple[int, int | None, int, int | None]:
        if vocab is None:
            return mlp_params(model, widths), None, non_embedding_params(model, widths), None
        params = count_params(model, widths, vocab)
        flops = flops_per_token(model, widths, vocab, seq_len).training
        return params.mlp, params.total, params.non_embedding, flops

    base = budget(uniform)
    caption = f"FLOPs/tok: training FLOPs per token at seq_len {seq_len} (3 x forward)"
    if vocab is not None:
        f = flops_per_token(model, uniform, vocab, seq_len)
        caption += (
            f"; of the uniform model's FLOPs the MLPs (what a taper moves) take "
            f"{f.mlp / f.forward:.0%}, the LM head {f.head / f.forward:.0%}"
        )
    total = "vocabulary from the data" if vocab is None else f"total params {base[1]:,}"
    table = Table(
        title=f"{title}: {model.arch}, {model.n_layer} layers, d_model {model.d_model}, "
        f"d_ff {d_ff} (multiple of {model.multiple_of}); uniform: {total}, "
        f"non-embedding {base[2]:,}, MLP {base[0]:,}",
        title_justify="left",
        caption=caption,
        caption_justify="left",
    )
    for col in (
        "candidate",
        "first",
        "last",
        "min",
        "max",
        "realised",
        "MLP params",
        "total",
        "non-emb",
        "FLOPs/tok",
        "vs uniform",
    ):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    cands = cfg.candidates()
    for cand in cands[:limit]:
        plan = model.plan(cand)
        counts = budget(plan.widths)
        deltas = [
            f"{name} {a - b:+,}"
            for name, a, b in zip(_NAMES, counts, base, strict=True)
            if a is not None and b is not None and a != b
        ]
        table.add_row(
            describe(cand),
            str(plan.widths[0]),
            str(plan.widths[-1]),
            str(min(plan.widths)),
            str(max(plan.widths)),
            f"{plan.realised_start:.3f}->{plan.realised_end:.3f}",
            *("?" if c is None else f"{c:,}" for c in counts),
            "; ".join(deltas) or "equal",
        )
    if len(cands) > limit:
        table.caption += f"; ... and {len(cands) - limit} more candidates"
    return table


def same_widths_notes(cfg: StudyConfig) -> list[str]:
    """One line per group of grid candidates that share a proxy width vector (trained once).

    Warns where the group's members differ at the target size: the proxy cannot tell apart
    what the full-scale model would.
    """
    lines = []
    for t in cfg.trainings():
        if not t.stands_for:
            continue
        names = ", ".join(describe(c) for c in t.stands_for)
        line = (
            f"same proxy widths {list(t.widths)}: {describe(t.candidate)} trains once per seed "
            f"and stands for {names}"
        )
        if cfg.target is not None:
            target = {cfg.target.plan(c).widths for c in t.all}
            if len(target) > 1:
                line += (
                    f"; warning: at the target size ({cfg.target.n_layer} layers) they are "
                    f"{len(target)} different models: this proxy cannot tell them apart"
                )
        lines.append(line)
    return lines


# Measured (docs/cluster.md "Multi-worker trials"): Ray Train's controller and worker actors
# take this long to start, per trial, on this project's CPU machines.
WORKER_START_S = (20, 30)


def worker_notes(cfg: StudyConfig) -> list[str]:
    """A warning where ``ray.workers_per_trial`` > 1 trains on CPUs: the workers' start costs
    more than a CPU-sized trial gains from them."""
    n = cfg.ray.workers_per_trial
    if n == 1 or cfg.ray.gpus_per_trial > 0:
        return []
    low, high = WORKER_START_S
    return [
        f"note: ray.workers_per_trial {n} on CPUs: Ray Train starts a trial's workers in "
        f"~{low}-{high} s (measured), and on CPUs N gloo workers rarely beat one worker with N "
        f"threads (train.threads); use it to fit a model one node cannot hold, or on GPUs"
    ]


def effective_lrs(
    cfg: StudyConfig, candidates: Iterable[Mapping[str, Any]] | None = None
) -> list[tuple[str, Any]]:
    """(schedule label, :class:`tlmsearch.parametrization.EffectiveLR`) for every non-uniform
    schedule of ``candidates`` (default: every one the study's grid trains), once per
    parametrization it trains under."""
    from tlmsearch.space import schedule_label

    if candidates is None:
        candidates = [t.candidate for t in cfg.trainings()]
    out, seen = [], set()
    for cand in candidates:
        try:  # a trial's params that plan no model (hand-edited, a sampler's odd draw): skipped
            e = effective_lr_of(cfg, cand)
        except (TypeError, ValueError, KeyError):  # ScheduleError and pydantic's are ValueErrors
            continue
        key = (schedule_label(cand), e.parametrization)
        if key in seen:
            continue
        seen.add(key)
        if not e.uniform:
            out.append((key[0], e))
    return out


def effective_lr_of(cfg: StudyConfig, candidate: Mapping[str, Any]) -> Any:
    """The :class:`tlmsearch.parametrization.EffectiveLR` of one candidate: its proxy widths
    under the parametrization it trains with (its own ``train.parametrization`` setting, else
    the study's)."""
    from tlmsearch.parametrization import effective_lr

    parametrization = cfg.for_candidate(candidate).train.parametrization
    return effective_lr(cfg.model.plan(candidate).widths, cfg.model.d_ff_uniform,
                        parametrization)  # fmt: skip


def effective_lr_lines(cfg: StudyConfig, per_schedule: bool = True) -> list[str]:
    """``tlmsearch validate``'s lines: what the parametrization does to each schedule's layers
    against uniform (:func:`effective_lrs`; not with ``per_schedule`` False), then how the study
    compares schedules: at one learning rate, or each at its own best too."""
    from tlmsearch.parametrization import lr_comparison

    pairs = effective_lrs(cfg) if per_schedule else []
    lines = [f"  {label}: {e.line()}" for label, e in pairs]
    if lines:
        lines.insert(0, "effective learning rate per layer, against uniform:")
    note = lr_comparison(cfg.space, cfg.train.lr)
    return lines + ([f"note: schedules are compared {note}"] if note else [])


def learning_rate(trials: Any, cfg: StudyConfig) -> dict[str, Any]:
    """best.yaml's ``learning_rate``: how the study compares schedules (``compared``: at one LR,
    with the caveat, or each also at its own best LR) and, per schedule it trained (and
    parametrization), what the parametrization does to its layers against uniform."""
    import json

    from tlmsearch.parametrization import lr_comparison

    note = lr_comparison(cfg.space, cfg.train.lr)
    params = []
    for text in dict.fromkeys(trials["params_json"]) if len(trials) else ():
        try:
            params.append(json.loads(text) if isinstance(text, str) and text else {})
        except ValueError:  # not JSON: a hand-edited record, nothing to say about it
            continue
    return {
        "compared": note or ("within each train.lr value, and each schedule at its own best LR "
                             "(tuned)"),
        "at_one_lr": bool(note),
        "effective_lr": {f"{label} ({e.parametrization})": e.line()
                         for label, e in effective_lrs(cfg, params)},
    }  # fmt: skip
