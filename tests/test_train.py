"""The proxy trainer: schedule, a tiny run that learns, paired determinism, divergence, the CLI."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import learnable_bytes
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import EVAL_KEYS, RAW_EVAL_KEYS, ModelConfig, TrainConfig
from tlmsearch.data import PreparedData
from tlmsearch.errors import ConfigError
from tlmsearch.train import mfu
from tlmsearch.train.loop import parse_candidate, train_proxy
from tlmsearch.train.runtime import attention_kernel, batch_shape, lr_at

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
TINY = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64)


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The MFU calibration and prepared data go to a throwaway cache.
    monkeypatch.setenv("TLMSEARCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> PreparedData:
    """Byte-level tokens of a small, learnable text made here (repetitive pseudo-English)."""
    return learnable_bytes(tmp_path_factory.mktemp("tiny"), 600, 2048)


def tcfg(**kw: object) -> TrainConfig:
    base: dict = dict(
        tokens=24_576,
        batch_tokens=512,
        micro_batch_size=8,
        lr=3e-3,
        warmup_tokens=2048,
        eval_every_tokens=8192,
        compile="off",
        dtype="fp32",
    )
    base.update(kw)
    return TrainConfig.model_validate(base)


# -------------------------------------------------------------------------------------------------
# Learning rate and batch shape


@given(
    st.integers(1, 10**6),
    st.floats(0.05, 0.9),
    st.floats(0.0, 1.0),
    st.sampled_from(["cosine", "wsd"]),
    st.floats(0.05, 1.0),
)
def test_lr_schedule_shape(
    total: int, warm_frac: float, ratio: float, kind: str, decay: float
) -> None:
    warm = int(total * warm_frac)
    cfg = TrainConfig(
        tokens=total,
        warmup_tokens=warm,
        lr=1e-3,
        min_lr_ratio=ratio,
        lr_schedule=kind,
        decay_fraction=decay,
    )
    points = sorted({0, warm, total // 2, total - 1, total, *range(0, total, max(1, total // 37))})
    lrs = [lr_at(t, cfg) for t in points]
    low = 1e-3 * ratio
    assert all(0 <= v <= 1e-3 * (1 + 1e-9) for v in lrs)
    after = [lr_at(t, cfg) for t in points if t >= warm]
    assert all(v >= low - 1e-12 for v in after)
    assert all(b <= a + 1e-12 for a, b in itertools.pairwise(after))  # non-increasing
    if warm > 0:
        assert lr_at(warm, cfg) == pytest.approx(1e-3)
        assert lr_at(0, cfg) == 0.0
        assert lr_at(warm // 2, cfg) == pytest.approx(1e-3 * (warm // 2) / warm)
    assert lr_at(total, cfg) == pytest.approx(low, abs=1e-12)


@given(st.integers(1, 1 << 16), st.integers(1, 64), st.sampled_from([8, 32, 256]))
def test_batch_shape_fills_the_step(batch_tokens: int, micro: int, seq: int) -> None:
    cfg = TrainConfig(
        tokens=10**6, warmup_tokens=0, batch_tokens=batch_tokens, micro_batch_size=micro
    )
    m, accum = batch_shape(cfg, seq)
    seqs = max(1, batch_tokens // seq)
    assert 1 <= m <= micro
    assert m * accum == seqs  # every requested whole sequence is trained, none added
    assert all(seqs % d for d in range(m + 1, min(micro, seqs) + 1))  # the largest such micro


# -------------------------------------------------------------------------------------------------
# Training


def test_a_tiny_run_lowers_the_loss_and_reports_every_key(data: PreparedData) -> None:
    seen: list[dict] = []
    s = train_proxy(TINY, [64, 64], data, tcfg(), seed=0, threads=1, on_eval=seen.append)
    assert s.status == "completed" and s.tokens == 24_576
    assert [r["tokens"] for r in s.curve] == [8192, 16384, 24576]
    assert seen == s.curve
    for row in s.curve:
        assert tuple(row) == tuple(k for k in EVAL_KEYS if k not in RAW_EVAL_KEYS)
        assert all(isinstance(v, float | int) for v in row.values())
    first, last = s.curve[0], s.curve[-1]
    assert last["val_loss"] < first["val_loss"] < math.log(256)
    assert last["val_bpb"] == pytest.approx(
        last["val_loss"] * (data.n_val_tokens - 1) / (math.log(2) * data.val_bytes)
    )
    assert last["val_ppl"] == pytest.approx(math.exp(last["val_loss"]))
    assert last["tokens_per_s"] > 0 and 0 < last["mfu"] < 1
    assert s.n_params > s.n_params_nonemb > 0 and s.flops_per_token > 0


def test_one_seed_gives_identical_curves_and_another_seed_does_not(data: PreparedData) -> None:
    def curve(seed: int) -> list[tuple]:
        s = train_proxy(TINY, [96, 32], data, tcfg(tokens=8192, eval_every_tokens=4096), seed=seed)
        return [
            (r["tokens"], r["train_loss"], r["val_loss"], r["val_bpb"], r["lr"]) for r in s.curve
        ]

    a, b, c = curve(7), curve(7), curve(8)
    assert a == b
    assert a != c


def test_the_model_is_keyed_by_the_seed_not_the_global_generator(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train_proxy passes its seed to build_model; whatever the global generator holds when the
    model is built does not change it (candidates of a seed share their init: docs/running.md)."""
    import tlmsearch.models as models

    real, built = models.build_model, []

    def spy(*args: object, **kw: object) -> torch.nn.Module:
        torch.manual_seed(123)
        model = real(*args, **kw)
        built.append({k: v.clone() for k, v in model.state_dict().items()})
        return model

    monkeypatch.setattr(models, "build_model", spy)
    train_proxy(TINY, (64, 64), data, tcfg(tokens=1024, warmup_tokens=512), seed=5)
    expected = real(TINY, (64, 64), data.vocab_size, seed=5).state_dict()
    assert built[0].keys() == expected.keys()
    assert all(torch.equal(built[0][k], v) for k, v in expected.items())


def test_gradient_accumulation_matches_one_big_batch(data: PreparedData) -> None:
    # 16 window starts drawn at once equal 4 draws of 4 (one generator), so the two runs see the
    # same sequences per step and must agree up to float summation order.
    big = train_proxy(TINY, [64, 64], data, tcfg(tokens=4096, micro_batch_size=16), seed=1)
    acc = train_proxy(TINY, [64, 64], data, tcfg(tokens=4096, micro_batch_size=4), seed=1)
    assert big.setup["accum"] == 1 and acc.setup["accum"] == 4
    assert big.tokens == acc.tokens == 4096
    assert acc.metrics["val_loss"] == pytest.approx(big.metrics["val_loss"], rel=1e-4)
    assert acc.metrics["train_loss"] == pytest.approx(big.metrics["train_loss"], rel=1e-4)


class _NaNAfter(torch.nn.Module):
    """Wraps a model; its logits turn NaN after ``n`` forward calls."""

    def __init__(self, inner: torch.nn.Module, n: int) -> None:
        super().__init__()
        self.inner, self.n, self.calls = inner, n, 0

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = self.inner(idx)
        return out * float("nan") if self.calls > self.n else out

    def param_groups(self, wd: float) -> list[dict]:
        return self.inner.param_groups(wd)

    def before_optimizer_step(self, step: int) -> None:
        self.inner.before_optimizer_step(step)


def test_a_nan_run_stops_cleanly(data: PreparedData, monkeypatch: pytest.MonkeyPatch) -> None:
    import tlmsearch.models as models

    real = models.build_model
    monkeypatch.setattr(models, "build_model", lambda *a, **kw: _NaNAfter(real(*a, **kw), 5))
    s = train_proxy(TINY, [64, 64], data, tcfg(), seed=0)
    assert s.status == "diverged" and "nan" in s.reason.lower()
    # Forward calls 1-5 were fine: whole steps before the bad call were taken, its step was not.
    assert s.tokens == (5 // s.setup["accum"]) * s.setup["step_tokens"] and not s.curve


def test_a_huge_learning_rate_diverges_without_a_trace(data: PreparedData) -> None:
    s = train_proxy(TINY, [64, 64], data, tcfg(lr=50.0, grad_clip=0, warmup_tokens=0), seed=0)
    assert s.status == "diverged" and s.reason


class _ScaledAfter(_NaNAfter):
    """Logits blown up (finite) after ``n`` forward calls: a blow-up after a good start."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        out = self.inner(idx)
        return out * 1e3 if self.calls > self.n else out


def test_a_blow_up_after_a_good_start_is_diverged(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tlmsearch.models as models

    real = models.build_model
    monkeypatch.setattr(models, "build_model", lambda *a, **kw: _ScaledAfter(real(*a, **kw), 30))
    s = train_proxy(TINY, [64, 64], data, tcfg(), seed=0)
    assert s.status == "diverged" and "above its minimum" in s.reason, s.reason
    assert s.tokens < 24_576


def test_a_run_that_never_leaves_ln_v_is_diverged(data: PreparedData) -> None:
    # lr so small that nothing is learned: the loss stays at ln V (the old rule waited for 3x).
    s = train_proxy(TINY, [64, 64], data, tcfg(lr=1e-9), seed=0)
    assert s.status == "diverged" and "not learning" in s.reason, s.reason


def test_a_healthy_run_is_not_flagged(data: PreparedData) -> None:
    assert train_proxy(TINY, [64, 64], data, tcfg(), seed=0).status == "completed"


def test_the_callback_can_stop_the_run(data: PreparedData) -> None:
    s = train_proxy(TINY, [64, 64], data, tcfg(), seed=0, on_eval=lambda row: "stop")
    assert s.status == "stopped" and len(s.curve) == 1 and s.tokens == 8192


def test_in_memory_data_trains_the_same(data: PreparedData) -> None:
    cfg = tcfg(tokens=4096, eval_every_tokens=4096)
    a = train_proxy(TINY, [64, 64], data, cfg, seed=2)
    b = train_proxy(TINY, [64, 64], data.in_memory(), cfg, seed=2)
    assert a.metrics["val_loss"] == b.metrics["val_loss"]


def test_attention_kernel_auto_takes_math_for_short_windows_on_a_cpu() -> None:
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert attention_kernel(tcfg(), cpu, 128) == "math"
    assert attention_kernel(tcfg(), cpu, 256) == "math"
    assert attention_kernel(tcfg(), cpu, 512) == "default"
    assert attention_kernel(tcfg(), cuda, 128) == "default"
    assert attention_kernel(tcfg(attention="default"), cpu, 128) == "default"
    assert attention_kernel(tcfg(attention="math"), cuda, 1024) == "math"


def test_both_attention_kernels_train_the_same_model(data: PreparedData) -> None:
    cfg = tcfg(tokens=4096, eval_every_tokens=2048)
    runs = [
        train_proxy(TINY, [64, 64], data, cfg.model_copy(update={"attention": k}), seed=4)
        for k in ("math", "default")
    ]
    assert [r.setup["attention"] for r in runs] == ["math", "default"]
    for a, b in zip(runs[0].curve, runs[1].curve, strict=True):
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-4)
        assert b["train_loss"] == pytest.approx(a["train_loss"], rel=1e-4)


@pytest.mark.skipif(not mfu.cpu_has_bf16(), reason="no native bf16")
def test_bf16_autocast_trains(data: PreparedData) -> None:
    s = train_proxy(TINY, [64, 64], data, tcfg(tokens=4096, dtype="bf16"), seed=0)
    assert s.status == "completed" and s.setup["dtype"] == "bfloat16"
    assert s.metrics["val_loss"] < math.log(256)


@pytest.mark.slow
def test_compiled_training_matches_eager(data: PreparedData) -> None:
    # with an EMA for evaluation: the compiled step is a function of the model, whose averaged
    # copy evaluates eagerly
    cfg = tcfg(tokens=2048, eval_every_tokens=1024, warmup_tokens=512, eval_weights="ema")
    eager = train_proxy(TINY, [64, 64], data, cfg, seed=3)
    compiled = train_proxy(TINY, [64, 64], data, cfg.model_copy(update={"compile": "on"}), seed=3)
    assert compiled.setup["compile"] and compiled.status == "completed"
    for a, b in zip(eager.curve, compiled.curve, strict=True):
        assert b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-3)
        assert b["val_loss_raw"] == pytest.approx(a["val_loss_raw"], rel=1e-3)
        assert b["val_loss"] != b["val_loss_raw"]


def test_vocab_below_the_data_is_a_config_error(data: PreparedData) -> None:
    from tlmsearch.errors import ConfigError

    with pytest.raises(ConfigError, match=r"model.vocab_size"):
        train_proxy(TINY.model_copy(update={"vocab_size": 100}), [64, 64], data, tcfg(), seed=0)


# -------------------------------------------------------------------------------------------------
# The command


def test_parse_candidate() -> None:
    from tlmsearch.errors import ConfigError

    assert parse_candidate("uniform") == {"shape": "uniform"}
    assert parse_candidate('{"shape": "cosine", "r_start": 1.5}')["r_start"] == 1.5
    for bad in ("cosine", "[1, 2]"):
        with pytest.raises(ConfigError, match="--candidate"):
            parse_candidate(bad)


def _tiny_study(tmp_path: Path, data: PreparedData, source: str | None = None) -> Path:
    study = yaml.safe_load((ROOT / "studies/quickstart.yaml").read_text())
    study["model"].update(n_layer=2, d_model=32, n_head=2, d_ff=64, multiple_of=16)
    study.pop("target", None)
    study["data"] = {
        "sources": [source or str(Path(data.dir).parent.parent.parent / "text.txt")],
        "tokenizer": {"kind": "bytes"},
        "seq_len": 32,
        "val_tokens": 1024,
        "cache_dir": str(tmp_path / "cache"),
    }
    study["train"] = {
        "tokens": 2048,
        "batch_tokens": 512,
        "warmup_tokens": 512,
        "compile": "off",
        "dtype": "fp32",
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(study))
    return path


def test_cli_train_runs_one_candidate(tmp_path: Path, data: PreparedData) -> None:
    study = _tiny_study(tmp_path, data)
    res = runner.invoke(
        app, ["train", str(study), "--candidate", '{"shape": "linear", "r_start": 1.5}']
    )
    assert res.exit_code == 0, res.output
    assert (
        "completed" in res.output and "widths [96, 32]" in res.output and "val_bpb" in res.output
    )
    assert "raw weights" not in res.output
    res = runner.invoke(app, ["train", str(study), "--set", "train.eval_weights=ema"])
    assert res.exit_code == 0 and "(raw weights: val_bpb " in res.output, res.output
    res = runner.invoke(app, ["train", str(study), "--candidate", "zigzag"])
    assert res.exit_code == 2 and "--candidate" in res.output
    res = runner.invoke(app, ["train", str(study), "--candidate", '{"shape": "zigzag"}'])
    assert res.exit_code == 2
    missing = _tiny_study(tmp_path, data, source=str(tmp_path / "nowhere.txt"))
    res = runner.invoke(app, ["train", str(missing)])
    assert res.exit_code == 2 and "does not exist" in res.output
    corrupt = tmp_path / "bad.npy"
    corrupt.write_bytes(b"\x93NUMPY\x01\x00garbage")
    res = runner.invoke(
        app,
        [
            "train",
            str(_tiny_study(tmp_path, data, source=str(corrupt))),
            "--set",
            "data.token_vocab_size=256",
            "--set",
            "objectives=[{metric: val_loss}]",  # token files alone carry no byte count
        ],
    )
    assert res.exit_code == 2 and "bad.npy" in res.output


def test_train_module_imports_no_ray_or_optuna() -> None:
    import subprocess
    import sys

    code = (
        "import sys, tlmsearch.train.loop, tlmsearch.data; "
        "print('ray' in sys.modules, 'optuna' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


# -------------------------------------------------------------------------------------------------
# The MFU peak


def test_cpu_peak_is_calibrated_once_and_recalibration_keeps_the_max(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tlmsearch.train import mfu

    readings = iter([5e11, 3e11, 9e11])
    calls: list[int] = []

    def fake(dtype: torch.dtype, n: int = 1024, seconds: float = 0.4) -> float:
        calls.append(1)
        return next(readings)

    monkeypatch.setattr(mfu, "measure_matmul", fake)
    assert mfu.cpu_peak(1, tmp_path) == 5e11
    assert mfu.cpu_peak(1, tmp_path) == 5e11 and len(calls) == 1  # cached
    assert mfu.cpu_peak(1, tmp_path, recalibrate=True) == 5e11  # a low reading is ignored
    assert mfu.cpu_peak(1, tmp_path, recalibrate=True) == 9e11
    assert mfu.cpu_peak(1, tmp_path) == 9e11 and len(calls) == 3


def test_measure_matmul_is_plausible() -> None:
    from tlmsearch.train.mfu import measure_matmul

    flops = measure_matmul(torch.float32, n=256, seconds=0.05)
    assert 1e8 < flops < 1e14


def test_mfu_is_against_the_peak_of_the_dtype_that_ran(
    data: PreparedData, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tlmsearch.train import mfu

    monkeypatch.setenv("TLMSEARCH_CACHE", str(tmp_path))
    peaks = {torch.float32: 2e11, torch.bfloat16: 9e11}
    monkeypatch.setattr(mfu, "measure_matmul", lambda dtype, *a, **kw: peaks[dtype])
    monkeypatch.setattr(mfu, "cpu_has_bf16", lambda: True)  # the bf16 peak exists beside it
    s = train_proxy(TINY, [64, 64], data, tcfg(tokens=4096, dtype="fp32"), seed=0, device="cpu")
    assert s.setup["dtype"] == "float32" and s.setup["peak_flops"] == 2e11
    row = s.curve[-1]
    assert row["mfu"] == pytest.approx(row["tokens_per_s"] * s.flops_per_token / 2e11)


# -------------------------------------------------------------------------------------------------
# Checkpoints: a resumed run goes on exactly as if it had never stopped

TIMING = ("tokens_per_s", "mfu", "wall_s")


def _through_disk(state: dict) -> dict:
    """The state as a checkpoint on disk holds it (torch.save, then torch.load)."""
    import io

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)  # what a checkpoint loads with


def _untimed(curve: list[dict]) -> list[dict]:
    return [{k: v for k, v in row.items() if k not in TIMING} for row in curve]


@pytest.mark.parametrize("parametrization", ["standard", "mup"])
def test_a_resumed_run_gives_the_same_losses_as_an_uninterrupted_one(
    data: PreparedData, parametrization: str
) -> None:
    cfg = tcfg(
        tokens=12_288,
        eval_every_tokens=2048,
        checkpoint_every_tokens=4096,
        parametrization=parametrization,
    )

    def run(**kw: object):
        return train_proxy(TINY, (64, 32), data, cfg, seed=3, threads=1, device="cpu", **kw)

    states: list[dict] = []
    straight = run(on_checkpoint=lambda s: states.append(_through_disk(s)), final_checkpoint=True)
    assert straight.status == "completed"
    # at the evals at 4,096 and 8,192 tokens, then the end (12,288 is a boundary too: no twin)
    assert [s["tokens"] for s in states] == [4096, 8192, 12_288]
    half = states[0]
    assert [r["tokens"] for r in half["loop"]["curve"]] == [2048, 4096]
    evals: list[dict] = []
    resumed = run(resume=half, on_eval=evals.append)
    assert resumed.status == "completed" and resumed.tokens == straight.tokens
    assert [e["tokens"] for e in evals] == [6144, 8192, 10_240, 12_288]  # nothing trained twice
    assert _untimed(resumed.curve) == _untimed(straight.curve)  # exactly, not approximately
    # from its final state a run trains nothing more and takes no second final checkpoint
    out: list[dict] = []
    again = run(resume=states[-1], on_checkpoint=out.append, final_checkpoint=True)
    assert again.status == "completed" and again.tokens == 12_288 and out == []
    assert _untimed(again.curve) == _untimed(straight.curve)


def test_mup_changes_a_tapered_run_and_not_the_uniform_one(data: PreparedData) -> None:
    """At the base shape muP is standard (same curve); a taper's down projections get other
    learning rates and inits, so its curve differs."""

    def curve(widths: tuple[int, int], parametrization: str) -> list[dict]:
        cfg = tcfg(tokens=4096, eval_every_tokens=2048, parametrization=parametrization)
        s = train_proxy(TINY, widths, data, cfg, seed=1, threads=1, device="cpu")
        assert s.status == "completed"
        return _untimed(s.curve)

    assert curve((64, 64), "standard") == curve((64, 64), "mup")
    assert curve((96, 32), "standard") != curve((96, 32), "mup")


def test_checkpoint_every_below_the_eval_interval_is_refused() -> None:
    with pytest.raises(ValueError, match=r"checkpoint_every_tokens .* below the eval interval"):
        tcfg(eval_every_tokens=4096, checkpoint_every_tokens=1000)


# -------------------------------------------------------------------------------------------------
# Averaged weights for evaluation (train.eval_weights)


def _recorded_run(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch, cfg: TrainConfig
) -> tuple[object, torch.nn.Module, list[tuple[int, dict]]]:
    """A run, its model, and its raw weights after every optimizer step (tokens, state_dict),
    recorded by a global optimizer hook: independent of the averaging code."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    import tlmsearch.models

    built: list[torch.nn.Module] = []
    build = tlmsearch.models.build_model

    def keep(*a: object, **kw: object) -> torch.nn.Module:
        built.append(build(*a, **kw))
        return built[-1]

    monkeypatch.setattr(tlmsearch.models, "build_model", keep)
    steps: list[tuple[int, dict]] = []

    def after_step(*_: object) -> None:
        sd = {k: v.detach().clone() for k, v in built[0].state_dict().items()}
        steps.append(((len(steps) + 1) * cfg.batch_tokens, sd))

    hook = register_optimizer_step_post_hook(after_step)
    try:
        s = train_proxy(TINY, (64, 32), data, cfg, seed=2, threads=1, device="cpu")
    finally:
        hook.remove()
    assert s.status == "completed"
    return s, built[0], steps


def _val_loss_of(model: torch.nn.Module, weights: dict, data: PreparedData) -> float:
    """``evaluate`` of ``model`` holding ``weights``, as the trainer scores its evals."""
    import copy

    from tlmsearch.data.batches import val_windows
    from tlmsearch.train.runtime import evaluate

    m = copy.deepcopy(model)
    m.load_state_dict(weights)
    vx, vy = val_windows(data.val_tokens(), data.seq_len)
    return evaluate(m, vx, vy, 8, torch.device("cpu"), torch.float32) / vx.numel()


AVG = dict(tokens=8192, eval_every_tokens=2048, warmup_tokens=1024)


def test_averaging_leaves_the_raw_run_alone_and_a_tiny_half_life_is_the_raw_weights(
    data: PreparedData,
) -> None:
    def run(**kw: object):
        cfg = tcfg(**AVG, **kw)
        return train_proxy(TINY, (64, 32), data, cfg, seed=2, threads=1, device="cpu").curve

    raw = run()
    # a half-life of a thousandth of a token: each step's decay 0.5**512000 is 0
    ema = run(eval_weights="ema", ema_half_life_tokens=1e-3)
    assert [r["val_loss_raw"] for r in ema] == [r["val_loss"] for r in raw]
    assert [r["val_bpb_raw"] for r in ema] == [r["val_bpb"] for r in raw]
    assert [r["val_loss"] for r in ema] == [r["val_loss"] for r in raw]
    assert [r["train_loss"] for r in ema] == [r["train_loss"] for r in raw]
    assert all("val_loss_raw" not in r for r in raw)


def test_the_ema_metric_is_the_hand_computed_ema_of_each_steps_weights(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tcfg(**AVG, eval_weights="ema", ema_half_life_tokens=2048)
    s, model, steps = _recorded_run(data, monkeypatch, cfg)
    decay = 0.5 ** (512 / 2048)
    ema, by_tokens = {}, {}
    for i, (tokens, sd) in enumerate(steps):
        ema = sd if i == 0 else {k: decay * ema[k] + (1 - decay) * w for k, w in sd.items()}
        by_tokens[tokens] = ema
    assert [r["tokens"] for r in s.curve] == [2048, 4096, 6144, 8192]
    for row in s.curve:
        assert row["val_loss"] == pytest.approx(
            _val_loss_of(model, by_tokens[row["tokens"]], data), rel=1e-6
        )
        assert row["val_loss_raw"] == pytest.approx(
            _val_loss_of(model, dict(steps)[row["tokens"]], data), rel=1e-6
        )
        assert row["val_loss"] != row["val_loss_raw"]
        assert row["val_bpb"] / row["val_loss"] == pytest.approx(
            row["val_bpb_raw"] / row["val_loss_raw"]
        )


def test_the_lawa_metric_is_the_mean_of_the_last_k_snapshots(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tcfg(**AVG, eval_weights="lawa", lawa_k=2, lawa_every_tokens=1536)
    s, model, steps = _recorded_run(data, monkeypatch, cfg)
    # snapshots after the steps reaching 1536, 3072, 4608, 6144, 7680 tokens
    snaps = [(t, sd) for t, sd in steps if t % 1536 == 0]
    assert [t for t, _ in snaps] == [1536, 3072, 4608, 6144, 7680]
    for row in s.curve:
        last = [sd for t, sd in snaps if t <= row["tokens"]][-2:]
        mean = {k: sum(sd[k] for sd in last) / len(last) for k in last[0]}
        assert row["val_loss"] == pytest.approx(_val_loss_of(model, mean, data), rel=1e-6)
        assert row["val_loss"] != row["val_loss_raw"]


def test_before_the_first_lawa_snapshot_the_metric_is_the_raw_one(data: PreparedData) -> None:
    cfg = tcfg(**AVG, eval_weights="lawa", lawa_k=2, lawa_every_tokens=3072)
    curve = train_proxy(TINY, (64, 32), data, cfg, seed=2, threads=1, device="cpu").curve
    first, *rest = curve
    assert first["tokens"] == 2048 and first["val_loss"] == first["val_loss_raw"]
    assert first["val_bpb"] == first["val_bpb_raw"]
    assert all(r["val_loss"] != r["val_loss_raw"] for r in rest)


@pytest.mark.parametrize(
    "averaging",
    [{"eval_weights": "ema", "ema_half_life_tokens": 1024}, {"eval_weights": "lawa", "lawa_k": 3}],
)
def test_a_resumed_run_averages_exactly_as_an_uninterrupted_one(
    data: PreparedData, averaging: dict
) -> None:
    cfg = tcfg(
        tokens=12_288, eval_every_tokens=2048, checkpoint_every_tokens=4096, **averaging
    )  # lawa: a snapshot every 1,024 tokens

    def run(**kw: object):
        return train_proxy(TINY, (64, 32), data, cfg, seed=3, threads=1, device="cpu", **kw)

    states: list[dict] = []
    straight = run(on_checkpoint=lambda s: states.append(_through_disk(s)), final_checkpoint=True)
    assert straight.status == "completed" and "average" in states[0]
    assert all(r["val_loss"] != r["val_loss_raw"] for r in straight.curve)
    resumed = run(resume=states[0])
    assert resumed.tokens == straight.tokens
    assert _untimed(resumed.curve) == _untimed(straight.curve)  # averaged metrics included
    # a checkpoint without the average cannot resume an averaging run, nor the reverse
    raw_state = {k: v for k, v in states[0].items() if k != "average"}
    with pytest.raises(ConfigError, match=r"train\.eval_weights"):
        run(resume=raw_state)


def test_evaluate_of_no_windows_is_zero_and_the_ranks_slices_sum_to_the_whole() -> None:
    # A rank whose slice of the validation windows is empty (fewer windows than workers) adds
    # nothing; before, torch.stack([]) raised. The slices of every rank sum to the whole.
    from tlmsearch.models import build_model
    from tlmsearch.train.distributed import DistInfo
    from tlmsearch.train.runtime import evaluate

    cfg = ModelConfig(n_layer=1, d_model=16, n_head=2, d_ff=32)
    model = build_model(cfg, [32], 32)
    vx = torch.randint(0, 32, (3, 8))
    vy = torch.randint(0, 32, (3, 8))
    cpu = torch.device("cpu")
    whole = evaluate(model, vx, vy, 2, cpu, torch.float32)
    parts = []
    for rank in range(4):
        rows = DistInfo(rank, 4).rows(vx.size(0))
        parts.append(evaluate(model, vx[rows], vy[rows], 2, cpu, torch.float32))
    assert 0.0 in parts  # 3 windows, 4 ranks: one rank has none
    assert sum(parts) == pytest.approx(whole, rel=1e-6)
