"""Width-aware parametrization: take the learning-rate confound out of width comparisons.

With one global Adam learning rate (``train.parametrization: standard``), how far one step moves
an MLP's output grows with the MLP's hidden width: a 1.5x wider early MLP is stepped harder than
a 0.5x late one, so "taper vs uniform" mixes width with an effective per-layer learning rate.
``train.parametrization: mup`` applies the Maximal Update Parametrization (Tensor Programs V,
Yang et al. 2022, arXiv 2203.03466) to the widths that vary here, the MLP hidden width d_ff_i
of layer i (and its attention heads under a heads schedule, below), with the study's uniform
model as the base shape:

    width multiplier  m_i = d_ff_i / d_ff_uniform        (d_model, head size, depth stay fixed)

The rule. Each SwiGLU ``w2(silu(w1 x) * w3 x)`` is a one-hidden-layer network whose hidden width
d_ff_i grows while its input and output width d_model does not. In muP's terms:

- ``w1``, ``w3`` (gate, up; weight (d_ff_i, d_model)): only fan_out is a width, so they are
  *input weights*. TP5 Table 3 for Adam: init variance 1/fan_in and LR 1, both independent of
  d_ff_i: **unchanged**. (In the ``mup`` package these are "vector-like", ``infshape.ninf() ==
  1``, which MuAdam leaves alone.)
- ``w2`` (down; weight (d_model, d_ff_i)): only fan_in is a width, so it is an *output weight*
  of the MLP. TP5 Table 3 for Adam: init variance 1/fan_in^2 and LR 1/fan_in. Relative to the
  base model: **init std / m_i, Adam LR / m_i, weight decay x m_i**.

Why this form. The ``mup`` package implements output weights as ``MuReadout`` (TP5 Table 8): a
forward multiplier 1/m on the input, the SP init rescaled by sqrt(m), and the global LR (MuAdam
leaves a matrix with one infinite dimension alone). Adam's update does not depend on the
gradient's scale, so a multiplier 1/m with LR eta is the same training as the weight itself
scaled by 1/m with LR eta / m (the abc-parametrization symmetry, TP5 Sec. 5). We use the second
form because it leaves the modules untouched: the model is the same nn.Module under both
parametrizations, checkpoints and exports need no multiplier, and only the init of ``w2`` and
the optimizer's groups change. AdamW decays ``p *= 1 - lr * wd``; with the multiplier the
weight shrinks by ``lr * wd`` per step, so in the scaled form ``wd`` is multiplied by m to keep
``lr * wd`` (MuAdamW does the same for the matrices it scales). Gradient clipping takes its
global norm in the MuReadout frame too (:func:`clip_grad_norm_`): the output weight's gradient
there is ours / m.

At the base width (m = 1) muP is standard: the uniform model trains identically under both, and
under ``standard`` nothing here changes a number. Common random numbers still hold: ``w2``'s
keyed draw is only rescaled, so two candidates of a seed share their common units up to the
factor m_a / m_b (exactly where their widths are equal).

Attention heads (a heads schedule, tlmsearch/widths/heads.py) are the other width that varies:
layer i has h_i query heads of the model's fixed head size, against ``n_head`` in the base model
(the uniform one, built without ``layer_heads``). The same reasoning applies with
m_i = h_i / n_head: q/k/v and the gate (weight (heads * head_dim, d_model)) are input weights,
**unchanged**; the output projection (weight (d_model, h_i * head_dim)) is an output weight,
**init std / m_i, Adam LR / m_i, weight decay x m_i**. An output projection at m = 1 stays in
the model's own decay group, so a model without a heads schedule has the groups it always had.

What every architecture feeds the rule: only SwiGLU MLPs receive a per-layer width (titans'
memory MLP has width ``memory_expansion * head_dim``, hope's chained CMS levels are each a
SwiGLU of the layer's width and are scaled each on its own; their summed-over-a-period gradient
is a gradient to Adam), and only attention matrices tagged with ``head_units`` receive per-layer
heads. :func:`mup_groups` checks that: a parameter whose shape differs from the base model's and
is neither an MLP matrix tagged with ``unit_dim`` nor a tagged attention matrix is an error
naming ``train.parametrization``. The tags are separate so that neither is taken for the other.

The coordinate check (tests/test_parametrization.py): after a few Adam steps at a fixed LR, the
mean |change| of each MLP's output is flat in d_ff under ``mup`` and grows about linearly in
d_ff under ``standard``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

PARAMETRIZATIONS = ("standard", "mup")
# A param group's muP multiplier of the scheduled learning rate (absent: 1). It is also the
# factor to muP's MuReadout frame that gradient clipping reads (readout_factors).
LR_SCALE = "lr_scale"
# A param group's depth-profile multiplier of the learning rate (train.lr_profile, or the
# embedding's train.embedding_lr_mult; absent: 1). A training recipe, not a parametrization:
# clipping's frame does not read it.
LR_MULT = "lr_mult"
# The block of layer i owns every parameter named blocks.{i}.* (the built-in models).
_BLOCK = re.compile(r"^blocks\.(\d+)\.")


def width_mult(width: int, base: int) -> float:
    """muP's width multiplier of an MLP of hidden width ``width``: ``width / base``.

    >>> width_mult(96, 64)
    1.5
    """
    if width < 1 or base < 1:
        raise ValueError(f"widths must be positive, but got {width=} and {base=}")
    return width / base


def mup_scales(width: int, base: int) -> dict[str, float]:
    """Relative to the base model, the muP factors of an MLP's output weight (w2) at ``width``:
    init std, Adam LR and weight decay. Input weights (w1, w3) keep 1 for all three.

    >>> mup_scales(128, 64)
    {'init_std': 0.5, 'lr': 0.5, 'weight_decay': 2.0}
    """
    m = width_mult(width, base)
    return {"init_std": 1 / m, "lr": 1 / m, "weight_decay": m}


def _mlp_output_weights(model: Any) -> list[tuple[str, Any]]:
    """(name, weight) of every MLP matrix whose fan-in is the hidden width (``unit_dim == 1``)."""
    return [
        (f"{name}.weight", module.weight)
        for name, module in model.named_modules()
        if getattr(module, "unit_dim", None) == 1
    ]


def _head_output_weights(model: Any) -> list[tuple[str, Any]]:
    """(name, weight) of every attention matrix whose fan-in is the layer's heads
    (``head_units == 1``: the output projection)."""
    return [
        (f"{name}.weight", module.weight)
        for name, module in model.named_modules()
        if getattr(module, "head_units", None) == 1
    ]


def _tagged(model: Any) -> set[str]:
    """Names of the matrices whose shape may follow a candidate: MLP matrices (``unit_dim``)
    and attention matrices (``head_units``)."""
    return {
        f"{name}.weight"
        for name, module in model.named_modules()
        if getattr(module, "unit_dim", None) in (0, 1)
        or getattr(module, "head_units", None) in (0, 1)
    }


def _check_only_mlps_vary(model: Any, base_model: Any) -> None:
    """Every parameter whose shape differs from the base model's must be a tagged MLP or
    attention matrix: the rule knows nothing else that grows with the candidate."""
    base_shapes = {n: tuple(p.shape) for n, p in base_model.named_parameters()}
    tagged = _tagged(model)
    for name, p in model.named_parameters():
        if name in tagged or base_shapes.get(name) == tuple(p.shape):
            continue
        raise ValueError(
            f"train.parametrization: 'mup' cannot scale {name} (shape {tuple(p.shape)}, base "
            f"{base_shapes.get(name)}): only MLP hidden widths and attention heads follow the "
            "muP rule here; use train.parametrization: standard for this architecture"
        )


def _output_weights(model: Any, base_width: int, base_model: Any) -> list[dict[tuple, list]]:
    """The output weights muP scales, by (fan-in, base fan-in): every MLP down projection (base
    ``base_width``), and each attention output projection whose heads differ from the base
    model's (at m = 1 it stays in the model's own group). MLPs first, then attention."""
    base_fan = {n: p.size(1) for n, p in base_model.named_parameters() if p.ndim == 2}
    mlp: dict[tuple, list] = defaultdict(list)
    for _, w in _mlp_output_weights(model):
        mlp[w.size(1), base_width].append(w)
    attention: dict[tuple, list] = defaultdict(list)
    for name, w in _head_output_weights(model):
        if w.size(1) != base_fan[name]:
            attention[w.size(1), base_fan[name]].append(w)
    return [mlp, attention]


def mup_groups(model: Any, weight_decay: float, base_width: int, base_model: Any) -> list[dict]:
    """AdamW groups under muP, and the output weights' init rescaled in place (std / m).

    ``model.param_groups(weight_decay)`` split: each MLP output weight of width multiplier m
    (and each attention output projection of heads multiplier m != 1) leaves the decay group
    for a group of multiplier m with ``lr_scale`` 1/m and weight decay ``weight_decay * m``;
    everything else keeps its group. ``base_model``: the uniform model of the same config, the
    base shapes (its output projections' fan-in is ``n_head * head_dim``), also used to check
    that nothing else differs from it.
    """
    import torch

    _check_only_mlps_vary(model, base_model)
    groups = model.param_groups(weight_decay)
    kinds = _output_weights(model, base_width, base_model)
    scaled = {id(w) for kind in kinds for ws in kind.values() for w in ws}
    out = [{**g, "params": [p for p in g["params"] if id(p) not in scaled]} for g in groups]
    for kind in kinds:
        for (fan, base), ws in sorted(kind.items()):
            s = mup_scales(fan, base)
            if fan != base:
                with torch.no_grad():
                    for w in ws:
                        w.mul_(s["init_std"])
            out.append(
                {"params": ws, "weight_decay": weight_decay * s["weight_decay"], LR_SCALE: s["lr"]}
            )
    return [g for g in out if g["params"]]


def param_groups(model: Any, model_cfg: Any, train_cfg: Any, *, vocab_size: int) -> list[dict]:
    """The AdamW param groups of ``train_cfg.parametrization`` (and, under ``mup``, the muP init),
    split by layer where ``train_cfg`` has depth profiles (:func:`profile_groups`).

    ``standard``: ``model.param_groups(train_cfg.weight_decay)`` as is. ``mup``: see
    :func:`mup_groups`, with the uniform model of ``model_cfg`` as the base shape (uniform MLP
    widths and ``n_head`` heads in every layer; ``n_kv_head`` kept).
    """
    groups = _parametrized_groups(model, model_cfg, train_cfg, vocab_size=vocab_size)
    scale_init(model, train_cfg)
    return profile_groups(model, groups, train_cfg)


def _parametrized_groups(
    model: Any, model_cfg: Any, train_cfg: Any, *, vocab_size: int
) -> list[dict]:
    if train_cfg.parametrization == "standard":
        return model.param_groups(train_cfg.weight_decay)
    if train_cfg.parametrization != "mup":
        raise ValueError(
            f"train.parametrization: {train_cfg.parametrization!r} is not one of "
            f"{', '.join(PARAMETRIZATIONS)}"
        )
    import torch

    from tlmsearch.models import build_model

    base = model_cfg.d_ff_uniform
    uniform = model_cfg.model_copy(update={"layer_heads": None})  # n_head heads in every layer
    with torch.device("meta"):  # shapes only: no draws, no memory
        base_model = build_model(uniform, [base] * model_cfg.n_layer, vocab_size)
    return mup_groups(model, train_cfg.weight_decay, base, base_model)


def set_lr(optimizer: Any, lr: float) -> None:
    """Set the scheduled ``lr`` on every group, times the group's ``lr_scale`` (a muP group) and
    ``lr_mult`` (a depth profile's layer) where it has them; groups without either get ``lr``
    itself, exactly."""
    for group in optimizer.param_groups:
        x = lr * group[LR_SCALE] if LR_SCALE in group else lr
        group["lr"] = x * group[LR_MULT] if LR_MULT in group else x


# -------------------------------------------------------------------------------------------------
# Depth profiles (tlmsearch/widths/profiles.py): per-layer LR and init multipliers


def layer_parts(model: Any, part: str) -> dict[int, int]:
    """``id(param) -> layer`` for the parameters of ``part`` in each block: ``block`` (all of
    blocks.{i}), ``mlp`` (its MLP matrices: tagged ``unit_dim``) or ``down`` (the MLP output
    weights: ``unit_dim == 1``). A model without ``blocks.{i}`` parameters has none.

    >>> import torch
    >>> from tlmsearch.config import ModelConfig
    >>> from tlmsearch.models import build_model
    >>> m = build_model(ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64), [64, 64], 256)
    >>> names = {id(p): n for n, p in m.named_parameters()}
    >>> sorted(names[i] for i, layer in layer_parts(m, "down").items() if layer == 1)
    ['blocks.1.mlps.0.w2.weight']
    """
    wanted = {"mlp": (0, 1), "down": (1,)}.get(part)
    if part != "block" and wanted is None:
        raise ValueError(f"part: {part!r} is not one of block, mlp, down")
    tagged = None
    if wanted is not None:
        tagged = {
            f"{name}.weight"
            for name, module in model.named_modules()
            if getattr(module, "unit_dim", None) in wanted
        }
    out: dict[int, int] = {}
    for name, p in model.named_parameters():
        match = _BLOCK.match(name)
        if match and (tagged is None or name in tagged):
            out[id(p)] = int(match.group(1))
    return out


def _check_layers(mults: Sequence[float], layers: dict[int, int], field: str) -> None:
    found = 1 + max(layers.values(), default=-1)
    if found != len(mults):
        raise ValueError(
            f"train.{field} has {len(mults)} multipliers but the model has {found} layers "
            f"with parameters to scale; give one per layer (model.n_layer)"
        )


def profile_groups(model: Any, groups: list[dict], train_cfg: Any) -> list[dict]:
    """``groups`` split so that layer i's parameters of ``train_cfg.lr_profile_part`` carry
    ``lr_mult`` = ``lr_profile[i]`` (the token embedding ``embedding_lr_mult``, the output
    layer ``head_lr_mult``); each keeps its muP ``lr_scale``, so set_lr composes muP x profile.
    Without a profile or an end multiplier, ``groups`` itself (the same groups as ever).

    **Decay stays the study's.** AdamW decays ``p *= 1 - lr x wd``: a group stepped at
    ``lr x p`` gets ``wd / p``, so ``lr x wd`` per step is the study's in every layer. A profile
    changes how far the Adam update moves a layer, not how fast its weights shrink: a taper's
    wide layer keeps uniform's per-weight decay, and uniform widths stepped as the taper must
    too (muP's ``wd x m`` beside ``lr / m`` keeps the same product)."""
    profile = getattr(train_cfg, "lr_profile", None)
    emb = float(getattr(train_cfg, "embedding_lr_mult", 1.0))
    head = float(getattr(train_cfg, "head_lr_mult", 1.0))
    if profile is None and emb == 1.0 and head == 1.0:
        return groups
    mult: dict[int, float] = {}
    if profile is not None:
        layers = layer_parts(model, train_cfg.lr_profile_part)
        _check_layers(profile, layers, "lr_profile")
        mult.update({pid: float(profile[i]) for pid, i in layers.items()})
    ends = [("embedding_lr_mult", "wte", emb), ("head_lr_mult", "lm_head", head)]
    for field, module, m in ends:
        if m == 1.0:
            continue
        weight = getattr(getattr(model, module, None), "weight", None)
        if weight is None:
            raise ValueError(f"train.{field}: this model has no {module} to scale; remove it")
        if mult.get(id(weight), m) != m:  # tied: one matrix, two multipliers
            raise ValueError(
                f"train.{field} ({m:g}) differs from train.embedding_lr_mult ({emb:g}), but "
                "model.tie_embeddings makes them one matrix; give one value"
            )
        mult[id(weight)] = m
    out = []
    for g in groups:
        split: dict[float, list] = {}
        for p in g["params"]:
            split.setdefault(mult.get(id(p), 1.0), []).append(p)
        for m, ps in split.items():
            group = {**g, "params": ps}
            if m != 1.0:
                group[LR_MULT] = m
                group["weight_decay"] = g["weight_decay"] / m  # lr x wd: the study's
            out.append(group)
    return out


def scale_init(model: Any, train_cfg: Any) -> None:
    """Multiply layer i's matrices of ``train_cfg.init_profile_part`` by ``init_profile[i]``
    in place (their init std x p_i; vectors such as norm gains keep theirs). Composes with
    muP's own rescaling of the down projections. Nothing without an init profile."""
    profile = getattr(train_cfg, "init_profile", None)
    if profile is None:
        return
    import torch

    layers = layer_parts(model, train_cfg.init_profile_part)
    _check_layers(profile, layers, "init_profile")
    with torch.no_grad():
        for p in model.parameters():
            i = layers.get(id(p))
            if i is not None and p.ndim >= 2 and profile[i] != 1.0:
                p.mul_(float(profile[i]))


# -------------------------------------------------------------------------------------------------
# Gradient clipping in the MuReadout frame


def readout_factors(param_groups: Sequence[dict]) -> dict[int, float]:
    """``id(param) -> f``: the factor that maps an output weight's gradient in our form to the
    ``MuReadout`` frame, f = 1/m (the group's ``lr_scale``), for every parameter whose f is
    not 1. Empty under ``standard`` and for the uniform model under ``mup`` (every m = 1).

    Why 1/m. Our output weight W (init std / m, LR / m) computes ``y = W h``; MuReadout's
    weight V computes ``y = (1/m) V h``: the same function at V = m W. By the chain rule
    ``dL/dV = (1/m) dL/dy h^T = (1/m) dL/dW``, so the gradient MuReadout sees is ours times
    1/m, which is exactly the group's LR multiplier.
    """
    return {
        id(p): float(g[LR_SCALE])
        for g in param_groups
        if g.get(LR_SCALE, 1.0) != 1.0
        for p in g["params"]
    }


def clip_grad_norm_(model: Any, param_groups: Sequence[dict], max_norm: float) -> Any:
    """Clip ``model``'s gradients on their global norm as the ``MuReadout`` formulation would:
    the norm is taken in that frame, the same coefficient scales every gradient. Returns the
    total norm (in that frame; a 0-d tensor, never read back to the host).

    ``torch.nn.utils.clip_grad_norm_`` multiplies every gradient by
    ``c = min(1, max_norm / (N + 1e-6))``, N the global 2-norm. In the MuReadout frame the
    gradient of an output weight of multiplier m is ours / m (:func:`readout_factors`), so

        N^2 = sum over unscaled p of |g_p|^2  +  sum over output weights W of |g_W|^2 / m^2.

    Clipping V's gradient by c is clipping W's by c (the map is linear), so applying that c
    to our gradients, then our AdamW (LR / m, decay x m), moves V = m W as MuAdamW moves the
    MuReadout weight (up to Adam's eps, which our form applies as eps / m in V's units). A
    global norm taken in our frame instead counts a wide layer's down projection m times too
    much, a narrow one's too little: candidates of different widths would clip differently
    from the formulation the docs say we train (docs/parametrization.md).

    Without a factor other than 1 (``standard``, or the uniform model under ``mup``) this is
    torch's own call on ``model.parameters()``, bit for bit.
    """
    import torch

    factors = readout_factors(param_groups)
    if not factors:
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    by_factor: dict[float, list] = defaultdict(list)
    for p in model.parameters():
        if p.grad is not None:
            by_factor[factors.get(id(p), 1.0)].append(p.grad)
    parts = [f * torch.nn.utils.get_total_norm(grads) for f, grads in by_factor.items()]
    total = torch.linalg.vector_norm(torch.stack(parts))
    torch.nn.utils.clip_grads_with_norm_(model.parameters(), max_norm, total)
    return total


# -------------------------------------------------------------------------------------------------
# What a parametrization does to each layer of a candidate, against uniform


@dataclass(frozen=True)
class EffectiveLR:
    """Per layer, what ``parametrization`` does to a candidate of MLP widths ``widths`` against
    the uniform model (every width ``base``): the learning-rate confound, said out loud.

    - ``lr``: the MLP down projection's Adam LR over uniform's (standard: 1; mup: 1 / m), times
      a depth profile's p_i where the study gives one (``train.lr_profile``: every part it
      applies to holds the down projection).
    - ``init``: its init std over uniform's (standard: 1; mup: 1 / m; times an init profile's).
    - ``step``: how far one Adam step moves the MLP's output over uniform's. Adam's update has a
      fixed size per weight, so the output moves in proportion to the d_ff weights summed:
      m x lr (standard: m, the wide layers pushed harder; mup: 1, flat; uniform widths with an
      LR profile: p_i, the taper's steps without its capacity).
    - ``attention_lr`` / ``attention_step``: the same for layer i's attention: its LR over
      uniform's is a depth profile's p_i where the profile applies to the whole block (muP's
      own factors leave attention alone: d_model is fixed), and one step moves its output in
      proportion to its heads, h_i / n_head x its LR (a heads schedule's wide layers are pushed
      harder, as the MLP's are).

    Each has a range and two means. The layer mean of m is 1 for any exact-budget schedule, and
    so is the mean of mup's ``lr`` weighted by the layers' MLP parameters (proportional to m):
    that is why one number hides the confound. A narrow layer's units each get the larger LR.

    >>> e = effective_lr([96, 80, 48, 32], 64, "mup")
    >>> [round(x, 3) for x in e.lr], round(e.lr_layer_mean, 3), round(e.lr_param_mean, 3)
    ([0.667, 0.8, 1.333, 2.0], 1.2, 1.0)
    >>> effective_lr([64, 64], 64, "standard", lr_profile=[1.5, 0.5]).step
    (1.5, 0.5)
    >>> effective_lr([64, 64], 64, "standard", heads=[2, 6], n_head=4).attention_step
    (0.5, 1.5)
    """

    parametrization: str
    widths: tuple[int, ...]
    base: int
    lr: tuple[float, ...]
    init: tuple[float, ...]
    step: tuple[float, ...]
    attention_lr: tuple[float, ...] = ()  # () : every layer x1 (no block profile, no heads)
    attention_step: tuple[float, ...] = ()

    @property
    def lr_layer_mean(self) -> float:
        return sum(self.lr) / len(self.lr)

    @property
    def lr_param_mean(self) -> float:
        """The down projections' LR multiplier weighted by their parameters (d_model x width)."""
        return sum(w * x for w, x in zip(self.widths, self.lr, strict=True)) / sum(self.widths)

    @property
    def step_layer_mean(self) -> float:
        return sum(self.step) / len(self.step)

    @property
    def uniform(self) -> bool:
        """Every layer x1 of uniform's: uniform widths, uniform heads and no profile."""
        flat_attention = all(abs(x - 1) < 1e-12 for x in self.attention_step)
        return all(w == self.base for w in self.widths) and not self.profiled and flat_attention

    def attention_words(self) -> str:
        """``"; attention steps x0.50..x1.50"`` where attention's differ from uniform's."""
        if all(abs(x - 1) < 1e-12 for x in self.attention_step):
            return ""
        lo, hi = min(self.attention_step), max(self.attention_step)
        return f"; a step moves the attention output x{lo:.2f}..x{hi:.2f} of uniform's"

    @property
    def profiled(self) -> bool:
        """Whether a depth profile (LR or init) multiplies muP's own factors."""
        mup = self.parametrization == "mup"
        own = [1 / width_mult(w, self.base) if mup else 1.0 for w in self.widths]
        return any(abs(x - o) > 1e-12 for x, o in zip(self.lr, own, strict=True)) or any(
            abs(x - o) > 1e-12 for x, o in zip(self.init, own, strict=True)
        )

    def line(self) -> str:
        """The candidate's multipliers in one line (``validate``, ``status``, the report)."""
        return self._mlp_line() + self.attention_words()

    def _mlp_line(self) -> str:
        if self.uniform:
            return f"{self.parametrization}: x1 in every layer (the uniform model is the base)"
        lo, hi = min(self.step), max(self.step)
        step = (
            f"a step moves the MLP output x{lo:.2f}..x{hi:.2f} of uniform's (layer mean "
            f"{self.step_layer_mean:.2f})"
            if hi - lo > 1e-9
            else f"a step moves every MLP output x{lo:.2f} of uniform's"
        )
        if self.profiled:
            lr = f"x{min(self.lr):.2f}..x{max(self.lr):.2f}"
            init = f"x{min(self.init):.2f}..x{max(self.init):.2f}"
            what = f"{self.parametrization} x depth profile: down-projection"
            return f"{what} LR {lr}, init {init} of uniform's; {step}"
        if self.parametrization == "standard":
            return (
                f"standard: LR and init x1 everywhere; {step}: at one LR the wide layers are "
                "pushed harder"
            )
        return (
            f"{self.parametrization}: down-projection LR and init x{min(self.lr):.2f}.."
            f"x{max(self.lr):.2f} of uniform's (layer mean {self.lr_layer_mean:.2f}, by "
            f"parameters {self.lr_param_mean:.2f}); {step}"
        )

    def as_dict(self) -> dict[str, Any]:
        """best.yaml's ``effective_lr``: the per-layer multipliers, their ranges and means."""

        def r(xs: tuple[float, ...]) -> list[float]:
            return [round(x, 4) for x in xs]

        return {
            "parametrization": self.parametrization,
            "lr": r(self.lr),
            "init": r(self.init),
            "step": r(self.step),
            "lr_range": [round(min(self.lr), 4), round(max(self.lr), 4)],
            "lr_layer_mean": round(self.lr_layer_mean, 4),
            "lr_param_mean": round(self.lr_param_mean, 4),
            "step_range": [round(min(self.step), 4), round(max(self.step), 4)],
            "step_layer_mean": round(self.step_layer_mean, 4),
            **(
                {"attention_lr": r(self.attention_lr), "attention_step": r(self.attention_step)}
                if self.attention_step
                else {}
            ),
            "line": self.line(),
        }


def effective_lr(
    widths: Sequence[int],
    base: int,
    parametrization: str,
    *,
    lr_profile: Sequence[float] | None = None,
    init_profile: Sequence[float] | None = None,
    lr_profile_part: str = "mlp",
    heads: Sequence[int] | None = None,
    n_head: int | None = None,
) -> EffectiveLR:
    """The :class:`EffectiveLR` of MLP ``widths`` against uniform width ``base``, with the
    study's depth profiles (``train.lr_profile``, ``train.init_profile``, the LR profile's
    ``lr_profile_part``) where it has them, and attention's ``heads`` per layer against
    ``n_head`` (None: every layer's heads are uniform's).

    >>> effective_lr([96, 32], 64, "standard").step
    (1.5, 0.5)
    """
    if parametrization not in PARAMETRIZATIONS:
        raise ValueError(
            f"train.parametrization: {parametrization!r} is not one of "
            f"{', '.join(PARAMETRIZATIONS)}"
        )
    ms = [width_mult(w, base) for w in widths]
    if not ms:
        raise ValueError("widths: give at least one layer's width")
    scale = [1.0] * len(ms) if parametrization == "standard" else [1 / m for m in ms]
    for name, prof in (("lr_profile", lr_profile), ("init_profile", init_profile)):
        if prof is not None and len(prof) != len(ms):
            raise ValueError(f"train.{name} has {len(prof)} multipliers for {len(ms)} layers")
    lr = [s * p for s, p in zip(scale, lr_profile or [1.0] * len(ms), strict=True)]
    init = [s * p for s, p in zip(scale, init_profile or [1.0] * len(ms), strict=True)]
    step = [m * x for m, x in zip(ms, lr, strict=True)]
    attn_lr = list(lr_profile) if lr_profile and lr_profile_part == "block" else [1.0] * len(ms)
    if heads is not None and len(heads) != len(ms):
        raise ValueError(f"heads has {len(heads)} layers for {len(ms)} widths")
    share = [h / n_head for h in heads] if heads is not None and n_head else [1.0] * len(ms)
    attn_step = [s * x for s, x in zip(share, attn_lr, strict=True)]
    flat = all(abs(x - 1) < 1e-12 for x in attn_step + attn_lr)
    return EffectiveLR(
        parametrization,
        tuple(int(w) for w in widths),
        int(base),
        tuple(lr),
        tuple(init),
        tuple(step),
        () if flat else tuple(attn_lr),
        () if flat else tuple(attn_step),
    )


AT_ONE_LR = "at one learning rate: may be an LR effect; see tuned"


def lr_comparison(space: Any, train_lr: float) -> str:
    """How a study compares schedules, in words: ``""`` when ``train.lr`` is a setting dimension
    of two or more distinct values (each schedule also at its own best LR: the tuned
    comparison), else :data:`AT_ONE_LR` with the LR and what to do.

    ``space``: a :class:`tlmsearch.widths.space.SearchSpace`; ``train_lr``: the study's
    ``train.lr``.
    """
    dim = space.dimensions.get("train.lr")
    if dim is not None and not dim.finite:
        return ""
    lr = train_lr
    if dim is not None:
        try:  # YAML reads 3e-3 as a string; the trial's config turns it into the float
            values = {float(v) for v in dim.values()}
        except (TypeError, ValueError):
            values = set()
        if len(values) > 1:
            return ""
        lr = next(iter(values), train_lr)
    return (
        f"{AT_ONE_LR} (every schedule trains at train.lr {lr:g}; a train.lr dimension "
        "compares each at its own best LR: studies/taper_lr.yaml, "
        "docs/search_dimensions.md)"
    )
