"""Names and defaults that several layers share, defined once.

The metrics an objective may name and the keys of every eval (the config validates them, the
trainer reports them, the search and the report read them), the trackers' packages, the keys of a
transformers config that the model config sets, and the statistics' defaults (the confidence
level and the multiple-comparison family of every decision: docs/statistics.md).

A leaf (docs/contributing.md, rule 19): it imports nothing, so the config, the search, the
statistics and the report can all read these names without importing one another.
"""

from __future__ import annotations

# The package's one version: tlmsearch.__version__, `tlmsearch --version` and the distribution's
# (pyproject.toml reads it here); CHANGELOG.md's top entry names it.
VERSION = "0.9.2"

# Metric name -> the direction that is better, used when an objective gives none.
METRICS: dict[str, str] = {
    "val_bpb": "minimize",
    "val_loss": "minimize",
    "val_ppl": "minimize",
    "train_loss": "minimize",
    "tokens_per_s": "maximize",
    "mfu": "maximize",
    "params": "minimize",
    "non_embedding_params": "minimize",
    "flops_per_token": "minimize",
    "wall_s": "minimize",
}

# torch's own variable for where torch.compile keeps its caches (inductor's FX graphs and
# kernels, Triton's under it): the search sets it in every trial process to the run's
# compile-cache (run_dir.RunDir.compile_cache) unless the user set it (docs/running.md).
COMPILE_CACHE_ENV = "TORCHINDUCTOR_CACHE_DIR"

# The keys of every eval the trainer reports (the search's results and curves.parquet follow it).
EVAL_KEYS = (
    "tokens",
    "train_loss",
    "val_loss",
    "val_ppl",
    "val_bpb",
    "val_loss_raw",  # with train.eval_weights ema or lawa only: the raw weights' metrics
    "val_bpb_raw",
    "tokens_per_s",
    "mfu",
    "lr",
    "wall_s",
)
# The raw weights' metrics beside the averaged ones: in an eval only when the run averages.
RAW_EVAL_KEYS = ("val_loss_raw", "val_bpb_raw")

# tracker -> (the module it needs, the pip extra that installs it)
TRACKER_PACKAGES = {
    "mlflow": ("mlflow", "mlflow"),
    "wandb": ("wandb", "wandb"),
    "tensorboard": ("tensorboardX", "tensorboard"),
}

# The keys of a transformers config that ModelConfig's own fields set (model.hf must not).
HF_SET_BY = {
    "hidden_size": "d_model",
    "num_hidden_layers": "n_layer",
    "num_attention_heads": "n_head",
    "num_key_value_heads": "n_kv_head (None: n_head, multi-head attention)",
    "intermediate_size": "d_ff (and each layer's width from the schedule)",
    "vocab_size": "vocab_size (or the data's tokenizer)",
    "tie_word_embeddings": "tie_embeddings",
    "rms_norm_eps": "norm_eps",
    "initializer_range": "init_std",
    "rope_theta": "rope_theta",
    "head_dim": "d_model and n_head (head_dim = d_model // n_head)",
}

# The confidence level of every decision the statistics take (1 - its error rate): the default
# of stats.level and search.racing.confidence, and of every function that takes a level.
LEVEL = 0.95
# The families a decision's error rate may hold over: holm (family-wise error), bh (false
# discovery rate, Benjamini-Hochberg) or none (per comparison); FAMILY is the default.
FAMILIES = ("holm", "bh", "none")
FAMILY = "holm"
# The trials table's ``stage`` of a confirmation-stage trial (search.confirm: the main stage's
# best candidates and uniform again on fresh, unpruned seeds); the main stage's is "".
CONFIRM_STAGE = "confirm"
# The schedule families a contrast may name (stats.contrasts): capacity toward layer 0 (taper
# strength > 0), toward the last layer (< 0), or every schedule but uniform.
SCHEDULE_FAMILIES = ("early-heavy", "late-heavy", "all")

# candidates a sampler draws when search.n_trials is not set: the race's, plan's and the
# conclusions' planned family, and the samplers' own cap
SAMPLER_TRIALS = 20

# `tlmsearch plan`: a study that needs more seeds than this is not a plan
MAX_SEEDS = 10**9
