"""The paired pruner on synthetic learning curves (in-memory Optuna, no Ray)."""

from __future__ import annotations

import json

import optuna
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.search.sampling.paired_pruner import PairedPruner

optuna.logging.set_verbosity(optuna.logging.WARNING)
STEPS = [1000 * i for i in range(1, 9)]


def base(step: int, seed: int = 0) -> float:
    return 3.0 - 0.1 * step / 1000 + 0.2 * seed  # seed 1 is a harder seed, for every model


def _add(study, name: str, seed: int, delta, *, baseline=False, state="COMPLETE", steps=STEPS):
    trial = study.ask()
    trial.set_user_attr("seed", seed)
    trial.set_user_attr("candidate", json.dumps({"name": name}))
    if baseline:
        trial.set_user_attr("tlm_control", True)
    for s in steps:
        d = delta(s) if callable(delta) else delta
        trial.report(base(s, seed) + d, s)
    if state == "COMPLETE":
        study.tell(trial, base(steps[-1], seed) + (delta(steps[-1]) if callable(delta) else delta))
    return trial


def _study(seeds=(0,)) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    for seed in seeds:
        _add(study, "uniform", seed, 0.0, baseline=True)
        _add(study, "good", seed, -0.05)
    return study


def _frozen(study, trial):
    return study._storage.get_trial(trial._trial_id)


def test_a_consistent_loser_is_pruned_and_a_slow_starter_is_kept() -> None:
    pruner = PairedPruner(grace_tokens=3000, patience=2)
    study = _study()
    loser = _add(study, "loser", 0, 0.2, state="RUNNING")
    slow = _add(study, "slow", 0, lambda s: 0.4 if s < 3000 else -0.06, state="RUNNING")
    assert pruner.prune(study, _frozen(study, loser))
    assert not pruner.prune(study, _frozen(study, slow))
    # the median pruner, which compares raw values from the first step on, kills the slow one
    median = optuna.pruners.MedianPruner(n_startup_trials=1)
    early = _add(
        study,
        "slow2",
        0,
        lambda s: 0.4 if s < 3000 else -0.06,
        state="RUNNING",
        steps=[1000, 2000],
    )
    assert median.prune(study, _frozen(study, early))


def test_deltas_take_the_seeds_difficulty_out() -> None:
    # seed 1 is 0.2 worse for every model: a raw-value comparison would prune its candidates;
    # its paired delta (-0.05 vs its own uniform) equals the best's: kept.
    pruner = PairedPruner(grace_tokens=3000, patience=2)
    study = _study(seeds=(0, 1))
    hard = _add(study, "other", 1, -0.05, state="RUNNING")
    assert not pruner.prune(study, _frozen(study, hard))


def test_within_the_pooled_seed_noise_is_kept() -> None:
    study = optuna.create_study(direction="minimize")
    for seed, d in ((0, -0.3), (1, 0.3)):  # "noisy" candidate: deltas spread 0.42 sd
        _add(study, "uniform", seed, 0.0, baseline=True)
        _add(study, "noisy", seed, d)
    close = _add(study, "close", 0, 0.0, state="RUNNING")  # 0.3 behind the best: < 2 sd
    assert not PairedPruner(3000, patience=2).prune(study, _frozen(study, close))
    far = _add(study, "far", 0, 1.5, state="RUNNING")
    assert PairedPruner(3000, patience=2).prune(study, _frozen(study, far))


def test_patience_needs_that_many_bad_evals_in_a_row() -> None:
    study = _study()
    late = _add(study, "late", 0, lambda s: 0.2 if s >= 8000 else -0.05, state="RUNNING")
    assert not PairedPruner(3000, patience=2).prune(study, _frozen(study, late))
    assert PairedPruner(3000, patience=1).prune(study, _frozen(study, late))


def test_no_baseline_value_no_verdict_and_the_baseline_is_never_pruned() -> None:
    study = optuna.create_study(direction="minimize")
    _add(study, "uniform", 0, 0.0, baseline=True, state="RUNNING", steps=[1000, 2000])
    _add(study, "good", 0, -0.05)
    ahead = _add(study, "ahead", 0, 0.5, state="RUNNING")  # its baseline is behind it
    assert not PairedPruner(3000).prune(study, _frozen(study, ahead))
    ctrl = study.get_trials()[0]
    assert not PairedPruner(0, patience=1).prune(study, ctrl)


def test_maximize_flips_the_sign() -> None:
    study = optuna.create_study(direction="maximize")
    _add(study, "uniform", 0, 0.0, baseline=True)
    _add(study, "good", 0, 0.05)
    low = _add(study, "low", 0, -0.3, state="RUNNING")
    assert PairedPruner(3000).prune(study, _frozen(study, low))


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"patience": 0}, "patience"),
        ({"patience": 1.5}, "patience"),
        ({"margin_sds": -1}, "margin_sds"),
        ({"prior_sd": 0}, "prior_sd"),
        ({"grace_tokens": -1}, "grace_tokens"),
    ],
)
def test_bad_options_name_themselves(kw, needle) -> None:
    with pytest.raises(ValueError, match=needle):
        PairedPruner(**kw)


def test_it_survives_pickling() -> None:
    import pickle

    p = pickle.loads(pickle.dumps(PairedPruner(100, patience=3, margin_sds=1.5, prior_sd=0.01)))
    assert (p._grace, p._patience, p._margin, p._prior) == (100, 3, 1.5, 0.01)


def test_tied_candidates_are_rarely_pruned() -> None:
    # 15 candidates no different from uniform, 2 seeds, deltas N(0, 0.02) per seed (fixed over
    # the curve, as a seed's luck is): judged against the best of 14 others, a plain "worse
    # than the best single trial by 2 sd" rule pruned about half; the incumbent's mean with the
    # winner's-curse margin prunes few (6% over these 8 draws; 10% at margin_sds 2).
    import numpy as np

    pruned = total = 0
    for rep in range(8):
        rng = np.random.default_rng(rep)
        study = optuna.create_study(direction="minimize")
        for seed in (0, 1):
            _add(study, "uniform", seed, 0.0, baseline=True)
        luck = {(c, s): float(rng.normal(0, 0.02)) for c in range(15) for s in (0, 1)}
        trials = []
        for (c, s), d in luck.items():
            trials.append(_add(study, f"c{c}", s, d, state="RUNNING"))
        for t in trials:
            total += 1
            pruned += PairedPruner(3000, patience=2).prune(study, _frozen(study, t))
    assert pruned / total <= 0.08, pruned / total


@given(
    st.lists(
        st.lists(st.floats(-1, 1, allow_nan=False), min_size=1, max_size=4)
        | st.builds(lambda n: [0.0] * n, st.integers(1, 3)),
        min_size=1,
        max_size=5,
    )
)
@settings(max_examples=60, deadline=None)
def test_the_pruner_and_the_race_judge_with_the_same_block_design_noise(groups) -> None:
    # one noise model for both: the two-way fit of the values (uniform on every seed)
    import pandas as pd

    from tlmsearch.evidence.racing import race_noise as noise_of
    from tlmsearch.search.sampling.paired_pruner import _pooled_sd

    rows = [(f"c{i}", s, 0, d) for i, g in enumerate(groups) for s, d in enumerate(g)]
    frame = pd.DataFrame(rows, columns=["candidate", "seed", "number", "v"])
    seeds = sorted({s for _, s, _, _ in rows})
    frame = pd.concat([frame, pd.DataFrame({"candidate": "uniform", "seed": seeds, "v": 0.0})])
    frame["state"] = "COMPLETE"
    frame["is_baseline"] = frame["candidate"] == "uniform"
    race_noise = noise_of(frame.reset_index(drop=True), "v", "candidate", None)
    pruner_noise = _pooled_sd(rows)
    if race_noise is None:
        assert pruner_noise is None
    else:
        assert pruner_noise == pytest.approx(race_noise.sd)
