"""Quality: the study's uniform model against compressors, in bits per byte of the same val text.

Run: ``.venv/bin/python benchmarks/quality.py [--study studies/quickstart.yaml] [--set k=v ...]``.

Trains the study's uniform candidate (``tlmsearch train``'s path: its data, its settings, its
first seed) and prints the val_bpb curve, then the same text's bits per byte under
``xz -9e`` and ``gzip -9``, each two ways:
- ``alone``: the val text compressed by itself (what ``xz -9e val.txt`` gives);
- ``given train``: ``size(train + val) - size(train)``, the cost of the val text to a
  compressor that has read the train split first (as the model has): the fair reference.
The goal: the quickstart's uniform model below 2.0 bits per byte on val.
"""

from __future__ import annotations

import argparse
import gzip
import json
import lzma
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tlmsearch.data import PreparedData

ROOT = Path(__file__).resolve().parent.parent
GOAL_BPB = 2.0


def val_text(data: PreparedData) -> tuple[bytes, bytes]:
    """(train text, the val text whose tokens the val loss predicts), as UTF-8 bytes."""
    import numpy as np

    from tlmsearch.data.tokenizer import load_saved

    if data.tokenizer_path is None:
        raise SystemExit("quality: the study's data has no tokenizer (token files): no text")
    tok = load_saved(Path(data.tokenizer_path))
    val = np.asarray(data.val_tokens())
    train = np.asarray(data.train_tokens())
    val_bytes = tok.decode(val[1:].tolist()).encode()
    train_bytes = tok.decode(train.tolist()).encode()
    return train_bytes, val_bytes


def compressor_bpb(train: bytes, val: bytes) -> dict[str, dict[str, float]]:
    def xz(b: bytes) -> int:
        return len(lzma.compress(b, preset=9 | lzma.PRESET_EXTREME))

    def gz(b: bytes) -> int:
        return len(gzip.compress(b, compresslevel=9))

    out = {}
    for name, size in (("xz -9e", xz), ("gzip -9", gz)):
        alone = 8 * size(val) / len(val)
        given = 8 * (size(train + val) - size(train)) / len(val)
        out[name] = {"alone": round(alone, 3), "given_train": round(given, 3)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--study", default=str(ROOT / "studies/quickstart.yaml"))
    ap.add_argument("--set", dest="sets", action="append", default=[], help="a study override")
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()

    from tlmsearch.config import load_study
    from tlmsearch.data import prepare_data
    from tlmsearch.train.loop import train_candidate

    cfg = load_study(args.study, args.sets)
    data = prepare_data(cfg.data, progress=False)
    train_b, val_b = val_text(data)
    t0 = time.perf_counter()
    refs = compressor_bpb(train_b, val_b)
    print(
        json.dumps(
            {
                "val_bytes": len(val_b),
                "val_bytes_in_the_trainer": data.val_bytes,
                "train_bytes": len(train_b),
                "compressors_bpb": refs,
                "compress_s": round(time.perf_counter() - t0, 1),
            }
        ),
        flush=True,
    )
    _, s = train_candidate(cfg, {"shape": "uniform"}, seed=args.seed, progress=False)
    for row in s.curve:
        print(
            json.dumps(
                {k: round(row[k], 4) for k in ("tokens", "val_bpb", "val_loss", "tokens_per_s")}
            ),
            flush=True,
        )
    bpb = s.metrics.get("val_bpb", float("nan"))
    print(
        json.dumps(
            {
                "study": args.study,
                "overrides": args.sets,
                "status": s.status,
                "tokens": s.tokens,
                "val_bpb": round(bpb, 4),
                "goal": f"< {GOAL_BPB}",
                "met": bpb < GOAL_BPB,
                "xz_given_train": refs["xz -9e"]["given_train"],
                "wall_s": round(s.wall_s, 1),
                "setup": s.setup,
            }
        )
    )
    sys.exit(0)


if __name__ == "__main__":
    main()
