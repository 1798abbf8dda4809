"""Per-layer diagnostics of kept weights: what each MLP writes into the residual stream, and
what removing it costs (``tlmsearch analyze RUN``, written to ``analysis.parquet``).

Every architecture here is a stack of pre-norm residual blocks (:class:`tlmsearch.models.Block`):
after its mixers, MLP i of a block computes ``x = x + mlps[i](mlp_norms[i](x))``. transformer,
gated_attention and titans blocks have one MLP per layer (level 0); a hope_attention block has
one per CMS level (``model.hope.periods``: a chain of residual MLPs, all of the layer's width,
level i updated every periods[i] steps), so Hope gets a row per (layer, level). For each MLP,
over the validation windows (every position predicted once, so a plain mean over positions is
token-weighted):

- ``cosine``: mean over positions of cos(mlp_out_t, x_t), x_t the residual stream the MLP reads
  (its norm's input) and is added to: > 0 it reinforces the stream, < 0 it erases, ~0 it writes
  a new direction.
- ``rel_norm``: mean over positions of ||mlp_out_t|| / ||x_t||: how much it writes.
- ``ablation_nats``: the validation loss (nats/token) with this MLP's output zeroed, every other
  MLP intact, minus the intact loss: what the layer is worth to the trained model.

For each attention layer (tlmsearch's :class:`~tlmsearch.models.common.CausalSelfAttention`:
transformer, gated_attention, hope_attention, titans with ``with_attention``), on the same windows:

- ``attn_entropy_nats``: the entropy (nats) of a head's causal attention distribution
  p_t = softmax(q_t k_j^T / sqrt(hs), j <= t), H_t = -sum_j p_tj log p_tj, with RoPE and grouped
  query heads as the module computes them (query head i reads key head i // (h / kv)), averaged
  over windows and query positions, then over the layer's heads; ``_min`` / ``_max``: the
  layer's least and most spread head. Uniform attention over the t + 1 visible positions gives
  log(t + 1), so over a window of T positions the mean can be at most lgamma(T + 1) / T.
- ``attn_ablation_nats``: the validation loss with the attention's output zeroed (all its
  heads; the block adds nothing), minus the intact loss.

Per head (``analysis_heads.parquet``): its entropy, and its ablation (its channels of the output
projection's input zeroed, the other heads intact) when the model has at most
``max_head_ablations`` heads in all (:data:`HEAD_ABLATION_CAP`: one validation pass per head).

The numbers are read through forward hooks on the models' own modules (a pre-hook on the MLP's
norm sees x, a hook on the MLP sees its output; a hook on an attention sees its input and RoPE
tables, from which q and k are recomputed with its own weights; a hook that returns zeros ablates
a module: :mod:`tlmsearch.analysis.probes`), so the models carry no code for this. The passes run
in fp32, whatever dtype the trial trained in. hf and plugin models get the MLP measures only: their
attention is the family's own code (:data:`NO_ATTENTION`). torch is imported at module level:
the report reads ``analysis.parquet`` through :mod:`tlmsearch.run_dir.tables` and never imports
this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pandas as pd
import torch
from torch import nn

from tlmsearch.analysis.probes import (
    ablated,
    ablated_head,
    attention_entropy,
    attention_sites,
    check_windows,
    mean_nll,
)
from tlmsearch.config import StudyConfig
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir

NO_WEIGHTS = "run with search.keep_weights: best (or final) to analyze"
NO_ATTENTION = (
    "no attention measures: only tlmsearch's own attention layers are read (transformer, "
    "gated_attention, hope_attention, titans with with_attention), not hf or plugin attention"
)
# Per-head ablations (one validation pass per head) only for models with at most this many
# query heads in all layers together: 8 layers of 8 heads.
HEAD_ABLATION_CAP = 64
_EPS = 1e-12  # a residual or MLP output of norm 0 gives cosine 0 and no division by zero

# ``load(path) -> (model, meta)``: a kept-weights directory to its model and its meta.json
Load = Callable[[Any], tuple[nn.Module, Mapping[str, Any]]]


def mlp_sites(model: nn.Module) -> list[tuple[int, int, nn.Module, nn.Module]]:
    """``(layer, level, norm, mlp)`` for every MLP of a :class:`~tlmsearch.models.CausalLM`, in
    depth order; level indexes a block's MLPs (hope_attention's CMS levels, else only 0).
    A model built by other code (hf, a plugin: models/external.py) lists its own."""
    if hasattr(model, "mlp_sites"):
        return model.mlp_sites()
    return [
        (layer, level, norm, mlp)
        for layer, block in enumerate(model.blocks)
        for level, (norm, mlp) in enumerate(zip(block.mlp_norms, block.mlps, strict=True))
    ]


def _width(model: nn.Module, layer: int, mlp: nn.Module) -> int:
    """An MLP's hidden width: its w1's rows (ours), else the width the model was built with."""
    w1 = getattr(mlp, "w1", None)
    return int(w1.out_features) if isinstance(w1, nn.Linear) else int(model.widths[layer])


@torch.inference_mode()
def layer_diagnostics(
    model: nn.Module,
    vx: torch.Tensor,
    vy: torch.Tensor,
    *,
    batch: int,
    device: str | torch.device = "cpu",
) -> list[dict[str, Any]]:
    """Per MLP (layer, level): width, cosine, rel_norm and ablation_nats (see the module doc),
    with the intact ``val_loss`` (nats/token) and ``val_tokens`` (positions) they were read on.

    ``vx``, ``vy``: (windows, T) inputs and targets (:func:`tlmsearch.data.batches.val_windows`);
    ``model`` must already be on ``device``. One intact pass, then one pass per MLP.

    Example: ``layer_diagnostics(model, vx, vy, batch=16)[0]["ablation_nats"]``.
    """
    check_windows(vx, vy, batch)
    dev = torch.device(device)
    sites = mlp_sites(model)
    cos_sum = torch.zeros(len(sites), dtype=torch.float64, device=dev)
    ratio_sum = torch.zeros_like(cos_sum)
    resid: dict[int, torch.Tensor] = {}

    def reads(k: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            resid[k] = args[0]  # (B, T, d): the stream the MLP reads and is added to

        return hook

    def writes(k: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: Any, out: torch.Tensor) -> None:
            assert k in resid, f"MLP {k} ran without its norm: Block.forward changed"
            x, o = resid.pop(k).double(), out.double()  # (B, T, d)
            xn, on = x.norm(dim=-1), o.norm(dim=-1)  # (B, T)
            cos_sum[k] += ((o * x).sum(-1) / (on * xn).clamp_min(_EPS)).sum()
            ratio_sum[k] += (on / xn.clamp_min(_EPS)).sum()

        return hook

    handles = []
    try:
        for k, (_, _, norm, mlp) in enumerate(sites):
            handles.append(norm.register_forward_pre_hook(reads(k)))
            handles.append(mlp.register_forward_hook(writes(k)))
        intact = mean_nll(model, vx, vy, batch, dev)
    finally:
        for h in handles:
            h.remove()
    n = vy.numel()
    rows = []
    for k, (layer, level, _, mlp) in enumerate(sites):
        with ablated(mlp):
            loss = mean_nll(model, vx, vy, batch, dev)
        rows.append(
            {
                "layer": layer,
                "level": level,
                "width": _width(model, layer, mlp),
                "cosine": float(cos_sum[k]) / n,
                "rel_norm": float(ratio_sum[k]) / n,
                "ablation_nats": loss - intact,
                "val_loss": intact,
                "val_tokens": n,
            }
        )
    return rows


# -------------------------------------------------------------------------------------------------
# Attention


class AttentionRows(NamedTuple):
    # per attention layer: layer, heads, kv_heads, attn_entropy_nats (mean over heads),
    # attn_entropy_min_nats, attn_entropy_max_nats, attn_ablation_nats
    layers: list[dict[str, Any]]
    # per query head: layer, head, kv_head, entropy_nats, ablation_nats (NaN: not measured)
    heads: list[dict[str, Any]]


@torch.inference_mode()
def attention_diagnostics(
    model: nn.Module,
    vx: torch.Tensor,
    vy: torch.Tensor,
    *,
    batch: int,
    device: str | torch.device = "cpu",
    max_head_ablations: int = HEAD_ABLATION_CAP,
) -> AttentionRows:
    """Per attention layer and per head: entropy and ablation (see the module doc). Per-head
    ablations only when the model has at most ``max_head_ablations`` heads in all (0: none).
    Empty for a model without tlmsearch attention (:func:`attention_sites`).

    One intact pass, one per layer, one per head. Example:
    ``attention_diagnostics(model, vx, vy, batch=16).layers[0]["attn_entropy_nats"]``.
    """
    check_windows(vx, vy, batch)
    sites = attention_sites(model)
    if not sites:
        return AttentionRows([], [])
    dev = torch.device(device)
    sums = [torch.zeros(attn.n_head, dtype=torch.float64, device=dev) for _, attn in sites]

    def reads(k: int) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], out: torch.Tensor) -> None:
            x, rope = args  # Block.forward calls mixer(norm(x), rope)
            sums[k] += attention_entropy(module, x, rope).double().sum((0, 2))

        return hook

    handles = [attn.register_forward_hook(reads(k)) for k, (_, attn) in enumerate(sites)]
    try:
        intact = mean_nll(model, vx, vy, batch, dev)
    finally:
        for h in handles:
            h.remove()
    n = vy.numel()
    per_head = sum(attn.n_head for _, attn in sites) <= max_head_ablations
    layers, heads = [], []
    for k, (layer, attn) in enumerate(sites):
        entropy = (sums[k] / n).tolist()
        with ablated(attn):
            loss = mean_nll(model, vx, vy, batch, dev)
        layers.append(
            {
                "layer": layer,
                "heads": attn.n_head,
                "kv_heads": attn.n_kv_head,
                "attn_entropy_nats": sum(entropy) / len(entropy),
                "attn_entropy_min_nats": min(entropy),
                "attn_entropy_max_nats": max(entropy),
                "attn_ablation_nats": loss - intact,
            }
        )
        group = attn.n_head // attn.n_kv_head
        for head, e in enumerate(entropy):
            cost = math.nan
            if per_head:
                with ablated_head(attn, head):
                    cost = mean_nll(model, vx, vy, batch, dev) - intact
            row = {"layer": layer, "head": head, "kv_head": head // group, "entropy_nats": e}
            heads.append({**row, "ablation_nats": cost})
    return AttentionRows(layers, heads)


def with_attention(
    mlp_rows: Sequence[Mapping[str, Any]], attention: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The MLP rows of :func:`layer_diagnostics` with each layer's attention measures on its
    level-0 row (a layer's attention is one, its CMS levels several); a layer with attention
    and no MLP row gets a row of its own. Rows without attention keep none (NaN in the table)."""
    by_layer = {int(a["layer"]): dict(a) for a in attention}
    rows = []
    for r in mlp_rows:
        extra = by_layer.pop(int(r["layer"]), {}) if r.get("level", 0) == 0 else {}
        rows.append({**r, **extra})
    rows += [{"level": 0, **a} for a in by_layer.values()]
    return sorted(rows, key=lambda r: (r["layer"], r.get("level", 0)))


# -------------------------------------------------------------------------------------------------
# A run's kept weights


def validation_windows(
    cfg: StudyConfig, max_windows: int | None = None, *, progress: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's validation windows as its trials evaluated them (the run's prepared data and
    ``data.seq_len``), the first ``max_windows`` of them when given."""
    from tlmsearch.data import prepare_data
    from tlmsearch.data.batches import val_windows

    data = prepare_data(cfg.data_for_run(), progress=progress)
    vx, vy = val_windows(data.val_tokens(), data.seq_len)
    if max_windows is not None:
        vx, vy = vx[:max_windows], vy[:max_windows]
    return vx, vy


def select_kept(kept: Sequence[Mapping[str, Any]], trials: str | None) -> list[dict[str, Any]]:
    """The kept weights to analyze: all, or those of the trial numbers in ``trials`` ("3,7").

    A run that kept none, a bad list or a number without kept weights is a ConfigError.
    """
    # a checkpoint written outside a search (no Optuna trial) has no number: nothing to name
    kept = [k for k in kept if k.get("number") is not None]
    if not kept:
        raise ConfigError(f"the run kept no weights; {NO_WEIGHTS}")
    if trials is None:
        return [dict(k) for k in kept]
    try:
        wanted = [int(t) for t in trials.split(",")]
    except ValueError:
        raise ConfigError(
            f"--trials: {trials!r} is not a list of trial numbers; e.g. --trials 3,7"
        ) from None
    have = {int(k["number"]): k for k in kept}
    missing = [t for t in wanted if t not in have]
    if missing:
        raise ConfigError(
            f"--trials: no kept weights for trial(s) {', '.join(map(str, missing))}; "
            f"the run kept {', '.join(map(str, sorted(have)))}"
        )
    return [dict(have[t]) for t in dict.fromkeys(wanted)]


def _trial_info(meta: Mapping[str, Any], trials: pd.DataFrame) -> dict[str, Any]:
    """The analysis columns that say which trial a model is, from its meta and the trials table."""
    from tlmsearch.widths.space import describe, is_baseline

    number = int(meta["number"])
    params = dict(meta.get("candidate") or {})
    ids = trials.loc[trials["number"] == number, "trial_id"]
    shape = params.get("shape", "uniform")
    return {
        "trial_id": ids.iloc[0] if len(ids) else f"optuna-{number}",
        "number": number,
        "seed": meta.get("seed"),
        "candidate": describe(params),
        "shape": shape,
        "is_baseline": is_baseline(params),  # the uniform baseline: every delta's reference
        "arch": meta.get("arch") or (meta.get("model") or {}).get("arch", ""),
    }


class Analysis(NamedTuple):
    layers: pd.DataFrame  # analysis.parquet: per (trial, layer, level), MLP and attention
    heads: pd.DataFrame  # analysis_heads.parquet: per (trial, layer, query head)


def analyze_run(
    run_dir: str | Path,
    kept: Sequence[Mapping[str, Any]],
    load: Load,
    *,
    val: tuple[torch.Tensor, torch.Tensor],
    batch: int,
    device: str | torch.device = "cpu",
    max_head_ablations: int = HEAD_ABLATION_CAP,
) -> Analysis:
    """:func:`layer_diagnostics` and :func:`attention_diagnostics` of every kept model of a
    run; writes ``analysis.parquet`` and ``analysis_heads.parquet``.

    ``kept``: kept-weights entries (meta dicts with ``"path"``); ``load(path) -> (model, meta)``
    puts the model on ``device``; ``val``: (vx, vy) from :func:`validation_windows`. Returns the
    analysis table (:data:`tlmsearch.run_dir.tables.ANALYSIS_COLUMNS`), one row per (trial, layer,
    level), and the heads table (:data:`tlmsearch.run_dir.tables.ANALYSIS_HEAD_COLUMNS`), one row
    per (trial, layer, head), each also written atomically into the run dir (replacing an earlier
    one).
    """
    from tlmsearch.run_dir.tables import (
        analysis_frame,
        analysis_heads_frame,
        atomic_write,
        load_run,
    )

    run = load_run(run_dir)
    if not kept:
        raise ConfigError(f"the run kept no weights; {NO_WEIGHTS}")
    vx, vy = val
    rows, head_rows = [], []
    for entry in kept:
        model, meta = load(entry["path"])
        info = _trial_info({**entry, **meta}, run.trials)
        diags = layer_diagnostics(model, vx, vy, batch=batch, device=device)
        attn = attention_diagnostics(
            model, vx, vy, batch=batch, device=device, max_head_ablations=max_head_ablations
        )
        rows += [{**info, **d} for d in with_attention(diags, attn.layers)]
        head_rows += [{**info, **h, "val_tokens": vy.numel()} for h in attn.heads]
        del model
    out = Analysis(analysis_frame(rows), analysis_heads_frame(head_rows))
    paths = RunDir(run.path)
    atomic_write(paths.analysis, lambda p: out.layers.to_parquet(p, index=False))
    atomic_write(paths.analysis_heads, lambda p: out.heads.to_parquet(p, index=False))
    return out
