"""train.parametrization: the muP rule, its coordinate check, and what stays as it was."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from tlmsearch.config import ARCHS, ModelConfig, TrainConfig
from tlmsearch.models import ARCHITECTURES, build_model
from tlmsearch.models.common import Block, CausalSelfAttention, SwiGLU
from tlmsearch.train import parametrization
from tlmsearch.train.parametrization import LR_SCALE, mup_scales, set_lr, width_mult

BASE = 64
TINY = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=BASE)
VOCAB = 64
MULTS = (0.5, 1, 2, 4)


def _setup(par: str, widths: list[int], *, seed: int = 0, cfg: ModelConfig = TINY, lr=1e-2):
    train_cfg = TrainConfig(parametrization=par, lr=lr, weight_decay=0.1)
    model = build_model(cfg, widths, VOCAB, seed=seed)
    groups = parametrization.param_groups(model, cfg, train_cfg, vocab_size=VOCAB)
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), weight_decay=0.1)
    return model, opt


# -------------------------------------------------------------------------------------------------
# The rule


@given(st.integers(1, 4096), st.integers(1, 4096))
def test_the_down_projection_scales_as_an_output_weight(width: int, base: int) -> None:
    s = mup_scales(width, base)
    m = width_mult(width, base)
    assert math.isclose(s["init_std"] * m, 1) and math.isclose(s["lr"] * m, 1)
    # AdamW shrinks p by lr * wd per step: the product stays the base model's (MuAdamW's rule)
    assert math.isclose(s["lr"] * s["weight_decay"], 1)
    assert (s["lr"] == 1) == (width == base)


def test_mup_scales_w2_only_by_its_width_multiplier() -> None:
    standard, _ = _setup("standard", [32, 256])
    model, opt = _setup("mup", [32, 256])
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    std_params = dict(standard.named_parameters())
    for name, p in model.named_parameters():
        g = by_param[id(p)]
        if name.endswith("w2.weight"):
            m = p.size(1) / BASE
            assert g[LR_SCALE] == 1 / m and g["weight_decay"] == pytest.approx(0.1 * m)
            assert torch.allclose(p, std_params[name] / m)  # the same keyed draw, scaled
        else:  # w1, w3 (input weights), attention, embeddings, norms: as under standard
            assert LR_SCALE not in g
            assert torch.equal(p, std_params[name])
    set_lr(opt, 0.01)
    assert sorted(g["lr"] for g in opt.param_groups if LR_SCALE in g) == [0.0025, 0.02]


def test_standard_is_the_models_own_groups_untouched() -> None:
    model = build_model(TINY, [32, 96], VOCAB, seed=1)
    before = {n: p.clone() for n, p in model.named_parameters()}
    groups = parametrization.param_groups(model, TINY, TrainConfig(), vocab_size=VOCAB)
    assert groups == model.param_groups(TrainConfig().weight_decay)
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_the_mup_base_model_on_the_meta_device_draws_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The base model is built for its shapes only; before, keyed_normal_ drew every weight of
    # it on the CPU (_keyed_draw allocates there) and copied it into a meta tensor.
    from tlmsearch.models import common

    model = build_model(TINY, [32, 96], VOCAB, seed=1)
    draws = []
    real = common._keyed_draw
    monkeypatch.setattr(common, "_keyed_draw", lambda *a: draws.append(a[3]) or real(*a))
    parametrization.param_groups(model, TINY, TrainConfig(parametrization="mup"), vocab_size=VOCAB)
    assert not any("mlp" not in key for key in draws), draws  # only muP's redraw of the MLPs
    draws.clear()
    with torch.device("meta"):
        build_model(TINY, [32, 96], VOCAB, seed=1)
    assert draws == []


def test_the_uniform_model_trains_identically_under_both() -> None:
    """At the base shape muP is standard: the same losses, bit for bit."""
    losses = {}
    for par in ("standard", "mup"):
        model, opt = _setup(par, [BASE, BASE], seed=2)
        losses[par] = _train(model, opt, steps=3, lr=1e-2)[0]
    assert losses["standard"] == losses["mup"]


@pytest.mark.parametrize("arch", ARCHS)
def test_every_architecture_feeds_its_widths_to_mlps_only(arch: str) -> None:
    """The runtime check behind config.WIDTH_SITES: only tagged MLP matrices change shape."""
    cfg = ModelConfig(arch=arch, n_layer=2, d_model=32, n_head=2, d_ff=BASE)
    model = build_model(cfg, [32, 96], VOCAB)
    groups = parametrization.param_groups(
        model, cfg, TrainConfig(parametrization="mup"), vocab_size=VOCAB
    )
    n_mlps = sum(isinstance(m, SwiGLU) for m in model.modules())
    scaled = [p for g in groups if LR_SCALE in g for p in g["params"]]
    assert len(scaled) == n_mlps  # every MLP's w2, hope's levels each on its own
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def test_a_width_outside_the_mlps_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    class WideMixer(CausalSelfAttention):  # a mixer whose size follows the layer's width
        def __init__(self, d_model: int, n_head: int, width: int) -> None:
            super().__init__(d_model, n_head)
            self.extra = nn.Parameter(torch.zeros(width))

    def blocks(cfg: ModelConfig, widths: list[int]) -> list[Block]:
        return [
            Block([WideMixer(cfg.d_model, cfg.n_head, w)], [SwiGLU(cfg.d_model, w)], 32, 1e-5)
            for w in widths
        ]

    monkeypatch.setitem(ARCHITECTURES, "transformer", blocks)
    model = build_model(TINY, [32, 96], VOCAB)
    with pytest.raises(ValueError, match=r"train.parametrization: 'mup' cannot scale .*extra"):
        parametrization.param_groups(
            model, TINY, TrainConfig(parametrization="mup"), vocab_size=VOCAB
        )


# -------------------------------------------------------------------------------------------------
# The coordinate check (TP5 Sec. 7; the mup package's get_coord_data): how far a few Adam steps
# at one fixed LR move each MLP's output, as the MLPs widen from 0.5x to 4x the base width.


def _train(
    model: nn.Module, opt: torch.optim.Optimizer, *, steps: int, lr: float, kind: type = SwiGLU
):
    """(losses, mean |change| of the output of each ``kind`` module (each MLP by default) on a
    fixed batch after ``steps`` steps)."""
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randint(0, VOCAB, (8, 16), generator=g) for _ in range(2))
    mlps = [m for m in model.modules() if isinstance(m, kind)]
    outs: dict[int, torch.Tensor] = {}
    for k, mlp in enumerate(mlps):
        mlp.register_forward_hook(lambda _m, _i, o, k=k: outs.__setitem__(k, o.detach()))
    with torch.no_grad():
        model(x)
    start = dict(outs)
    losses = []
    for _ in range(steps):
        set_lr(opt, lr)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    with torch.no_grad():
        model(x)
    return losses, [(outs[k] - start[k]).abs().mean().item() for k in range(len(mlps))]


def _coord_sizes(par: str, widen: str, seed: int) -> list[float]:
    """Per width multiplier, the mean |delta output| of the widened MLP(s)."""
    sizes = []
    for m in MULTS:
        w = int(BASE * m)
        widths = [w, w] if widen == "all" else [w, BASE]
        model, opt = _setup(par, widths, seed=seed)
        deltas = _train(model, opt, steps=4, lr=1e-2)[1]
        sizes.append(max(deltas) if widen == "all" else deltas[0])
    return sizes


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("widen", ["all", "one"])
def test_coordinate_check_mup_is_flat_in_width_and_standard_grows(widen: str, seed: int) -> None:
    """Measured (4 steps, lr 1e-2): mup moves an MLP's output within a factor 1.3 from 0.5x to
    4x; standard moves it ~3x more at 4x than at 0.5x (grows like width^0.55 this early)."""
    mup = _coord_sizes("mup", widen, seed)
    standard = _coord_sizes("standard", widen, seed)
    assert max(mup) / min(mup) < 1.5, mup
    assert standard[-1] / standard[0] > 2.2, standard
    assert all(a < b for a, b in itertools.pairwise(standard)), standard


def test_coordinate_check_fails_without_the_lr_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    """muP's init alone does not flatten the update: the 1/m learning rate does."""

    def global_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
        for group in optimizer.param_groups:
            group["lr"] = lr

    monkeypatch.setattr(parametrization, "set_lr", global_lr)
    monkeypatch.setitem(globals(), "set_lr", global_lr)
    sizes = _coord_sizes("mup", "all", seed=0)
    assert sizes[-1] / sizes[0] > 2.2, sizes


# -------------------------------------------------------------------------------------------------
# Attention heads: the output projection is an output weight of multiplier heads/n_head

HEADS = ModelConfig(n_layer=2, d_model=32, n_head=4, d_ff=BASE, layer_heads=[2, 8])


def test_mup_scales_the_attention_output_projection_by_its_heads() -> None:
    """Layer heads (2, 8) against n_head 4: proj gets m = 0.5 and 2 (LR / m, decay x m, init
    std / m); q/k/v, the MLP's input weights and the rest keep standard's groups and draws."""
    standard, _ = _setup("standard", [BASE, BASE], cfg=HEADS)
    model, opt = _setup("mup", [BASE, BASE], cfg=HEADS)
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    std_params = dict(standard.named_parameters())
    seen = {}
    for name, p in model.named_parameters():
        g = by_param[id(p)]
        if name.endswith("proj.weight"):
            m = p.size(1) / (4 * 8)  # heads * head_dim over the base's n_head * head_dim
            seen[name] = g[LR_SCALE]
            assert g[LR_SCALE] == 1 / m and g["weight_decay"] == pytest.approx(0.1 * m)
            assert torch.allclose(p, std_params[name] / m)
        elif name.endswith("w2.weight"):  # the uniform MLP widths: m = 1
            assert g[LR_SCALE] == 1 and torch.equal(p, std_params[name])
        else:
            assert LR_SCALE not in g, name
            assert torch.equal(p, std_params[name]), name
    assert sorted(seen.values()) == [0.5, 2.0]  # 8 heads: LR / 2; 2 heads: LR x 2


def test_mup_with_uniform_heads_keeps_the_projection_in_its_group() -> None:
    """An output projection at n_head heads is at the base: no group of its own (a model
    without a heads schedule has the optimizer groups it always had)."""
    cfg = HEADS.model_copy(update={"layer_heads": [4, 8]})
    model, opt = _setup("mup", [BASE, BASE], cfg=cfg)
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    p0, p1 = model.blocks[0].mixers[0].proj.weight, model.blocks[1].mixers[0].proj.weight
    assert LR_SCALE not in by_param[id(p0)] and by_param[id(p1)][LR_SCALE] == 0.5


@pytest.mark.parametrize("arch", ["transformer", "gated_attention"])
def test_mup_accepts_per_layer_heads_and_gqa(arch: str) -> None:
    """The attention matrices that follow a layer's heads (qkv, proj, gate) are tagged, so the
    check lets them vary; the base model is the uniform one (n_head heads, n_kv_head kept)."""
    cfg = HEADS.model_copy(update={"arch": arch, "n_kv_head": 2, "layer_heads": [2, 6]})
    model = build_model(cfg, [32, 96], VOCAB)
    groups = parametrization.param_groups(
        model, cfg, TrainConfig(parametrization="mup"), vocab_size=VOCAB
    )
    scales = sorted(g[LR_SCALE] for g in groups if LR_SCALE in g)
    assert scales == pytest.approx(sorted([2.0, 4 / 6, BASE / 32, BASE / 96]))
    assert sum(len(g["params"]) for g in groups) == len(list(model.parameters()))


def _coord_sizes_heads(par: str, widen: str, seed: int) -> list[float]:
    """Per heads multiplier (2, 4, 8, 16 heads against n_head 4), the mean |delta output| of
    the widened attention layer(s)."""
    sizes = []
    for h in (2, 4, 8, 16):
        cfg = HEADS.model_copy(update={"layer_heads": [h, h] if widen == "all" else [h, 4]})
        model, opt = _setup(par, [BASE, BASE], seed=seed, cfg=cfg)
        deltas = _train(model, opt, steps=4, lr=1e-2, kind=CausalSelfAttention)[1]
        sizes.append(max(deltas) if widen == "all" else deltas[0])
    return sizes


@pytest.mark.parametrize(("widen", "seed"), [("all", 0), ("one", 1)])
def test_coordinate_check_of_attention_heads(widen: str, seed: int) -> None:
    """Measured (4 steps, lr 1e-2, 2 -> 16 heads, seeds 0 and 1 of both): mup moves an
    attention layer's output within a factor 1.6 (1.13-1.57); standard moves it 4.1-5.0x
    more at 16 heads than at 2, growing at every step."""
    mup = _coord_sizes_heads("mup", widen, seed)
    standard = _coord_sizes_heads("standard", widen, seed)
    assert max(mup) / min(mup) < 2.0, mup
    assert standard[-1] / standard[0] > 3.0, standard
    assert all(a < b for a, b in itertools.pairwise(standard)), standard


# -------------------------------------------------------------------------------------------------
# The effective learning rate each layer gets, against uniform

TAPER4 = [96, 80, 48, 32]  # `tlmsearch widths --shape cosine --layers 4 --d-ff 64`: 1.5 -> 0.5


def test_effective_lr_of_a_4_layer_taper_by_hand() -> None:
    std = parametrization.effective_lr(TAPER4, BASE, "standard")
    assert std.lr == std.init == (1.0, 1.0, 1.0, 1.0)
    assert std.step == (1.5, 1.25, 0.75, 0.5)  # 96/64, 80/64, 48/64, 32/64
    assert std.step_layer_mean == 1.0
    assert "x0.50..x1.50" in std.line() and "layer mean 1.00" in std.line()
    mup = parametrization.effective_lr(TAPER4, BASE, "mup")
    assert mup.lr == pytest.approx((64 / 96, 64 / 80, 64 / 48, 64 / 32))  # 0.667 0.8 1.333 2
    assert mup.init == mup.lr and mup.step == pytest.approx((1, 1, 1, 1))
    assert mup.lr_layer_mean == pytest.approx((2 / 3 + 0.8 + 4 / 3 + 2) / 4)  # 1.2
    # weighted by parameters (d_model x width each): (96 * 2/3 + 80 * 0.8 + ...) / 256 = 1
    assert mup.lr_param_mean == pytest.approx(1.0)
    assert "x0.67..x2.00" in mup.line() and "layer mean 1.20, by parameters 1.00" in mup.line()
    assert (
        parametrization.effective_lr([64] * 4, BASE, "mup")
        .line()
        .endswith("x1 in every layer (the uniform model is the base)")
    )
    with pytest.raises(ValueError, match=r"train\.parametrization"):
        parametrization.effective_lr(TAPER4, BASE, "ntk")


@pytest.mark.parametrize("par", parametrization.PARAMETRIZATIONS)
def test_effective_lr_is_what_the_optimizer_and_init_do(par: str) -> None:
    """The reported multipliers are read off the real param groups and weights, not restated."""
    cfg = ModelConfig(n_layer=4, d_model=32, n_head=2, d_ff=BASE)
    model, opt = _setup(par, TAPER4, cfg=cfg)
    e = parametrization.effective_lr(TAPER4, BASE, par)
    by_param = {id(p): g for g in opt.param_groups for p in g["params"]}
    std, _ = _setup("standard", TAPER4, cfg=cfg)  # the same keyed draws, unscaled
    std_w2 = {n: p for n, p in std.named_parameters() if n.endswith("w2.weight")}
    w2 = [(n, p) for n, p in model.named_parameters() if n.endswith("w2.weight")]
    assert len(w2) == 4
    for i, (name, p) in enumerate(w2):
        assert by_param[id(p)].get(LR_SCALE, 1.0) == pytest.approx(e.lr[i])
        ratio = (p.std() / std_w2[name].std()).item()
        assert ratio == pytest.approx(e.init[i], rel=1e-5)


@given(st.integers(2, 64), st.lists(st.integers(0, 63), min_size=1, max_size=6))
def test_exact_budget_means_hide_the_confound(base_units: int, offsets: list[int]) -> None:
    """For any exact-budget width vector (mean width = uniform's): standard's step multipliers
    average 1 over layers, and mup's LR multipliers average 1 weighted by parameters, while
    their plain layer mean is at least 1 (Jensen: the narrow layers' larger LRs win)."""
    base = 16 * base_units
    deltas = [16 * (o % base_units) for o in offsets]  # each width stays >= 16
    widths = [base + d for d in deltas] + [base - d for d in deltas]  # sums to len x base
    std = parametrization.effective_lr(widths, base, "standard")
    mup = parametrization.effective_lr(widths, base, "mup")
    assert std.step_layer_mean == pytest.approx(1.0)
    assert mup.lr_param_mean == pytest.approx(1.0)
    assert mup.lr_layer_mean >= 1.0 - 1e-12
    assert (mup.lr_layer_mean > 1.0 + 1e-12) == any(deltas)


# -------------------------------------------------------------------------------------------------
# Gradient clipping in the MuReadout frame

CLIPPED = HEADS.model_copy(update={"layer_heads": [2, 8]})  # w2 at m 0.5, 4; proj at 0.5, 2


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randint(0, VOCAB, (4, 16), generator=g) for _ in range(2))  # type: ignore


def _ce(logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def _readout(model: nn.Module, opt: torch.optim.Optimizer, lr: float):
    """The MuReadout formulation of ``model``, built by hand: each output weight W of
    multiplier m (its group's lr_scale 1/m) becomes a leaf V = m W used as ``(1/m) V`` in the
    forward; AdamW at the global LR with the base decay (MuAdamW leaves such a matrix alone).
    Returns (leaves by name, the multiplier of each name, its AdamW)."""
    factor = parametrization.readout_factors(opt.param_groups)
    names = {id(p): n for n, p in model.named_parameters()}
    mult = {n: 1.0 / factor.get(id(p), 1.0) for n, p in model.named_parameters()}
    leaves = {n: (p.detach() * mult[n]).requires_grad_() for n, p in model.named_parameters()}
    groups = [
        {
            "params": [leaves[names[id(p)]] for p in g["params"]],
            "weight_decay": g["weight_decay"] * g.get(LR_SCALE, 1.0),
        }
        for g in opt.param_groups
    ]
    ref_opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-12)
    return leaves, mult, ref_opt


def _readout_loss(model, leaves, mult, x, y) -> torch.Tensor:
    params = {n: v / mult[n] if mult[n] != 1 else v for n, v in leaves.items()}
    return _ce(torch.func.functional_call(model, params, (x,)), y)


def test_mup_clips_the_gradient_as_the_mureadout_formulation_does() -> None:
    """The norm is taken in MuReadout's frame: our clipped gradients, mapped there (times 1/m),
    are the reference's clipped ones, while clipping on our frame's norm is not."""
    model, opt = _setup("mup", [32, 256], cfg=CLIPPED)
    leaves, mult, _ = _readout(model, opt, 1e-2)
    assert sorted({round(m, 6) for m in mult.values()}) == [0.5, 1.0, 2.0, 4.0]
    x, y = _batch(0)
    _readout_loss(model, leaves, mult, x, y).backward()
    ref_norm = float(torch.nn.utils.get_total_norm([v.grad for v in leaves.values()]))
    max_norm = 0.2 * ref_norm  # clipping is active
    ref_total = torch.nn.utils.clip_grad_norm_(list(leaves.values()), max_norm)

    _ce(model(x), y).backward()
    ours_frame = {n: p.grad.clone() for n, p in model.named_parameters()}
    total = parametrization.clip_grad_norm_(model, opt.param_groups, max_norm)
    assert float(total) == pytest.approx(float(ref_total), rel=1e-5)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad / mult[n], leaves[n].grad, rtol=1e-5, atol=1e-9)
    # the old rule: torch's global norm over our frame clips by another coefficient
    ours_norm = float(torch.nn.utils.get_total_norm(list(ours_frame.values())))
    assert abs(ours_norm / ref_norm - 1) > 0.005  # 1% in this tiny model
    torch.nn.utils.clip_grads_with_norm_(list(ours_frame.values()), max_norm, ours_norm)
    w2 = "blocks.1.mlps.0.w2.weight"
    assert not torch.allclose(ours_frame[w2] / mult[w2], leaves[w2].grad, rtol=1e-3)


def _update_error(clip: str, steps: int = 4, max_norm: float = 0.05, lr: float = 1e-2) -> float:
    """The largest relative error, over parameters, of our form's update after ``steps``
    clipped AdamW steps against the MuReadout formulation's (|dW - dV / m| / |dV / m|).
    ``clip``: "mureadout" (parametrization.clip_grad_norm_) or "ours" (torch's global norm in
    our frame, the old rule)."""
    model = build_model(CLIPPED, [32, 256], VOCAB, seed=0)
    train_cfg = TrainConfig(parametrization="mup", lr=lr, weight_decay=0.1)
    groups = parametrization.param_groups(model, CLIPPED, train_cfg, vocab_size=VOCAB)
    opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-12)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    leaves, mult, ref_opt = _readout(model, opt, lr)
    for step in range(steps):
        x, y = _batch(step)
        _readout_loss(model, leaves, mult, x, y).backward()
        assert torch.nn.utils.clip_grad_norm_(list(leaves.values()), max_norm) > max_norm
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
        _ce(model(x), y).backward()
        if clip == "mureadout":
            parametrization.clip_grad_norm_(model, opt.param_groups, max_norm)
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        set_lr(opt, lr)
        opt.step()
        opt.zero_grad(set_to_none=True)
    errors = []
    for n, p in model.named_parameters():
        ours, ref = p.detach() - start[n], leaves[n].detach() / mult[n] - start[n]
        errors.append(float((ours - ref).norm() / ref.norm()))
    return max(errors)


def test_mup_with_clipping_trains_as_the_mureadout_formulation() -> None:
    """Four AdamW steps with clipping active in each (the coefficient changes step to step,
    so Adam's moments see it): every weight moves as MuReadout's V / m does, to float rounding
    (measured 4e-5, Adam's eps included); the old rule, a norm over our frame, is off by 6e-3."""
    assert _update_error("mureadout") < 3e-4
    assert _update_error("ours") > 2e-3


@pytest.mark.parametrize(("par", "widths"), [("standard", [32, 256]), ("mup", [BASE, BASE])])
def test_clipping_is_torchs_own_bit_for_bit_without_a_multiplier(par, widths) -> None:
    """Standard, and the uniform model under mup (every m = 1): torch's clip_grad_norm_ over
    model.parameters(), the same numbers bit for bit."""
    cfg = TINY
    model, opt = _setup(par, widths, cfg=cfg)
    twin, _ = _setup(par, widths, cfg=cfg)
    x, y = _batch(0)
    for m in (model, twin):
        _ce(m(x), y).backward()
    assert parametrization.readout_factors(opt.param_groups) == {}
    total = parametrization.clip_grad_norm_(model, opt.param_groups, 0.01)
    want = torch.nn.utils.clip_grad_norm_(twin.parameters(), 0.01)
    assert torch.equal(total, want) and want > 0.01
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(p.grad, q.grad)


def test_attention_steps_follow_a_heads_schedule_and_a_block_profile() -> None:
    """Attention's effective steps: h_i / n_head x its LR, whose multiplier is a depth profile's
    only where that profile applies to the whole block."""
    heads = parametrization.effective_lr([64] * 4, BASE, "standard", heads=[1, 2, 2, 3], n_head=2)
    assert heads.attention_step == (0.5, 1.0, 1.0, 1.5) and heads.attention_lr == (1, 1, 1, 1)
    assert not heads.uniform and "attention output x0.50..x1.50" in heads.line()
    block = parametrization.effective_lr(
        [64] * 2, BASE, "standard", lr_profile=[1.5, 0.5], lr_profile_part="block"
    )
    assert block.attention_lr == block.attention_step == (1.5, 0.5)
    assert block.as_dict()["attention_step"] == [1.5, 0.5]
    mlp = parametrization.effective_lr([64] * 2, BASE, "standard", lr_profile=[1.5, 0.5])
    assert mlp.attention_step == () and "attention" not in mlp.line()  # the MLP's steps only
    flat = parametrization.effective_lr([64] * 2, BASE, "mup", heads=[2, 2], n_head=2)
    assert flat.uniform and "attention_step" not in flat.as_dict()


def test_validate_says_a_heads_schedules_attention_steps() -> None:
    from tlmsearch.config.study import StudyConfig
    from tlmsearch.config.summary import effective_lr_of

    cfg = StudyConfig.model_validate(
        {
            "name": "h",
            "model": {"n_layer": 2, "d_model": 32, "n_head": 4, "d_ff": 64},
            "space": {"dimensions": {"shape": {"type": "fixed", "value": "uniform"}}},
            "train": {"parametrization": "mup"},
        }
    )
    e = effective_lr_of(cfg, {"shape": "uniform", "heads.shape": "linear", "heads.r_start": 1.5})
    assert e.attention_step == (1.5, 0.5) and e.step == (1.0, 1.0)
