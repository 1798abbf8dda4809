"""A survivor of the pruner is conditional on surviving it: never called separated."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tlmsearch.evidence import Evidence
from tlmsearch.evidence.conclusions import conclusions


def _pruned(rng, n_seeds: int = 4) -> pd.DataFrame:
    """uniform, two unpruned candidates, w (far better, never pruned), p (pruned on seed 0)."""
    rows = []
    for s in range(n_seeds):
        level = rng.normal(0, 0.01)
        for c in ("uniform", "a", "b", "w", "p"):
            state = "PRUNED" if (c, s) == ("p", 0) else "COMPLETE"
            rows.append((c, s, 2.0 + level + rng.normal(0, 0.003) - 0.05 * (c == "w"), state))
    return pd.DataFrame(
        {
            "candidate": [r[0] for r in rows],
            "seed": [r[1] for r in rows],
            "is_baseline": [r[0] == "uniform" for r in rows],
            "state": [r[3] for r in rows],
            "v": [r[2] for r in rows],
            "unpruned": [r[0] in ("a", "b") for r in rows],
        }
    )


def test_a_survivor_of_the_pruner_is_never_separated_and_the_sentence_says_why():
    t = _pruned(np.random.default_rng(0))
    ev = Evidence.build(t, "v")
    eff = ev.effects.set_index("candidate")
    assert bool(eff.at["w", "conditional"]) and eff.at["w", "mean_delta"] < -0.04
    assert pd.isna(eff.at["w", "separated"])
    assert not eff.at["a", "conditional"] and not eff.at["p", "conditional"]  # unpruned; censored
    said = conclusions(t, label="v", evidence=ev)
    line = next(x for x in said.unsupported if x.startswith("w vs uniform"))
    assert "conditional on surviving the pruner" in line
    assert not any(x.startswith("w beats") for x in said.supported)
    whole = Evidence.build(t.assign(state="COMPLETE"), "v").effects.set_index("candidate")
    assert bool(whole.at["w", "separated"]) and not whole.at["w", "conditional"]
