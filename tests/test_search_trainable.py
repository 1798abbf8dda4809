"""The Ray Tune trainable (tlmsearch/search/execution/trainable.py) outside Ray: ``tune.report``
caught.

A real tiny training of an attention-only taper: its reports, its Optuna trial and
its row of the trials table carry its heads per layer, and its parameters are uniform's."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from search_helpers import tiny_config

from tlmsearch.run_dir.tables import trials_frame
from tlmsearch.search.ledger import TrialLedger
from tlmsearch.search.records import trial_records
from tlmsearch.search.sampling.samplers import enqueue
from tlmsearch.widths.budget import trial_counts

ATTENTION_ONLY = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}


def test_an_attention_only_trial_trains_its_heads_and_records_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray import tune

    from tlmsearch import models
    from tlmsearch.data import prepare_data
    from tlmsearch.models import build_model
    from tlmsearch.search.execution.trainable import run_trial

    cfg = tiny_config(tmp_path, train={"tokens": 2048, "eval_every_tokens": 1024})
    data = prepare_data(cfg.data, progress=False)
    reports: list[dict] = []
    monkeypatch.setattr(tune, "report", lambda metrics, **kw: reports.append(metrics))
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)  # no Ray session: none
    built: list[tuple[int, ...]] = []

    def spy(model_cfg, *args, **kw):  # the heads of the model the trainer trains
        built.append(model_cfg.heads)
        return build_model(model_cfg, *args, **kw)

    monkeypatch.setattr(models, "build_model", spy)
    run_trial({"candidate": ATTENTION_ONLY, "seed": 0}, study=cfg.to_dict(), data=data)
    final = reports[-1]
    assert final["final"] and final["status"] == "completed", final.get("reason")
    assert built == [(3, 1)]  # cosine 1.5 -> 0.5 of 2 heads a layer, at 2 layers
    assert all(r["heads"] == [3, 1] and r["widths"] == [64, 64] for r in reports)
    assert final["heads_share"] == 1.0
    # the model the trial built: its heads, and exactly uniform's parameters (share 1)
    headed = cfg.model.built_for(ATTENTION_ONLY).model_copy(update={"vocab_size": data.vocab_size})
    model = build_model(headed, [64, 64], data.vocab_size)
    assert final["n_params"] == sum(p.numel() for p in model.parameters())
    uniform = trial_counts(cfg.model, [64, 64], data.vocab_size, cfg.data.seq_len)
    assert final["n_params"] == uniform["n_params"]

    # its reports through the ledger into storage, then the trials table
    study = optuna.create_study()
    enqueue(study, cfg, ATTENTION_ONLY, 0)
    ot = study.ask()
    ledger, ray_trial = TrialLedger(), SimpleNamespace(trial_id="t0")
    for r in reports:
        ledger.record(ot, ray_trial, r)
    study.tell(ot, final["val_bpb"])
    row = trials_frame(trial_records(study)[0], cfg.model).iloc[0]
    assert json.loads(row["heads_json"]) == [3, 1] and row["heads_shape"] == "cosine"
    assert row["heads_share"] == 1.0 and not row["is_baseline"]
    assert row["n_params"] == uniform["n_params"]
    assert row["candidate"] == "uniform | heads cosine 1.5->0.5"


def test_a_trial_compiles_into_the_cache_the_run_hands_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run's compile cache is this process's before the trial builds its model (before
    anything can compile), and a trial given none leaves the process's setting alone."""
    from ray import tune

    from tlmsearch import models
    from tlmsearch.data import prepare_data
    from tlmsearch.models import build_model
    from tlmsearch.search.execution.trainable import run_trial

    cfg = tiny_config(tmp_path, train={"tokens": 2048, "eval_every_tokens": 2048})
    data = prepare_data(cfg.data, progress=False)
    reports: list[dict] = []
    monkeypatch.setattr(tune, "report", lambda metrics, **kw: reports.append(metrics))
    monkeypatch.setattr(tune, "get_checkpoint", lambda: None)
    seen: list[str | None] = []

    def spy(*args, **kw):
        seen.append(os.environ.get("TORCHINDUCTOR_CACHE_DIR"))
        return build_model(*args, **kw)

    monkeypatch.setattr(models, "build_model", spy)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "before"))
    cache = str(tmp_path / "runs" / "tiny" / "compile-cache")
    for given in (cache, None):
        run_trial(
            {"candidate": {"shape": "uniform"}, "seed": 0},
            study=cfg.to_dict(),
            data=data,
            compile_cache=given,
        )
        assert reports[-1]["status"] == "completed", reports[-1].get("reason")
    assert seen == [cache, cache]  # None: the process keeps the cache it has


def test_the_ledger_writes_a_trials_facts_once_and_again_only_when_they_change():
    """Every user attribute is one storage transaction: a trial's static facts (widths,
    parameters, node) go to storage at its first eval; its final report writes only those that
    changed since (on RDB storage each write was a commit, most of a trial's driver time)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study()
    ot = study.ask()
    writes: list[str] = []
    real = ot.set_user_attr

    def counted(key, value):
        writes.append(key)
        real(key, value)

    ot.set_user_attr = counted
    facts = {"widths": [64, 64], "n_params": 1000, "flops_per_token": 5.0, "node": "a"}
    ledger, ray_trial = TrialLedger(), SimpleNamespace(trial_id="t0")
    for tokens in (10, 20):
        ledger.record(ot, ray_trial, {**facts, "tokens": tokens, "val_bpb": 1.0, "final": False})
    assert sorted(k for k in writes if k in facts) == sorted(facts)  # once, at the first eval
    writes.clear()
    ledger.record(ot, ray_trial, {**facts, "node": "a,b", "tokens": 20, "final": True})
    assert [k for k in writes if k in facts] == ["node"]  # only what changed
    assert ot.user_attrs["node"] == "a,b" and ot.user_attrs["widths"] == [64, 64]
