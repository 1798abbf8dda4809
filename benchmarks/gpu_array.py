"""Trial arrays on a GPU: K quickstart-size members trained in one process as one fused model.

Run: ``python benchmarks/gpu_array.py`` on a machine with a CUDA GPU (rows start within
``--budget-s`` 330 s, sized for under 6 minutes on an H200; not yet run on a GPU), also
``python benchmarks/gpu.py --array``; ``--cpu`` runs tiny sizes here (``--quick``:
the smallest, for the test). Needs torch, numpy, pyyaml and pydantic (tlmsearch's configs);
no Ray, Optuna or rich. Without pydantic it says which import failed and how to carry it.

Rows: the quickstart proxy (4 x 128, d_ff 512, seq 128, 2048-token steps, vocab 16384 untied,
``benchmarks/gpu.py``'s size) as K = 1, 4, 16 and 64 members of one
:class:`tlmsearch.train.trial_array.TrialArray` (bf16 autocast, ``torch.compile`` of the fused
step), with all members uniform or mixed (the quickstart's uniform, cosine 1.5 -> 0.5 and its
mirror 0.5 -> 1.5, in turn; padded to the widest per layer), each member its own seed; and one
solo :class:`Trainer` (compiled) for comparison. Data: this repository's README and docs as
bytes (the vocabulary padded to 16384, so the output layer costs what it would).

Per row: ``compile_s`` (the first step, the compile included), then steps timed for
``--seconds`` after two warm-up steps (CUDA synchronised at both ends): tokens/s per member and
of all members, MFU of all (each member's own FLOPs per token, ``tlmsearch.widths.budget``, not the
padding's, against the GPU's data-sheet bf16 peak, ``tlmsearch.train.mfu``), the padding's share of
the FLOPs computed, and GPU seconds per 2M-token member: ``2e6 / tokens/s all`` (steady) and
``(compile_s + 2e6 / tokens/s per member) / K`` (a whole array of 2M-token members, its compile
included, per member). Evals are not timed (the members' evals run eagerly, one by one).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from gpu import CPU_SIZES, GPU_SIZES, data_section  # benchmarks/gpu.py

TAPER = {"shape": "cosine", "r_start": 1.5, "r_end": 0.5}
MIRROR = {"shape": "cosine", "r_start": 0.5, "r_end": 1.5}
MIXES = {"uniform": [{"shape": "uniform"}], "mixed": [{"shape": "uniform"}, TAPER, MIRROR]}
TOKENS_PER_MEMBER = 2_000_000


def require_configs() -> None:
    """Exit with what to do when tlmsearch's configs cannot be imported (pydantic)."""
    try:
        import tlmsearch.config  # noqa: F401
    except ModuleNotFoundError as err:
        v = sys.version_info
        sys.exit(
            f"tlmsearch.config cannot be imported: {err} (tlmsearch's configs are pydantic "
            "models). Install it (pip install 'pydantic>=2'), or carry it from a machine with "
            f"pip: pip download --only-binary=:all: --python-version {v.major}.{v.minor} "
            "--platform manylinux2014_x86_64 pydantic -d wheels, then unzip every wheel into one "
            "folder and put that folder on PYTHONPATH"
        )


def _members(size: dict[str, Any], mix: str, k: int, train: Any) -> list:
    from tlmsearch.config import ModelConfig
    from tlmsearch.train.trial_array import Member

    model = ModelConfig(**size["model"])
    cands = MIXES[mix]
    return [
        Member(model, tuple(model.plan(cands[i % len(cands)]).widths), train, seed=i)
        for i in range(k)
    ]


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(step: Any, device: Any, seconds: float) -> tuple[int, float]:
    """(steps, seconds) of ``step()`` calls for about ``seconds``, synchronised at both ends."""
    _sync(device)
    t0, n = time.perf_counter(), 0
    batch = 1
    while True:
        for _ in range(batch):
            step()
        n += batch
        _sync(device)
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n, dt
        batch = max(1, min(4 * batch, int(n * (seconds - dt) / dt) + 1))


def _first_then_timed(step: Any, device: Any, seconds: float) -> tuple[float, int, float]:
    """(compile_s, steps, seconds): the first step (the compile) alone, two warm-up steps, then
    :func:`_timed` (what every row measures, array or solo)."""
    t0 = time.perf_counter()
    step()
    _sync(device)
    compile_s = time.perf_counter() - t0
    for _ in range(2):
        step()
    return (compile_s, *_timed(step, device, seconds))


def array_row(size: dict[str, Any], mix: str, k: int, args: Any, data: Any) -> dict[str, Any]:
    import torch

    from tlmsearch.config import TrainConfig
    from tlmsearch.train.trial_array import TrialArray, padded_widths
    from tlmsearch.widths import budget

    train = TrainConfig(
        tokens=10**12,
        warmup_tokens=2 * size["train"]["batch_tokens"],
        eval_every_tokens=10**12,
        compile="off",
        **size["train"],
    )
    members = _members(size, mix, k, train)
    dev = "cpu" if args.cpu else "cuda"
    if not args.cpu:
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    arr = TrialArray(members, data, device=dev, threads=args.threads, compile=not args.cpu)
    try:
        build_s = time.perf_counter() - t0
        compile_s, n, dt = _first_then_timed(arr.step, arr.device, args.seconds)
        step_tokens = arr.trainers[0].step_tokens
        vocab = arr.trainers[0].model.wte.num_embeddings
        seq = data.seq_len
        fpt = [
            budget.trial_counts(m.model, m.widths, vocab, seq)["flops_per_token"] for m in members
        ]
        padded = budget.trial_counts(
            members[0].model, padded_widths([m.widths for m in members]), vocab, seq
        )
        tps_member = n * step_tokens / dt
        peak = arr.trainers[0].setup["peak_flops"]
        row = {
            "rows": "array",
            "mix": mix,
            "members": k,
            "tokens_per_s_member": tps_member,
            "tokens_per_s_all": k * tps_member,
            "mfu": tps_member * sum(fpt) / peak if peak else math.nan,
            "padding_flops": 1 - sum(fpt) / (k * padded["flops_per_token"]),
            "compile_s": compile_s,
            "build_s": build_s,
            "gpu_s_per_member": TOKENS_PER_MEMBER / (k * tps_member),
            "gpu_s_per_member_with_compile": (compile_s + TOKENS_PER_MEMBER / tps_member) / k,
            "steps": n,
            "timed_s": dt,
            "dtype": arr.trainers[0].setup["dtype"],
            "vmap_fallbacks": sorted(arr.fallbacks),
            "mem_gb": None if args.cpu else torch.cuda.max_memory_allocated() / 1e9,
        }
    finally:
        arr.close()
    return row


def solo_row(size: dict[str, Any], args: Any, data: Any) -> dict[str, Any]:
    """One compiled Trainer (train_proxy's step) of the uniform model, for comparison."""
    from tlmsearch.config import TrainConfig
    from tlmsearch.train.trainer import Trainer

    train = TrainConfig(
        tokens=10**12,
        warmup_tokens=2 * size["train"]["batch_tokens"],
        eval_every_tokens=10**12,
        compile="off" if args.cpu else "on",
        **size["train"],
    )
    (m,) = _members(size, "uniform", 1, train)
    t = Trainer(
        m.model,
        m.widths,
        data,
        train,
        seed=0,
        threads=args.threads,
        device="cpu" if args.cpu else "cuda",
    )
    try:
        compile_s, n, dt = _first_then_timed(t.step, t.device, args.seconds)
        tps = n * t.step_tokens / dt
        fpt = t.counts["flops_per_token"]
        return {
            "rows": "solo Trainer",
            "mix": "uniform",
            "members": 1,
            "tokens_per_s_member": tps,
            "tokens_per_s_all": tps,
            "mfu": tps * fpt / t.peak if t.peak else math.nan,
            "padding_flops": 0.0,
            "compile_s": compile_s,
            "gpu_s_per_member": TOKENS_PER_MEMBER / tps,
            "gpu_s_per_member_with_compile": compile_s + TOKENS_PER_MEMBER / tps,
            "steps": n,
            "timed_s": dt,
            "dtype": t.setup["dtype"],
        }
    finally:
        t.close()


def print_table(rows: list[dict[str, Any]], title: str) -> None:
    """A plain-text table (no rich: the GPU box may not have it)."""
    cols = [
        ("rows", "rows", "s"),
        ("mix", "mix", "s"),
        ("members", "K", "d"),
        ("tokens_per_s_member", "tok/s member", ",.0f"),
        ("tokens_per_s_all", "tok/s all", ",.0f"),
        ("mfu", "MFU all", ".1%"),
        ("padding_flops", "padding", ".0%"),
        ("compile_s", "compile_s", ".1f"),
        ("gpu_s_per_member", "GPU s/2M member", ".2f"),
        ("gpu_s_per_member_with_compile", "+compile", ".2f"),
        ("mem_gb", "mem GB", ".1f"),
        ("error", "status", "s"),
    ]

    def cell(r: dict[str, Any], key: str, spec: str) -> str:
        v = r.get(key)
        if key == "error":
            return str(v)[:90] if v else "ok"
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            return "-"
        return format(v, spec)

    table = [[h for _, h, _ in cols]] + [[cell(r, k, s) for k, _, s in cols] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(cols))]
    print(title)
    for line in table:
        print(
            "  ".join(
                c.rjust(w) if i > 1 else c.ljust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            )
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu", action="store_true", help="tiny sizes on this CPU")
    ap.add_argument("--quick", action="store_true", help="with --cpu: the smallest run (tests)")
    ap.add_argument("--seconds", type=float, default=None, help="timed seconds a row")
    ap.add_argument("--budget-s", type=float, default=None, help="seconds for all rows")
    ap.add_argument("--members", default=None, help="comma-separated K (default 1,4,16,64)")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (--cpu)")
    ap.add_argument("--out", type=Path, default=None, help="JSON (default: a temp dir)")
    args = ap.parse_args(argv)
    args.cpu = args.cpu or args.quick
    require_configs()
    import torch

    if not args.cpu and not torch.cuda.is_available():
        sys.exit("no CUDA device: run with --cpu (tiny sizes on this CPU)")
    size = (
        (CPU_SIZES["tiny-32"] if args.quick else CPU_SIZES["tiny-64"])
        if args.cpu
        else GPU_SIZES["quickstart"]
    )
    ks = (
        [int(k) for k in args.members.split(",")]
        if args.members
        else ([1, 2] if args.quick else [1, 2, 4] if args.cpu else [1, 4, 16, 64])
    )
    args.seconds = args.seconds or (0.5 if args.quick else 2.0 if args.cpu else 4.0)
    args.budget_s = args.budget_s or (330.0 if not args.cpu else 300.0)
    if not args.cpu:
        import torch._dynamo.config as dynamo_config

        # one compile per (K, widths): more than dynamo's default 8 entries per function
        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, 64)
    device = (
        (f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}")
        if not args.cpu
        else f"CPU, torch {torch.__version__}"
    )
    print(f"# {device}", flush=True)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        from tlmsearch.config import DataConfig
        from tlmsearch.data import prepare_data

        data = prepare_data(DataConfig(**data_section(size, tmp)), progress=False)
        plan = [("solo", "uniform", 1)] + [("array", mix, k) for k in ks for mix in MIXES]
        rows = []
        for kind, mix, k in plan:
            base = {
                "rows": "solo Trainer" if kind == "solo" else "array",
                "mix": mix,
                "members": k,
            }
            if time.perf_counter() - t_start > args.budget_s:
                rows.append({**base, "error": "skipped: time budget spent"})
                continue
            try:
                row = (
                    solo_row(size, args, data)
                    if kind == "solo"
                    else array_row(size, mix, k, args, data)
                )
            except Exception as err:  # the table still comes out
                row = {**base, "error": f"{type(err).__name__}: {err}"[:300]}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if not args.cpu:
                torch.cuda.empty_cache()
    total = time.perf_counter() - t_start
    print_table(rows, f"# {device}; {args.seconds:g} s timed a row; {total:.0f} s in all")
    out = args.out or Path(tempfile.gettempdir()) / "tlmsearch-gpu-array.json"
    out.write_text(
        json.dumps(
            {"device": device, "seconds": args.seconds, "total_s": total, "rows": rows}, indent=1
        )
    )
    print(f"# JSON: {out}")


if __name__ == "__main__":
    main()
