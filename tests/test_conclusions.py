"""tlmsearch.conclusions: sentences from small trials tables with hand-computed numbers."""

from __future__ import annotations

import pandas as pd
import pytest

from tlmsearch import stats
from tlmsearch.conclusions import conclusions, study_effects, study_noise

BASE = [2.0, 2.1, 1.9]  # uniform on seeds 0, 1, 2: a seed effect pairing cancels


def frame(rows: list[tuple]) -> pd.DataFrame:
    df = pd.DataFrame(rows, columns=["candidate", "seed", "state", "val_bpb"])
    df["is_baseline"] = df["candidate"] == "uniform"
    return df


def with_deltas(deltas: dict[str, list[float]], extra: list[tuple] = ()) -> pd.DataFrame:
    rows = [("uniform", s, "COMPLETE", v) for s, v in enumerate(BASE)]
    for cand, ds in deltas.items():
        rows += [(cand, s, "COMPLETE", BASE[s] + d) for s, d in enumerate(ds) if d is not None]
    return frame(rows + list(extra))


def study() -> pd.DataFrame:
    """A: -0.010, -0.012, -0.014 (clear); B: +0.003, -0.007 (noise); C: +0.05 on one seed."""
    return with_deltas({"A": [-0.010, -0.012, -0.014], "B": [0.003, -0.007], "C": [0.05]})


def test_the_issue_sentences_with_hand_computed_numbers():
    c = conclusions(study(), "val_bpb")
    # A: mean -0.012, sd 0.002, half t(.975, 2) * 0.002 / sqrt(3) = 0.00497; 6.0 noise units
    assert c.supported[0] == (
        "A beats uniform on 3/3 seeds: -0.0120 ± 0.0050 val_bpb (95% CI), 6.0 noise units"
    )
    # B: mean -0.002, sd 0.00707, half t(.975, 1) * 0.00707 / sqrt(2) = 0.0635
    assert c.unsupported[0] == (
        "B vs uniform: within noise on 2 seeds (-0.002 ± 0.064 val_bpb (95% CI), "
        "0.3 noise units): not separated"
    )


def test_one_seed_is_judged_with_the_pooled_noise_and_says_so():
    # pooled over A (ss 8e-6, df 2) and B (ss 5e-5, df 1): sd sqrt(5.8e-5 / 3) = 0.0044, df 3;
    # C's +0.05 on one seed: half t(.975, 3) * 0.0044 = 0.014
    noise = study_noise(study(), "val_bpb")
    assert noise.df == 3 and noise.sd == pytest.approx((5.8e-5 / 3) ** 0.5)
    c = conclusions(study(), "val_bpb")
    assert c.supported[1] == (
        "C loses to uniform on 1/1 seed: +0.050 ± 0.014 val_bpb (95% CI from the pooled seed "
        "noise, sd 0.0044 over 3 df), 11.4 noise units"
    )
    e = study_effects(study(), "val_bpb").set_index("candidate")
    assert e.loc["C", "noise"] == "pooled" and e.loc["A", "noise"] == "own"
    assert e.loc["C", "noise_sd"] == pytest.approx(noise.sd)


def test_the_best_against_the_top_group():
    c = conclusions(study(), "val_bpb")
    assert "A beats C on 1/1 common seed: -0.060 ± 0.014 val_bpb" in c.supported[2]
    assert c.unsupported[1].startswith("A vs B: within noise on 2 common seeds (-0.009 ± 0.051")
    assert c.unsupported[-1] == (
        "A ranks first but cannot be told apart from B at 95%: a tie of the top group"
    )
    clear = conclusions(with_deltas({"A": [-0.10, -0.11, -0.12], "D": [0.0, 0.01, -0.01]}))
    assert clear.supported[-1] == (
        "A ranks first and is separated at 95% from each of the next 1 ranked candidate(s)"
    )
    assert "D vs uniform: within noise on 3 seeds" in clear.unsupported[0]
    assert conclusions(study(), "val_bpb", top=1).unsupported[-1].startswith("B vs uniform")


def test_without_a_second_seed_nothing_is_separated():
    c = conclusions(with_deltas({"A": [-0.5], "B": [0.01]}), "val_bpb")
    assert c.supported == []
    assert c.unsupported[0] == (
        "A vs uniform: -0.50 val_bpb on 1 seed, noise unknown (no candidate has two paired "
        "seeds yet): not separated"
    )


def test_a_censored_winner_is_no_conclusion_a_censored_loser_is():
    t = with_deltas(
        {"A": [-0.010, -0.012, -0.014], "P": [-0.10, -0.11], "L": [0.20, 0.21]},
        [("P", 2, "PRUNED", 9.0), ("L", 2, "FAIL", float("nan"))],
    )
    c = conclusions(t, "val_bpb")
    pruned = next(s for s in c.unsupported if s.startswith("P "))
    assert pruned.startswith("P beats uniform on 2/2 seeds (-0.105 ± ")
    assert pruned.endswith(
        "but it was pruned on seed 2: not a conclusion, the seeds it did not finish may be worse"
    )
    assert any(s.startswith("L loses to uniform on 2/2 seeds") for s in c.supported)


def test_maximize_unpaired_and_no_baseline():
    t = with_deltas({"A": [0.1, 0.12, 0.11]}, [("N", 0, "PRUNED", 1.0), ("R", 1, "RUNNING", 1.0)])
    c = conclusions(t, "val_bpb", "maximize", label="acc")
    assert c.supported[0].startswith("A beats uniform on 3/3 seeds: +0.110 ± 0.025 acc")
    assert c.unsupported == [
        "2 candidate(s) have no seed paired with a finished uniform (pruned, failed or "
        "running): no effect measured (N, R)"
    ]
    lonely = frame([("A", 0, "COMPLETE", 1.0), ("B", 0, "COMPLETE", 1.1)])
    assert conclusions(lonely, "val_bpb").unsupported[0] == (
        "no uniform baseline in the study: no effect vs uniform is measured"
    )
    assert conclusions(frame([]), "val_bpb") == ([], [], None)


def test_the_numbers_are_those_of_stats():
    """No statistic is re-derived: the sentences quote stats.effects and stats.pairwise."""
    t = study()
    e = stats.effects(t, "val_bpb", noise=study_noise(t, "val_bpb")).set_index("candidate")
    a = e.loc["A"]
    text = conclusions(t, "val_bpb").supported[0]
    assert f"{a['mean_delta']:+.4f} ± {a['half_width']:.4f}" in text
    assert f"{abs(a['effect_noise']):.1f} noise units" in text


def test_where_own_seeds_and_the_pooled_noise_disagree_both_are_said():
    # A: -0.10, -0.12 (sd 0.0141, 1 df: half 0.127, not separated on its own seeds); pooled
    # with B (0.01, -0.01, 0.0): sd sqrt((0.0002 + 0.0002) / 3) = 0.0115 over 3 df, half
    # t(.975, 3) * 0.0115 / sqrt(2) = 0.026: separated at 95% on one look
    t = with_deltas({"A": [-0.10, -0.12], "B": [0.01, -0.01, 0.0]})
    e = study_effects(t, "val_bpb").set_index("candidate").loc["A"]
    pooled = (0.0004 / 3) ** 0.5
    assert e["pooled_half_width"] == pytest.approx(stats.t_quantile(3) * pooled / 2**0.5)
    assert bool(e["pooled_separated"]) and not bool(e["separated"])
    (a,) = [s for s in conclusions(t, "val_bpb").unsupported if s.startswith("A vs uniform")]
    assert a == (
        "A vs uniform: within noise on 2 seeds (-0.11 ± 0.13 val_bpb (95% CI), 7.8 noise units): "
        "not separated on its own seeds; with the pooled seed noise (sd 0.012 over 3 df, at 95% "
        "per look; racing tests each look stricter) it would be ± 0.026: separated"
    )
