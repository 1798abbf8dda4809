"""The simulator backend (``train.backend: simulate``): blackboxes of curves (tabular and
surrogate), their config, and a simulated study through the real driver (``tlmsearch run``),
which replays a stored run's curves into the same decisions the live run made."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from search_helpers import tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import study_from_mapping
from tlmsearch.config.train import SurrogateConfig
from tlmsearch.errors import ConfigError
from tlmsearch.search.execution.blackbox import (
    SurrogateBlackbox,
    TabularBlackbox,
    _two_way,
    eval_tokens,
    fit_surrogate,
    key,
    load_blackbox,
)

runner = CliRunner()
SURROGATE = {"offset": -0.02, "curvature": 0.1, "optimum": {"r_start": 1.5}}


def _sim(tmp: Path, simulate: dict, **sections) -> dict:
    return tiny_study(tmp, train={"backend": "simulate", "simulate": simulate}, **sections)


# -------------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize(
    ("train", "words"),
    [
        ({"backend": "simulate"}, "backend simulate needs simulate"),
        ({"simulate": {"run": "x"}}, "set backend: simulate"),
        ({"backend": "simulate", "simulate": {}}, "exactly one of run"),
        ({"backend": "simulate", "simulate": {"surrogate": {"noise": "loud"}}}, "noise"),
        ({"backend": "simulate", "simulate": {"surrogate": {"noise_sd": -1}}}, "noise_sd"),
        (
            {
                "backend": "simulate",
                "simulate": {"surrogate": {"control_noise": 3.0, "baseline_noise": 2.0}},
            },
            "train.simulate.surrogate: give baseline_noise only: control_noise is its old name",
        ),
    ],
)
def test_a_bad_simulate_section_exits_2_naming_the_field(tmp_path, train, words):
    _exits_2_naming(tmp_path, tiny_study(tmp_path, train=train), words)


def test_a_replayed_run_cannot_confirm_on_fresh_seeds(tmp_path):
    study = _sim(tmp_path, {"run": str(tmp_path)}, search={"pruner": "median"})
    study["search"]["confirm"] = {"top": 1, "seeds": 2}
    _exits_2_naming(tmp_path, study, "which a replayed run (train.simulate.run) never trained")


def _exits_2_naming(tmp_path, study, words):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(study))
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    out = " ".join(res.output.split())
    assert "train" in out and words in out, out


def test_a_key_under_its_old_name_loads_with_a_warning_naming_both(tmp_path):
    """train.simulate.surrogate.control_noise is baseline_noise now: an older study file loads
    as it did, and the warning says what to rename."""
    old = _sim(tmp_path, {"surrogate": {"noise": "heteroscedastic", "control_noise": 3.0}})
    with pytest.warns(FutureWarning, match="control_noise is now called baseline_noise"):
        cfg = study_from_mapping(old)
    assert cfg.train.simulate.surrogate.baseline_noise == 3.0
    new = _sim(tmp_path, {"surrogate": {"noise": "heteroscedastic", "baseline_noise": 3.0}})
    assert study_from_mapping(new) == cfg


def test_a_run_dir_without_tables_is_an_input_error(tmp_path):
    cfg = study_from_mapping(_sim(tmp_path, {"run": str(tmp_path / "nowhere")}))
    with pytest.raises(ConfigError, match=r"train\.simulate\.run: .* holds no trials\.parquet"):
        load_blackbox(cfg)


# -------------------------------------------------------------------------------------------------
# Surrogate


def _box(tmp_path, **surrogate) -> SurrogateBlackbox:
    cfg = study_from_mapping(_sim(tmp_path, {"surrogate": {**SURROGATE, **surrogate}}))
    box = load_blackbox(cfg)
    assert isinstance(box, SurrogateBlackbox)
    return box


def test_a_surrogate_curve_lands_on_its_formula_at_the_end(tmp_path):
    box = _box(tmp_path, seed_sd=0, noise_sd=0, eval_sd=0, final=3.0)
    cfg = study_from_mapping(_sim(tmp_path, {"surrogate": SURROGATE}))
    cand = {"shape": "cosine", "r_start": 1.25}
    evals = box.curve(cand, 0).evals
    assert [e["tokens"] for e in evals] == eval_tokens(cfg) == [2048, 4096, 6144, 8192]
    # offset + curvature x (1.25 - 1.5)^2
    assert evals[-1]["val_loss"] == pytest.approx(3.0 - 0.02 + 0.1 * 0.0625)
    assert evals[-1]["val_bpb"] == pytest.approx(evals[-1]["val_loss"] / math.log(2))
    losses = [e["val_loss"] for e in evals]
    assert losses == sorted(losses, reverse=True)  # a power law falls
    assert box.curve({"shape": "uniform"}, 0).evals[-1]["val_loss"] == pytest.approx(3.0)


def test_a_surrogate_is_deterministic_per_candidate_and_seed(tmp_path):
    a, b = _box(tmp_path), _box(tmp_path)
    cand = {"shape": "linear", "r_start": 1.5}
    assert a.curve(cand, 1).evals == b.curve(cand, 1).evals
    assert a.curve(cand, 1).evals != a.curve(cand, 2).evals
    other = _box(tmp_path, seed=7)
    assert other.curve(cand, 1).evals != a.curve(cand, 1).evals


def test_heteroscedastic_noise_differs_by_candidate_and_the_baseline_is_noisiest(tmp_path):
    homo = _box(tmp_path)
    het = _box(tmp_path, noise="heteroscedastic", spread=1.0, baseline_noise=3.0, noise_sd=0.01)
    cands = [{"shape": s, "r_start": r} for s in ("cosine", "linear") for r in (1.25, 1.5)]
    assert {homo.noise_sd(c) for c in cands} == {0.01}
    assert len({het.noise_sd(c) for c in cands}) == 4
    assert het.noise_sd({"shape": "uniform"}) == pytest.approx(0.03)


@settings(max_examples=30, deadline=None)
@given(
    cand=st.lists(st.floats(-1, 1), min_size=2, max_size=6),
    seed=st.lists(st.floats(-1, 1), min_size=2, max_size=5),
)
def test_the_two_way_fit_recovers_an_additive_table(cand, seed):
    y = np.add.outer(np.array(cand), np.array(seed))
    a, b = _two_way(y)
    assert np.allclose(b, np.array(seed) - np.mean(seed), atol=1e-9)
    assert np.allclose(a, np.array(cand) + np.mean(seed), atol=1e-9)


def _stored(box: SurrogateBlackbox, cands: list[dict], seeds: list[int]):
    """A trials and a curves table of every (candidate, seed) as ``box`` draws them."""
    trials, curves = [], []
    for i, (c, s) in enumerate((c, s) for c in cands for s in seeds):
        evals = box.curve(c, s).evals
        tid = f"t{i}"
        trials.append(
            {
                "trial_id": tid,
                "params_json": key(c),
                "seed": s,
                "state": "COMPLETE",
                "reason": "",
                "val_loss": evals[-1]["val_loss"],
                "val_bpb": evals[-1]["val_bpb"],
            }
        )
        curves += [{"trial_id": tid, "seed": s, **e} for e in evals]
    return pd.DataFrame(trials), pd.DataFrame(curves)


def test_a_fit_recovers_the_surrogate_that_drew_the_run(tmp_path, monkeypatch):
    truth = _box(
        tmp_path,
        final=2.5,
        seed_sd=0.02,
        noise_sd=0.01,
        amplitude=0.8,
        alpha=0.7,
        eval_sd=0.001,
        bytes_per_token=1.3,
    )
    cands = [{"shape": "uniform"}] + [
        {"shape": s, "r_start": r} for s in ("cosine", "linear", "sigmoid") for r in (1.25, 1.5)
    ]
    trials, curves = _stored(truth, cands, list(range(8)))
    import tlmsearch.search.execution.blackbox as bb

    monkeypatch.setattr(bb, "_stored", lambda run, where: (trials, curves))
    cfg = study_from_mapping(_sim(tmp_path, {"surrogate": {"fit": "stored"}}))
    p = fit_surrogate(SurrogateConfig(fit="stored"), cfg)
    # uniform's mean over 8 seeds: within 3 sd of (seed effect + own noise) / sqrt(8) of 2.5
    assert p.final == pytest.approx(2.5, abs=3 * math.hypot(0.02, 0.01) / math.sqrt(8))
    uniform = trials[trials["params_json"] == key({"shape": "uniform"})]
    assert p.final == pytest.approx(uniform["val_loss"].mean())
    assert p.noise_sd == pytest.approx(0.01, rel=0.35)
    assert p.alpha == pytest.approx(0.7, rel=0.1) and p.amplitude == pytest.approx(0.8, rel=0.1)
    assert p.bytes_per_token == pytest.approx(1.3)
    for c in cands[1:]:  # effects within the noise of an 8-seed mean difference
        assert p.effects[key(c)] == pytest.approx(truth.effect(c), abs=0.015)
    fitted = SurrogateBlackbox(p, eval_tokens(cfg), 256)
    near = {"shape": "cosine", "r_start": 1.3}  # unseen: the nearest stored candidate's
    assert fitted.effect(near) == p.effects[key({"shape": "cosine", "r_start": 1.25})]
    given_field = fit_surrogate(SurrogateConfig(fit="stored", noise_sd=0.5), cfg)
    assert given_field.noise_sd == 0.5  # a field the YAML gives wins over the fit


# -------------------------------------------------------------------------------------------------
# Tabular


def test_a_tabular_blackbox_answers_what_the_run_stored_and_no_more():
    trials = pd.DataFrame(
        [
            {
                "trial_id": "a",
                "params_json": key({"shape": "cosine"}),
                "seed": 0,
                "state": "PRUNED",
                "reason": "pruned",
            },
            {
                "trial_id": "b",
                "params_json": key({"shape": "cosine"}),
                "seed": 0,
                "state": "COMPLETE",
                "reason": "",
            },
            {
                "trial_id": "c",
                "params_json": key({"shape": "linear"}),
                "seed": 0,
                "state": "PRUNED",
                "reason": "pruned",
            },
        ]
    )
    curves = pd.DataFrame(
        [{"trial_id": "a", "tokens": 10, "val_loss": 2.0}]
        + [{"trial_id": "b", "tokens": t, "val_loss": 3.0 - t / 100} for t in (10, 20)]
        + [{"trial_id": "c", "tokens": 10, "val_loss": 2.5}]
    )
    box = TabularBlackbox.from_tables(trials, curves, 256)
    full = box.curve({"shape": "cosine"}, 0)  # the complete trial wins over the pruned one
    assert full.status == "completed" and [e["tokens"] for e in full.evals] == [10, 20]
    cut = box.curve({"shape": "linear"}, 0)
    assert cut.status == "failed" and "pruned it at 10 tokens" in cut.reason
    missing = box.curve({"shape": "linear"}, 1)
    assert missing.status == "failed" and missing.evals == []


# -------------------------------------------------------------------------------------------------
# Through the real driver


RAY_LOGS = {"progress.csv", "result.json"}  # Ray Tune's automatic CSV and JSON loggers


def _run(tmp: Path, data: dict) -> Path:
    path = tmp / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data))
    res = runner.invoke(app, ["run", str(path)])
    assert res.exit_code == 0, res.output
    return tmp / "runs" / data["name"]


@pytest.mark.slow
def test_a_simulated_study_runs_end_to_end(local_ray, tmp_path):
    # trial arrays: two members a Ray trial, each reporting its blackbox curve in step
    data = _sim(
        tmp_path,
        {"surrogate": SURROGATE},
        name="simulated",
        search={
            "sampler": "random",
            "n_trials": 6,
            "seeds": [0, 1],
            "pruner": "median",
            "array": {"size": 2},
        },
    )
    run = _run(tmp_path, data)
    df = pd.read_parquet(run / "trials.parquet")
    assert len(df) == 14 and set(df["state"]) <= {"COMPLETE", "PRUNED"}  # 6 x 2 + uniform x 2
    assert (run / "report.html").is_file() and (run / "best.yaml").is_file()
    res = runner.invoke(app, ["status", str(run)])
    assert res.exit_code == 0 and "14/14 finished" in " ".join(res.output.split()), res.output
    # Ray's own per-result logs are off (the ledger holds the curves); its experiment state is
    # still written at the end
    folders = list((run / "ray").glob("session-0/trial_*"))
    assert folders and not [p for f in folders for p in f.glob("*") if p.name in RAY_LOGS]
    assert list((run / "ray").glob("session-0/experiment_state-*.json"))


def _decisions(run: Path) -> tuple:
    df = pd.read_parquet(run / "trials.parquet")
    pruned = sorted(
        zip(
            df.loc[df["state"] == "PRUNED", "params_json"],
            df.loc[df["state"] == "PRUNED", "seed"],
            strict=True,
        )
    )
    ran = sorted(zip(df["params_json"], df["seed"], strict=True))
    races = sorted(df["race_decision"].dropna()) if "race_decision" in df else []
    best = yaml.safe_load((run / "best.yaml").read_text())["best"][0]["params"]
    return pruned, ran, races, best


@pytest.mark.slow
def test_replaying_a_stored_run_reproduces_its_decisions(local_ray, tmp_path):
    """A live run with a pruner and a race, then its stored curves replayed through the real
    driver: the same trials run, the same are pruned, the race decides the same, the same best."""
    search = {
        "pruner": "percentile",
        "pruner_options": {"percentile": 40.0},
        "unpruned_candidates": 0,
        "concurrency": 1,
        "seeds": [0, 1, 2],
        "racing": {"max_seeds": 3, "prior_sd": 1e-9},
    }
    # three distinct models at 2 layers (a shape changes nothing there)
    space = {
        "dimensions": {
            "shape": {"type": "categorical", "choices": ["cosine"]},
            "r_start": {"type": "float", "low": 1.25, "high": 1.75, "step": 0.25},
        }
    }
    live = _run(tmp_path, tiny_study(tmp_path, name="live", search=search, space=space))
    sim = _run(
        tmp_path, _sim(tmp_path, {"run": str(live)}, name="replayed", search=search, space=space)
    )
    got, want = _decisions(sim), _decisions(live)
    assert want[0], "the live run pruned nothing: the test would not test pruning"
    assert want[2], "the live race decided nothing: the test would not test racing"
    assert got == want
    a = pd.read_parquet(live / "trials.parquet").set_index(["params_json", "seed"])
    b = pd.read_parquet(sim / "trials.parquet").set_index(["params_json", "seed"])
    assert np.allclose(a.loc[b.index, "val_bpb"], b["val_bpb"], equal_nan=True)
    assert json.loads(json.dumps(got[3])) == got[3]


def test_a_run_dirs_study_yaml_with_an_old_key_reads_without_a_warning(tmp_path):
    """A frozen study.yaml (written by an older version) is read as it is: no FutureWarning
    asks the reader of a run dir to rename a key in a file they should not edit."""
    import warnings

    from tlmsearch.config import frozen_study

    old = _sim(tmp_path, {"surrogate": {"noise": "heteroscedastic", "control_noise": 3.0}})
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        cfg = frozen_study(old)
    assert cfg.train.simulate.surrogate.baseline_noise == 3.0
