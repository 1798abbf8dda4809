"""Parameters and FLOPs per token, counted analytically from a model config and its widths.

No torch: ``tlmsearch validate`` uses it to show that every schedule keeps the budget exactly.
"""

from __future__ import annotations

from collections.abc import Sequence

from tlmsearch.config import ModelConfig


def mlp_params(model: ModelConfig, widths: Sequence[int]) -> int:
    """Weights of all MLPs: a SwiGLU MLP of width w has 3 * d_model * w (no biases)."""
    return 3 * model.d_model * sum(widths)
