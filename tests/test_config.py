"""Study YAML: validation, error messages that name the path, overrides, shipped studies."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from isolation import recursion_limit

from tlmsearch import config
from tlmsearch.config import apply_overrides, load_study, study_from_mapping
from tlmsearch.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

TINY = {
    "name": "tiny",
    "space": "paper",
    "model": {"n_layer": 2, "d_model": 32, "n_head": 2, "d_ff": 64, "multiple_of": 8},
    "data": {"tokenizer": {"kind": "bytes"}},
}


def _write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def _problems(tmp_path: Path, data: object, overrides: tuple[str, ...] = ()) -> str:
    with pytest.raises(ConfigError) as info:
        load_study(_write(tmp_path, data), overrides)
    return str(info.value)


@pytest.mark.parametrize(
    "name",
    [
        "quickstart",
        "paper_440m",
        "race",
        "paper_grid",
        "paper_blocks",
        "paper_ladder",
        "attention_depth",
    ],
)
def test_shipped_studies_are_valid(name: str) -> None:
    cfg = load_study(ROOT / "studies" / f"{name}.yaml")
    assert cfg.name == name
    assert cfg.candidates()[0] == {"shape": "uniform"}
    assert cfg.model.d_ff_uniform % cfg.model.multiple_of == 0


def test_config_is_frozen_and_round_trips(tmp_path: Path) -> None:
    cfg = load_study(_write(tmp_path, TINY))
    with pytest.raises(Exception, match="frozen"):
        cfg.name = "other"  # type: ignore[misc]
    again = study_from_mapping(yaml.safe_load(cfg.to_yaml()))
    assert again == cfg
    assert cfg.vocab_size == 256


def test_mlp_ratio_gives_a_rounded_uniform_width(tmp_path: Path) -> None:
    data = {
        **TINY,
        "model": {"n_layer": 2, "d_model": 48, "n_head": 2, "mlp_ratio": 2.7, "multiple_of": 16},
    }
    cfg = load_study(_write(tmp_path, data))
    assert cfg.model.d_ff_uniform == 128  # 2.7 * 48 = 129.6 -> 8 units of 16


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["model"].update(n_layr=3), "model.n_layr: unknown key; valid keys here:"),
        (lambda d: d["model"].update(n_layer="two"), "model.n_layer: 'two' is invalid"),
        (lambda d: d.update(search={"pruner": "mediam"}), "search.pruner: 'mediam' is invalid"),
        (
            lambda d: d.update(
                space={"dimensions": {"shape": {"type": "categorical", "choices": ["zigzag"]}}}
            ),
            "space.dimensions: ",
        ),
        (lambda d: d["model"].update(d_ff=60), "model: d_ff (60) must be a multiple of"),
        (lambda d: d["model"].update(n_head=3), "model: d_model (32) must be divisible"),
        (lambda d: d.update(name="bad name!"), "name: 'bad name!' is invalid"),
        (lambda d: d.update(search={"seeds": [1, 1]}), "search.seeds"),
        (lambda d: d.update(train={"tokens": 100, "warmup_tokens": 200}), "train: warmup_tokens"),
        (
            lambda d: d.update(objectives=[{"metric": "val_bpb"}, {"metric": "tokens_per_s"}]),
            "cannot prune several objectives",
        ),
        (lambda d: d.update(space="continuous"), "search.sampler is grid but the space is"),
        (lambda d: d.update(space="nowhere"), "space: 'nowhere' not found"),
        (lambda d: d.pop("model"), "model: required but missing"),
        (lambda d: d["model"].update(hope={"levels": 3, "periods": [1, 2]}), "model.hope"),
    ],
)
def test_bad_studies_name_the_yaml_path(tmp_path: Path, mutate, needle: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(TINY))
    mutate(data)
    assert needle in _problems(tmp_path, data)


def test_impossible_widths_name_the_candidate_and_the_fix(tmp_path: Path) -> None:
    data = {**TINY, "model": {**TINY["model"], "d_ff": 64, "multiple_of": 32}}
    msg = _problems(tmp_path, data)
    assert "cannot be met for model" in msg and "1.75->0.25" in msg and "lower multiple_of" in msg


def test_target_model_is_checked_too(tmp_path: Path) -> None:
    data = {
        **TINY,
        "target": {"n_layer": 24, "d_model": 64, "n_head": 2, "d_ff": 64, "multiple_of": 64},
    }
    assert "cannot be met for target" in _problems(tmp_path, data)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "the file is empty"),
        ("name: [unclosed", "not valid YAML at line 1"),
        ("- a\n- b\n", "expected a mapping of sections"),
    ],
)
def test_unreadable_files(tmp_path: Path, text: str, needle: str) -> None:
    assert needle in _problems(tmp_path, text)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="study file not found"):
        load_study(tmp_path / "nope.yaml")


def test_overrides_are_typed_and_validated(tmp_path: Path) -> None:
    path = _write(tmp_path, TINY)
    cfg = load_study(path, ["search.pruner=none", "train.tokens=500000", "search.seeds=[0, 1]"])
    assert cfg.search.pruner == "none" and cfg.train.tokens == 500000
    assert cfg.search.seeds == [0, 1]
    assert "--set 'oops'" in _problems(tmp_path, TINY, ("oops",))
    assert "search.pruner: 'mediam'" in _problems(tmp_path, TINY, ("search.pruner=mediam",))
    assert "model.colour: unknown key" in _problems(tmp_path, TINY, ("model.colour=red",))
    assert "train.tokens: 'many'" in _problems(tmp_path, TINY, ("train.tokens=many",))
    assert "name is 'tiny', not a section" in _problems(tmp_path, TINY, ("name.x=1",))
    assert "train: warmup_tokens (50000) must be below tokens (5000)" in _problems(
        tmp_path, TINY, ("train.tokens=5000",)
    )


def test_apply_overrides_creates_sections() -> None:
    assert apply_overrides({}, ["ray.address=auto"]) == {"ray": {"address": "auto"}}


def test_flat_candidates_are_the_baseline_not_a_second_run(tmp_path: Path) -> None:
    data = {**TINY, "space": "blocks", "model": {**TINY["model"], "n_layer": 6}}
    cfg = load_study(_write(tmp_path, data))
    cands = cfg.candidates()
    assert cands[0] == {"shape": "uniform"}
    assert {"shape": "blocks", "preset": "uniform"} not in cands
    assert len(cands) == 13  # baseline + 3 presets x 2 x 2 boundaries
    no_baseline = load_study(_write(tmp_path, {**data, "search": {"baseline": False}}))
    assert {"shape": "blocks", "preset": "uniform"} in no_baseline.candidates()


def test_training_process_env() -> None:
    from tlmsearch.config import TrainConfig

    assert TrainConfig().process_env() == {"THP_MEM_ALLOC_ENABLE": "1"}
    assert TrainConfig(thp=False).process_env() == {}


def test_compile_accepts_yaml_booleans(tmp_path: Path) -> None:
    # a bare `off` is False in YAML 1.1; it must still mean "off"
    assert load_study(_write(tmp_path, TINY), ["train.compile=off"]).train.compile == "off"
    assert load_study(_write(tmp_path, TINY), ["train.compile=on"]).train.compile == "on"


def test_an_invalid_candidate_is_an_input_error_not_a_crash(tmp_path: Path) -> None:
    data = {
        **TINY,
        "space": {
            "dimensions": {
                "shape": {"type": "categorical", "choices": ["cosine"]},
                "r_start": {"type": "float", "low": 1.5, "high": 2.5, "step": 0.5},
            }
        },
    }
    msg = _problems(tmp_path, data)  # r_start 2.0 leaves r_end = 0
    assert "candidate cosine 2->0 cannot be met" in msg and "r_end" in msg


def test_candidates_with_identical_proxy_widths_train_once(tmp_path: Path) -> None:
    # At 4 layers the blocks boundaries b1/b2 all round to the same split: 13 candidates,
    # 4 distinct width vectors (uniform + one per preset).
    data = {**TINY, "space": "blocks", "model": {**TINY["model"], "n_layer": 4}}
    cfg = load_study(_write(tmp_path, data))
    assert len(cfg.candidates()) == 13
    trainings = cfg.trainings()
    assert len(trainings) == 4
    assert trainings[0].candidate == {"shape": "uniform"} and not trainings[0].stands_for
    assert [len(t.stands_for) for t in trainings[1:]] == [3, 3, 3]
    assert len({t.widths for t in trainings}) == 4
    for t in trainings:  # every candidate a training stands for has exactly its widths
        assert {cfg.model.plan(c).widths for c in t.all} == {t.widths}
    assert sum(len(t.all) for t in trainings) == 13  # none lost, none twice


def test_candidates_with_distinct_widths_are_not_grouped(tmp_path: Path) -> None:
    model = {**TINY["model"], "n_layer": 8, "d_ff": 512}
    cfg = load_study(_write(tmp_path, {**TINY, "model": model}))
    assert [t.candidate for t in cfg.trainings()] == cfg.candidates()


def _token_study(tmp_path: Path, **extra: object) -> dict:
    import numpy as np

    np.arange(4096, dtype=np.uint16).tofile(tmp_path / "train.bin")
    np.arange(512, dtype=np.uint16).tofile(tmp_path / "val.bin")
    data = {"sources": [str(tmp_path / "train.bin"), str(tmp_path / "val.bin")]}
    return {**TINY, "data": {**data, "token_vocab_size": 4096}, **extra}


def test_val_bpb_on_token_files_without_bytes_is_refused_before_training(tmp_path: Path) -> None:
    msg = _problems(tmp_path, _token_study(tmp_path))
    assert "objectives: val_bpb needs the UTF-8 bytes" in msg and "bytes_per_token" in msg
    # other objectives, or a byte count per token beside the files, are fine
    load_study(_write(tmp_path, _token_study(tmp_path, objectives=[{"metric": "val_loss"}])))
    (tmp_path / "meta.json").write_text('{"vocab_size": 4096, "bytes_per_token": 3.9}')
    load_study(_write(tmp_path, _token_study(tmp_path)))


def test_run_dirs_frozen_before_divergence_nats_still_load(tmp_path: Path) -> None:
    # study.yaml of older runs holds train.divergence_factor: resume and export must read it
    cfg = load_study(_write(tmp_path, {**TINY, "train": {"divergence_factor": 3.0}}))
    assert cfg.train.divergence_nats == 1.5


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda d: d["model"].update(n_head=2**20), "model.n_head: 1048576 is invalid"),
        (lambda d: d["model"].update(multiple_of=2**40), "model.multiple_of: 1099511627776 is"),
        (
            lambda d: d["model"].update(d_ff=None, d_model=2**16, n_head=2**8, mlp_ratio=40),
            "model: d_ff = mlp_ratio * d_model = 2621440 is above 1048576; lower mlp_ratio",
        ),
        (lambda d: d["model"].update(titans={"memory_depth": 10**9}), "model.titans.memory_d"),
        (lambda d: d["model"].update(hope={"levels": 10**6}), "model.hope.levels: 1000000 is"),
        (lambda d: d["model"].update(rope_theta=float("nan")), "model.rope_theta: nan is inval"),
        (lambda d: d["data"].update(val_tokens=2**40), "data.val_tokens: 1099511627776 is"),
        (lambda d: d["data"]["tokenizer"].update(vocab_size=2**30), "data.tokenizer.vocab_size"),
        (lambda d: d.update(train={"batch_tokens": 2**40}), "train.batch_tokens: 10995116277"),
        (lambda d: d.update(train={"betas": [0.9, 1.5]}), "train: betas must lie in [0, 1)"),
        (lambda d: d.update(search={"sampler_seed": -1}), "search.sampler_seed: -1 is invalid"),
        (lambda d: d.update(search={"n_trials": 10**9}), "search.n_trials: 1000000000 is inv"),
        (lambda d: d.update(ray={"num_cpus": 10**9}), "ray.num_cpus: 1000000000 is invalid"),
    ],
)
def test_every_size_has_a_bound(tmp_path: Path, mutate, needle: str) -> None:
    data = yaml.safe_load(yaml.safe_dump(TINY))
    mutate(data)
    assert needle in _problems(tmp_path, data)


def test_n_layer_is_bounded_where_the_model_is_validated() -> None:
    # (a whole study with 2**63 layers is in test_cli.py, under a memory cap: it used to
    # allocate until the machine ran out of memory)
    from pydantic import ValidationError

    from tlmsearch.config import ModelConfig

    with pytest.raises(ValidationError, match="less than or equal to 1024"):
        ModelConfig(n_layer=9223372036854775808, d_model=32, n_head=2, d_ff=64, multiple_of=8)
    assert ModelConfig(n_layer=1024, d_model=32, n_head=2, d_ff=64).n_layer == 1024


def test_unreadable_values_in_overrides_are_input_errors(tmp_path: Path) -> None:
    msg = _problems(tmp_path, TINY, ("train.tokens=" + "1" * 5000,))
    assert "the value cannot be read: a number of more than 4300 digits" in msg
    # at a known limit: a compile earlier in this process may have lifted it (inductor: 2,000)
    with recursion_limit(1000):
        msg = _problems(tmp_path, TINY, ("model.n_layer=" + "[" * 1200 + "]" * 1200,))
    assert "nested deeper than Python can read" in msg


@pytest.mark.parametrize("source", ["~nosuchuser/train.npy", "x" * 300 + ".npy"])
def test_token_paths_that_name_no_file_are_not_a_crash(tmp_path: Path, source: str) -> None:
    # validate looks for the byte counts of token files; a path that cannot exist has none
    cfg = load_study(_write(tmp_path, {**TINY, "data": {"sources": [source]}}))
    assert cfg.data.sources == [source]


def test_a_space_named_like_another_users_home_is_just_not_found(tmp_path: Path) -> None:
    assert "space: '~nosuchuser/paper' not found" in _problems(
        tmp_path, {**TINY, "space": "~nosuchuser/paper"}
    )


@pytest.mark.parametrize(
    "override",
    [
        "train.tokens=true",
        "model.n_layer=false",
        "search.concurrency=true",
        "train.lr=true",
        "search.seeds=[0, true]",
        "search.racing.max_seeds=true",
    ],
)
def test_a_boolean_where_a_number_goes_is_refused(tmp_path: Path, override: str) -> None:
    # pydantic alone reads YAML `true` as 1 in an int field: a typo that trains something else
    field = override.split("=")[0]
    text = _problems(tmp_path, {**TINY, "search": {"seeds": [0, 1]}}, (override,))
    assert field.split(".")[-1] in text and "is a boolean, which this field does not take" in text


def test_boolean_fields_still_take_booleans(tmp_path: Path) -> None:
    cfg = load_study(_write(tmp_path, TINY), ("search.baseline=false",))
    assert cfg.search.baseline is False


# -------------------------------------------------------------------------------------------------
# Multi-worker trials


@given(st.integers(1, 16), st.sampled_from([0.5, 1.0, 2.0, 8.0]), st.sampled_from([0.0, 1.0]))
def test_a_trial_reserves_its_workers_resources(n: int, cpus: float, gpus: float) -> None:
    """Per worker given: the trial's totals are N times it; per trial given: N divides it."""
    from tlmsearch.config import RayConfig

    rc = RayConfig(workers_per_trial=n, cpus_per_worker=cpus, gpus_per_worker=gpus)
    assert (rc.cpus_per_trial, rc.gpus_per_trial) == (n * cpus, n * gpus)
    back = RayConfig(workers_per_trial=n, cpus_per_trial=n * cpus, gpus_per_trial=n * gpus)
    assert (back.cpus_per_worker, back.gpus_per_worker) == pytest.approx((cpus, gpus))
    assert RayConfig.model_validate(rc.model_dump()) == rc  # study.yaml reads back the same


def test_one_worker_per_trial_means_what_it_meant() -> None:
    cfg = study_from_mapping({**TINY, "ray": {"cpus_per_trial": 3, "gpus_per_trial": 0.5}})
    assert cfg.ray.workers_per_trial == 1
    assert (cfg.ray.cpus_per_worker, cfg.ray.gpus_per_worker) == (3, 0.5)


@pytest.mark.parametrize(
    ("ray", "train", "expected"),
    [
        ({"workers_per_trial": 2, "gpus_per_trial": 1}, {}, r"ray\.gpus_per_worker \(0\.5\)"),
        ({"workers_per_trial": 2, "gpus_per_worker": 2}, {}, r"must be 0 or 1"),
        (
            {"workers_per_trial": 2, "cpus_per_trial": 3, "cpus_per_worker": 1},
            {},
            r"ray\.cpus_per_trial \(3\) is not ray\.workers_per_trial \(2\) x ray\.cpus_per_w",
        ),
        (  # 4096 tokens of 256: 16 sequences per step, not a multiple of 3
            {"workers_per_trial": 3},
            {"batch_tokens": 4096},
            r"ray\.workers_per_trial \(3\) must divide the 16 sequences .*batch_tokens: 4608",
        ),
    ],
)
def test_bad_worker_settings_name_the_field(tmp_path, ray, train, expected) -> None:
    data = {**TINY, "ray": ray, "train": train, "data": {**TINY["data"], "seq_len": 256}}
    assert re.search(expected, _problems(tmp_path, data)), _problems(tmp_path, data)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ("train.lawa_k=1", "train.lawa_k: 1 is invalid: LAWA averages at least 2 checkpoints"),
        ("train.ema_half_life_tokens=0", "train.ema_half_life_tokens: 0 is invalid: an EMA"),
        ("train.ema_half_life_tokens=-5", "train.ema_half_life_tokens: -5 is invalid"),
        ("train.lawa_every_tokens=0", "train.lawa_every_tokens: 0 is invalid"),
        ("train.eval_weights=swa", "train.eval_weights: 'swa'"),
    ],
)
def test_eval_weights_settings_are_checked_naming_the_field(
    tmp_path: Path, override: str, needle: str
) -> None:
    assert needle in _problems(tmp_path, TINY, (override,))


def test_lawa_checkpoints_must_fit_in_the_run(tmp_path: Path) -> None:
    sets = ("train.tokens=100000", "train.eval_weights=lawa", "train.lawa_every_tokens=30000")
    assert "lawa_k * lawa_every_tokens (5 x 30,000 = 150,000) exceeds tokens (100,000)" in (
        _problems(tmp_path, TINY, sets)
    )
    # the same spacing with raw weights, and the default spacing, are fine
    assert load_study(_write(tmp_path, TINY), sets[:1] + sets[2:]).train.eval_weights == "raw"
    cfg = load_study(_write(tmp_path, TINY), sets[:2]).train
    assert cfg.lawa_spacing == 5000 and cfg.ema_half_life == 10_000


def test_parametrization_is_checked_naming_the_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert "train.parametrization: 'mu-p'" in _problems(
        tmp_path, TINY, ("train.parametrization=mu-p",)
    )
    for arch in ("transformer", "titans", "hope_attention", "gated_attention"):
        sets = ("train.parametrization=mup", f"model.arch={arch}", "data.seq_len=128")
        assert load_study(_write(tmp_path, TINY), sets).train.parametrization == "mup"
    # an architecture whose per-layer width reaches more than its MLPs cannot follow the rule
    monkeypatch.setitem(config.WIDTH_SITES, "titans", "the memory MLP")
    sets = ("train.parametrization=mup", "model.arch=titans", "data.seq_len=128")
    problem = _problems(tmp_path, TINY, sets)
    assert "train.parametrization: 'mup' scales MLP hidden widths, but model.arch titans" in (
        problem
    )
    assert "set train.parametrization: standard" in problem
    assert load_study(_write(tmp_path, TINY), sets[1:]).train.parametrization == "standard"


def test_mup_refuses_hf_and_plugins_saying_which_archs_it_supports(tmp_path: Path) -> None:
    sets = ("train.parametrization=mup", "model.arch=hf", "model.hf.model_type=llama")
    problem = _problems(tmp_path, TINY, sets)
    assert (
        "'mup' supports only the built-in architectures (transformer, gated_attention, "
        "titans, hope_attention) today, not model.arch hf"
    ) in " ".join(problem.split())


# A run dir's frozen study.yaml (config/load.py: frozen_study): what every reader of a run takes


def _frozen_dict(tmp_path: Path) -> dict:
    """A run's study.yaml as this version writes it (every section, defaults filled in)."""
    return yaml.safe_load(load_study(_write(tmp_path, TINY)).to_yaml())


def test_a_frozen_study_is_the_study_it_froze(tmp_path: Path) -> None:
    frozen = _frozen_dict(tmp_path)
    cfg = config.frozen_study(frozen)
    assert type(cfg) is config.StudyConfig and cfg == load_study(_write(tmp_path, TINY))


def test_an_older_versions_study_yaml_is_read_without_what_it_no_longer_knows(
    tmp_path: Path,
) -> None:
    # a field since removed, a section since dropped, an option since renamed: each is named,
    # the rest of the study is read as it was, and the dropped keys take their defaults
    frozen = _frozen_dict(tmp_path)
    frozen["search"]["grace_fraction"] = 0.25
    frozen["legacy_report"] = {"theme": "dark"}
    frozen["search"]["pruner"] = "asha"
    frozen["search"]["seeds"] = [3, 4]
    with pytest.warns(config.StudyYamlWarning) as caught:
        cfg = config.frozen_study(frozen, "runs/old/study.yaml")
    assert type(cfg) is config.StudyConfig  # a whole study: status and export can use it
    assert cfg.search.seeds == [3, 4] and cfg.model.n_layer == 2
    assert cfg.search.pruner == config.SearchConfig().pruner  # the model's default, not asha
    (warning,) = caught
    text = str(warning.message)
    assert text.startswith("runs/old/study.yaml: read without ")
    for key in (
        "search.grace_fraction (not a key of this version)",
        "legacy_report (not a key of this version)",
        "search.pruner ('asha': ",
    ):
        assert key in text


def test_a_partial_study_yaml_is_read_section_by_section_with_the_models_defaults() -> None:
    cfg = config.frozen_study({"name": "s", "objectives": [{"metric": "tokens_per_s"}]})
    assert isinstance(cfg, config.PartialStudy) and (cfg.name, cfg.space, cfg.model) == (
        "s",
        None,
        None,
    )
    assert cfg.objectives[0].sense == "maximize"
    assert cfg.stats == config.StatsConfig() and cfg.search == config.SearchConfig()
    assert "seeds" not in cfg.search.model_fields_set  # the readers tell "none named" apart
    empty = config.PartialStudy()  # a run dir without study.yaml
    assert [(o.metric, o.sense) for o in empty.objectives] == [("val_bpb", "minimize")]


def test_what_needs_the_whole_study_says_why_a_study_yaml_is_not_one(tmp_path: Path) -> None:
    path = _write(tmp_path, {"name": "s", "objectives": [{"metric": "val_bpb"}]})
    assert isinstance(config.load_frozen_study(path), config.PartialStudy)
    with pytest.raises(ConfigError, match=r"not a study this version can read: space: "):
        config.load_frozen_study(path, whole=True)
    with pytest.raises(ConfigError, match="study file not found"):
        config.load_frozen_study(tmp_path / "nope.yaml", whole=True)
    assert config.load_frozen_study(tmp_path / "nope.yaml") == config.PartialStudy()
