"""Ladders of proxy sizes: validation of ``ladder:``, the rung studies, promotion, and
``tlmsearch fidelity`` / report / best.yaml on fabricated rung run dirs (no training).

The slow end-to-end test trains a 2-rung ladder of a tiny study through the CLI.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
import yaml
from fixtures_run import make_run, make_trials, study_dict
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from search_helpers import tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import StudyConfig, study_from_mapping
from tlmsearch.errors import ConfigError
from tlmsearch.search import ladder as L

runner = CliRunner()
LADDER = [{"model": {"d_model": 32}}, {"model": {"d_model": 48}, "train": {"tokens": 6144}}]


def _validate(tmp: Path, data: dict[str, Any]) -> Any:
    path = tmp / "study.yaml"
    path.write_text(yaml.safe_dump(data))
    return runner.invoke(app, ["validate", str(path), "--no-config"])


BAD = {
    "one rung": ({"ladder": LADDER[:1]}, "ladder:"),
    "a rung changes the space": (
        {
            "ladder": [
                {},
                {"space": {"dimensions": {"shape": {"type": "fixed", "value": "cosine"}}}},
            ]
        },
        "ladder[1].space: a rung may override model, train, data only",
    ),
    "a rung changes the search": (
        {"ladder": [{"search": {"seeds": [3]}}, {}]},
        "ladder[0].search",
    ),
    "a rung's model is invalid": (
        {"ladder": [{}, {"model": {"d_model": 33}}]},
        "ladder[1].model: d_model (33) must be divisible by n_head",
    ),
    "a rung's unknown key": (
        {"ladder": [{}, {"model": {"d_modle": 64}}]},
        "ladder[1].model.d_modle",
    ),
    "a rung trains less than its warm-up": (
        {"ladder": [{"train": {"tokens": 512}}, {}]},
        "ladder[0].train: warmup_tokens (1024) must be below tokens (512)",
    ),
    "a rung that is not a mapping": ({"ladder": [{"model": 3}, {}]}, "ladder[0].model: 3"),
    "a rung that changes the candidates": (
        {"ladder": [{"model": {"n_layer": 1}}, {}]},
        "ladder[0].model: at n_layer 1 the candidates differ",
    ),
    "promote without promote_top": (
        {"ladder": LADDER, "ladder_mode": "promote"},
        "promote_top: ladder_mode promote needs it",
    ),
    "promote_top in mode all": ({"ladder": LADDER, "promote_top": 2}, "promote_top is read in"),
    "promote_top without a ladder": ({"promote_top": 2}, "need a ladder"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_ladders_exit_2_naming_the_field(tmp_path: Path, case: str) -> None:
    patch, needle = BAD[case]
    data = tiny_study(tmp_path)
    for key, value in patch.items():
        data[key] = {**data[key], **value} if key == "storage" else value
    res = _validate(tmp_path, data)
    assert res.exit_code == 2, res.output
    assert needle in res.output
    assert "Traceback" not in res.output


_junk = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10**6) | st.text(max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
_rung = st.dictionaries(
    st.sampled_from(["model", "train", "data", "search", "space", "name"]),
    st.dictionaries(
        st.sampled_from(["d_model", "n_layer", "tokens", "seq_len", "lr", "x"]), _junk, max_size=2
    )
    | _junk,
    max_size=2,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(rungs=st.lists(_rung | _junk, min_size=0, max_size=3))
def test_fuzzed_ladders_are_valid_or_name_the_ladder(tmp_path: Path, rungs: list[Any]) -> None:
    data = tiny_study(tmp_path)
    data["ladder"] = rungs
    try:
        cfg = study_from_mapping(data)
    except ConfigError as err:
        assert all(p.startswith("ladder") for p in err.problems), err.problems
        return
    for i in range(len(rungs)):  # valid: every rung is a study with the same candidates
        assert cfg.rung(i).candidates() == cfg.candidates()


def test_rungs_apply_their_overrides_and_validate_lists_them(tmp_path: Path) -> None:
    cfg = study_from_mapping({**tiny_study(tmp_path), "ladder": LADDER})
    assert [cfg.rung(i).model.d_model for i in (0, 1)] == [32, 48]
    assert [cfg.rung(i).train.tokens for i in (0, 1)] == [8192, 6144]
    assert cfg.rung(1).ladder is None and cfg.rung(1).model.n_head == 2  # the rest: the study's
    res = _validate(tmp_path, {**tiny_study(tmp_path), "ladder": LADDER})
    assert res.exit_code == 0, res.output
    assert "rung 1: 2 layers, d_model 48" in res.output
    assert "ladder_mode all: every candidate at every rung" in res.output
    flat = [{"model": {"d_model": 48}}, {"model": {"d_model": 32}}]  # compute goes down
    res = _validate(tmp_path, {**tiny_study(tmp_path), "ladder": flat})
    assert res.exit_code == 0 and "warning: rung 1 does not spend more compute" in res.output


def test_a_plain_study_yaml_says_nothing_of_ladders(tmp_path: Path) -> None:
    text = study_from_mapping(tiny_study(tmp_path)).to_yaml()
    assert "ladder" not in text and "promote_top" not in text


# -------------------------------------------------------------------------------------------------
# Fabricated ladder runs


def make_ladder(
    root: Path, slopes: dict[float, float], seeds=(0, 1, 2), mode: str = "all", drop_upper=()
) -> StudyConfig:
    """A finished 2-rung ladder run dir: rung 1's effect of r_start r shifts by slopes[r];
    rung 1 has no trials of the r_start in ``drop_upper``."""
    study = study_dict(seeds=seeds)
    study["train"] = {"tokens": 4000, "warmup_tokens": 100}
    study["ladder"] = [{"model": {"d_model": 32}}, {"model": {"d_model": 64}}]
    if mode == "promote":
        study.update(ladder_mode="promote", promote_top=2)
    cfg = study_from_mapping(study)
    root.mkdir(parents=True)
    (root / "study.yaml").write_text(cfg.to_yaml())
    L._write_ladder(root, cfg, {})
    for i in range(2):
        sub = L.rung_study(cfg, i, root).to_dict()
        sub["name"] = f"rung-{i}"
        trials, curves = make_trials(seeds=seeds)
        if i == 1:
            trials = [t for t in trials if t["params"].get("r_start") not in drop_upper]
        for t in trials:
            t["flops_per_token"] = 600_000 * (1 + 3 * i)
            if t["state"] == "COMPLETE" and t["params"]["shape"] != "uniform":
                t["val_bpb"] += i * slopes.get(t["params"]["r_start"], 0.0)
        make_run(root / f"rung-{i}", study=sub, trials=trials, curves=curves)
        (root / f"rung-{i}" / "best.yaml").write_text(yaml.safe_dump({"best": [], "study": "x"}))
    return cfg


def _cli(*args: str) -> Any:
    return runner.invoke(app, list(args))


def test_fidelity_command_report_and_best_yaml(tmp_path: Path) -> None:
    run = tmp_path / "lad"
    make_ladder(run, {1.25: 0.05, 1.75: -0.05})  # rung 1 reverses the r_start order
    res = _cli("fidelity", str(run))
    assert res.exit_code == 0, res.output
    doc = json.loads((run / "fidelity.json").read_text())
    (pair,) = doc["pairs"]
    assert pair["n_candidates"] == 7 and pair["n_seeds"] == 3
    assert pair["tau_ci95"][0] <= pair["kendall_tau"] <= pair["tau_ci95"][1]
    assert "Kendall tau" in res.output and "decision accuracy" in res.output
    assert pair["distinct_resamples"] == 10 and "distinct resamples" in res.output  # 3 seeds
    assert "only 10 distinct bootstrap resamples with 3 seeds" in doc["trust"]
    assert pair["conditional_on"] is None  # ladder_mode all: nothing chosen by rank
    (dec,) = doc["decisions"]  # decision accuracy per FLOP: rung 0 against the top rung
    assert (dec["rung"], dec["top"], dec["n_pairs"]) == (0, 1, 21)
    assert dec["compute_ratio"] == pytest.approx(0.25)  # 600k vs 2.4M FLOPs per token
    assert dec["accuracy"] == pytest.approx(pair["decision_accuracy"])  # every seed common
    assert dec["accuracy"] < 1  # rung 1 reverses the order of r_start
    assert "decision accuracy vs the top rung (rung 1) per compute" in res.output
    snr = doc["rungs"][0]["signal_to_noise"]  # each rung's, with its curves' checkpoint noise
    assert snr["candidates"] == 7 and snr["checkpoint_noise"]["trials"] == 21
    assert snr["seed_noise"]["snr"] > snr["seed_noise"]["snr_if_all_equal"]
    assert "signal-to-noise per rung" in res.output
    assert doc["bootstrap"] == {
        "resamples": 2000,
        "rng_seed": 0,
        "level": 0.95,
        "resampled": "seeds, with replacement",
    }
    again = json.loads(json.dumps(L.ladder_fidelity(run)))
    assert again == doc  # deterministic
    # a crossing of two candidates' lines lies between the rungs or beyond, never below
    for c in doc["crossings"]:
        assert c["log10_compute"] is None or c["log10_compute"] >= doc["rungs"][0]["log10_compute"]
    res = _cli("report", str(run))
    assert res.exit_code == 0, res.output
    html = (run / "report.html").read_text()
    assert "id='fidelity-box'" in html and "fig-fidelity" in html
    # the tables `tlmsearch fidelity` printed, the same cells
    # (tlmsearch/evidence/fidelity_tables.py)
    assert "decision accuracy vs the top rung (rung 1) per compute" in html
    assert "signal-to-noise per rung" in html and "rank agreement of the candidates" in html
    best = L.finish_ladder(run)
    block = yaml.safe_load((run / "best.yaml").read_text())["fidelity"]
    assert block["kendall_tau"] == pair["kendall_tau"] and block["n_seeds"] == 3
    assert block["distinct_resamples"] == 10
    assert block["statement"] == doc["trust"] and best["fidelity"]["trust"] == doc["trust"]


def test_ladder_fidelity_passes_the_studys_stats_level_and_family(tmp_path, monkeypatch) -> None:
    from tlmsearch.evidence import fidelity as fid

    run = tmp_path / "lad"
    cfg = make_ladder(run, {})
    d = cfg.to_dict()
    d["stats"] = {**(d.get("stats") or {}), "level": 0.9, "family": "bh"}
    (run / "study.yaml").write_text(study_from_mapping(d).to_yaml())
    seen = {}

    def spy(rungs, value, sense, **kw):
        seen.update(kw)
        return {}

    monkeypatch.setattr(fid, "fidelity", spy)
    L.ladder_fidelity(run)
    assert (seen["level"], seen["family"]) == (0.9, "bh")


def test_the_dashboard_of_a_ladder_names_a_rung(tmp_path: Path) -> None:
    make_ladder(tmp_path / "lad", {})
    res = _cli("dashboard", str(tmp_path / "lad"), "--port", "0")
    assert res.exit_code == 2 and "tlmsearch dashboard" in res.output and "rung-1" in res.output


def test_fidelity_of_a_plain_run_exits_2(tmp_path: Path) -> None:
    make_run(tmp_path / "plain")
    res = _cli("fidelity", str(tmp_path / "plain"))
    assert res.exit_code == 2 and "is not a ladder run" in res.output


def test_promote_takes_the_best_of_the_rung_below(tmp_path: Path) -> None:
    run = tmp_path / "lad"
    cfg = make_ladder(run, {}, mode="promote")
    below = L.rung_study(cfg, 0, run)
    top = L.promoted(below, run / "rung-0", 2)
    # the synthetic law: best near r_start 1.4, cosine better than linear
    assert top == [{"shape": "cosine", "r_start": 1.5}, {"shape": "cosine", "r_start": 1.25}]
    up = L.rung_study(cfg, 1, run, top)
    assert up.search.sampler == "grid"
    assert up.candidates() == [{"shape": "uniform"}, *top]
    assert isinstance(up, StudyConfig) and up.model.d_model == 64


def test_a_rung_without_trials_promotes_nothing(tmp_path: Path) -> None:
    """An empty rung (every trial lost, or none run): no candidate, not a KeyError."""
    from tlmsearch.run_dir.tables import write_results

    run = tmp_path / "lad"
    cfg = make_ladder(run, {}, mode="promote")
    below = L.rung_study(cfg, 0, run)
    empty = tmp_path / "empty"
    write_results(empty, [], [], study=below)
    assert L.promoted(below, empty, 2) == []


def test_fidelity_leaves_out_what_a_rung_did_not_measure(tmp_path: Path) -> None:
    run = tmp_path / "lad"
    make_ladder(run, {}, drop_upper=(1.75,))
    (pair,) = L.ladder_fidelity(run)["pairs"]
    assert pair["n_candidates"] == 5
    assert pair["left_out"] == ["cosine 1.75->0.25", "linear 1.75->0.25"]


# -------------------------------------------------------------------------------------------------
# End to end: a 2-rung ladder of a tiny study, trained


@pytest.mark.slow
def test_a_two_rung_ladder_runs_resumes_and_measures_fidelity(local_ray, tmp_path: Path) -> None:
    data = tiny_study(
        tmp_path,
        space={
            "dimensions": {
                "shape": {"type": "fixed", "value": "cosine"},
                "r_start": {"type": "categorical", "choices": [1.25, 1.5]},
            }
        },
        train={"tokens": 4096, "eval_every_tokens": 2048},
        search={"pruner": "none", "seeds": [0, 1]},
    )
    data["name"] = "lad"
    data["ladder"] = LADDER  # d_model 32, then 48 trained on 6144 tokens
    shared = f"sqlite:///{tmp_path / 'shared.db'}"  # one storage for both rungs, as a server is
    data["storage"] = {**data.get("storage", {}), "optuna": shared}
    path = tmp_path / "lad.yaml"
    path.write_text(yaml.safe_dump(data))
    res = _cli("run", str(path))
    assert res.exit_code == 0, res.output
    run = tmp_path / "runs" / "lad"
    assert sorted(optuna.get_all_study_names(shared)) == ["lad.rung-0", "lad.rung-1"]
    for i, tokens in enumerate((4096, 6144)):
        trials = pd.read_parquet(run / f"rung-{i}" / "trials.parquet")
        assert len(trials) == 6 and set(trials["state"]) == {"COMPLETE"}  # 3 candidates x 2
        assert set(trials["tokens"]) == {tokens}
    assert "rank agreement" in res.output and "trust:" in res.output
    assert (run / "report.html").exists() and (run / "best.yaml").exists()
    res = _cli("fidelity", str(run))
    assert res.exit_code == 0, res.output
    doc = json.loads((run / "fidelity.json").read_text())
    (pair,) = doc["pairs"]
    assert pair["n_candidates"] == 3 and pair["n_seeds"] == 2
    (dec,) = doc["decisions"]  # rung 0's share of rung 1's pairwise decisions, per FLOP
    assert dec["n_pairs"] == 3 and 0 < dec["compute_ratio"] < 1
    assert "decision accuracy vs the top rung" in res.output
    ck = doc["rungs"][0]["signal_to_noise"]["checkpoint_noise"]  # 2 evals per trial: too few
    assert ck["snr"] is None and "4 evals" in ck["why"]
    assert doc["rungs"][1]["compute"] > doc["rungs"][0]["compute"]
    best = yaml.safe_load((run / "best.yaml").read_text())
    assert best["rung"] == "rung-1" and best["fidelity"]["n_candidates"] == 3
    res = _cli("status", str(run))  # each rung's counts and best
    assert res.exit_code == 0, res.output
    assert "rung-0" in res.output and "rung-1" in res.output and "6 complete" in res.output
    assert res.output.count("signal-to-noise (arXiv 2508.13144)") == 2  # one line per rung
    res = _cli("export", str(run), "--format", "yaml")
    assert res.exit_code == 0, res.output
    assert yaml.safe_load((run / "best.yaml").read_text())["fidelity"]["n_seeds"] == 2
    assert (run / "rung-0" / "report.html").exists() and (run / "rung-1" / "report.html").exists()
    res = _cli("resume", str(run))  # a finished ladder: nothing runs again
    assert res.exit_code == 0, res.output
    assert res.output.count("nothing left to run") == 2


@pytest.mark.parametrize("case", ["a rung's study name taken", "a storage that cannot open"])
def test_a_shared_storage_problem_is_exit_2_before_any_rung_dir(tmp_path: Path, case: str) -> None:
    shared = f"sqlite:///{tmp_path / 'shared.db'}"
    if case == "a rung's study name taken":
        optuna.create_study(storage=shared, study_name="lad.rung-1")  # another ladder "lad"'s
        said = ["already holds a study 'lad.rung-1'", "--name NEW"]
    else:
        shared = f"sqlite:///{tmp_path / 'no' / 'such' / 'dir' / 'shared.db'}"
        said = ["storage.optuna: cannot open"]
    data = study_dict(seeds=(0,))
    data.update(name="lad", ladder=LADDER, storage={"runs_dir": str(tmp_path), "optuna": shared})
    data["train"] = {"tokens": 4096, "warmup_tokens": 512, "eval_every_tokens": 2048}
    path = tmp_path / "lad.yaml"
    path.write_text(yaml.safe_dump(data))
    res = _cli("run", str(path))
    assert res.exit_code == 2, res.output
    assert all(s in res.output for s in said), res.output
    assert not (tmp_path / "lad").exists()


def test_rung_study_names_follow_the_ladder_dir_even_as_dot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lad").mkdir()
    monkeypatch.chdir(tmp_path / "lad")  # `tlmsearch resume .`
    assert L.rung_study_name(Path("."), 1) == "lad.rung-1"
    assert L.rung_study_name(tmp_path / "lad", 0) == "lad.rung-0"


def test_climb_promotes_and_resume_continues_the_first_unfinished_rung(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestration with fabricated rung runs in place of training."""
    from tlmsearch.search import runner

    calls: list[tuple[str, str]] = []
    stop_at = {"rung-1"}  # the first climb is interrupted in rung 1

    def fake_run(cfg: StudyConfig, *, address=None, name=None, study_name=None, echo=print) -> Any:
        assert study_name == f"synthetic.{name}"  # each rung a study of its own
        run = Path(cfg.storage.runs_dir) / name
        calls.append(("run", name))
        keys = [json.dumps(c, sort_keys=True) for c in cfg.candidates()]
        trials, curves = make_trials(seeds=cfg.search.seeds)
        trials = [t for t in trials if json.dumps(t["params"], sort_keys=True) in keys]
        for t in trials:
            t["flops_per_token"] = 20_000 * cfg.model.d_model
        make_run(run, study={**cfg.to_dict(), "name": name}, trials=trials, curves=curves)
        (run / "best.yaml").write_text(yaml.safe_dump({"best": [], "study": name}))
        status = "interrupted" if name in stop_at else "finished"
        return runner.RunResult(run, status)

    def fake_resume(
        run_dir: Path, *, address=None, retry_failed=False, trust_checkpoints=False, echo=print
    ) -> Any:
        calls.append(("resume", Path(run_dir).name))
        return runner.RunResult(Path(run_dir), "finished")

    monkeypatch.setattr(runner, "run_study", fake_run)
    monkeypatch.setattr(runner, "resume_run", fake_resume)
    study = study_dict(seeds=(0, 1))
    study["train"] = {"tokens": 4000, "warmup_tokens": 100}
    study["storage"] = {"runs_dir": str(tmp_path)}
    sizes = (32, 48, 64)
    study.update(ladder=[{"model": {"d_model": d}} for d in sizes], ladder_mode="promote")
    study["promote_top"] = 2
    cfg = study_from_mapping(study)
    res = L.run_ladder(cfg, echo=lambda _: None)
    assert res.status == "interrupted" and calls == [("run", "rung-0"), ("run", "rung-1")]
    run = tmp_path / "synthetic"
    state = json.loads((run / L.LADDER_FILE).read_text())
    best_two = [{"r_start": 1.5, "shape": "cosine"}, {"r_start": 1.25, "shape": "cosine"}]
    assert state["rungs"][1]["candidates"] == best_two  # rung 0's best two, best first
    assert L.rung_study(cfg, 1, run, best_two).candidates()[0] == {"shape": "uniform"}
    calls.clear()
    stop_at.clear()
    res = L.resume_ladder(run, echo=lambda _: None)
    assert res.status == "finished"
    assert calls == [("resume", "rung-0"), ("resume", "rung-1"), ("run", "rung-2")]
    trials = pd.read_parquet(run / "rung-2" / "trials.parquet")
    assert set(trials["candidate"]) == {"uniform", "cosine 1.5->0.5", "cosine 1.25->0.75"}
    assert [p["n_candidates"] for p in res.fidelity["pairs"]] == [3, 3, 3]  # the promoted ones
    # each pair is measured on what rung 0 (for rung 1) or rung 1 (for rung 2) chose by rank
    assert [p["conditional_on"] for p in res.fidelity["pairs"]] == [
        f"the candidates rung {k} promoted by rank" for k in (0, 1, 1)
    ]
    assert "conditional on the candidates rung 1 promoted by rank" in res.fidelity["trust"]
    assert yaml.safe_load((run / "best.yaml").read_text())["rung"] == "rung-2"
