"""The CUDA path, checked on a CPU: pinned batches, flash-ready attention calls, TF32, the compile
rule, GPU peaks by device name, fractional GPUs per trial and the device a trial trains on."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace as N

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import tiny_config, write_text

from tlmsearch.config import DataConfig, ModelConfig, TrainConfig
from tlmsearch.data import PreparedData, prepare_data
from tlmsearch.data.batches import Batches
from tlmsearch.errors import ConfigError
from tlmsearch.models import ARCHITECTURES, build_model
from tlmsearch.search.runner import trial_slots
from tlmsearch.train import mfu
from tlmsearch.train.loop import train_proxy
from tlmsearch.train.runtime import (
    GPU_COMPILE_AFTER_S,
    GPU_EAGER_MFU,
    enable_tf32,
    resolve_compile,
)
from tlmsearch.widths.space import UNIFORM

CUDA = torch.device("cuda")  # a device object needs no GPU; nothing here touches one


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TLMSEARCH_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def fp32_precision():
    """torch's fp32 matmul precision, restored after the test (it is process-wide)."""
    before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(before)


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """Tensor.pin_memory and Tensor.to recorded; a copy 'to CUDA' stays on the CPU."""
    calls: list[tuple] = []
    real_to = torch.Tensor.to

    def pin_memory(self: torch.Tensor) -> torch.Tensor:
        calls.append(("pin", tuple(self.shape)))
        return self.clone()

    def to(self: torch.Tensor, *args: object, **kw: object) -> torch.Tensor:
        if args and isinstance(args[0], torch.device) and args[0].type == "cuda":
            calls.append(("to", args[0].type, kw.get("non_blocking")))
            return self
        return real_to(self, *args, **kw)

    monkeypatch.setattr(torch.Tensor, "pin_memory", pin_memory)
    monkeypatch.setattr(torch.Tensor, "to", to)
    return calls


# -------------------------------------------------------------------------------------------------
# Pinned batches


def test_a_cuda_batch_is_pinned_once_and_copied_asynchronously(copies: list[tuple]) -> None:
    tokens = np.arange(1000, dtype=np.uint16)
    x, y = Batches(tokens, 16, seed=1).next(4, CUDA)
    assert copies == [("pin", (4, 17)), ("to", "cuda", True)]  # one copy: x and y are views
    x0, y0 = Batches(tokens, 16, seed=1).next(4)
    assert torch.equal(x, x0) and torch.equal(y, y0)  # the same windows as without a device


def test_a_cpu_batch_is_neither_pinned_nor_copied(copies: list[tuple]) -> None:
    tokens = np.arange(1000, dtype=np.uint16)
    x, y = Batches(tokens, 16, seed=1).next(4, torch.device("cpu"))
    x0, y0 = Batches(tokens, 16, seed=1).next(4)
    assert copies == [] and torch.equal(x, x0) and torch.equal(y, y0)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> PreparedData:
    root = tmp_path_factory.mktemp("gpu")
    cfg = DataConfig(
        sources=[str(write_text(root / "text.txt", 200))],
        tokenizer={"kind": "bytes"},
        seq_len=32,
        val_tokens=1025,
        cache_dir=str(root / "cache"),
    )
    return prepare_data(cfg, progress=False)


def test_a_cpu_run_pins_nothing_and_reports_its_first_step(
    data: PreparedData, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(self: torch.Tensor) -> torch.Tensor:
        raise AssertionError("pinned memory on a CPU run")

    monkeypatch.setattr(torch.Tensor, "pin_memory", refuse)
    train = TrainConfig(
        tokens=2048, batch_tokens=512, micro_batch_size=8, warmup_tokens=256, compile="off"
    )
    model = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64)
    s = train_proxy(model, [64, 64], data, train, seed=0, threads=1, device="cpu")
    assert s.status == "completed" and s.setup["tf32"] is False
    assert s.setup["first_step_s"] > 0


# -------------------------------------------------------------------------------------------------
# Attention: the call the flash kernel accepts


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_attention_is_causal_sdpa_without_a_mask_in_bf16_under_autocast(
    arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict] = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, *args, **kw):
        seen.append({"args": args, "kw": dict(kw), "q": q, "k": k, "v": v})
        return real(q, k, v, *args, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    cfg = ModelConfig(
        arch=arch, n_layer=2, d_model=64, n_head=2, d_ff=64, titans={"chunk_size": 4}
    )
    model = build_model(cfg, [64, 64], 256)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.zeros(2, 16, dtype=torch.long)).float().sum().backward()
    assert seen, f"{arch} never called scaled_dot_product_attention"
    for call in seen:
        assert call["args"] == () and call["kw"] == {"is_causal": True}  # no attn_mask
        q, k, v = call["q"], call["k"], call["v"]
        assert q.dtype == k.dtype == v.dtype == torch.bfloat16
        # flash: (B, nh, T, hs) with unit stride in hs, hs a multiple of 8 and at most 256
        assert all(t.dim() == 4 and t.stride(-1) == 1 for t in (q, k, v))
        assert q.shape[-1] % 8 == 0 and q.shape[-1] <= 256


# -------------------------------------------------------------------------------------------------
# TF32, compile, peaks


def test_tf32_is_set_for_fp32_on_cuda_only(fp32_precision: None) -> None:
    torch.set_float32_matmul_precision("highest")
    assert enable_tf32(torch.device("cpu"), torch.float32) is False
    assert enable_tf32(CUDA, torch.bfloat16) is False
    assert torch.get_float32_matmul_precision() == "highest"
    assert enable_tf32(CUDA, torch.float32) is True
    assert torch.get_float32_matmul_precision() == "high"


def test_compile_auto_on_cuda_follows_the_expected_uncompiled_time() -> None:
    peak, fpt = 989e12, 8.5e8  # H200, a ~125M model at seq 1024
    limit = GPU_COMPILE_AFTER_S * GPU_EAGER_MFU * peak / fpt  # tokens of 3 minutes uncompiled
    auto = TrainConfig(tokens=int(limit) + 1, warmup_tokens=0)
    assert resolve_compile(auto, CUDA, fpt, peak)
    short = TrainConfig(tokens=int(limit) - 1, warmup_tokens=0)
    assert not resolve_compile(short, CUDA, fpt, peak)
    # the quickstart's 2M tokens of a ~20 MFLOP/token proxy: well under a second of GPU time
    assert not resolve_compile(TrainConfig(tokens=2_000_000), CUDA, 2e7, peak)
    assert resolve_compile(TrainConfig(tokens=2_000_000), torch.device("cpu"))  # as before
    on = TrainConfig(tokens=2_000_000, compile="on")
    assert resolve_compile(on, CUDA, 2e7, peak)
    off = TrainConfig(tokens=int(limit) * 10, compile="off")
    assert not resolve_compile(off, CUDA, fpt, peak)
    # a GPU missing from the peak table counts as 100 TFLOP/s: compiles sooner, not never
    assert resolve_compile(short, CUDA, fpt, None)


NAMES = {
    "NVIDIA H200": (989e12, 495e12),
    "NVIDIA H200 NVL": (835e12, 418e12),
    "NVIDIA GH200 480GB": (989e12, 495e12),
    "NVIDIA H100 80GB HBM3": (989e12, 495e12),
    "NVIDIA H100 PCIe": (756e12, 378e12),
    "NVIDIA A100-SXM4-80GB": (312e12, 156e12),
    "NVIDIA L40S": (362e12, 183e12),
    "NVIDIA L40": (181e12, 90.5e12),
    "NVIDIA L4": (121e12, 60e12),
    "NVIDIA GeForce RTX 4090": (165e12, 82.6e12),
}


@pytest.mark.parametrize("name", sorted(NAMES))
def test_gpu_peaks_by_device_name(
    name: str, monkeypatch: pytest.MonkeyPatch, fp32_precision: None
) -> None:
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    bf16, tf32 = NAMES[name]
    assert mfu.peak_flops(CUDA) == mfu.peak_flops(CUDA, dtype=torch.bfloat16) == bf16
    torch.set_float32_matmul_precision("high")
    assert mfu.gpu_peak(CUDA, torch.float32) == tf32
    torch.set_float32_matmul_precision("highest")
    assert mfu.gpu_peak(CUDA, torch.float32) == mfu._lookup(mfu.GPU_PEAK_FP32, name)


def test_a_gpu_without_tf32_or_in_no_table(
    monkeypatch: pytest.MonkeyPatch, fp32_precision: None
) -> None:
    torch.set_float32_matmul_precision("high")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-16GB")
    assert mfu.gpu_peak(CUDA, torch.float32) == 15.7e12  # Volta: fp32, no TF32
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Some GPU")
    assert mfu.gpu_peak(CUDA) is None and mfu.gpu_peak(CUDA, torch.float32) is None


# -------------------------------------------------------------------------------------------------
# Trials on GPUs


def _slots(concurrency: int, cpus: float, cpt: float, gpus: float, gpt: float) -> int:
    cfg = N(search=N(concurrency=concurrency), ray=N(cpus_per_trial=cpt, gpus_per_trial=gpt))
    return trial_slots(cfg, {"cpus": cpus, "gpus": gpus})


@given(k=st.integers(1, 16), n_gpus=st.integers(1, 8))
def test_fractional_gpus_per_trial_fit_k_trials_per_gpu(k: int, n_gpus: int) -> None:
    assert _slots(1000, 1000.0, 1.0, float(n_gpus), 1 / k) == n_gpus * k
    assert _slots(3, 1000.0, 1.0, float(n_gpus), 1 / k) == min(3, n_gpus * k)


def test_fractions_count_as_ray_counts_them() -> None:
    assert _slots(100, 16.0, 1.0, 1.0, 0.1) == 10  # 1.0 // 0.1 == 9.0 in floating point
    assert _slots(100, 16.0, 1.0, 1.0, 0.3) == 3
    assert _slots(100, 0.7, 0.1, 0.0, 0.0) == 7  # 0.7 // 0.1 == 6.0
    assert _slots(100, 16.0, 4.0, 2.0, 0.25) == 4  # the CPUs bind first
    assert _slots(100, 16.0, 1.0, 0.0, 0.5) == 1  # no GPU yet (a joining cluster): one slot


def test_gpus_per_trial_is_at_most_one_gpu(tmp_path: Path) -> None:
    assert tiny_config(tmp_path, ray={"gpus_per_trial": 0.25}).ray.gpus_per_trial == 0.25
    with pytest.raises(
        ConfigError, match=r"ray\.gpus_per_trial \(2\): .*0\.25.*workers_per_trial"
    ):
        tiny_config(tmp_path, ray={"gpus_per_trial": 2})


@pytest.mark.parametrize("gpus, device", [(0.0, "cpu"), (0.25, "cuda"), (1.0, "cuda")])
def test_a_trial_trains_on_the_gpu_ray_gave_it(
    gpus: float, device: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray.tune

    from tlmsearch.search.execution import trainable
    from tlmsearch.train import loop as train

    cfg = tiny_config(tmp_path, ray={"gpus_per_trial": gpus})
    got: dict = {}

    def fake_train(*args: object, **kw: object) -> object:
        got.update(kw)
        return N(metrics={}, tokens=0, status="completed", reason="")

    monkeypatch.setattr(train, "train_proxy", fake_train)
    monkeypatch.setattr(ray.tune, "report", lambda metrics: None)
    data = N(vocab_size=256)
    trainable._train({"candidate": UNIFORM, "seed": 0}, cfg.to_dict(), data, {}, None)
    assert got["device"] == device == trainable.trial_device(cfg)


def test_a_local_ray_without_a_gpu_refuses_gpu_trials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tlmsearch.search import runner
    from tlmsearch.search.execution import cluster

    released: list[bool] = []
    facts = {"joined": False, "owned": True, "address": "127.0.0.1:1", "nodes": ["n"]}
    monkeypatch.setattr(cluster, "start_ray", lambda *a, **kw: {**facts, "cpus": 2, "gpus": 0})
    monkeypatch.setattr(cluster, "stop_ray", lambda: released.append(True))
    cfg = tiny_config(tmp_path, ray={"gpus_per_trial": 0.5})
    with pytest.raises(ConfigError, match=r"ray\.gpus_per_trial: 0\.5 but Ray found no GPU"):
        runner._ray(cfg, None, lambda line: None)
    assert released == [True]  # the embedded Ray is stopped, not left behind
    cpus_only = tiny_config(tmp_path, ray={"gpus_per_trial": 0})
    assert runner._ray(cpus_only, None, lambda line: None)["cpus"] == 2 and released == [True]
