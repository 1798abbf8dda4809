"""Terminal tables (rich) for ``tlmsearch validate``: candidates, widths, budgets. No torch."""

from __future__ import annotations

from rich.table import Table

from tlmsearch.budget import mlp_params
from tlmsearch.config import ModelConfig, StudyConfig
from tlmsearch.schedules import uniform_widths
from tlmsearch.space import describe


def candidates_table(cfg: StudyConfig, model: ModelConfig, title: str, limit: int = 40) -> Table:
    """One row per candidate: its widths and its MLP parameters against the uniform baseline."""
    d_ff = model.d_ff_uniform
    base = mlp_params(model, uniform_widths(model.n_layer, d_ff))
    table = Table(
        title=f"{title}: {model.arch}, {model.n_layer} layers, d_model {model.d_model}, "
        f"d_ff {d_ff} (multiple of {model.multiple_of}); uniform MLP params {base:,}",
        title_justify="left",
    )
    for col in (
        "candidate",
        "first",
        "last",
        "min",
        "max",
        "realised",
        "MLP params",
        "vs uniform",
    ):
        table.add_column(col, justify="left" if col == "candidate" else "right")
    cands = cfg.candidates()
    for cand in cands[:limit]:
        plan = cfg.space.widths(
            cand, n_layer=model.n_layer, d_ff=d_ff, multiple_of=model.multiple_of
        )
        params = mlp_params(model, plan.widths)
        delta = params - base
        table.add_row(
            describe(cand),
            str(plan.widths[0]),
            str(plan.widths[-1]),
            str(min(plan.widths)),
            str(max(plan.widths)),
            f"{plan.realised_start:.3f}->{plan.realised_end:.3f}",
            f"{params:,}",
            "equal" if delta == 0 else f"{delta:+,}",
        )
    if len(cands) > limit:
        table.caption = f"... and {len(cands) - limit} more candidates"
    return table
