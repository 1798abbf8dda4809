"""The typed candidate (tlmsearch/widths/candidate.py): frozen, one identity, equal candidates
hash equal, and one layer plan every consumer reads."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tlmsearch.config import ModelConfig
from tlmsearch.widths.candidate import Candidate, plan

values = st.one_of(st.integers(-5, 5), st.floats(0.1, 3.0), st.sampled_from(["cosine", "linear"]))
params = st.dictionaries(
    st.sampled_from(["shape", "r_start", "r_end", "k", "lr.shape", "train.lr", "heads.r_start"]),
    values,
)


@given(params)
def test_identity_is_the_stored_params_json_and_round_trips(p: dict) -> None:
    c = Candidate(p)
    assert c.identity == json.dumps(p, sort_keys=True)  # old run dirs' params_json
    assert Candidate.from_identity(c.identity) == c == p
    for back in (pickle.loads(pickle.dumps(c)), copy.deepcopy(c), copy.copy(c)):
        assert type(back) is Candidate and back == c


@given(params)
def test_equal_candidates_hash_equal(p: dict) -> None:
    as_floats = {k: float(v) if isinstance(v, int) else v for k, v in p.items()}
    a, b = Candidate(p), Candidate(as_floats)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1


def test_a_candidate_is_frozen_and_parses_its_parts() -> None:
    c = Candidate(
        {
            "shape": "cosine",
            "r_start": 1.25,
            "heads.shape": "linear",
            "lr.shape": "cosine",
            "lr.r_start": 1.5,
            "train.lr": 0.01,
        }
    )
    assert c.mlp == {"shape": "cosine", "r_start": 1.25}
    assert c.heads == {"shape": "linear"} and c.settings == {"train.lr": 0.01}
    assert c.profiles == {"lr": {"shape": "cosine", "r_start": 1.5}} and not c.is_baseline
    for change in (
        lambda: c.update(r_start=2),
        lambda: c.pop("shape"),
        lambda: c.clear(),
        lambda: c.__setitem__("k", 1),
        lambda: c.setdefault("k", 1),
    ):
        with pytest.raises(TypeError, match="frozen"):
            change()
    assert Candidate() == {} and Candidate(None) == {}
    with pytest.raises(TypeError, match="mapping"):
        Candidate([("shape", "cosine")])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="JSON object"):
        Candidate.from_identity("[1, 2]")


def test_the_layer_plan_holds_every_per_layer_quantity_and_the_training_key() -> None:
    model = ModelConfig(n_layer=2, d_model=32, n_head=2, d_ff=64)
    uniform = plan(model, {"shape": "uniform"})
    stepped = plan(model, {"shape": "uniform", "lr.shape": "linear", "lr.r_start": 1.5})
    assert uniform.widths == stepped.widths == (64, 64) and uniform.is_baseline
    assert stepped.profiles == {"lr": (1.5, 0.5)} and not stepped.is_baseline
    assert stepped.train_update == {"lr_profile": [1.5, 0.5], "lr_profile_part": "mlp"}
    assert uniform.key != stepped.key  # the same widths trained with other steps: a training
    # a flat profile trains the uniform model the uniform way: one training key
    assert plan(model, {"shape": "uniform", "lr.shape": "uniform"}).key == uniform.key


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@given(st.one_of(st.text(max_size=40), json_values.map(json.dumps)))
def test_a_stored_identity_of_any_text_is_a_candidate_or_a_value_error(text: str) -> None:
    """A trials table or an Optuna attribute edited by hand: never another exception; a
    candidate that parses hashes, and its identity parses back to an equal candidate."""
    try:
        c = Candidate.from_identity(text)
    except ValueError:
        return
    assert isinstance(c, Candidate)
    hash(c)
    again = Candidate.from_identity(c.identity)
    assert again.identity == c.identity


def test_the_identity_column_is_the_one_the_trials_table_and_old_run_dirs_name() -> None:
    from tlmsearch.run_dir.tables import TRIAL_COLUMNS
    from tlmsearch.widths.candidate import IDENTITY

    assert IDENTITY == "params_json" and TRIAL_COLUMNS[IDENTITY] == "str"


def test_the_per_layer_registry_names_every_per_layer_column_of_the_trials_table() -> None:
    """MLP widths, attention heads and each depth profile are LAYERED entries, in that order,
    and the trials table's per-layer columns are exactly theirs."""
    from tlmsearch.run_dir.tables import TRIAL_COLUMNS
    from tlmsearch.widths.profiles import LAYERED, QUANTITIES

    assert list(LAYERED) == ["mlp", "heads", *QUANTITIES]
    assert [e.column for e in LAYERED.values()] == [
        "widths_json",
        "heads_json",
        *(q.column for q in QUANTITIES.values()),
    ]
    assert [e.record for e in LAYERED.values()] == [
        "widths",
        "heads",
        *(q.profile_field for q in QUANTITIES.values()),
    ]
    assert [c for c in TRIAL_COLUMNS if c.endswith("_json") and c != "params_json"] == [
        e.column for e in LAYERED.values()
    ]
    assert LAYERED["mlp"].prefix == "" and LAYERED["heads"].prefix == "heads."
    assert all(LAYERED[q.name].prefix == q.prefix for q in QUANTITIES.values())


layer_lists = st.lists(st.integers(1, 512), min_size=1, max_size=6)


@settings(max_examples=30, deadline=None)  # trials_frame builds a DataFrame: ~0.1 s each
@given(layer_lists, layer_lists, st.lists(st.floats(0.01, 50.0), min_size=1, max_size=6))
def test_a_records_per_layer_lists_land_in_their_registry_columns(widths, heads, lrs) -> None:
    """trials_frame writes each entry's list as JSON of its numbers (ints for capacity, floats
    for multipliers), and realised_start / realised_end from the widths."""
    from tlmsearch.run_dir.tables import trials_frame
    from tlmsearch.widths.profiles import LAYERED

    rec = {
        "params": {"shape": "uniform"},
        "seed": 0,
        "state": "COMPLETE",
        "widths": widths,
        "heads": heads,
        "lr_profile": lrs,
    }
    row = trials_frame([rec]).iloc[0]
    assert json.loads(row[LAYERED["mlp"].column]) == widths
    assert json.loads(row[LAYERED["heads"].column]) == heads
    assert json.loads(row[LAYERED["lr"].column]) == pytest.approx(lrs)
    assert row[LAYERED["init"].column] == ""  # not given: no column value
    mean = sum(widths) / len(widths)
    assert row["realised_start"] == pytest.approx(widths[0] / mean)
    assert row["realised_end"] == pytest.approx(widths[-1] / mean)


@settings(max_examples=30, deadline=None)
@given(
    st.sampled_from(["uniform", "linear", "cosine"]),
    st.floats(1.05, 1.5),
    st.sampled_from(["uniform", "linear"]),
    st.floats(0.6, 1.4),
)
def test_a_plans_layers_are_its_widths_heads_and_non_flat_profiles(shape, r, lr_shape, r_lr):
    from tlmsearch.widths.profiles import LAYERED

    model = ModelConfig(n_layer=4, d_model=64, n_head=4, d_ff=128)
    keys = {"shape": shape, "lr.shape": lr_shape}
    keys.update({"r_start": r} if shape != "uniform" else {})
    keys.update({"lr.r_start": r_lr} if lr_shape != "uniform" else {})
    cand = Candidate(keys)
    p = plan(model, cand)
    layers = p.layers
    assert layers["mlp"] == p.widths and layers["heads"] == p.heads == (4, 4, 4, 4)
    assert ("lr" in layers) == ("lr" in p.profiles)
    if "lr" in layers:
        assert layers["lr"] == p.profiles["lr"] and not LAYERED["lr"].uniform(layers["lr"])
    assert LAYERED["heads"].uniform(layers["heads"]) and "init" not in layers
    assert LAYERED["mlp"].uniform(layers["mlp"]) == (len(set(p.widths)) == 1)
