"""Models: exact counts, causality, uniform = homogeneous, fp32/bf16 forward+backward, hooks,
keyed init (common random numbers across widths)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tlmsearch.config import ModelConfig
from tlmsearch.models import ARCHITECTURES, build_model
from tlmsearch.models.common import UNIT_CHUNK, RMSNorm, keyed_normal, keyed_normal_
from tlmsearch.models.titans import NeuralMemory
from tlmsearch.widths.budget import count_params
from tlmsearch.widths.schedules import plan_widths, uniform_widths

ARCHS = sorted(ARCHITECTURES)
VOCAB = 256
# Short Titans chunks so a 16-token sequence crosses several chunk boundaries.
TINY = dict(n_layer=2, d_model=32, n_head=2, d_ff=64, multiple_of=16, titans={"chunk_size": 4})


def tiny(arch: str, **kw) -> ModelConfig:
    return ModelConfig(arch=arch, **{**TINY, **kw})


def seeded(cfg: ModelConfig, widths, seed: int = 0, vocab: int = VOCAB) -> nn.Module:
    return build_model(cfg, widths, vocab, seed=seed)


def test_registry_names_every_architecture_of_the_config() -> None:
    """One spec entry per architecture (config.model.ARCH_SPECS), one block builder
    (models.ARCHITECTURES) and one parameter count (budget.MIXERS): the same names."""
    from tlmsearch.config import ARCHS as CONFIG_ARCHS
    from tlmsearch.config.model import ARCH_SPECS, WIDTH_SITES
    from tlmsearch.models.hf_export import NO_FAMILY
    from tlmsearch.train.trial_array import FUSABLE_ARCHS
    from tlmsearch.widths.budget import MIXERS

    assert set(ARCHITECTURES) == set(CONFIG_ARCHS) == set(MIXERS) == set(ARCH_SPECS)
    assert set(WIDTH_SITES) == set(ARCH_SPECS)
    assert set(FUSABLE_ARCHS) == {a.name for a in ARCH_SPECS.values() if a.fusable}
    assert all(a.name in NO_FAMILY for a in ARCH_SPECS.values() if not a.hf_family)


@pytest.mark.parametrize("arch", ARCHS)
def test_uniform_model_is_homogeneous_and_taper_keeps_the_total(arch: str) -> None:
    cfg = tiny(arch, n_layer=4)
    uni = seeded(cfg, uniform_widths(4, 64))
    shapes = [[tuple(p.shape) for p in b.parameters()] for b in uni.blocks]
    assert all(s == shapes[0] for s in shapes)  # every layer the same: the ordinary model
    taper = plan_widths("cosine", n_layer=4, d_ff=64, multiple_of=16, r_start=1.5).widths
    assert taper != uniform_widths(4, 64)
    tap = seeded(cfg, taper)
    n_uni = sum(p.numel() for p in uni.parameters())
    assert n_uni == sum(p.numel() for p in tap.parameters())
    assert [b.mlps[0].w1.out_features for b in tap.blocks] == list(taper)  # never rescaled


def test_uniform_transformer_equals_a_reference_llama() -> None:
    """The uniform-width transformer is an ordinary Llama: same init for a seed, same output."""
    cfg = tiny("transformer")
    model = seeded(cfg, [64, 64], seed=3)
    ref = _ReferenceLlama(VOCAB, d=32, n_head=2, n_layer=2, d_ff=64)
    ref.init(0.02, seed=3)
    assert list(ref.state_dict()) == list(model.state_dict())
    for (name, a), b in zip(model.state_dict().items(), ref.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    idx = torch.randint(0, VOCAB, (2, 12))
    torch.testing.assert_close(model(idx), ref(idx))


class _ReferenceLlama(nn.Module):
    """A homogeneous Llama written independently (one d_ff for all layers, manual attention)."""

    def __init__(self, vocab: int, d: int, n_head: int, n_layer: int, d_ff: int) -> None:
        super().__init__()
        self.n_head, self.n_layer = n_head, n_layer
        self.wte = nn.Embedding(vocab, d)
        self.blocks = nn.ModuleList()
        for _ in range(n_layer):
            blk = nn.Module()
            blk.mixer_norms = nn.ModuleList([_Norm(d)])
            att = nn.Module()
            att.qkv, att.proj = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
            blk.mixers = nn.ModuleList([att])
            blk.mlp_norms = nn.ModuleList([_Norm(d)])
            mlp = nn.Module()
            mlp.w1, mlp.w3 = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
            mlp.w2 = nn.Linear(d_ff, d, bias=False)
            blk.mlps = nn.ModuleList([mlp])
            self.blocks.append(blk)
        self.norm_f = _Norm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    @torch.no_grad()
    def init(self, std: float, seed: int) -> None:
        """Each weight drawn by name; MLP hidden units are rows of w1, w3 and columns of w2;
        attention channels are rows of q, k and v (each keyed on its own) and columns of proj."""

        def draw(name: str, std: float, unit_dim: int | None = None) -> None:
            p = self.get_parameter(name)
            keyed_normal_(p, std, seed=seed, name=name, unit_dim=unit_dim)

        draw("wte.weight", std)
        res = std / math.sqrt(2 * self.n_layer)
        for i in range(self.n_layer):
            qkv = f"blocks.{i}.mixers.0.qkv.weight"
            for part, rows in zip("qkv", self.get_parameter(qkv).chunk(3), strict=True):
                keyed_normal_(rows, std, seed=seed, name=f"{qkv}/{part}", unit_dim=0)
            draw(f"blocks.{i}.mixers.0.proj.weight", res, unit_dim=1)
            draw(f"blocks.{i}.mlps.0.w1.weight", std, unit_dim=0)
            draw(f"blocks.{i}.mlps.0.w3.weight", std, unit_dim=0)
            draw(f"blocks.{i}.mlps.0.w2.weight", res, unit_dim=1)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        B, T = idx.shape
        x = self.wte(idx)
        d = x.size(-1)
        hs = d // self.n_head
        pos = torch.arange(T, dtype=torch.float32)
        freqs = pos[:, None] * (10000.0 ** (-torch.arange(0, hs, 2) / hs))[None]
        cos, sin = freqs.cos(), freqs.sin()

        def rope(t: torch.Tensor) -> torch.Tensor:
            a, b = t[..., : hs // 2], t[..., hs // 2 :]
            return torch.cat([a * cos - b * sin, a * sin + b * cos], -1)

        mask = torch.ones(T, T, dtype=torch.bool).tril()
        for blk in self.blocks:
            att, mlp = blk.mixers[0], blk.mlps[0]
            h = blk.mixer_norms[0](x)
            q, k, v = att.qkv(h).split(d, -1)
            q, k, v = (t.view(B, T, self.n_head, hs).transpose(1, 2) for t in (q, k, v))
            s = (rope(q) @ rope(k).transpose(-1, -2)) / math.sqrt(hs)
            y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
            x = x + att.proj(y.transpose(1, 2).reshape(B, T, d))
            h = blk.mlp_norms[0](x)
            x = x + mlp.w2(F.silu(mlp.w1(h)) * mlp.w3(h))
        return self.lm_head(self.norm_f(x))


class _Norm(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * self.weight


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("widths", [(64, 64), (96, 32), (16, 112)])
def test_analytic_parameter_count_equals_the_built_model(arch: str, widths) -> None:
    for kw in ({}, {"tie_embeddings": False}):
        cfg = tiny(arch, **kw)
        model = build_model(cfg, widths, VOCAB)
        count = count_params(cfg, widths, VOCAB)
        assert count.total == sum(p.numel() for p in model.parameters())
        mlp = sum(p.numel() for b in model.blocks for m in b.mlps for p in m.parameters())
        assert count.mlp == mlp


@pytest.mark.parametrize(
    "cfg",
    [
        tiny("gated_attention", gated_attention={"gate": "headwise"}),
        tiny("titans", titans={"with_attention": False, "memory_depth": 3, "chunk_size": 4}),
        tiny("titans", titans={"memory_expansion": 1, "chunk_size": 32}),
        tiny("hope_attention", hope={"levels": 3, "periods": [1, 2, 4]}),
        tiny("hope_attention", hope={"levels": 1, "periods": [1]}),
    ],
    ids=lambda c: c.arch,
)
def test_analytic_parameter_count_of_arch_options(cfg: ModelConfig) -> None:
    model = build_model(cfg, (96, 32), VOCAB)
    assert count_params(cfg, (96, 32), VOCAB).total == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("arch", ARCHS)
def test_causal_changing_later_tokens_leaves_earlier_logits(arch: str) -> None:
    model = seeded(tiny(arch), (96, 32)).eval()
    idx = torch.randint(0, VOCAB, (2, 16))
    with torch.no_grad():
        base = model(idx)
        # chunk boundaries of Titans (chunk 4) included: t = 3, 4, 7
        for t in (0, 3, 4, 7, 12):
            other = idx.clone()
            other[:, t + 1 :] = torch.randint(0, VOCAB, other[:, t + 1 :].shape)
            out = model(other)
            torch.testing.assert_close(out[:, : t + 1], base[:, : t + 1], rtol=1e-5, atol=1e-5)
            if t < 12:  # and the change is seen later (the test can fail)
                assert not torch.allclose(out[:, t + 1 :], base[:, t + 1 :])


def test_titans_reads_memory_only_from_earlier_chunks() -> None:
    """A token reads the memory as of its chunk's start: writes of its own chunk are invisible
    to it (so a token never sees its own write), earlier chunks' writes are visible."""
    torch.manual_seed(0)
    mem = NeuralMemory(32, 2, depth=2, expansion=2, chunk_size=4, max_lr=0.5)
    mem.init_extra(0.02, keyed_normal(mem, seed=0))
    x = torch.randn(1, 12, 32)
    rope = (torch.ones(1), torch.zeros(1))  # unused by the memory
    with torch.no_grad():
        base = mem(x, rope)
        y = x.clone()
        y[:, 4:7] += torch.randn(1, 3, 32)  # tokens 4, 5, 6 of the chunk 4..7
        out = mem(y, rope)
    torch.testing.assert_close(out[:, :4], base[:, :4])
    torch.testing.assert_close(out[:, 7], base[:, 7])  # same chunk, later token: unchanged
    assert not torch.allclose(out[:, 8:], base[:, 8:])  # the next chunk sees the writes


def _naive_memory(mem: NeuralMemory, x: torch.Tensor) -> torch.Tensor:
    """Token-by-token Titans recurrence with autograd gradients at the chunk-start weights."""
    B, T, C = x.shape
    H, hs, size = mem.n_head, mem.head_dim, mem.chunk_size
    q = F.normalize(mem.q(x).view(B, T, H, hs), dim=-1)
    k = F.normalize(mem.k(x).view(B, T, H, hs), dim=-1)
    v = mem.v(x).view(B, T, H, hs)
    z = mem.gates(x).view(B, T, 3, H)
    theta, eta, alpha = (
        mem.max_lr * z[:, :, 0].sigmoid(),
        z[:, :, 1].sigmoid(),
        z[:, :, 2].sigmoid(),
    )
    out = torch.zeros(B, T, H, hs)
    for b in range(B):
        for h in range(H):
            w = [p[h].detach().clone() for p in mem.memory]
            s = [torch.zeros_like(t) for t in w]

            def run(ws, inp):
                for i, wi in enumerate(ws):
                    inp = inp @ wi
                    if i < len(ws) - 1:
                        inp = F.silu(inp)
                return inp

            for c0 in range(0, T, size):
                start = [t.clone() for t in w]
                for t in range(c0, min(c0 + size, T)):
                    out[b, t, h] = run(start, q[b, t, h])
                for t in range(c0, min(c0 + size, T)):
                    ws = [t_.clone().requires_grad_(True) for t_ in start]
                    loss = (run(ws, k[b, t, h]) - v[b, t, h]).pow(2).sum()
                    grads = torch.autograd.grad(loss, ws)
                    s = [
                        eta[b, t, h] * si - theta[b, t, h] * g
                        for si, g in zip(s, grads, strict=True)
                    ]
                    w = [(1 - alpha[b, t, h]) * wi + si for wi, si in zip(w, s, strict=True)]
    return mem.proj(out.reshape(B, T, C))


@pytest.mark.parametrize("depth", [2, 3])
def test_titans_chunk_parallel_equals_the_token_recurrence(depth: int) -> None:
    torch.manual_seed(1)
    mem = NeuralMemory(16, 2, depth=depth, expansion=2, chunk_size=4, max_lr=0.5)
    mem.init_extra(0.02, keyed_normal(mem, seed=1))
    with torch.no_grad():  # large, varied gates so every term of the closed form matters
        mem.gates.weight.normal_(std=0.5)
        mem.v.weight.normal_(std=0.5)
    x = torch.randn(2, 12, 16)
    rope = (torch.ones(1), torch.zeros(1))
    expected = _naive_memory(mem, x)
    with torch.no_grad():
        got = mem(x, rope)
    torch.testing.assert_close(got, expected.detach(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16"])
def test_forward_backward_loss_near_ln_vocab(arch: str, bf16: bool) -> None:
    model = seeded(tiny(arch), (96, 32))
    idx = torch.randint(0, VOCAB, (4, 16))
    targets = torch.randint(0, VOCAB, (4, 16))
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(idx)
        loss = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
    assert logits.dtype == torch.float32 and logits.shape == (4, 16, VOCAB)
    assert abs(loss.item() - math.log(VOCAB)) < 0.1
    loss.backward()
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert sum(g.abs().sum().item() for g in grads) > 0


def _mlp_units(model: nn.Module) -> dict[str, tuple[torch.Tensor, int]]:
    """Every MLP matrix by name, with the dimension that indexes its hidden units."""
    return {
        f"{name}.weight": (m.weight, m.unit_dim)
        for name, m in model.named_modules()
        if ".mlps." in name and isinstance(m, nn.Linear)
    }


# Hope with two levels, so the rule is checked per level; Titans as MAL (memory + attention).
CRN_CFGS = [
    tiny("transformer"),
    tiny("gated_attention"),
    tiny("titans", titans={"chunk_size": 4, "with_attention": True}),
    tiny("hope_attention", hope={"levels": 2, "periods": [1, 2]}),
]


@pytest.mark.parametrize("cfg", CRN_CFGS, ids=lambda c: c.arch)
def test_candidates_of_a_seed_share_every_common_parameter_and_mlp_unit(
    cfg: ModelConfig,
) -> None:
    """Common random numbers: two widths, one seed. Everything outside the MLPs is bit-identical
    and the MLPs share their first min(width) units (rows of w1/w3, columns of w2)."""
    wide_first, uniform = seeded(cfg, (96, 32), seed=7), seeded(cfg, (64, 64), seed=7)
    a, b = dict(wide_first.named_parameters()), dict(uniform.named_parameters())
    assert a.keys() == b.keys()
    others = [n for n in a if ".mlps." not in n]
    assert len(others) > 6  # embeddings, attention, norms (and arch-specific parameters)
    for name in others:
        assert torch.equal(a[name], b[name]), name
    units_a, units_b = _mlp_units(wide_first), _mlp_units(uniform)
    assert units_a.keys() == units_b.keys()
    assert len(units_a) == 3 * cfg.n_layer * len(wide_first.blocks[0].mlps)
    for name, (wa, dim) in units_a.items():
        wb = units_b[name][0]
        k = min(wa.size(dim), wb.size(dim))
        assert torch.equal(wa.narrow(dim, 0, k), wb.narrow(dim, 0, k)), name


@pytest.mark.parametrize("cfg", CRN_CFGS, ids=lambda c: c.arch)
def test_init_is_deterministic_for_a_seed_and_ignores_the_global_generator(
    cfg: ModelConfig,
) -> None:
    torch.manual_seed(123)
    a = seeded(cfg, (96, 32), seed=7)
    torch.manual_seed(456)  # the global generator plays no part
    torch.randn(1000)
    b = seeded(cfg, (96, 32), seed=7)
    c = seeded(cfg, (96, 32), seed=8)
    sa, sb = a.state_dict(), b.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    for name, p in a.named_parameters():
        if p.unique().numel() > 3:  # every random parameter (not constant fills) changes
            assert not torch.equal(p, c.get_parameter(name)), name


def test_mlp_units_come_in_keyed_chunks_across_many_widths() -> None:
    """Unit j depends on j alone: widths across several chunk boundaries nest exactly."""
    cfg = tiny("transformer", n_layer=1)
    widths = [16, UNIT_CHUNK - 16, UNIT_CHUNK, UNIT_CHUNK + 16, 3 * UNIT_CHUNK + 16]
    w1 = [seeded(cfg, (w,)).blocks[0].mlps[0].w1.weight for w in widths]
    w2 = [seeded(cfg, (w,)).blocks[0].mlps[0].w2.weight for w in widths]
    for w in (*w1, *w2):
        assert w.unique().numel() == w.numel()  # no chunk repeats another
    for narrow, wide in itertools.pairwise(range(len(widths))):
        k = widths[narrow]
        assert torch.equal(w1[narrow], w1[wide][:k])
        assert torch.equal(w2[narrow], w2[wide][:, :k])


@pytest.mark.parametrize("cfg", CRN_CFGS, ids=lambda c: c.arch)
def test_init_statistics(cfg: ModelConfig) -> None:
    """N(0, std) matrices, residual output projections at std / sqrt(branches), zero biases
    (but Titans' gate logits), memory W_0 at std 1 then 1 / sqrt(fan-in), unit norm gains."""
    cfg = cfg.model_copy(update={"init_std": 0.05})
    model = seeded(cfg, (96, 32), seed=1, vocab=4096)
    branches = sum(len(b.mixers) + len(b.mlps) for b in model.blocks)
    seen = 0
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)) and m.weight.numel() >= 1024:
            std = 0.05 / math.sqrt(branches) if getattr(m, "residual_out", False) else 0.05
            assert abs(m.weight.mean().item()) < 0.1 * std, name
            assert m.weight.std().item() == pytest.approx(std, rel=0.1), name
            seen += 1
        if isinstance(m, NeuralMemory):
            for i, w in enumerate(m.memory):
                std = 1.0 if i == 0 else 1 / math.sqrt(w.size(1))
                assert w.std().item() == pytest.approx(std, rel=0.1), name
            h = m.n_head
            assert torch.equal(m.gates.bias[:h], torch.zeros(h))
            assert m.gates.bias[h:].unique().numel() == 2  # eta and alpha logits, constant
        if isinstance(m, RMSNorm):
            assert torch.equal(m.weight, torch.ones_like(m.weight)), name
    assert model.wte.weight.std().item() == pytest.approx(0.05, rel=0.02)  # 131k draws
    assert seen >= 1 + 5 * cfg.n_layer


@pytest.mark.parametrize("arch", ARCHS)
def test_param_groups_decay_matrices_only(arch: str) -> None:
    model = build_model(tiny(arch), (96, 32), VOCAB)
    decay, no_decay = model.param_groups(0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and decay["params"]
    assert all(p.ndim < 2 for p in no_decay["params"]) and no_decay["params"]
    ids = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    assert any(p is model.wte.weight for p in decay["params"])
    torch.optim.AdamW(model.param_groups(0.1), lr=1e-3)  # accepted as is


@pytest.mark.parametrize("arch", ["transformer", "gated_attention", "titans"])
def test_before_optimizer_step_is_a_no_op(arch: str) -> None:
    model = seeded(tiny(arch), (96, 32))
    model(torch.randint(0, VOCAB, (1, 8))).sum().backward()
    before = [p.grad.clone() for p in model.parameters()]
    model.before_optimizer_step(0)
    assert all(torch.equal(a, p.grad) for a, p in zip(before, model.parameters(), strict=True))


def test_hope_levels_update_at_their_periods_with_the_summed_gradient() -> None:
    cfg = tiny("hope_attention", hope={"levels": 2, "periods": [1, 3]})
    model = seeded(cfg, (96, 32))
    # AdamW with weight decay: a level without a gradient must not move at all (no decay either)
    opt = torch.optim.AdamW(model.param_groups(0.1), lr=1e-2)
    slow = model.blocks[0].mlps[1].w1.weight
    fast = model.blocks[0].mlps[0].w1.weight
    total = torch.zeros_like(slow)
    for step in range(6):
        idx = torch.randint(0, VOCAB, (2, 8))
        F.cross_entropy(model(idx).view(-1, VOCAB), idx.view(-1)).backward()
        total += slow.grad
        model.before_optimizer_step(step)
        assert fast.grad is not None
        start, fast_start = slow.detach().clone(), fast.detach().clone()
        if (step + 1) % 3:
            assert slow.grad is None
        else:
            torch.testing.assert_close(slow.grad, total)
            total.zero_()
        opt.step()
        opt.zero_grad(set_to_none=True)
        assert torch.equal(slow, start) == bool((step + 1) % 3)
        assert not torch.equal(fast, fast_start)
    # the pending sum is part of the state dict, so a checkpoint resumes mid-period
    assert any(k.startswith("blocks.0.grad_sum_1_") for k in model.state_dict())


def test_bad_widths_are_clear_value_errors() -> None:
    cfg = tiny("transformer")
    with pytest.raises(ValueError, match=r"widths has 3 entries but model\.n_layer is 2"):
        build_model(cfg, (64, 64, 64), VOCAB)
    with pytest.raises(ValueError, match="positive integers"):
        build_model(cfg, (64, 0), VOCAB)
    with pytest.raises(ValueError, match="positive integers"):
        build_model(cfg, (64, 31.5), VOCAB)


@pytest.mark.slow
@pytest.mark.parametrize("arch", ARCHS)
def test_torch_compile_matches_eager(arch: str) -> None:
    model = seeded(tiny(arch, n_layer=1), (64,))
    compiled = torch.compile(model)
    idx = torch.randint(0, VOCAB, (2, 8))  # Titans: two chunks, one write (compile is slow)
    torch.testing.assert_close(compiled(idx), model(idx), rtol=1e-4, atol=1e-4)
    compiled(idx).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    compiled.before_optimizer_step(0)  # the trainer calls it on the compiled wrapper


def test_titans_chunk_must_be_shorter_than_the_sequence() -> None:
    from pathlib import Path

    from tlmsearch.config import load_study
    from tlmsearch.errors import ConfigError

    study = Path(__file__).resolve().parent.parent / "studies/quickstart.yaml"
    sets = ["model.arch=titans", "data.seq_len=64"]
    assert load_study(study, [*sets, "model.titans.chunk_size=16"]).model.arch == "titans"
    with pytest.raises(ConfigError, match=r"model\.titans\.chunk_size \(64\) must be below"):
        load_study(study, [*sets, "model.titans.chunk_size=64"])
