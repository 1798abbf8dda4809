"""Terminal tables (rich) for ``tlmsearch validate``: candidates, widths, budgets. No torch."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from rich.table import Table

from tlmsearch.config import ModelConfig, StudyConfig
from tlmsearch.widths.budget import count_params, flops_per_token, mlp_params, non_embedding_params
from tlmsearch.widths.candidate import IDENTITY, Candidate
from tlmsearch.widths.heads import heads_schedule
from tlmsearch.widths.schedules import uniform_widths
from tlmsearch.widths.space import SHARE, describe

_NAMES = ("MLP", "total", "non-emb", "FLOPs")


def candidates_table(cfg: StudyConfig, model: ModelConfig, title: str, limit: int = 40) -> Table:
    """One row per candidate: its widths, its exact parameter counts (total, non-embedding, MLP)
    and training FLOPs per token (:mod:`tlmsearch.widths.budget`), against the uniform baseline.

    Each candidate is counted as it is built (``model.built_for(candidate)``: its heads schedule's
    per-layer heads); a study with a heads schedule shows each candidate's heads per layer and
    its realised ``heads.share``."""
    d_ff = model.d_ff_uniform
    uniform = uniform_widths(model.n_layer, d_ff)
    vocab = model.vocab_size or cfg.vocab_size  # None: the data's tokenizer decides
    seq_len = cfg.data.seq_len

    def budget(m: ModelConfig, widths: tuple[int, ...]) -> tuple[int, int | None, int, int | None]:
        if vocab is None:
            return mlp_params(m, widths), None, non_embedding_params(m, widths), None
        params = count_params(m, widths, vocab)
        flops = flops_per_token(m, widths, vocab, seq_len).training
        return params.mlp, params.total, params.non_embedding, flops

    base = budget(model, uniform)
    cands = cfg.candidates()
    has_heads = any(heads_schedule(c) is not None for c in cands)
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
        f"non-embedding {base[2]:,}, MLP {base[0]:,}"
        + (f", heads {heads_text(model.heads)}" if has_heads else ""),
        title_justify="left",
        caption=caption,
        caption_justify="left",
    )
    columns = ["candidate", "first", "last", "min", "max", "realised"]
    columns += ["heads", "share"] if has_heads else []
    columns += ["MLP params", "total", "non-emb", "FLOPs/tok", "vs uniform"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("candidate", "heads") else "right")
    shares = []
    for cand in cands[:limit]:
        plan = model.plan(cand)
        counts = budget(model.built_for(cand), plan.widths)
        deltas = [
            f"{name} {a - b:+,}"
            for name, a, b in zip(_NAMES, counts, base, strict=True)
            if a is not None and b is not None and a != b
        ]
        heads = [heads_text(plan.heads or model.heads), f"{plan.heads_share:.3f}"]
        shares.append(plan.heads_share)
        table.add_row(
            describe(cand),
            str(plan.widths[0]),
            str(plan.widths[-1]),
            str(min(plan.widths)),
            str(max(plan.widths)),
            f"{plan.realised_start:.3f}->{plan.realised_end:.3f}",
            *(heads if has_heads else []),
            *("?" if c is None else f"{c:,}" for c in counts),
            "; ".join(deltas) or "equal",
        )
    if has_heads:
        caption += "; " + heads_caption(model, moved=any(s != 1.0 for s in shares))
    if len(cands) > limit:
        caption += f"; ... and {len(cands) - limit} more candidates"
    table.caption = caption
    return table


def heads_text(heads: Sequence[int]) -> str:
    """Attention heads per layer, short: every layer's up to 8 layers, else the ends (and the
    range where it reaches past them).

    >>> heads_text((2, 3, 5, 6)), heads_text((4,) * 12), heads_text((4,) * 6 + (8,) * 10)
    ('2 3 5 6', '4 x12', '4->8')
    >>> heads_text((8, 12, 16, 12, 8, 4, 4, 8, 8, 8))
    '8->8 [4..16]'
    """
    if len(heads) <= 8:
        return " ".join(str(h) for h in heads)
    if min(heads) == max(heads):
        return f"{heads[0]} x{len(heads)}"
    ends = f"{heads[0]}->{heads[-1]}"
    inside = (min(heads), max(heads)) == tuple(sorted((heads[0], heads[-1])))
    return ends if inside else f"{ends} [{min(heads)}..{max(heads)}]"


def heads_caption(model: ModelConfig, moved: bool) -> str:
    """What a heads schedule keeps equal to uniform: with every realised ``heads.share`` 1 both
    the parameters and the FLOPs per token; with ``moved`` capacity between attention and the
    MLPs, only what ``model.attention.hold`` names (the other differs between candidates)."""
    text = "heads: query heads per layer (head size fixed); share: heads total / uniform's"
    if not moved:
        return text + " (1 everywhere: parameters and FLOPs equal)"
    if model.attention.hold == "flops":
        return (
            text + f"; model.attention.hold flops: training FLOPs at seq_len "
            f"{model.attention.seq_len} are kept equal, so parameters differ between candidates"
        )
    return (
        text + "; model.attention.hold params: parameters are kept equal, but attention's FLOPs "
        "grow with its heads and the sequence length, so FLOPs/tok differ between candidates "
        "(hold: flops keeps them equal instead)"
    )


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
        same = f"same proxy widths {list(t.widths)}"
        if heads_schedule(t.candidate) is not None:  # the same widths with other heads differ
            same += f" and heads {list(cfg.model.plan(t.candidate).heads or ())}"
        line = f"{same}: {describe(t.candidate)} trains once per seed and stands for {names}"
        if cfg.target is not None:
            target = {(p.widths, p.heads) for p in (cfg.target.plan(c) for c in t.all)}
            if len(target) > 1:
                line += (
                    f"; warning: at the target size ({cfg.target.n_layer} layers) they are "
                    f"{len(target)} different models: this proxy cannot tell them apart"
                )
        lines.append(line)
    return lines


def share_notes(cfg: StudyConfig) -> list[str]:
    """A note per candidate whose ``heads.share`` is realised far from the request: heads move
    in exactly payable steps (tlmsearch/widths/heads.py), so a small model may round a share to 1
    (the same model as uniform heads) or far off it."""
    from tlmsearch.widths.schedules import ScheduleError

    lines = []
    for section, model in [("proxy", cfg.model), ("target", cfg.target)]:
        for cand in cfg.candidates() if model is not None else []:
            asked = cand.get(SHARE)
            if not isinstance(asked, int | float) or isinstance(asked, bool) or asked == 1:
                continue
            try:
                got = model.plan(cand).heads_share
            except ScheduleError:
                continue  # the candidates table says why
            if got == 1.0 or abs(got - asked) > 0.1 * asked:
                lines.append(
                    f"note: {describe(cand)}: heads.share {asked:g} is realised as {got:.4g} at "
                    f"the {section} (heads move in exactly payable steps; "
                    + ("the same model as share 1)" if got == 1.0 else "the nearest one)")
                )
    return lines


# Measured (docs/cluster.md "Multi-worker trials"): Ray Train's controller and worker actors
# take this long to start, per trial, on the 2-core CPU machines of docs/platform.md.
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
    cfg: StudyConfig, candidates: Iterable[Candidate] | None = None
) -> list[tuple[str, Any]]:
    """(schedule label, :class:`tlmsearch.train.parametrization.EffectiveLR`) for every non-uniform
    schedule of ``candidates`` (default: every one the study's grid trains), once per
    parametrization it trains under."""
    from tlmsearch.widths.space import schedule_label

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


def effective_lr_of(cfg: StudyConfig, candidate: Candidate) -> Any:
    """The :class:`tlmsearch.train.parametrization.EffectiveLR` of one candidate: its proxy widths
    under the parametrization it trains with (its own ``train.parametrization`` setting, else
    the study's)."""
    from tlmsearch.train.parametrization import effective_lr

    train = cfg.for_candidate(candidate).train
    plan = cfg.model.plan(candidate)
    return effective_lr(
        plan.widths,
        cfg.model.d_ff_uniform,
        train.parametrization,
        lr_profile=train.lr_profile,
        init_profile=train.init_profile,
        lr_profile_part=train.lr_profile_part,
        heads=plan.heads,
        n_head=cfg.model.n_head,
    )


def effective_lr_lines(cfg: StudyConfig, per_schedule: bool = True) -> list[str]:
    """``tlmsearch validate``'s lines: what the parametrization does to each schedule's layers
    against uniform (:func:`effective_lrs`; not with ``per_schedule`` False), then how the study
    compares schedules: at one learning rate, or each at its own best too."""
    from tlmsearch.train.parametrization import lr_comparison

    pairs = effective_lrs(cfg) if per_schedule else []
    lines = [f"  {label}: {e.line()}" for label, e in pairs]
    if lines:
        lines.insert(0, "effective learning rate per layer, against uniform:")
    note = lr_comparison(cfg.space, cfg.train.lr)
    return lines + ([f"note: schedules are compared {note}"] if note else [])


def learning_rate(trials: Any, cfg: StudyConfig, per_schedule: bool = True) -> dict[str, Any]:
    """best.yaml's ``learning_rate``: how the study compares schedules (``compared``: at one LR,
    with the caveat, or each also at its own best LR) and, per schedule it trained (and
    parametrization), what the parametrization does to its layers against uniform (not with
    ``per_schedule`` False: ``tlmsearch status`` prints the comparison only, and planning every
    trial's widths took 2 s at 5,000 trials)."""

    from tlmsearch.train.parametrization import lr_comparison

    note = lr_comparison(cfg.space, cfg.train.lr)
    params = []
    for text in dict.fromkeys(trials[IDENTITY]) if len(trials) and per_schedule else ():
        try:
            params.append(Candidate.from_identity(text) if isinstance(text, str) else Candidate())
        except ValueError:  # not JSON: a hand-edited record, nothing to say about it
            continue
    return {
        "compared": note
        or ("within each train.lr value, and each schedule at its own best LR (tuned)"),
        "at_one_lr": bool(note),
        "effective_lr": {
            f"{label} ({e.parametrization})": e.line() for label, e in effective_lrs(cfg, params)
        },
    }
