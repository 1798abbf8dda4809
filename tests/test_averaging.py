"""Averaged weights: the EMA and LAWA against hand-computed averages (known answers)."""

from __future__ import annotations

import pytest
import torch

from tlmsearch.config import TrainConfig
from tlmsearch.errors import ConfigError
from tlmsearch.train.averaging import EMA, LAWA, ema_decay, load_average, weight_average


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))


def _steps(n: int) -> list[dict[str, torch.Tensor]]:
    """n made-up weight states of _net(), as training would leave them after each step."""
    gen = torch.Generator().manual_seed(1)
    shapes = {k: v.shape for k, v in _net().state_dict().items()}
    return [{k: torch.randn(s, generator=gen) for k, s in shapes.items()} for _ in range(n)]


def test_ema_decay_halves_the_weight_every_half_life() -> None:
    assert ema_decay(512, 512) == 0.5
    assert ema_decay(256, 1024) ** 4 == pytest.approx(0.5)


def test_the_ema_is_the_hand_computed_ema_of_each_steps_weights() -> None:
    net, decay = _net(), 0.8
    ema = EMA(net, decay)
    assert ema.eval_model() is None  # nothing averaged before the first step
    want: dict[str, torch.Tensor] = {}
    for t, weights in enumerate(_steps(6)):
        net.load_state_dict(weights)
        ema.update(net, tokens=(t + 1) * 100)
        # e_1 = w_1; e_t = decay * e_(t-1) + (1 - decay) * w_t
        want = (
            {k: w.clone() for k, w in weights.items()}
            if t == 0
            else {k: decay * want[k] + (1 - decay) * w for k, w in weights.items()}
        )
    got = ema.eval_model().state_dict()
    for k, w in want.items():
        torch.testing.assert_close(got[k], w, rtol=1e-6, atol=1e-7)
        assert not torch.equal(got[k], net.state_dict()[k])  # not the raw weights


def test_lawa_is_the_mean_of_the_last_k_snapshots_spaced_in_tokens() -> None:
    net = _net()
    lawa = LAWA(net, k=3, every=200)
    steps = _steps(12)
    for t, weights in enumerate(steps):  # steps of 100 tokens: a snapshot after every other one
        net.load_state_dict(weights)
        lawa.update(net, tokens=(t + 1) * 100)
        if t == 0:
            assert lawa.eval_model() is None  # no snapshot yet: the trainer evaluates the raw
    # snapshots at 200, 400, ..., 1200 tokens (steps 1, 3, ..., 11); the last 3: steps 7, 9, 11
    assert len(lawa.snapshots) == 3 and lawa.next == 1400
    got = lawa.eval_model().state_dict()
    for k in got:
        want = (steps[7][k] + steps[9][k] + steps[11][k]) / 3
        torch.testing.assert_close(got[k], want, rtol=1e-6, atol=1e-7)
    # a step that skips past a multiple still takes one snapshot, and the next multiple is next
    net.load_state_dict(steps[0])
    lawa.update(net, tokens=1750)
    assert lawa.next == 1800
    torch.testing.assert_close(
        lawa.eval_model().state_dict()["0.weight"],
        (steps[9]["0.weight"] + steps[11]["0.weight"] + steps[0]["0.weight"]) / 3,
    )


def test_weight_average_follows_the_config() -> None:
    net = _net()
    base = {"tokens": 10_000, "warmup_tokens": 0}
    assert weight_average(TrainConfig(**base), net, 100) is None
    ema = weight_average(TrainConfig(**base, eval_weights="ema"), net, 100)
    assert isinstance(ema, EMA) and ema.decay == ema_decay(100, 1000)  # a tenth of tokens
    lawa = weight_average(TrainConfig(**base, eval_weights="lawa"), net, 100)
    assert isinstance(lawa, LAWA) and (lawa.k, lawa.every) == (5, 500)  # tokens / (4 k)


def test_a_checkpoint_of_another_kind_of_average_is_refused() -> None:
    net = _net()
    ema_state = {"average": EMA(net, 0.5).state_dict()}
    load_average(None, {})  # raw into raw
    with pytest.raises(ConfigError, match=r"written with ema .* asks for lawa"):
        load_average(LAWA(net, 2, 10), ema_state)
    with pytest.raises(ConfigError, match=r"written with ema .* asks for raw"):
        load_average(None, ema_state)
    with pytest.raises(ConfigError, match=r"written with raw .* asks for ema"):
        load_average(EMA(net, 0.5), {})
