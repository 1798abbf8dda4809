"""The Trainer object (tlmsearch/train/trainer.py): a hot loop without host reads, its eval batch,
its state. The behaviour of whole runs (resume, divergence, averaging) is tested in
test_train.py."""

from __future__ import annotations

import pytest
import test_train
import torch

from tlmsearch.data import PreparedData
from tlmsearch.train.trainer import Trainer

TINY = test_train.TINY
data = test_train.data  # a fixture: test_train's tiny byte-level corpus
throwaway_cache = test_train._cache  # autouse: MFU calibration and data to a tmp cache
CFG = test_train.tcfg(tokens=4096, eval_every_tokens=2048, warmup_tokens=512)


def _trainer(data: PreparedData, **kw: object) -> Trainer:
    cfg = CFG.model_copy(update=kw)
    return Trainer(TINY, (64, 32), data, cfg, seed=4, threads=1, device="cpu")


def test_a_step_reads_nothing_back_and_an_eval_reads_its_window_once(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    for name in ("item", "tolist", "__float__", "__bool__"):
        real = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *a: object, _real=real, _name=name) -> object:
            reads.append(_name)
            return _real(self, *a)

        monkeypatch.setattr(torch.Tensor, name, counted)
    t = _trainer(data)
    try:
        for _ in range(4):  # 4 x 512 tokens: up to the first eval
            t.step()
        assert reads == [] and t.eval_due
        row = t.evaluate()
    finally:
        t.close()
    assert row is not None and row["tokens"] == 2048
    # one read of the window's 4 losses, one of the eval's per-batch sums
    assert reads == ["tolist", "tolist"]


def test_the_eval_batch_size_does_not_change_the_val_loss(data: PreparedData) -> None:
    rows = []
    for size in (None, 3, 64):  # the micro batch (8), a ragged 3, all windows at once
        t = _trainer(data, eval_batch_size=size)
        try:
            for _ in range(4):
                t.step()
            rows.append(t.evaluate())
        finally:
            t.close()
    assert rows[0] is not None and rows[0]["train_loss"] == rows[1]["train_loss"]
    for row in rows[1:]:
        assert row["val_loss"] == pytest.approx(rows[0]["val_loss"], rel=1e-6)


def test_a_state_holds_the_run_and_loads_into_a_fresh_trainer(data: PreparedData) -> None:
    t = _trainer(data)
    try:
        while not t.eval_due:
            t.step()
        t.evaluate()
        state = test_train._through_disk(t.state_dict())
        t.step()  # the run goes on; the state does not (its data position either)
        after = t.model.state_dict()["wte.weight"].clone()
    finally:
        t.close()
    assert {"model", "optimizer", "batches", "monitor", "rng", "loop", "tokens"} <= state.keys()
    assert state["tokens"] == 2048 and Trainer.evals_of(state) == t.curve[:1]
    fresh = _trainer(data)
    try:
        fresh.load_state_dict(state)
        assert (fresh.steps, fresh.tokens, fresh.curve) == (4, 2048, t.curve[:1])
        fresh.step()  # the same batches, weights and moments: the same next step, exactly
        assert torch.equal(fresh.model.state_dict()["wte.weight"], after)
    finally:
        fresh.close()


@pytest.mark.parametrize(("par", "factors"), [("standard", {}), ("mup", {2.0})])
def test_a_step_clips_in_the_mureadout_frame_under_mup(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch, par: str, factors: object
) -> None:
    """Under mup the step's clipping norm is MuReadout's (w2 of widths 64, 32 over base 64:
    m 1 and 0.5, its gradient counted x2); standard has no factor and keeps torch's own call
    (tests/test_parametrization.py checks both against a reference)."""
    from tlmsearch.train import parametrization

    seen: list[dict[int, float]] = []
    real = parametrization.clip_grad_norm_

    def spy(model: torch.nn.Module, groups: list[dict], max_norm: float) -> torch.Tensor:
        seen.append(parametrization.readout_factors(groups))
        return real(model, groups, max_norm)

    monkeypatch.setattr(parametrization, "clip_grad_norm_", spy)
    t = _trainer(data, parametrization=par, grad_clip=0.5)
    try:
        t.step()
    finally:
        t.close()
    assert len(seen) == 1 and set(seen[0].values()) == (factors or set())
