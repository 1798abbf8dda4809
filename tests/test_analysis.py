"""Per-layer diagnostics: the statistics against a hand computation, every architecture, a zero
MLP, scaling, attention entropy and ablation (exact on uniform attention and a zero projection,
grouped and per-layer heads, the per-head cap), a run's kept weights into analysis.parquet and
analysis_heads.parquet, and ``tlmsearch analyze``."""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from fixtures_run import make_run, make_trials, study_dict
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tlmsearch.analysis import (
    NO_ATTENTION,
    NO_WEIGHTS,
    analyze_run,
    attention_diagnostics,
    layer_diagnostics,
    mlp_sites,
    select_kept,
    validation_windows,
    with_attention,
)
from tlmsearch.analysis.probes import attention_sites
from tlmsearch.cli import app
from tlmsearch.config import ModelConfig, StudyConfig
from tlmsearch.data import prepare_data
from tlmsearch.data.batches import val_windows
from tlmsearch.errors import ConfigError
from tlmsearch.models import build_model
from tlmsearch.run_dir.tables import ANALYSIS_COLUMNS, ANALYSIS_HEAD_COLUMNS, load_run

VOCAB = 256
TINY = dict(n_layer=2, d_model=32, n_head=2, d_ff=64, multiple_of=16, titans={"chunk_size": 4})
CONFIGS = {
    "transformer": {},
    "gated_attention": {},
    "titans": {"titans": {"chunk_size": 4, "with_attention": True}},
    "hope_attention": {"hope": {"levels": 2, "periods": [1, 2]}},
}


def tiny_model(arch: str = "transformer", scale: float = 30.0, seed: int = 0) -> torch.nn.Module:
    """A tiny model whose MLP outputs are scaled up from the init (0.01 std), so that they
    matter: an untrained MLP barely moves the loss."""
    cfg = ModelConfig(arch=arch, **{**TINY, **CONFIGS[arch]})
    model = build_model(cfg, [96, 32], VOCAB, seed=seed)
    with torch.no_grad():
        for block in model.blocks:
            for mlp in block.mlps:
                mlp.w2.weight.mul_(scale)
    return model.eval()


def windows(n: int = 5, seq: int = 16, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, VOCAB, (n * seq + 1,), generator=g).numpy()
    return val_windows(tokens, seq)


@torch.no_grad()
def by_hand(
    model: torch.nn.Module, vx: torch.Tensor, vy: torch.Tensor, ablate: tuple[int, int] | None
) -> tuple[list[tuple[float, float]], float]:
    """Each MLP's (mean cosine, mean norm ratio) with the stream it is added to, and the mean
    loss, computed block by block from the submodules; ``ablate``: this (layer, level) adds 0."""
    x = model.wte(vx)
    rope = model.rotary(vx.size(1))
    stats = []
    for layer, block in enumerate(model.blocks):
        for norm, mixer in zip(block.mixer_norms, block.mixers, strict=True):
            x = x + mixer(norm(x), rope)
        for level, (norm, mlp) in enumerate(zip(block.mlp_norms, block.mlps, strict=True)):
            out = mlp(norm(x))
            if (layer, level) == ablate:
                out = torch.zeros_like(out)
            cos = (out * x).sum(-1) / (out.norm(dim=-1) * x.norm(dim=-1))
            stats.append((cos.mean().item(), (out.norm(dim=-1) / x.norm(dim=-1)).mean().item()))
            x = x + out
    logits = model.lm_head(model.norm_f(x))
    return stats, F.cross_entropy(logits.flatten(0, 1), vy.flatten()).item()


@pytest.mark.parametrize("arch", ["transformer", "hope_attention"])
def test_statistics_equal_a_hand_computation(arch: str) -> None:
    model = tiny_model(arch)
    vx, vy = windows()
    rows = layer_diagnostics(model, vx, vy, batch=2)  # 5 windows: batches of 2, 2 and 1
    stats, intact = by_hand(model, vx, vy, None)
    sites = [(layer, level) for layer, level, _, _ in mlp_sites(model)]
    assert [(r["layer"], r["level"]) for r in rows] == sites
    got = torch.tensor([[r["cosine"], r["rel_norm"]] for r in rows])
    assert torch.allclose(got, torch.tensor(stats), atol=1e-5)
    ablations = [by_hand(model, vx, vy, site)[1] - intact for site in sites]
    assert torch.allclose(
        torch.tensor([r["ablation_nats"] for r in rows]), torch.tensor(ablations), atol=1e-5
    )
    assert max(abs(a) for a in ablations) > 1e-3  # the MLPs matter, so the check has teeth
    assert all(math.isclose(r["val_loss"], intact, abs_tol=1e-5) for r in rows)
    assert {r["val_tokens"] for r in rows} == {vy.numel()}


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_every_architecture_gives_one_row_per_mlp(arch: str) -> None:
    model = tiny_model(arch, scale=1.0)
    vx, vy = windows(n=3)
    rows = layer_diagnostics(model, vx, vy, batch=4)
    levels = 2 if arch == "hope_attention" else 1
    assert [(r["layer"], r["level"]) for r in rows] == [
        (layer, level) for layer in range(2) for level in range(levels)
    ]
    assert [r["width"] for r in rows] == [96] * levels + [32] * levels
    for r in rows:
        assert all(math.isfinite(r[k]) for k in ("cosine", "rel_norm", "ablation_nats"))
        assert -1 <= r["cosine"] <= 1 and r["rel_norm"] > 0


def test_a_zero_mlp_costs_nothing_and_writes_nothing() -> None:
    model = tiny_model()
    with torch.no_grad():
        model.blocks[1].mlps[0].w2.weight.zero_()
    vx, vy = windows()
    zero = layer_diagnostics(model, vx, vy, batch=3)[1]
    assert zero["ablation_nats"] == 0.0 and zero["rel_norm"] == 0.0 and zero["cosine"] == 0.0


@pytest.fixture(scope="module")
def base() -> tuple[torch.nn.Module, list[dict]]:
    model = tiny_model()
    return model, layer_diagnostics(model, *windows(), batch=5)


@settings(max_examples=8, deadline=None)
@given(c=st.floats(0.1, 10.0))
def test_scaling_the_last_mlp_scales_its_norm_ratio_only(base, c: float) -> None:
    """The last MLP's output times c: its rel_norm times c, its cosine the same, and every
    earlier MLP reads the same stream as before."""
    model, base_rows = copy.deepcopy(base[0]), base[1]
    with torch.no_grad():
        model.blocks[-1].mlps[-1].w2.weight.mul_(c)
    rows = layer_diagnostics(model, *windows(), batch=5)
    *earlier, last = rows
    assert math.isclose(last["rel_norm"], c * base_rows[-1]["rel_norm"], rel_tol=1e-5)
    assert math.isclose(last["cosine"], base_rows[-1]["cosine"], rel_tol=1e-4, abs_tol=1e-6)
    for new, old in zip(earlier, base_rows, strict=False):
        assert math.isclose(new["rel_norm"], old["rel_norm"], rel_tol=1e-6)


def test_bad_arguments_are_refused(base) -> None:
    vx, vy = windows()
    with pytest.raises(ValueError, match="batch"):
        layer_diagnostics(base[0], vx, vy, batch=0)
    with pytest.raises(ValueError, match="vx, vy"):
        layer_diagnostics(base[0], vx, vy[:, :-1], batch=2)


# -------------------------------------------------------------------------------------------------
# Attention

SEQ = 16
UNIFORM_ENTROPY = math.lgamma(SEQ + 1) / SEQ  # mean over t < 16 of log(t + 1)


def headed(**kw: Any) -> torch.nn.Module:
    """The tiny transformer with grouped-query attention and per-layer heads (4 then 2 query
    heads, 2 then 1 key/value heads) unless ``kw`` says otherwise."""
    cfg = dict(n_head=4, n_kv_head=2, layer_heads=[4, 2])
    model = build_model(ModelConfig(**{**TINY, **cfg, **kw}), [96, 32], VOCAB, seed=0)
    with torch.no_grad():
        for _, attn in attention_sites(model):
            attn.qkv.weight.mul_(10)  # sharper than the init's near-uniform attention
            attn.proj.weight.mul_(30)  # and worth something to the loss
    return model.eval()


@torch.no_grad()
def nll(model: torch.nn.Module, vx: torch.Tensor, vy: torch.Tensor) -> float:
    return F.cross_entropy(model(vx).flatten(0, 1), vy.flatten()).item()


def test_uniform_attention_has_the_exact_entropy() -> None:
    """q = 0 in every layer: each position t attends evenly to its t + 1 keys, entropy
    log(t + 1), so the layer's mean over positions is lgamma(T + 1) / T for every head."""
    model = headed()
    with torch.no_grad():
        for _, attn in attention_sites(model):
            attn.qkv.weight[: attn.n_head * attn.head_dim].zero_()
    a = attention_diagnostics(model, *windows(), batch=2)
    for r in a.layers:
        for key in ("attn_entropy_nats", "attn_entropy_min_nats", "attn_entropy_max_nats"):
            assert math.isclose(r[key], UNIFORM_ENTROPY, rel_tol=1e-6), (r["layer"], key)
    assert all(math.isclose(h["entropy_nats"], UNIFORM_ENTROPY, rel_tol=1e-6) for h in a.heads)


def test_grouped_and_per_layer_heads() -> None:
    model = headed()
    vx, vy = windows()
    a = attention_diagnostics(model, vx, vy, batch=2)
    assert [(r["layer"], r["heads"], r["kv_heads"]) for r in a.layers] == [(0, 4, 2), (1, 2, 1)]
    assert [(h["layer"], h["head"], h["kv_head"]) for h in a.heads] == [
        (0, 0, 0),
        (0, 1, 0),
        (0, 2, 1),
        (0, 3, 1),
        (1, 0, 0),
        (1, 1, 0),
    ]
    for r in a.layers:
        own = [h["entropy_nats"] for h in a.heads if h["layer"] == r["layer"]]
        assert math.isclose(r["attn_entropy_nats"], sum(own) / len(own), rel_tol=1e-9)
        assert r["attn_entropy_min_nats"] == min(own) and r["attn_entropy_max_nats"] == max(own)
        assert 0 < r["attn_entropy_min_nats"] < r["attn_entropy_max_nats"] < UNIFORM_ENTROPY
    # the ablations against the same model with the weights zeroed: proj's columns (a head) or
    # the whole proj (the layer), whose output is then exactly 0
    intact = nll(model, vx, vy)
    for (layer, attn), r in zip(attention_sites(model), a.layers, strict=True):
        zeroed = copy.deepcopy(model)
        with torch.no_grad():
            zeroed.blocks[layer].mixers[0].proj.weight.zero_()
        assert r["attn_ablation_nats"] == pytest.approx(nll(zeroed, vx, vy) - intact, abs=1e-5)
        hs = attn.head_dim
        for h in (h for h in a.heads if h["layer"] == layer):
            zeroed = copy.deepcopy(model)
            with torch.no_grad():
                cols = slice(h["head"] * hs, (h["head"] + 1) * hs)
                zeroed.blocks[layer].mixers[0].proj.weight[:, cols] = 0
            want = nll(zeroed, vx, vy) - intact
            assert h["ablation_nats"] == pytest.approx(want, abs=1e-5)
    assert max(abs(r["attn_ablation_nats"]) for r in a.layers) > 1e-3  # the check has teeth


def test_a_zero_attention_costs_exactly_nothing() -> None:
    model = headed()
    with torch.no_grad():
        model.blocks[1].mixers[0].proj.weight.zero_()
    a = attention_diagnostics(model, *windows(), batch=3)
    assert a.layers[1]["attn_ablation_nats"] == 0.0
    assert [h["ablation_nats"] for h in a.heads if h["layer"] == 1] == [0.0, 0.0]
    assert a.layers[0]["attn_ablation_nats"] != 0.0


def test_per_head_ablations_stop_at_the_cap() -> None:
    model = headed()  # 6 heads in all
    vx, vy = windows(n=2)
    for cap, measured in ((6, True), (5, False), (0, False)):
        a = attention_diagnostics(model, vx, vy, batch=2, max_head_ablations=cap)
        assert len(a.heads) == 6
        assert all(math.isfinite(h["entropy_nats"]) for h in a.heads)
        assert all(math.isfinite(h["ablation_nats"]) == measured for h in a.heads), cap
        assert all(math.isfinite(r["attn_ablation_nats"]) for r in a.layers)


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_the_analysis_leaves_the_model_as_it_was(arch: str) -> None:
    model = tiny_model(arch, scale=1.0)
    vx, vy = windows(n=2)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(vx)
    a = attention_diagnostics(model, vx, vy, batch=2)
    layer_diagnostics(model, vx, vy, batch=2)
    assert [r["layer"] for r in a.layers] == [0, 1]
    after = model.state_dict()
    assert state.keys() == after.keys()
    assert all(torch.equal(state[k], after[k]) for k in state)
    with torch.no_grad():
        assert torch.equal(model(vx), before)
    hooked = [
        name for name, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks
    ]
    assert hooked == [] and not model.training


def test_a_model_without_attention_has_no_attention_rows() -> None:
    cfg = ModelConfig(
        arch="titans", **{**TINY, "titans": {"chunk_size": 4, "with_attention": False}}
    )
    model = build_model(cfg, [96, 32], VOCAB, seed=0).eval()
    assert attention_diagnostics(model, *windows(n=2), batch=2) == ([], [])
    assert "not hf or plugin attention" in NO_ATTENTION


def test_attention_goes_on_each_layers_first_row() -> None:
    mlp = [{"layer": layer, "level": level} for layer in (0, 1) for level in (0, 1)]
    attn = [{"layer": 0, "heads": 4}, {"layer": 2, "heads": 2}]
    assert with_attention(mlp, attn) == [
        {"layer": 0, "level": 0, "heads": 4},
        {"layer": 0, "level": 1},
        {"layer": 1, "level": 0},
        {"layer": 1, "level": 1},
        {"layer": 2, "level": 0, "heads": 2},  # attention without an MLP row: a row of its own
    ]


# -------------------------------------------------------------------------------------------------
# A run's kept weights

N_LAYER = study_dict()["model"]["n_layer"]


def keep(folder: Path, number: int, seed: int, params: dict[str, Any], model: dict) -> dict:
    """Kept weights as the checkpoints contract writes them: state.pt and meta.json."""
    cfg = ModelConfig(**{**model, "vocab_size": VOCAB})
    widths = list(cfg.plan(params).widths)
    folder.mkdir(parents=True)
    net = build_model(cfg, widths, VOCAB, seed=seed + 100)  # not the init: "trained" weights
    torch.save({"model": net.state_dict()}, folder / "state.pt")
    meta = {
        "number": number,
        "candidate": params,
        "seed": seed,
        "widths": widths,
        "tokens": 4000,
        "model": cfg.model_dump(mode="json"),
        "arch": cfg.arch,
    }
    (folder / "meta.json").write_text(json.dumps(meta))
    return {**meta, "path": str(folder)}


def load(path: Any, device: str = "cpu") -> tuple[torch.nn.Module, dict]:
    meta = json.loads((Path(path) / "meta.json").read_text())
    cfg = ModelConfig(**meta["model"])
    model = build_model(cfg, meta["widths"], cfg.vocab_size)
    model.load_state_dict(torch.load(Path(path) / "state.pt")["model"])
    return model.to(device), meta


@pytest.fixture
def kept_run(tmp_path: Path) -> tuple[Path, list[dict]]:
    """A run dir (uniform #0 and cosine 1.5 #1, seed 0) with both models' weights kept, and
    its data: a token file, so the CLI can prepare the run's validation windows."""
    tokens = np.random.default_rng(0).integers(0, VOCAB, size=4000).astype(np.uint16)
    np.save(tmp_path / "tokens.npy", tokens)
    # val_loss: token files carry no byte count for bits per byte
    study = study_dict(shapes=("cosine",), seeds=(0,), objectives=[{"metric": "val_loss"}])
    study["data"] = {
        "sources": [str(tmp_path / "tokens.npy")],
        "token_vocab_size": VOCAB,
        "seq_len": 16,
        "val_tokens": 161,
        "cache_dir": str(tmp_path / "cache"),
    }
    trials, curves = make_trials(shapes=("cosine",), ratios=(1.5,), seeds=(0,))
    run = make_run(tmp_path / "run", study=study, trials=trials, curves=curves)
    kept = [
        keep(run / "kept" / f"trial-{t['number']}", t["number"], 0, t["params"], study["model"])
        for t in trials
    ]
    return run, kept


def test_analyze_run_writes_one_row_per_trial_and_layer(kept_run) -> None:
    run, kept = kept_run
    vx, vy = windows(n=4)
    df, heads = analyze_run(run, kept, load, val=(vx, vy), batch=3)
    assert list(df.columns) == list(ANALYSIS_COLUMNS)
    assert list(heads.columns) == list(ANALYSIS_HEAD_COLUMNS)
    assert len(df) == 2 * N_LAYER
    assert df.groupby("number")["layer"].apply(list).to_dict() == {
        0: list(range(N_LAYER)),
        1: list(range(N_LAYER)),
    }
    first = df.groupby("number").first()
    assert first["trial_id"].tolist() == ["t0000", "t0001"]  # from the run's trials table
    assert first["candidate"].tolist() == ["uniform", "cosine 1.5->0.5"]
    assert first["is_baseline"].tolist() == [True, False]
    assert first["arch"].tolist() == ["transformer"] * 2
    for entry in kept:
        sub = df[df["number"] == entry["number"]]
        assert sub["width"].tolist() == entry["widths"]
        want = layer_diagnostics(load(entry["path"])[0], vx, vy, batch=4)
        assert np.allclose(sub["ablation_nats"], [r["ablation_nats"] for r in want], atol=1e-6)
        assert np.allclose(sub["cosine"], [r["cosine"] for r in want], atol=1e-6)
        attn = attention_diagnostics(load(entry["path"])[0], vx, vy, batch=4)
        for col in ("attn_entropy_nats", "attn_ablation_nats", "heads", "kv_heads"):
            assert np.allclose(sub[col].astype(float), [r[col] for r in attn.layers], atol=1e-6)
        own = heads[heads["number"] == entry["number"]]
        assert np.allclose(own["entropy_nats"], [h["entropy_nats"] for h in attn.heads], atol=1e-6)
        assert np.allclose(
            own["ablation_nats"], [h["ablation_nats"] for h in attn.heads], atol=1e-6
        )
    assert (df["level"] == 0).all() and (df["val_tokens"] == vy.numel()).all()
    n_head = study_dict()["model"]["n_head"]
    assert len(heads) == 2 * N_LAYER * n_head and (heads["val_tokens"] == vy.numel()).all()
    assert heads["ablation_nats"].notna().all()  # few heads: each one ablated
    back = load_run(run)
    assert back.analysis.equals(df) and back.analysis_heads.equals(heads)
    with pytest.raises(ConfigError, match="keep_weights"):
        analyze_run(run, [], load, val=(vx, vy), batch=3)


def test_select_kept() -> None:
    kept = [{"number": 3, "path": "a"}, {"number": 7, "path": "b"}]
    assert [k["path"] for k in select_kept(kept, None)] == ["a", "b"]
    assert [k["path"] for k in select_kept(kept, "7,3,7")] == ["b", "a"]
    with pytest.raises(ConfigError, match=re.escape(NO_WEIGHTS)):
        select_kept([], None)
    with pytest.raises(ConfigError, match=r"--trials: no kept weights for trial\(s\) 5; .* 3, 7"):
        select_kept(kept, "3,5")
    with pytest.raises(ConfigError, match="--trials: 'x' is not a list"):
        select_kept(kept, "x")


def test_validation_windows_are_the_runs(kept_run, tmp_path: Path) -> None:
    run, _ = kept_run
    cfg = StudyConfig.model_validate(load_run(run).config)
    vx, vy = validation_windows(cfg, 3)
    data = prepare_data(cfg.data, progress=False)
    ax, ay = val_windows(data.val_tokens(), 16)
    assert len(ax) == 10 and torch.equal(vx, ax[:3]) and torch.equal(vy, ay[:3])
    assert torch.equal(validation_windows(cfg)[0], ax)
    # a shared path is the cache when data.cache_dir is unset, as the run prepared it
    shared = cfg.model_copy(
        update={
            "data": cfg.data.model_copy(update={"cache_dir": None}),
            "ray": cfg.ray.model_copy(update={"shared_path": str(tmp_path / "shared")}),
        }
    )
    assert shared.data_for_run().cache_dir == str(tmp_path / "shared")
    assert cfg.data_for_run() == cfg.data


# -------------------------------------------------------------------------------------------------
# The command


def fake_checkpoints(monkeypatch, kept: list[dict]) -> list[tuple]:
    """``tlmsearch.train.checkpoints``' two readers, as its contract says, recording every call."""
    from tlmsearch.train import checkpoints

    calls: list[tuple] = []

    def kept_weights(run_dir: Any) -> list[dict]:
        calls.append(("kept_weights", Path(run_dir)))
        return [dict(k) for k in kept]

    def load_model(
        path: Any, device: str = "cpu", trust: bool = False
    ) -> tuple[torch.nn.Module, dict]:
        calls.append(("load_model", str(path), device))
        return load(path, device)

    monkeypatch.setattr(checkpoints, "kept_weights", kept_weights)
    monkeypatch.setattr(checkpoints, "load_model", load_model)
    return calls


def test_cli_analyze_writes_the_table_and_the_report(kept_run, monkeypatch) -> None:
    run, kept = kept_run
    calls = fake_checkpoints(monkeypatch, kept)
    res = CliRunner().invoke(app, ["analyze", str(run), "--max-windows", "2"])
    assert res.exit_code == 0, res.output
    assert calls == [
        ("kept_weights", run),
        ("load_model", kept[0]["path"], "cpu"),
        ("load_model", kept[1]["path"], "cpu"),
    ]
    df = load_run(run).analysis
    assert len(df) == 2 * N_LAYER and (df["val_tokens"] == 2 * 16).all()
    heads = 2 * N_LAYER * study_dict()["model"]["n_head"]
    assert f"2 model(s), {2 * N_LAYER} MLPs and {heads} attention heads on 32 validation " in (
        res.output
    )
    assert "#1 cosine 1.5->0.5 seed 0: ablation (nats)" in res.output
    assert "    attention: ablation (nats) " in res.output and "; entropy (nats) " in res.output
    assert df["attn_entropy_nats"].notna().all() and df["attn_ablation_nats"].notna().all()
    assert len(load_run(run).analysis_heads) == heads
    assert 'id="fig-layers"' in (run / "report.html").read_text()

    res = CliRunner().invoke(
        app, ["analyze", str(run), "--max-windows", "1", "--head-ablations", "1"]
    )
    assert res.exit_code == 0, res.output
    assert res.output.count("per-head ablation skipped: ") == 2
    assert load_run(run).analysis_heads["ablation_nats"].isna().all()

    calls.clear()
    res = CliRunner().invoke(app, ["analyze", str(run), "--trials", "1"])
    assert res.exit_code == 0, res.output
    assert [c[1] for c in calls if c[0] == "load_model"] == [kept[1]["path"]]
    assert load_run(run).analysis["number"].unique().tolist() == [1]


def test_cli_analyze_bad_input_is_exit_2(kept_run, monkeypatch) -> None:
    run, kept = kept_run
    fake_checkpoints(monkeypatch, [])
    res = CliRunner().invoke(app, ["analyze", str(run)])
    assert res.exit_code == 2
    assert "kept no weights; run with search.keep_weights: best (or final)" in res.output
    fake_checkpoints(monkeypatch, kept)
    res = CliRunner().invoke(app, ["analyze", str(run), "--trials", "9"])
    assert res.exit_code == 2 and "no kept weights for trial(s) 9; the run kept 0, 1" in res.output
    assert not (run / "analysis.parquet").exists()


def test_an_attention_only_taper_is_no_baseline_of_the_analysis() -> None:
    import pandas as pd

    from tlmsearch.analysis import _trial_info

    trials = pd.DataFrame({"number": [0, 1], "trial_id": ["u", "a"]})
    attention = {"shape": "uniform", "heads.shape": "cosine", "heads.r_start": 1.5}
    info = [
        _trial_info({"number": n, "seed": 0, "candidate": c}, trials)
        for n, c in ((0, {"shape": "uniform"}), (1, attention))
    ]
    assert [i["is_baseline"] for i in info] == [True, False]
    assert [i["shape"] for i in info] == ["uniform", "uniform"]  # the MLP shape alone
