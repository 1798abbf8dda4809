"""Bodies of ``tlmsearch run | resume | status | export`` (the typer commands stay thin).

Each returns an exit status: 0 ok, 1 the run failed (every trial failed), 130 interrupted,
143 preempted (SIGTERM: ``tlmsearch resume`` continues it).
ConfigError (bad input, exit 2) propagates to the caller.
"""

from __future__ import annotations

import contextlib
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tlmsearch.run_dir import RunDir

# The exit status of a preempted run (SIGTERM: 128 + 15, as a shell reports it): the sbatch
# script requeues the job on it (tlmsearch/search/execution/slurm.py)
PREEMPTED_EXIT = 143


def _echo(console: Any) -> Any:
    return lambda text: console.print(text, markup=False, highlight=False)


def _next_steps(console: Any, run_dir: Path, dashboard: str) -> None:
    console.print(f"\nrun dir: [bold]{run_dir}[/]")
    console.print(f"  tlmsearch status {run_dir}        counts and the best candidate")
    console.print(f"  tlmsearch report {run_dir}        rebuild the offline HTML report")
    console.print(f"  tlmsearch export {run_dir} --format yaml   best.yaml (target widths)")
    console.print(f"  {dashboard}   live Optuna dashboard")


def _load_the_report() -> None:
    """The report's modules, imported before a run's first trial, as the runner imports what
    its own end reads (:func:`tlmsearch.search.runner.load_the_end`): a package edited while
    the run goes then still writes the report. One that cannot import fails at the end, as any
    report failure does, and never stops the run."""
    with contextlib.suppress(Exception):
        from tlmsearch.report import html  # noqa: F401  (loads every figure's module)


def _write_report(console: Any, run_dir: Path) -> None:
    """Every run ends with its offline report; a report failure never fails the run. run.json
    says ``phase: report`` till it is written (a driver that dies meanwhile: run_dir/driver.py)."""
    from tlmsearch.report.html import write_report
    from tlmsearch.search.driver import Heartbeat, set_phase

    driving = RunDir(run_dir).status.exists()
    try:
        # the heartbeat goes on while the report is built: from another host a report that
        # takes minutes must not read as a driver gone
        with Heartbeat(Path(run_dir)) if driving else contextlib.nullcontext():
            if driving:
                set_phase(Path(run_dir), "report")
            path = write_report(run_dir)
            if driving:
                set_phase(Path(run_dir), "done")
    except Exception as err:  # the trials are stored; the report can be rebuilt later
        console.print(
            f"[yellow]report not written[/] ({type(err).__name__}: {err}); retry with "
            f"tlmsearch report {run_dir}"
        )
        return
    console.print(f"\nreport: [bold]{path}[/]  (open it in a browser; works offline)")


def best_line(best: dict[str, Any]) -> str:
    """One best.yaml entry as a line: values on their seeds, n of k, delta vs uniform with its
    per-comparison CI (the block-design noise), effect / noise and the one decision.

    A censored or unfinished candidate (best only when no candidate completed every seed of
    the study) says so on a second line.
    """
    vals = ", ".join(f"{m} {v:.4f}" for m, v in best["values"].items() if not math.isnan(v))
    seeds = ", ".join(str(x) for x in best.get("ranked_seeds") or [])
    text = f"best: {best['candidate']} ({vals}; mean of seed(s) {seeds}; {best['n_of_k']})"
    if best.get("confirmed_on_seeds"):  # search.confirm: from the fresh, unpruned seeds
        text = text.replace("best: ", "best (confirmation stage): ", 1)
    deltas = []
    for m, d in (best.get("delta_vs_uniform") or {}).items():
        ci = (best.get("delta_ci95") or {}).get(m)
        units = (best.get("effect_noise") or {}).get(m)
        sep = (best.get("separated_from_uniform") or {}).get(m)
        if ci:
            noise = f" [95% CI {ci[0]:+.4f}, {ci[1]:+.4f}]"
            noise += f", {abs(units):.1f} noise units" if units is not None else ""
            if sep is not None:
                noise += ", separated" if sep else ", not separated"
        elif (best.get("delta_note") or {}).get(m, "").startswith("cannot be bounded"):
            noise = f" [{best['delta_note'][m]}]"
        else:
            one = (best.get("delta_n_seeds") or {}).get(m) == 1
            noise = " [1 seed: noise unknown]" if one else " [noise unknown]"
        adj = (best.get("delta_selection_adjusted") or {}).get(m)
        if adj is not None and abs(adj - d) > 5e-5:
            noise += f" (selection-adjusted {adj:+.4f})"
        deltas.append(f"{m} {d:+.4f}{noise}")
    if deltas:
        text += "; vs uniform " + ", ".join(deltas)
    if best.get("flag"):
        text = f"{text}\n  note: {best['flag']}"
    if best.get("effective_lr"):  # the LR confound: what its parametrization does per layer
        text = f"{text}\n  effective LR vs uniform: {best['effective_lr']['line']}"
    return text


def censored_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Candidates not ranked above the best although they look better on fewer seeds."""
    out = []
    for c in rows:
        delta = ", ".join(f"{m} {v:+.4f}" for m, v in c["delta_vs_best"].items())
        out.append(
            f"not ranked above it: {c['candidate']} ({c['flag']}): {delta} vs the best on the "
            f"{c['n_seeds_shared']} seed(s) both completed; its other seeds decide"
        )
    return out


def conclusion_lines(c: Any, limit: int = 12, provisional: bool = False) -> list[str]:
    """What the study supports and what it does not, each list cut at ``limit`` lines.
    ``provisional``: the run is still going: every line is said to be so (the family is the
    planned one, but a look mid-run is one of several the reader takes)."""
    out = []
    if provisional and (c.supported or c.unsupported):
        out.append(
            "provisional (the run is still going): the trials so far, judged over the "
            "planned family; a later look may change any line"
        )
    tag = "provisionally " if provisional else ""
    for head, lines in ((f"{tag}supported", c.supported), (f"{tag}not supported", c.unsupported)):
        out += [f"{head}: {line}" for line in lines[:limit]]
        if len(lines) > limit:
            out.append(f"{head}: ... and {len(lines) - limit} more (see the report)")
    return out


def running_lines(progress: dict[str, Any], *, going: bool = True) -> list[str]:
    """The running trials (tokens done, last eval metric, tokens/s, ETA) and the run's ETA."""
    from tlmsearch.search.eta import format_eta, progress_text

    out = []
    for t in progress["trials"]:
        if t["age_s"] is None:
            text = "started, no eval yet"
        else:
            text = progress_text(
                t["tokens"], t["total"], t["metric"], t["value"], t["rate"], t["eta_s"]
            )
            text += f" (last eval {format_eta(t['age_s'])} ago)"
        out.append(f"running: #{t['number']} {t['label']} (seed {t['seed']}): {text}")
    if not going:
        if progress["trials"]:
            out.append("ETA: none, the run is not going (resume re-runs unfinished trials)")
        return out
    rate = progress["rate"]
    speed = f" at {rate:,.0f} tok/s together" if rate else ""
    out.append(
        f"ETA {format_eta(progress['eta_s'])} for the run: {progress['tokens_left']:,.0f} tokens "
        f"left ({len(progress['trials'])} running, {progress['queued']} to start){speed}, "
        f"{progress['slots']} trial(s) at once"
    )
    return out


def _print_result(console: Any, result: Any) -> int:
    c = result.counts
    console.print(
        f"[bold]{result.status}[/] in {result.wall_s / 60:.1f} min: {c.get('COMPLETE', 0)} "
        f"complete, {c.get('PRUNED', 0)} pruned, {c.get('FAIL', 0)} failed"
        + (f", {c['interrupted']} interrupted and re-run" if c.get("interrupted") else "")
        + (f", {c['requeued']} failed and re-run" if c.get("requeued") else "")
    )
    for best in result.best:
        console.print(best_line(best), markup=False, highlight=False)
    _write_report(console, result.run_dir)
    _next_steps(console, result.run_dir, result.dashboard)
    if result.status in ("interrupted", "preempted"):
        console.print(
            f"\n{result.status}: continue with [bold]tlmsearch resume {result.run_dir}[/]"
        )
        return PREEMPTED_EXIT if result.status == "preempted" else 130
    return 0


def run_command(
    study: Path,
    overrides: Sequence[str],
    *,
    address: str | None,
    name: str | None,
    console: Any,
) -> int:
    from tlmsearch.config import load_study
    from tlmsearch.search.runner import RunFailed, run_study

    cfg = load_study(study, overrides)  # exit 2 before anything starts
    _load_the_report()
    if cfg.ladder:
        from tlmsearch.search.ladder import ladder_notes, run_ladder

        for line in ladder_notes(cfg):
            console.print(line, markup=False, highlight=False)
        return _ladder_outcome(
            console, lambda: run_ladder(cfg, address=address, name=name, echo=_echo(console))
        )
    try:
        result = run_study(cfg, address=address, name=name, echo=_echo(console))
    except RunFailed as err:
        console.print(f"[red]error:[/] {err}", markup=True)
        return 1
    return _print_result(console, result)


def slurm_command(
    study: Path,
    overrides: Sequence[str],
    job: Any,
    *,
    name: str | None,
    dry_run: bool,
    console: Any,
) -> int:
    """``tlmsearch slurm``: the study (overrides applied) beside its run dir, the sbatch script
    (tlmsearch/search/execution/slurm.py), submitted unless ``dry_run`` (then printed)."""
    from tlmsearch.config import load_study, name_problem
    from tlmsearch.errors import ConfigError
    from tlmsearch.search.execution.slurm import render, storage_advice, submit

    cfg = load_study(study, overrides)  # exit 2 before anything is written
    if name is not None and name_problem(name):
        raise ConfigError(f"--name: {name!r} is invalid: {name_problem(name)}")
    if cfg.ladder:
        raise ConfigError("ladder: a ladder study runs with `tlmsearch run`; slurm runs one study")
    name = name or cfg.name
    if name is not None:
        cfg = cfg.model_copy(update={"name": name})
    run = (Path(cfg.storage.runs_dir) / name).resolve()
    resolved = run.parent / f"{name}.study.yaml"  # what the job runs: overrides applied
    script = render(cfg, resolved, job, name)
    say = _echo(console)
    if dry_run:
        console.print(script, markup=False, highlight=False, end="")
        say(f"# {storage_advice(cfg)}")
        return 0
    resolved.parent.mkdir(parents=True, exist_ok=True)
    resolved.write_text(cfg.to_yaml())
    line = submit(script, run.parent / f"{name}.sbatch")
    say(f"{line}: {run.parent / f'{name}.sbatch'}, run dir {run}")
    if RunDir(run).study.exists():
        say("the run dir exists: the job resumes it")
    say(storage_advice(cfg))
    say(f"  tlmsearch status {run}   (from any node that mounts it)")
    return 0


def resume_command(
    run_dir: Path,
    *,
    address: str | None,
    console: Any,
    retry_failed: bool = False,
    trust_checkpoints: bool = False,
) -> int:
    from tlmsearch.search.ladder import is_ladder_run, resume_ladder
    from tlmsearch.search.runner import RunFailed, resume_run

    _load_the_report()
    if is_ladder_run(run_dir):
        return _ladder_outcome(
            console,
            lambda: resume_ladder(
                run_dir,
                address=address,
                retry_failed=retry_failed,
                trust_checkpoints=trust_checkpoints,
                echo=_echo(console),
            ),
        )
    try:
        result = resume_run(
            run_dir,
            address=address,
            retry_failed=retry_failed,
            trust_checkpoints=trust_checkpoints,
            echo=_echo(console),
        )
    except RunFailed as err:
        console.print(f"[red]error:[/] {err}")
        return 1
    return _print_result(console, result)


def status_command(run_dir: Path, *, console: Any, stats_from: Path | None = None) -> int:
    from tlmsearch.search.ladder import is_ladder_run, rung_dirs

    if is_ladder_run(run_dir):  # a ladder: each rung's status in turn
        for rung in rung_dirs(Path(run_dir)):
            console.print(f"\n[bold]{rung.name}[/]")
            _status(rung, console=console, stats_from=stats_from)
        return 0
    return _status(run_dir, console=console, stats_from=stats_from)


def _status(run_dir: Path, *, console: Any, stats_from: Path | None = None) -> int:
    from tlmsearch.search.sampling.storage import dashboard_command, storage_url
    from tlmsearch.search.status import status_report

    rep = status_report(run_dir, stats_from=stats_from)
    if stats_from is not None:
        console.print(f"judged by the stats section of {stats_from} (the run's own is unchanged)")
    c = rep["counts"]
    finished = c["COMPLETE"] + c["PRUNED"] + c["FAIL"]
    planned = rep["planned"] or "?"
    console.print(
        f"{run_dir}: [bold]{rep['status']}[/] (updated {rep['updated']}); trials "
        f"{finished}/{planned} finished: {c['COMPLETE']} complete, {c['PRUNED']} pruned, "
        f"{c['FAIL']} failed; {c['RUNNING']} running, {c['WAITING']} queued"
        + (f"; {c['interrupted']} interrupted (re-queued)" if c["interrupted"] else "")
        + (f"; {c['preempted']} preempted (resume continues them)" if c["preempted"] else "")
    )
    if rep["driver"]:
        console.print(rep["driver"], markup=False, highlight=False)
    for line in running_lines(rep["running"], going=rep["status"] == "running"):
        console.print(line, markup=False, highlight=False)
    if not rep["best"]:
        console.print("best: none complete yet")
    for line in [*map(best_line, rep["best"]), *censored_lines(rep["censored_better"])]:
        console.print(line, markup=False, highlight=False)
    for line in rep["race"]:  # racing studies: seeds per candidate and why
        console.print(f"race: {line}", markup=False, highlight=False)
    if rep.get("confirmation"):  # search.confirm: each candidate confirmed or not
        from tlmsearch.evidence.confirm import lines as confirm_lines

        for line in confirm_lines(rep["confirmation"]):
            console.print(line, markup=False, highlight=False)
    going = rep["status"] in ("running", "interrupted", "preempted", "driver gone")
    for line in conclusion_lines(rep["conclusions"], provisional=going):  # in seed-noise units
        console.print(line, markup=False, highlight=False)
    from tlmsearch.evidence.contrasts import contrast_lines

    metric = rep["objectives"][0][0] if rep["objectives"] else ""
    # each one's word; of a sampler's thousands of schedules, 12 (contrast_lines says which)
    for line in contrast_lines(rep.get("contrasts"), metric, rep["level"], limit=12):
        console.print(line, markup=False, highlight=False)
    if rep.get("two_by_two"):  # stats.two_by_two: the 2 x 2 in one sentence
        console.print(f"reading: {rep['two_by_two']}", markup=False, highlight=False)
    if rep.get("signal_to_noise") is not None:  # docs/signal_to_noise.md
        console.print(rep["signal_to_noise"].line(), markup=False, highlight=False)
    lr = rep.get("learning_rate") or {}
    if lr.get("at_one_lr") and rep["best"]:  # beside the effects: they may be an LR effect
        console.print(f"note: effects are {lr['compared']}", markup=False, highlight=False)
    console.print(dashboard_command(storage_url(rep["storage"], Path(run_dir).resolve())))
    return 0


def export_command(run_dir: Path, fmt: str, out: Path | None, *, console: Any) -> int:
    from tlmsearch.search.export import export_run
    from tlmsearch.search.ladder import finish_ladder, is_ladder_run, rung_dirs

    ladder = is_ladder_run(run_dir)
    runs = rung_dirs(Path(run_dir)) if ladder else [Path(run_dir)]
    for rung in runs:  # a ladder: every rung's tables (into OUT/rung-i with --out)
        dest = Path(out) / rung.name if out is not None and ladder else out
        paths = export_run(rung, fmt, dest)
        for path in paths:
            console.print(str(path))
        if fmt == "hf":  # DeciLM's lattice: which layers block_configs.json had to move
            from tlmsearch.models.hf_export import off_lattice

            for line in off_lattice(paths[0].parent):
                console.print(f"block_configs.json: {line}", markup=False)
    if len(runs) > 1 and fmt == "yaml":  # the top rung's best, with the ladder's fidelity
        finish_ladder(run_dir)
        console.print(str(RunDir(run_dir).best))
    return 0


# -------------------------------------------------------------------------------------------------
# Ladder runs (search/ladder.py) and fidelity across scales


def _ladder_outcome(console: Any, climb: Any) -> int:
    from tlmsearch.search.runner import RunFailed

    try:
        result = climb()
    except RunFailed as err:
        console.print(f"[red]error:[/] {err}")
        return 1
    for res in result.rungs:
        console.print(f"\n[bold]{res.run_dir.name}[/]: {res.status} in {res.wall_s / 60:.1f} min")
        for best in res.best:
            console.print(best_line(best), markup=False, highlight=False)
    if result.status == "interrupted":
        console.print(f"\ninterrupted: continue with [bold]tlmsearch resume {result.run_dir}[/]")
        return 130
    print_fidelity(console, result.fidelity or {})
    for res in result.rungs:  # each rung's own report, then the ladder's
        _write_report(console, res.run_dir)
    _write_report(console, result.run_dir)
    console.print(f"\nrun dir: [bold]{result.run_dir}[/] (a ladder: one run per rung)")
    console.print(f"  tlmsearch fidelity {result.run_dir}   rank agreement between rungs")
    console.print(f"  tlmsearch status {result.run_dir}     each rung's counts and best")
    return 0


def print_fidelity(console: Any, doc: dict[str, Any]) -> None:
    """``tlmsearch fidelity``'s tables (:mod:`tlmsearch.evidence.fidelity_tables`, the report shows
    the same): rungs, agreement per pair of rungs, lines, crossings, signal-to-noise, decision
    accuracy; then how far to trust them."""
    from tlmsearch.evidence.fidelity_tables import fidelity_tables

    if not doc:
        return
    for table in fidelity_tables(doc):
        console.print(table.rich())
        for note in table.notes:
            console.print(note, markup=False, highlight=False)
    console.print(f"trust: {doc['trust']}", markup=False, highlight=False)


def fidelity_command(run_dir: Path, *, console: Any) -> int:
    from tlmsearch.search.ladder import write_fidelity

    doc = write_fidelity(run_dir)
    print_fidelity(console, doc)
    console.print(f"wrote {RunDir(run_dir).fidelity}", markup=False, highlight=False)
    return 0


def is_tty() -> bool:
    return sys.stdout.isatty()
