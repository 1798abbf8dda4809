"""A ladder's fidelity document (fidelity.json) as tables: ``tlmsearch fidelity`` prints them,
the report shows them. Pure text from :func:`tlmsearch.search.ladder.ladder_fidelity`'s
document."""

from __future__ import annotations

from typing import Any

from tlmsearch.evidence.fidelity import compute_text, snr_cells, with_ci
from tlmsearch.tables import Table


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _null_cell(p: dict[str, Any]) -> str:
    """The null check's numbers (tlmsearch.evidence.fidelity.null_check): P(null tau >= tau), the
    tau the null passes in <= 5%, and the seed noise's correlation (its upper bound, used)."""
    rho, up = p.get("seed_rho"), p.get("rho_upper")
    if rho is None or up is None:
        return "-"
    thr = p.get("null_tau95")
    need = "tau +1 is not enough" if thr is None else f"needs {thr:+.2f}"
    at = "" if p.get("null_p") is None else f"p {p['null_p']:.3f}, "
    return f"{at}{need} (seed corr {rho:+.2f}, <= {up:+.2f})"


def agreement(doc: dict[str, Any]) -> Table:
    """Rank agreement of the candidates' paired effects between every pair of rungs."""
    boot = doc["bootstrap"]
    rows = [
        (
            f"{p['lower']} -> {p['upper']}",
            str(p["n_candidates"]),
            str(p["n_seeds"]),
            str(p["distinct_resamples"]),
            with_ci(p["kendall_tau"], p["tau_ci95"]),
            _null_cell(p),
            with_ci(p["spearman_rho"], p["rho_ci95"]),
            _num(p["decision_accuracy"], ".0%"),
            ", ".join(p["left_out"]) or "-",
        )
        for p in doc["pairs"]
    ]
    notes = [
        f"rung {p['lower']} -> {p['upper']}: conditional on {p['conditional_on']}"
        for p in doc["pairs"]
        if p.get("conditional_on")
    ]
    return Table(
        f"rank agreement of the candidates' paired effects on {doc['metric']} vs uniform",
        (
            "rungs",
            "candidates",
            "seeds",
            "distinct resamples",
            "Kendall tau [95% CI]",
            "tau beyond shared seeds",
            "Spearman rho [95% CI]",
            "decision accuracy",
            "left out",
        ),
        rows,
        caption="on the seeds both rungs paired (uniform at 0); "
        f"95% CI: percentile bootstrap over seeds ({boot['resamples']} resamples, "
        f"rng seed {boot['rng_seed']}; S seeds allow only C(2S-1, S) distinct ones; it "
        "under-covers with few seeds and is not what the verdict judges by); tau beyond shared "
        "seeds: how often a ranking with no true agreement, its noise correlated between the "
        "rungs as the shared seeds' (at that correlation's 95% upper bound), reaches this tau "
        "(p) and the tau it reaches in at most 5%: the verdict's test; decision accuracy: "
        "share of candidate pairs ordered the same, ties counted half",
        notes=notes,
    )


def rungs(doc: dict[str, Any]) -> Table:
    """Each rung's run dir and training compute."""
    rows = [(str(r["index"]), str(r["label"]), _num(r["compute"], ".3g")) for r in doc["rungs"]]
    return Table("rungs", ("rung", "run dir", "training FLOPs per model"), rows)


def lines(doc: dict[str, Any]) -> Table:
    """Each candidate's paired effect against log10 compute, and its line."""
    rs = doc["rungs"]
    rows = []
    for fit in doc["fits"]:
        at = {round(pt["log10_compute"], 9): pt["effect"] for pt in fit["points"]}
        cells = [
            _num(
                at.get(round(r["log10_compute"], 9)) if r["log10_compute"] is not None else None,
                "+.4f",
            )
            for r in rs
        ]
        kind = fit["kind"] + (
            f" (residual sd {fit['residual_sd']:.4f})" if fit["residual_sd"] is not None else ""
        )
        rows.append((fit["candidate"], *cells, _num(fit["slope"], "+.4f"), kind))
    return Table(
        "paired effect vs log10 compute (training FLOPs), per candidate",
        ("candidate", *(f"rung {r['index']}" for r in rs), "slope / decade", "fit"),
        rows,
        caption="2 rungs: the line through the two points; 3 or more: least squares (residual sd)",
    )


def crossings(doc: dict[str, Any]) -> Table | None:
    """Where two candidates' lines cross (None: nowhere at or above the smallest rung)."""
    found = [c for c in doc["crossings"] if c["log10_compute"] is not None]
    if not found:
        return None
    rows = [
        (c["a"], c["b"], compute_text(c["log10_compute"]), c["where"], f"{c['effect']:+.4f}")
        for c in found
    ]
    return Table(
        "where two candidates' lines cross (predicted)",
        ("a", "b", "compute (FLOPs)", "where", "effect there"),
        rows,
    )


def signal_to_noise(doc: dict[str, Any]) -> Table | None:
    """Each rung's signal-to-noise (arXiv 2508.13144; docs/signal_to_noise.md)."""
    if not any(r.get("signal_to_noise") for r in doc.get("rungs") or []):
        return None
    rows = []
    for r in doc["rungs"]:
        snr = r.get("signal_to_noise")
        rows.append((str(r["index"]), "-" if not snr else str(snr["candidates"]), *snr_cells(snr)))
    return Table(
        "signal-to-noise per rung (arXiv 2508.13144)",
        ("rung", "candidates", "spread", "SNR over seeds", "SNR over checkpoints"),
        rows,
        caption="spread: max difference of the candidates' means; SNR over seeds: that over the "
        "sd of one paired delta; over checkpoints: relative spread over the relative sd of the "
        "last evals of each trial (detrended)",
    )


def decisions(doc: dict[str, Any]) -> Table | None:
    """Decision accuracy per FLOP against the top rung (DataDecide, arXiv 2504.11393)."""
    found = doc.get("decisions") or []
    if not found:
        return None
    rows = [
        (
            str(d["rung"]),
            _num(d["compute"], ".3g"),
            _num(d["compute_ratio"], ".3g"),
            str(d["n_pairs"]),
            _num(d["accuracy"], ".0%"),
            f"{d['n_separated']}: {_num(d['accuracy_separated'], '.0%')}",
            f"{d['n_pairs'] - d['n_separated']}: {_num(d['accuracy_within_noise'], '.0%')}",
        )
        for d in found
    ]
    return Table(
        f"decision accuracy vs the top rung (rung {found[0]['top']}) per compute",
        (
            "rung",
            "FLOPs per training",
            "x top",
            "pairs",
            "accuracy",
            "separated pairs: accuracy",
            "within noise: accuracy",
        ),
        rows,
        caption="DataDecide (arXiv 2504.11393): the share of the candidate pairs both rungs "
        "measured (uniform included) that the rung orders as the top rung does (ties half); "
        "separated: the pairs the top rung's own evidence separates (family-wise), within "
        "noise: the rest",
        notes=[f"rung {d['rung']}: {d['note']}" for d in found if d["note"]],
    )


def fidelity_tables(doc: dict[str, Any]) -> list[Table]:
    """Every table of a fidelity document, in the order both the CLI and the report show."""
    out = [
        rungs(doc),
        agreement(doc),
        lines(doc),
        crossings(doc),
        signal_to_noise(doc),
        decisions(doc),
    ]
    return [t for t in out if t is not None]
