"""The search drives trial arrays (tlmsearch/search/arrays/packing.py, array_trainable.py).

Quick: the packing searcher and the member-routing scheduler fed synthetic results, the array
trainable run in this process with ``tune.report`` captured (a retry skips recorded members and
continues the others from their checkpoints), ``search.array.size`` validation. Slow (real tiny
studies in one embedded Ray): a study with arrays records the same values as without (rtol
1e-4: the array reproduces each solo curve), a member the pruner stops leaves its array and the
others complete, an arch that does not fuse runs one process per trial.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pandas as pd
import pytest
import yaml
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher
from search_helpers import search_pair, tiny_config, tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config.planning import array_line, arrays_on
from tlmsearch.run_dir import RunDir
from tlmsearch.search.arrays.packing import (
    CHECKPOINT,
    ENDED,
    MEMBER,
    MEMBER_DIR,
    MEMBERS,
    ArrayScheduler,
    ArraySearcher,
    auto_size,
    fuse_key,
)
from tlmsearch.search.attrs import UNPRUNED
from tlmsearch.search.execution.faults import ENV, read_jsonl

optuna.logging.set_verbosity(optuna.logging.WARNING)
S = optuna.trial.TrialState
# two proxy widths besides uniform at 2 layers (linear 1.5 trains cosine 1.5's widths)
SPACE = {
    "dimensions": {
        "shape": {"type": "fixed", "value": "cosine"},
        "r_start": {"type": "categorical", "choices": [1.25, 1.5]},
    }
}
GOOD, BAD = {"shape": "cosine", "r_start": 1.25}, {"shape": "cosine", "r_start": 1.5}
STEPS = (2048, 4096, 6144, 8192)


def _cfg(tmp: Path, **search):
    return tiny_config(tmp, space=SPACE, search={"pruner": "none", **search})


# -------------------------------------------------------------------------------------------------
# Config and the pure rules


@pytest.mark.parametrize("size", [0, -1, "big", 2.5, True])
def test_a_bad_array_size_exits_2_naming_the_field(tmp_path: Path, size) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_study(tmp_path, search={"array": {"size": size}})))
    res = CliRunner().invoke(app, ["validate", str(path)])
    assert res.exit_code == 2, res.output
    assert "search.array.size" in res.output and "auto or a whole number" in res.output


def test_arrays_are_off_by_default_and_at_size_1_and_fall_back_where_nothing_fuses(tmp_path):
    assert not arrays_on(_cfg(tmp_path)) and array_line(_cfg(tmp_path)) is None
    assert not arrays_on(_cfg(tmp_path, array={"size": 1}))
    assert arrays_on(_cfg(tmp_path, array={"size": "auto"}))
    hope = tiny_config(
        tmp_path,
        search={"array": {"size": 3}},
        model={"arch": "hope_attention", "hope": {"levels": 1, "periods": [1]}},
    )
    assert not arrays_on(hope)
    assert "off, one process per trial: model.arch 'hope_attention'" in array_line(hope)


def test_auto_size_spreads_what_is_due_over_the_slots_with_a_cap() -> None:
    assert [auto_size(d, 2, gpu=False) for d in (0, 1, 2, 3, 7, 100)] == [1, 1, 1, 2, 4, 4]
    assert auto_size(100, 2, gpu=True) == 16 and auto_size(5, 1, gpu=True) == 5


def test_members_fuse_unless_their_settings_change_the_model_or_batch(tmp_path):
    cfg = tiny_config(
        tmp_path,
        space={
            "dimensions": {
                "shape": {"type": "fixed", "value": "cosine"},
                "train.lr": {"type": "categorical", "choices": [0.01, 0.02]},
                "model.init_std": {"type": "categorical", "choices": [0.02, 0.03]},
            }
        },
    )
    key = fuse_key(cfg, {"shape": "uniform"})
    assert fuse_key(cfg, GOOD) == key == fuse_key(cfg, {**GOOD, "train.lr": 0.02})
    assert fuse_key(cfg, {**GOOD, "model.init_std": 0.03}) != key  # another model
    assert fuse_key(cfg, {"shape": "nonsense"}).startswith("alone:")


# -------------------------------------------------------------------------------------------------
# Searcher and scheduler, fed synthetic results (no Ray cluster)


def _array_pair(tmp: Path, size, budget: int = 3, **search):
    cfg = _cfg(tmp, array={"size": size}, **search)
    plain, _ = search_pair(cfg)  # the study with the initial queue
    from tlmsearch.search.runner import searcher_and_scheduler

    searcher, sched = searcher_and_scheduler(
        cfg,
        plain.study.study_name,
        plain.study._storage,
        budget=budget,
        slots=1,
        trial_root=str(tmp / "session"),
    )
    ctrl = SimpleNamespace(search_alg=SimpleNamespace(searcher=searcher))
    return cfg, searcher, sched, ctrl


def _result(k: int, tokens: int, value: float, final: bool = False, **extra) -> dict:
    return {
        MEMBER: k,
        "tokens": tokens,
        "val_bpb": value,
        "val_loss": value,
        "final": final,
        "wall_s": 1.0,
        "widths": [64, 64],
        "n_params": 100,
        **extra,
    }


def test_one_suggest_packs_k_optuna_trials_each_its_own(tmp_path):
    _, searcher, sched, _ = _array_pair(tmp_path, 2)
    assert isinstance(searcher, ArraySearcher) and isinstance(sched, ArrayScheduler)
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert [len(first[MEMBERS]), len(second[MEMBERS])] == [2, 1]
    members = first[MEMBERS] + second[MEMBERS]
    assert [m["number"] for m in members] == [0, 1, 2]  # one Optuna trial each
    assert members[0]["candidate"] == {"shape": "uniform"} and members[0]["seed"] == 0
    assert [m["id"] for m in members] == ["a-0", "a-1", "b-0"]
    assert members[1][MEMBER_DIR] == str(tmp_path / "session" / "trial_a-1")
    assert searcher.suggest("c") == Searcher.FINISHED  # the session's budget is asked


def _array_trial(searcher, sched, ctrl, tid: str) -> SimpleNamespace:
    trial = SimpleNamespace(
        trial_id=tid,
        config=searcher.suggest(tid),
        path=None,
        error_file=None,
        get_error=lambda: None,
        should_recover=lambda: False,
    )
    sched.on_trial_add(ctrl, trial)
    return trial


def _finish(sched, ctrl, trial, k: int, values) -> None:
    for step, v in zip(STEPS, values, strict=True):
        assert sched.on_trial_result(ctrl, trial, _result(k, step, v)) == TrialScheduler.CONTINUE
    final = _result(k, STEPS[-1], values[-1], final=True, status="completed")
    assert sched.on_trial_result(ctrl, trial, final) == TrialScheduler.CONTINUE


def test_a_pruned_member_is_told_pruned_and_marked_and_the_array_goes_on(tmp_path):
    # GOOD (the queue's first candidate) is unpruned, BAD (the second) is not
    _, searcher, sched, ctrl = _array_pair(
        tmp_path, 3, budget=6, pruner="median", seeds=[0, 1], unpruned_candidates=1
    )
    first = _array_trial(searcher, sched, ctrl, "a")  # seed 0's three: finished to compare with
    for k in range(3):
        _finish(sched, ctrl, first, k, [3.0, 2.5, 2.2, 2.0])
    sched.on_trial_complete(ctrl, first, {})
    second = _array_trial(searcher, sched, ctrl, "b")  # seed 1's three
    assert [m["seed"] for m in second.config[MEMBERS]] == [1, 1, 1]
    assert [bool(m.get(UNPRUNED)) for m in second.config[MEMBERS]] == [False, True, False]
    for k in range(3):
        value = 9.0 if k == 2 else 3.0  # member 2 clearly worse
        decision = sched.on_trial_result(ctrl, second, _result(k, 2048, value))
        assert decision == TrialScheduler.CONTINUE  # the array is never stopped
    fts = searcher.study.get_trials()[3:]
    assert [ft.state for ft in fts] == [S.RUNNING, S.RUNNING, S.PRUNED]
    assert "pruned by Median at 2,048 tokens" in fts[2].user_attrs["reason"]
    assert (tmp_path / "session" / "trial_b-2" / ENDED).read_text() == "PRUNED"
    assert searcher.ended("b-2") == "PRUNED" and searcher.ended("b-0") is None
    # a late report of the pruned member changes nothing; the others finish
    sched.on_trial_result(ctrl, second, _result(2, 4096, 9.0))
    for k in (0, 1):
        _finish(sched, ctrl, second, k, [3.0, 2.5, 2.2, 2.0])
    fts = searcher.study.get_trials()[3:]
    assert [ft.state for ft in fts] == [S.COMPLETE, S.COMPLETE, S.PRUNED]
    assert list(fts[2].intermediate_values) == [2048]
    assert fts[0].user_attrs["ray_trial_id"] == "b-0" and fts[0].value == 2.0
    assert [e["tokens"] for e in fts[1].user_attrs["curve"]] == list(STEPS)
    assert fts[1].user_attrs["widths"] == [64, 64] and fts[1].intermediate_values[8192] == 2.0
    sched.on_trial_complete(ctrl, second, {})
    searcher.on_trial_complete("b", result={})  # Ray's follow-up: nothing left to tell


def test_an_array_lost_for_good_fails_only_its_unfinished_members(tmp_path):
    _, searcher, sched, ctrl = _array_pair(tmp_path, 3)
    trial = _array_trial(searcher, sched, ctrl, "a")
    sched.on_trial_result(ctrl, trial, _result(0, 8192, 2.0, final=True, status="completed"))
    sched.on_trial_error(ctrl, trial)
    searcher.on_trial_complete("a", error=True)
    assert [ft.state for ft in searcher.study.get_trials()] == [S.COMPLETE, S.FAIL, S.FAIL]


# -------------------------------------------------------------------------------------------------
# The array trainable in this process (tune.report captured)


@pytest.fixture
def reports(monkeypatch) -> list[dict]:
    import ray.tune

    out: list[dict] = []
    monkeypatch.setattr(ray.tune, "report", lambda metrics, **kw: out.append(dict(metrics)))
    return out


def _members(tmp: Path, cfg, n: int) -> list[dict]:
    cands = [{"shape": "uniform"}, GOOD, BAD][:n]
    return [
        {
            "candidate": c,
            "seed": 0,
            "number": i,
            "id": f"x-{i}",
            MEMBER_DIR: str(tmp / f"trial_x-{i}"),
        }
        for i, c in enumerate(cands)
    ]


def test_the_trainable_reports_each_member_as_a_solo_trial_and_a_retry_resumes(tmp_path, reports):
    from tlmsearch.data import prepare_data
    from tlmsearch.search.arrays.trainable import run_array
    from tlmsearch.train.checkpoints import latest_checkpoint, load_checkpoint

    cfg = _cfg(tmp_path, keep_weights="final")
    cfg = cfg.model_copy(
        update={"train": cfg.train.model_copy(update={"checkpoint_every_tokens": 4096})}
    )
    data = prepare_data(cfg.data, progress=False)
    members = _members(tmp_path, cfg, 3)
    (Path(members[2][MEMBER_DIR])).mkdir(parents=True)
    (Path(members[2][MEMBER_DIR]) / ENDED).write_text("PRUNED")  # recorded: not trained
    run_array({MEMBERS: members}, cfg.to_dict(), data)
    finals = {r[MEMBER]: r for r in reports if r["final"]}
    assert sorted(finals) == [0, 1] and all(r["status"] == "completed" for r in finals.values())
    assert not any(r[MEMBER] == 2 for r in reports)
    evals = [r["tokens"] for r in reports if r[MEMBER] == 1 and not r["final"]]
    assert evals == list(STEPS)
    assert finals[1]["widths"] == list(cfg.model.plan(GOOD).widths)
    # each member's checkpoints in its own folder, in the solo format; the final one reported
    ckpt = latest_checkpoint(members[1][MEMBER_DIR])
    _, meta = load_checkpoint(ckpt)
    assert meta["final"] and meta["number"] == 1 and meta["candidate"] == GOOD
    carried = [r[CHECKPOINT] for r in reports if r[MEMBER] == 1 and r.get(CHECKPOINT)]
    assert len(carried) == 2 and carried[-1] == str(ckpt)  # at 4,096 and 8,192 tokens
    assert len(list(Path(members[1][MEMBER_DIR]).glob("checkpoint_*"))) == 1  # older removed

    # a retry of the array (a lost worker): member 0 is recorded, member 1 continues from its
    # mid-way checkpoint (a solo state at 4,096 tokens) and ends with the same numbers, fused
    # with member 2 (unrecorded now) training from zero
    Path(members[0][MEMBER_DIR], ENDED).write_text("COMPLETE")
    Path(members[2][MEMBER_DIR], ENDED).unlink()
    mid = tmp_path / "mid"
    from tlmsearch.train.checkpoints import write_checkpoint
    from tlmsearch.train.loop import train_proxy

    def at(state: dict) -> None:  # its tensors are live: written at once
        if state["tokens"] == 4096:
            write_checkpoint(mid, state, {**meta, "tokens": 4096, "final": False})

    train_proxy(
        cfg.model.model_copy(update={"vocab_size": data.vocab_size}),
        cfg.model.plan(GOOD).widths,
        data,
        cfg.train,
        seed=0,
        threads=1,
        device="cpu",
        on_checkpoint=at,
    )
    for p in Path(members[1][MEMBER_DIR]).glob("checkpoint_*"):
        shutil.rmtree(p)
    retry = [m if m["number"] != 1 else {**m, "resume_from": str(mid)} for m in members]
    before = len(reports)
    run_array({MEMBERS: retry}, cfg.to_dict(), data)
    again = reports[before:]
    assert {r[MEMBER] for r in again} == {1, 2}
    for k in (1, 2):  # member 1's first two evals reported again, from its checkpoint
        assert [r["tokens"] for r in again if r[MEMBER] == k and not r["final"]] == list(STEPS)
    final = next(r for r in again if r[MEMBER] == 1 and r["final"])
    assert final["val_bpb"] == pytest.approx(finals[1]["val_bpb"], rel=1e-6)


LR_PROFILE = {"shape": "uniform", "lr.shape": "cosine", "lr.r_start": 1.5, "lr.r_end": 0.5}


def test_a_retried_array_resumes_a_profiled_member_only_from_its_own_profiles_checkpoint(
    tmp_path, reports, monkeypatch
):
    """A member with an LR profile whose array's worker is lost (the array retried) continues
    from its own mid-way checkpoint and ends with the numbers it ends with uninterrupted; a
    checkpoint of the same widths and seed trained without the profile (uniform's) is not
    resumed from (it trains from zero, and still ends with those numbers): the profile is part
    of what a checkpoint must match."""
    import tlmsearch.search.arrays.trainable as array_trainable
    from tlmsearch.data import prepare_data
    from tlmsearch.search.arrays.trainable import run_array
    from tlmsearch.train.checkpoints import latest_checkpoint, load_checkpoint, write_checkpoint
    from tlmsearch.train.loop import train_proxy

    cfg = _cfg(tmp_path, keep_weights="final")
    cfg = cfg.model_copy(
        update={"train": cfg.train.model_copy(update={"checkpoint_every_tokens": 4096})}
    )
    data = prepare_data(cfg.data, progress=False)
    members = [
        {
            "candidate": c,
            "seed": 0,
            "number": i,
            "id": f"x-{i}",
            MEMBER_DIR: str(tmp_path / f"trial_x-{i}"),
        }
        for i, c in enumerate([{"shape": "uniform"}, LR_PROFILE])
    ]
    run_array({MEMBERS: members}, cfg.to_dict(), data)  # uninterrupted: the reference
    finals = {r[MEMBER]: r for r in reports if r["final"]}
    assert finals[1]["lr_profile"] == pytest.approx([1.5, 0.5])
    assert finals[1]["widths"] == finals[0]["widths"]  # uniform widths: only the LRs differ
    assert finals[1]["val_bpb"] != pytest.approx(finals[0]["val_bpb"], rel=1e-6)
    _, meta = load_checkpoint(latest_checkpoint(members[1][MEMBER_DIR]))
    assert meta["train"]["lr_profile"] == pytest.approx([1.5, 0.5])

    model = cfg.model.model_copy(update={"vocab_size": data.vocab_size})
    widths = cfg.model.plan(LR_PROFILE).widths

    def mid(folder: Path, train) -> Path:
        """A checkpoint at 4,096 tokens of the LR member's widths and seed, trained by
        ``train`` (its tensors are live in the callback: written at once)."""
        meta_at = {**meta, "tokens": 4096, "final": False, "train": train.model_dump(mode="json")}

        def at(state: dict) -> None:
            if state["tokens"] == 4096:
                write_checkpoint(folder, state, meta_at)

        train_proxy(model, widths, data, train, seed=0, threads=1, device="cpu", on_checkpoint=at)
        return folder

    own = mid(tmp_path / "own", cfg.for_candidate(LR_PROFILE).train)
    flat = mid(tmp_path / "flat", cfg.train)  # uniform's: the same model without the profile
    resumed: list[int | None] = []  # the tokens each retried member continued from

    def spy(loaded, meta_):
        state = array_trainable_matching(loaded, meta_)
        resumed.append(None if state is None else int(state["tokens"]))
        return state

    array_trainable_matching = array_trainable._matching
    monkeypatch.setattr(array_trainable, "_matching", spy)
    Path(members[0][MEMBER_DIR], ENDED).write_text("COMPLETE")  # recorded: not run again
    for folder, expect in ((own, 4096), (flat, None)):
        for p in Path(members[1][MEMBER_DIR]).glob("checkpoint_*"):
            shutil.rmtree(p)  # the retry finds only the checkpoint it is given
        resumed.clear()
        before = len(reports)
        run_array(
            {MEMBERS: [members[0], {**members[1], "resume_from": str(folder)}]},
            cfg.to_dict(),
            data,
        )
        again = reports[before:]
        assert resumed == [expect]
        assert {r[MEMBER] for r in again} == {1}
        final = next(r for r in again if r["final"])
        assert final["lr_profile"] == pytest.approx([1.5, 0.5])
        assert final["val_bpb"] == pytest.approx(finals[1]["val_bpb"], rel=1e-6)


# -------------------------------------------------------------------------------------------------
# Real tiny studies in one embedded Ray


@pytest.fixture(scope="module")
def faults(tmp_path_factory: pytest.TempPathFactory):
    """The fault hook's folder, armed before Ray starts (its workers inherit the variable);
    ``faults.json`` is written by the test that shifts a candidate."""
    folder = tmp_path_factory.mktemp("faults")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ENV, str(folder))
        yield folder


@pytest.fixture(scope="module")
def ray_up(faults, local_ray):
    yield


def _run(tmp: Path, name: str, **sections):
    from tlmsearch.search.export import open_run
    from tlmsearch.search.runner import run_study

    lines: list[str] = []
    cfg = tiny_config(tmp, name=name, **sections)
    t = time.time()
    res = run_study(cfg, echo=lines.append)
    wall = time.time() - t
    _, study = open_run(res.run_dir)
    return res, study.get_trials(), lines, wall


@pytest.mark.slow
def test_a_study_with_arrays_records_the_values_it_records_without(ray_up, tmp_path):
    search = {"pruner": "none", "concurrency": 2}
    solo = _run(tmp_path, "solo", space=SPACE, search=search)
    fused = _run(tmp_path, "fused", space=SPACE, search={**search, "array": {"size": 3}})
    assert "trial arrays: up to 3 trainings a Ray trial, fused in one process" in fused[2]
    for _, trials, _, _ in (solo, fused):
        assert [ft.state for ft in trials] == [S.COMPLETE] * 3
    ids = [ft.user_attrs["ray_trial_id"] for ft in fused[1]]
    assert len({i.rsplit("-", 1)[0] for i in ids}) == 1  # one Ray trial trained the three
    for a, b in zip(solo[1], fused[1], strict=True):
        assert a.params == b.params and a.user_attrs["seed"] == b.user_attrs["seed"]
        assert b.value == pytest.approx(a.value, rel=1e-4)
        assert sorted(b.intermediate_values) == list(STEPS)
        for key in ("widths", "heads", "n_params", "flops_per_token", "node", "candidate"):
            assert b.user_attrs[key] == a.user_attrs[key], key
        assert [e["tokens"] for e in b.user_attrs["curve"]] == list(STEPS)
    # the run dir's tables: a row per member, its curve under its own trial id
    trials = pd.read_parquet(fused[0].run_dir / "trials.parquet")
    curves = pd.read_parquet(fused[0].run_dir / "curves.parquet")
    assert sorted(trials["trial_id"]) == sorted(ids) == sorted(set(curves["trial_id"]))
    print(f"3 trials: solo {solo[3]:.1f} s, one array {fused[3]:.1f} s")


@pytest.mark.slow
def test_a_pruned_member_leaves_its_array_and_the_others_complete(ray_up, faults, tmp_path):
    """Two arrays of three, one after the other (seed 0, then seed 1): the faults hook makes
    BAD report 1 bit/byte worse and GOOD 1 better, so at seed 1's first eval after the grace the
    median pruner (three finished trials) stops BAD and only BAD."""
    (faults / "faults.json").write_text(json.dumps({"shift": [[BAD, 1.0], [GOOD, -1.0]]}))
    seen = len(read_jsonl(faults / "evals.jsonl"))  # the module's earlier runs'
    try:
        search = {
            "pruner": "median",
            "concurrency": 1,
            "seeds": [0, 1],
            "array": {"size": 3},
            "unpruned_candidates": 1,
            "sampler_seed": 1,
        }  # GOOD is unpruned (sampler_seed 1's draw: test_search_pruning); BAD is not
        res, trials, _, _ = _run(tmp_path, "pruned", space=SPACE, search=search)
    finally:
        (faults / "faults.json").unlink()
    states = {(ft.user_attrs["candidate"], ft.user_attrs["seed"]): ft for ft in trials}
    bad = states[(json.dumps(BAD, sort_keys=True), 1)]
    assert bad.state == S.PRUNED and list(bad.intermediate_values) == [2048]
    assert "pruned by Median at 2,048 tokens" in bad.user_attrs["reason"]
    assert [ft.state for ft in trials].count(S.COMPLETE) == 5
    # it stopped costing compute: its array evaluated it no more after the prune
    evals = [
        e["tokens"]
        for e in read_jsonl(faults / "evals.jsonl")
        if e["candidate"] == BAD and e["seed"] == 1
    ]
    assert evals == [2048]
    assert res.status == "finished"
    # both arrays (processes of a Ray this run did not start) compiled into the run's cache
    caches = {e["compile_cache"] for e in read_jsonl(faults / "evals.jsonl")[seen:]}
    assert caches == {str(RunDir(res.run_dir).compile_cache.resolve())}


@pytest.mark.slow
def test_an_arch_that_does_not_fuse_runs_one_process_per_trial(ray_up, tmp_path):
    model = {"arch": "hope_attention", "hope": {"levels": 1, "periods": [1]}}
    _, trials, lines, _ = _run(
        tmp_path,
        "hope",
        model=model,
        search={"pruner": "none", "array": {"size": 3}},
        space={
            "dimensions": {
                "shape": {"type": "fixed", "value": "cosine"},
                "r_start": {"type": "fixed", "value": 1.5},
            }
        },
    )
    assert any("trial arrays: off, one process per trial" in ln for ln in lines)
    assert [ft.state for ft in trials] == [S.COMPLETE] * 2
    ids = [ft.user_attrs["ray_trial_id"] for ft in trials]
    assert len(set(ids)) == 2 and not any("-" in i for i in ids)  # Ray trials of their own


@pytest.mark.slow
def test_an_lr_profile_study_records_the_same_values_solo_and_as_an_array(ray_up, tmp_path):
    """uniform, uniform widths stepped as the taper (lr.shape cosine 1.5 -> 0.5) and the taper
    itself: a study and the same study as one trial array give equal numbers, and the profile
    reaches the trials table."""
    steps = {"shape": "uniform", "lr.shape": "cosine", "lr.r_start": 1.5, "lr.r_end": 0.5}
    taper = {"shape": "cosine", "r_start": 1.5, "r_end": 0.5}
    search = {"pruner": "none", "concurrency": 2, "candidates": [steps, taper], "seeds": [0]}
    solo = _run(tmp_path, "solo", search=search)
    fused = _run(tmp_path, "fused", search={**search, "array": {"size": 3}})
    for _, trials, _, _ in (solo, fused):
        assert [ft.state for ft in trials] == [S.COMPLETE] * 3
    by_candidate = {}
    for a, b in zip(solo[1], fused[1], strict=True):
        assert a.user_attrs["candidate"] == b.user_attrs["candidate"]
        assert b.value == pytest.approx(a.value, rel=1e-4)
        assert b.user_attrs.get("lr_profile") == a.user_attrs.get("lr_profile")
        by_candidate[a.user_attrs["candidate"]] = a
    ran = by_candidate[json.dumps(steps, sort_keys=True)]
    assert ran.user_attrs["lr_profile"] == pytest.approx([1.5, 0.5])
    assert (
        ran.user_attrs["widths"]
        == by_candidate[json.dumps({"shape": "uniform"})].user_attrs["widths"]
    )
    assert (
        ran.value != by_candidate[json.dumps({"shape": "uniform"})].value
    )  # trained, not replayed
    trials = pd.read_parquet(fused[0].run_dir / "trials.parquet").set_index("candidate")
    assert json.loads(trials.at["uniform | lr cosine 1.5->0.5", "lr_profile_json"]) == (
        pytest.approx([1.5, 0.5])
    )
    assert trials.at["uniform", "lr_profile_json"] == ""


def test_the_eta_schedules_an_arrays_members_not_its_ray_trials(tmp_path):
    """Old runner: the ETA had 2 slots for 8 trainings running as 2 arrays of 4, so it said
    2h20m for a study that took 39 min (the step_vs_capacity run)."""
    from tlmsearch.search.arrays.packing import training_slots
    from tlmsearch.search.eta import Running, study_eta

    cfg = _cfg(tmp_path, array={"size": "auto"})
    slots = training_slots(cfg, 2, due=72)
    assert slots == 8
    running = [Running(128_000, 512_000, 2_100.0)] * 8
    eta = study_eta(running, 72 - 8 - 16, 512_000, slots)
    assert eta == pytest.approx(384_000 / 2_100 + 6 * 512_000 / 2_100, rel=1e-9)  # ~33 min
    assert study_eta(running, 48, 512_000, 2) > 3 * eta  # what the progress line said
    assert training_slots(_cfg(tmp_path), 2, due=72) == 2  # no arrays: one a slot
