"""A tiny study for the search tests: 2 layers, d_model 32, bytes on a small made-up text; and
what the trials of a run stopped mid-way trained (the curves, each attempt's evals)."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from typing import Any

from tlmsearch.config import StudyConfig, study_from_mapping

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "and",
    "then",
    "runs",
    "away",
    "from",
    "the",
    "big",
    "red",
    "barn",
    "while",
    "small",
    "birds",
    "sing",
    "in",
    "old",
    "trees",
    "near",
    "a",
    "cold",
    "river",
]


def write_text(path: Path, n_paragraphs: int = 600, seed: int = 0) -> Path:
    rng = random.Random(seed)
    paras = []
    for _ in range(n_paragraphs):
        sents = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))).capitalize() + "."
            for _ in range(5)
        ]
        paras.append(" ".join(sents))
    path.write_text("\n\n".join(paras))
    return path


def tiny_study(tmp: Path, **sections: Any) -> dict[str, Any]:
    """A study dict; ``sections`` replace or update top-level sections."""
    text = tmp / "text.txt"
    if not text.exists():
        write_text(text)
    data: dict[str, Any] = {
        "name": "tiny",
        "space": {
            "dimensions": {
                "shape": {"type": "categorical", "choices": ["cosine", "linear"]},
                "r_start": {"type": "float", "low": 1.25, "high": 1.5, "step": 0.25},
            }
        },
        "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "d_ff": 64, "multiple_of": 16},
        "data": {
            "sources": [str(text)],
            "tokenizer": {"kind": "bytes"},
            "seq_len": 32,
            "val_tokens": 2048,
            "cache_dir": str(tmp / "cache"),
        },
        "train": {
            "tokens": 8192,
            "batch_tokens": 512,
            "micro_batch_size": 16,
            "warmup_tokens": 1024,
            "eval_every_tokens": 2048,
            "compile": "off",
            "dtype": "fp32",
            "lr": 0.01,
        },
        "search": {"sampler": "grid", "pruner": "none", "concurrency": 2},
        "storage": {"runs_dir": str(tmp / "runs")},
        "ray": {"num_cpus": 2, "cpus_per_trial": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return data


def tiny_config(tmp: Path, **sections: Any) -> StudyConfig:
    return study_from_mapping(tiny_study(tmp, **sections))


def learnable_bytes(root: Path, n_paragraphs: int, val_tokens: int) -> Any:
    """Byte-level tokens of a small, learnable text made under ``root`` (repetitive
    pseudo-English: 11 words, 40 a paragraph), prepared into ``root/cache``."""
    from tlmsearch.config import DataConfig
    from tlmsearch.data import prepare_data

    rng = random.Random(0)
    words = ["the", "lord", "said", "unto", "them", "that", "he", "shall", "be", "with", "thee"]
    paras = [" ".join(rng.choice(words) for _ in range(40)) + "." for _ in range(n_paragraphs)]
    (root / "text.txt").write_text("\n\n".join(paras))
    cfg = DataConfig(
        sources=[str(root / "text.txt")],
        tokenizer={"kind": "bytes"},
        seq_len=32,
        val_tokens=val_tokens,
        cache_dir=str(root / "cache"),
    )
    return prepare_data(cfg, progress=False)


def straight_curve(study: dict[str, Any], candidate: dict[str, Any], seed: int) -> list[dict]:
    """The eval rows of an uninterrupted run of (candidate, seed) of ``study`` (a mapping), in
    this process, as a one-worker trial trains it: ``train_proxy`` on one thread, on the CPU."""
    from tlmsearch.data import prepare_data
    from tlmsearch.train.loop import train_proxy

    cfg = study_from_mapping(study)
    summary = train_proxy(
        cfg.model,
        cfg.model.plan(candidate).widths,
        prepare_data(cfg.data, progress=False),
        cfg.train,
        seed=seed,
        threads=1,  # a trial's: ray.cpus_per_trial
        device="cpu",
    )
    return summary.curve


def search_pair(cfg: StudyConfig, name: str = "unit") -> tuple[Any, Any]:
    """The runner's searcher and scheduler over an in-memory Optuna study holding ``cfg``'s
    initial queue (the uniform baseline first)."""
    import optuna

    from tlmsearch.search.runner import searcher_and_scheduler
    from tlmsearch.search.sampling.samplers import write_initial_queue

    storage = optuna.storages.InMemoryStorage()
    senses = [o.sense for o in cfg.objectives]
    study = optuna.create_study(storage=storage, study_name=name, directions=senses)
    write_initial_queue(study, cfg)
    # an array study's members need a folder of their own (the run's Ray session folder)
    root = tempfile.mkdtemp(prefix="trials-")
    return searcher_and_scheduler(cfg, name, storage, trial_root=root)


# -------------------------------------------------------------------------------------------------
# Trials stopped mid-way (tests/test_search_killed.py, test_search_resume.py): where each attempt
# trained, and the curve the trial ended with

LOSSES = ("tokens", "train_loss", "val_loss", "val_ppl", "val_bpb", "lr")


def straight_losses(study: dict[str, Any], candidate: dict[str, Any], seed: int) -> list[dict]:
    """:func:`straight_curve`'s ``LOSSES`` only: what a run dir's curve of the trial holds."""
    return [{k: row[k] for k in LOSSES} for row in straight_curve(study, candidate, seed)]


def trial_row(df: Any, candidate: dict[str, Any], seed: int) -> Any:
    """The one row of (candidate, seed) in a trials table."""
    rows = df[(df["params_json"] == json.dumps(candidate, sort_keys=True)) & (df["seed"] == seed)]
    assert len(rows) == 1, df[["candidate", "seed", "state"]]
    return rows.iloc[0]


def trial_losses(run: Path, candidate: dict[str, Any], seed: int) -> list[dict]:
    """The curve of the completed trial of (candidate, seed) in run dir ``run``: ``LOSSES``."""
    import pandas as pd

    row = trial_row(pd.read_parquet(run / "trials.parquet"), candidate, seed)
    assert row["state"] == "COMPLETE", row
    curves = pd.read_parquet(run / "curves.parquet")
    mine = curves[curves["trial_id"] == row["trial_id"]].sort_values("tokens")
    return [
        {k: (int(r[k]) if k == "tokens" else float(r[k])) for k in LOSSES}
        for _, r in mine.iterrows()
    ]


def eval_attempts(faults: Path, candidate: dict[str, Any], seed: int) -> dict[int, list[int]]:
    """pid -> the tokens of the evals that process trained for (candidate, seed) (not the ones
    it reported again from a checkpoint), from the fault hook's ``evals.jsonl``."""
    from tlmsearch.search.execution.faults import read_jsonl

    out: dict[int, list[int]] = {}
    for e in read_jsonl(faults / "evals.jsonl"):
        if e["candidate"] == candidate and e["seed"] == seed:
            out.setdefault(e["pid"], []).append(e["tokens"])
    return out
