"""arch hf's attention: model.n_kv_head sets the family's num_key_value_heads; per-layer heads
(model.layer_heads, heads.* dimensions) are refused, naming the field (exit 2 from validate)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from search_helpers import tiny_study
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import ModelConfig, load_study
from tlmsearch.errors import ConfigError
from tlmsearch.models import build_model
from tlmsearch.models.hf import family_config
from tlmsearch.widths import budget

VOCAB = 64
LLAMA = dict(arch="hf", hf={"model_type": "llama"}, n_layer=2, d_model=32, n_head=4, d_ff=64)


@pytest.mark.parametrize(
    ("family", "n_kv_head", "kv"), [("llama", 2, 2), ("qwen2", 1, 1), ("qwen2", None, 4)]
)
def test_n_kv_head_sets_the_familys_key_value_heads(
    family: str, n_kv_head: int | None, kv: int
) -> None:
    # without n_kv_head: multi-head attention (Qwen2's own default would be 32 kv heads)
    cfg = ModelConfig(**{**LLAMA, "hf": {"model_type": family}, "n_kv_head": n_kv_head})
    assert family_config(cfg, VOCAB, 64).num_key_value_heads == kv
    model = build_model(cfg, [80, 48], VOCAB)
    for layer in model.inner.model.layers:
        assert layer.self_attn.q_proj.out_features == 4 * cfg.head_dim
        assert layer.self_attn.k_proj.out_features == kv * cfg.head_dim
    numel = sum(p.numel() for p in model.parameters())
    assert numel == budget.count_params(cfg, [80, 48], VOCAB).total


def test_model_hf_num_key_value_heads_is_read_as_n_kv_head() -> None:
    # a study (or a run's frozen study.yaml) written before n_kv_head keeps validating
    cfg = ModelConfig(**{**LLAMA, "hf": {"model_type": "llama", "num_key_value_heads": 2}})
    assert cfg.n_kv_head == 2 and "num_key_value_heads" not in (cfg.hf.model_extra or {})
    with pytest.raises(ValueError, match=r"hf\.num_key_value_heads \(2\) and n_kv_head \(1\)"):
        ModelConfig(
            **{**LLAMA, "n_kv_head": 1, "hf": {"model_type": "llama", "num_key_value_heads": 2}}
        )


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            {
                "space": {
                    "dimensions": {
                        "shape": {"type": "fixed", "value": "cosine"},
                        "r_start": {"type": "categorical", "choices": [1.5]},
                        "heads.shape": {"type": "fixed", "value": "linear"},
                        "heads.r_start": {"type": "categorical", "choices": [0.5]},
                    }
                }
            },
            "heads.shape",
        ),
        ({"model": {**LLAMA, "layer_heads": [2, 6]}}, "layer_heads"),
    ],
)
def test_validate_of_an_hf_study_with_per_layer_heads_exits_2_naming_the_field(
    change: dict, field: str, tmp_path: Path
) -> None:
    study = tiny_study(tmp_path, model=LLAMA)
    study.update({k: {**study[k], **v} for k, v in change.items()})
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(study))
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        load_study(path)
    result = CliRunner().invoke(app, ["validate", str(path), "--no-config"])
    text = " ".join(result.output.split())
    assert result.exit_code == 2 and field in text and "arch hf" in text, result.output
