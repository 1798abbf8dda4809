"""Peak FLOP/s for model FLOPs utilisation (MFU, arXiv 2204.02311 appendix B).

On a CPU the peak is measured once per machine (CPU model, torch version, thread count) by a short
bf16 matmul calibration and cached as JSON; bf16 is the peak on CPUs with AVX512-BF16 or AMX
(about 4.5x fp32 on the CPUs in docs/platform.md), fp32 elsewhere. On a GPU it comes from a
table of dense data-sheet peaks, matched in ``torch.cuda.get_device_name()``: bf16 tensor cores,
TF32 tensor cores for an fp32 run with TF32 matmuls on (``runtime.enable_tf32``), else plain fp32.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

# Dense (no sparsity) bf16 tensor-core peaks, FLOP/s, from the vendors' data sheets (which quote
# twice these "with sparsity"). Keys are matched in the device name, the longest first: "NVIDIA
# H100 80GB HBM3" (SXM) takes "H100", "NVIDIA GH200 480GB" takes "GH200" before "H200".
GPU_PEAK_BF16 = {
    "H200 NVL": 835e12,
    "H200": 989e12,
    "H100 SXM": 989e12,
    "H100 NVL": 835e12,
    "H100 PCIe": 756e12,
    "H100": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100": 312e12,
    "A10G": 70e12,
    "A10": 125e12,
    "L40S": 362e12,
    "L40": 181e12,
    "L4": 121e12,
    "RTX 4090": 165e12,
    "RTX 3090": 71e12,
    "V100": 125e12,  # fp16 tensor cores (no bf16 on Volta)
    "T4": 65e12,
}


# Dense TF32 tensor-core peaks (Ampere and newer), FLOP/s: an fp32 run with TF32 matmuls.
GPU_PEAK_TF32 = {
    "H200 NVL": 418e12,
    "H200": 495e12,
    "H100 SXM": 495e12,
    "H100 NVL": 418e12,
    "H100 PCIe": 378e12,
    "H100": 495e12,
    "GH200": 495e12,
    "B200": 1125e12,
    "A100": 156e12,
    "L40S": 183e12,
    "L40": 90.5e12,
    "L4": 60e12,
    "RTX 4090": 82.6e12,
    "RTX 3090": 35.6e12,
}


# Dense fp32 peaks without tensor cores (an fp32 run with TF32 off, or a GPU without TF32), FLOP/s.
GPU_PEAK_FP32 = {
    "H200 NVL": 60e12,
    "H200": 67e12,
    "H100 SXM": 67e12,
    "H100 NVL": 60e12,
    "H100 PCIe": 51e12,
    "H100": 67e12,
    "GH200": 67e12,
    "B200": 80e12,
    "A100": 19.5e12,
    "L40S": 91.6e12,
    "L40": 90.5e12,
    "L4": 30.3e12,
    "RTX 4090": 82.6e12,
    "V100": 15.7e12,
}


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_has_bf16() -> bool:
    """Native bf16 matmuls (AVX512-BF16 or AMX): then bf16 autocast pays on this CPU."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        flags = ""
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        return True
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()) and "avx512" in flags
    except (AttributeError, RuntimeError):
        return False


def measure_matmul(dtype: torch.dtype, n: int = 1024, seconds: float = 0.4) -> float:
    """FLOP/s of ``n x n @ n x n`` matmuls in ``dtype`` on the current thread count (best of 3)."""
    a = torch.randn(n, n).to(dtype)
    b = torch.randn(n, n).to(dtype)
    for _ in range(2):
        torch.mm(a, b)
    best = 0.0
    for _ in range(3):
        reps, t0 = 0, time.perf_counter()
        while True:
            torch.mm(a, b)
            reps += 1
            dt = time.perf_counter() - t0
            if dt >= seconds / 3:
                break
        best = max(best, 2 * n**3 * reps / dt)
    return best


def _cache_file(cache_dir: str | Path | None) -> Path:
    root = cache_dir or os.environ.get("TLMSEARCH_CACHE") or "~/.cache/tlmsearch"
    return Path(root).expanduser() / "mfu_peak.json"


def cpu_peak(
    threads: int | None = None,
    cache_dir: str | Path | None = None,
    *,
    recalibrate: bool = False,
    dtype: torch.dtype | None = None,
) -> float:
    """The measured CPU matmul peak for ``threads`` threads, calibrated once and cached.

    ``dtype`` is the one the run computes in (fp32 is ~4.5x below bf16 on the CPU of
    docs/platform.md, so an fp32 run against the bf16 peak would read 4.5x too low); default: bf16
    where the CPU has it natively, else fp32. A calibration taken while other work shares the
    cores reads low; ``recalibrate=True`` (or ``python -m tlmsearch.train.mfu``) measures again and
    keeps the higher value.
    """
    threads = threads or torch.get_num_threads()
    if dtype is None:
        dtype = torch.bfloat16 if cpu_has_bf16() else torch.float32
    key = f"{cpu_name()}|torch {torch.__version__}|{dtype}|threads={threads}"
    path = _cache_file(cache_dir)
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError):
        table = {}
    cached = table.get(key)
    cached = float(cached) if isinstance(cached, int | float) and cached > 0 else 0.0
    if cached and not recalibrate:
        return cached
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        peak = measure_matmul(dtype)
    finally:
        torch.set_num_threads(before)
    peak = max(peak, cached)
    table[key] = peak
    try:  # written atomically: trials calibrating at once must not see half a file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(table, indent=1))
        os.replace(tmp, path)
    except OSError:
        pass
    return peak


def _lookup(table: dict[str, float], name: str) -> float | None:
    for key in sorted(table, key=len, reverse=True):  # most specific name first
        if key in name:
            return table[key]
    return None


def gpu_peak(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> float | None:
    """The data-sheet peak of this GPU for ``dtype`` (None when the table lacks it): fp32 is
    the TF32 tensor-core peak while torch's fp32 matmuls use TF32 (precision ``high``/``medium``)
    on a GPU that has it, else the plain fp32 peak."""
    name = torch.cuda.get_device_name(device)
    if dtype in (torch.bfloat16, torch.float16):
        return _lookup(GPU_PEAK_BF16, name)
    if torch.get_float32_matmul_precision() != "highest":
        tf32 = _lookup(GPU_PEAK_TF32, name)
        if tf32 is not None:
            return tf32
    return _lookup(GPU_PEAK_FP32, name)


def peak_flops(
    device: torch.device,
    threads: int | None = None,
    cache_dir: str | Path | None = None,
    dtype: torch.dtype | None = None,
) -> float | None:
    """Peak FLOP/s of ``device`` in ``dtype``, the precision the run computes in (None when
    unknown: MFU is then reported as NaN). ``dtype`` None: bf16 where the device has it."""
    if device.type == "cuda":
        return gpu_peak(device, dtype or torch.bfloat16)
    if device.type == "cpu":
        return cpu_peak(threads, cache_dir, dtype=dtype)
    return None


if __name__ == "__main__":  # python -m tlmsearch.train.mfu: (re)calibrate this machine's CPU peaks
    import os as _os

    for n in sorted({1, _os.cpu_count() or 1}):
        print(f"{cpu_name()}: {n} thread(s): {cpu_peak(n, recalibrate=True) / 1e9:.0f} GFLOP/s")
