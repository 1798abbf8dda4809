"""The ``tlmsearch`` command line: thin typer commands, heavy imports inside each command.

Exit status: 0 ok, 1 failure while running, 2 bad input (the message names the field and fix).
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from tlmsearch.constants import VERSION
from tlmsearch.errors import ConfigError
from tlmsearch.run_dir import RunDir
from tlmsearch.widths.schedules import SHAPES, searchable_shapes

app = typer.Typer(
    name="tlmsearch",
    help="Search how capacity (MLP width, attention heads) is best spread over an LM's depth.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"tlmsearch {VERSION}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    # the options before any command (typer keeps the app's help above as the command's help)
    pass


SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="Override a study field, e.g. --set search.pruner=none"),
]
TrustOpt = Annotated[
    bool,
    typer.Option(
        "--trust-checkpoints",
        help="Load checkpoints an older tlmsearch pickled (pickle can run code: only for a run "
        "dir nobody else can write); resume rewrites them in the safe format",
    ),
]


def _bad_input(err: ConfigError) -> NoReturn:
    for line in err.lines():
        typer.secho(f"error: {line}", fg="red", err=True)
    raise typer.Exit(2)


def _console() -> Any:
    from rich.console import Console

    # Wide enough for the width tables when piped (rich assumes 80 columns off a terminal).
    return Console(highlight=False, width=None if sys.stdout.isatty() else 140)


@app.command()
def validate(
    study: Annotated[Path, typer.Argument(help="A study YAML, e.g. studies/quickstart.yaml")],
    set_: SetOpt = None,
    show_config: Annotated[
        bool, typer.Option("--config/--no-config", help="Print the resolved config")
    ] = True,
) -> None:
    """Validate a study and show every candidate's width vector at an exact budget."""
    from tlmsearch.config import load_study
    from tlmsearch.config.planning import array_line, confirm_line, pruner_line
    from tlmsearch.config.summary import (
        candidates_table,
        effective_lr_lines,
        same_widths_notes,
        share_notes,
        worker_notes,
    )
    from tlmsearch.search.sampling.samplers import planned_trials

    try:
        cfg = load_study(study, set_ or [])
    except ConfigError as err:
        _bad_input(err)
    console = _console()
    if show_config:
        console.print(cfg.to_yaml().rstrip(), markup=False)
        console.print()
    size = cfg.space.size()
    n_seeds = cfg.race_seeds
    if size is None:
        n_corners = len(cfg.space.corners())
        console.print(
            f"space [bold]{cfg.space.name}[/]: continuous; {n_corners} corner candidates checked"
        )
    else:
        n_runs = planned_trials(cfg) // n_seeds
        console.print(
            f"space [bold]{cfg.space.name}[/]: {size} candidates; {n_runs} trainings per seed"
            + (" (uniform baseline first)" if cfg.search.baseline else "")
            + f" x {n_seeds} seed(s) = {n_runs * n_seeds} trials"
            + (
                " at most (racing stops a candidate once it is separated)"
                if cfg.search.racing
                else ""
            )
        )
        if cfg.search.sampler == "grid":  # a sampler draws candidates; the grid enqueues them
            for line in same_widths_notes(cfg):
                console.print(line, markup=False)
    for line in share_notes(cfg):
        console.print(line, markup=False)
    for section, model in [("proxy", cfg.model), ("target", cfg.target)]:
        if model is not None:
            console.print(candidates_table(cfg, model, title=f"{section} model"))
    # a sampled continuous space has no list of candidates: only how it compares them
    for line in effective_lr_lines(cfg, per_schedule=size is not None):
        console.print(line, markup=False)
    if cfg.ladder:
        from tlmsearch.search.ladder import ladder_notes

        for line in ladder_notes(cfg):
            console.print(line, markup=False)
    for line in worker_notes(cfg):
        console.print(line, markup=False)
    if line := array_line(cfg):  # which trainings fuse, or why none do
        console.print(line, markup=False)
    if line := pruner_line(cfg):  # the candidates it leaves unpruned, which measure a pruned noise
        console.print(line, markup=False)
    if line := confirm_line(cfg):  # the confirmation stage's fresh seeds and what it adds
        console.print(line, markup=False)
    from tlmsearch.evidence.power import seed_notes

    for line in seed_notes(cfg):
        console.print(line, markup=False)
    console.print(f"[green]ok[/]: {study} is valid")


@app.command()
def schema(
    space: Annotated[
        bool, typer.Option("--space", help="A search-space file's schema instead of a study's")
    ] = False,
    markdown: Annotated[
        bool, typer.Option("--markdown", help="The study YAML reference (docs/reference.md)")
    ] = False,
    out: Annotated[Path | None, typer.Option("-o", "--out", help="Write it to this file")] = None,
) -> None:
    """Print the study YAML's JSON Schema (for editor completion) or its Markdown reference."""
    from tlmsearch.config.schema import reference_markdown, schema_text, space_schema, study_schema

    if space and markdown:
        _bad_input(
            ConfigError(
                "--space and --markdown: give one of them (the reference covers the space too)"
            )
        )
    if markdown:
        text = reference_markdown()
    else:
        text = schema_text(space_schema() if space else study_schema())
    if out is None:
        typer.echo(text, nl=False)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    typer.echo(f"wrote {out}")


@app.command()
def plan(
    study: Annotated[Path, typer.Argument(help="A study YAML, e.g. studies/race.yaml")],
    pilot: Annotated[
        Path | None,
        typer.Option("--from", help="A pilot's run dir (2+ seeds of 2+ candidates): its noise"),
    ] = None,
    min_effect: Annotated[
        float | None,
        typer.Option(
            help="Smallest effect to separate, in the metric's units (default: "
            "objectives[].min_effect)"
        ),
    ] = None,
    power: Annotated[float, typer.Option(help="Target power")] = 0.8,
    metric: Annotated[
        str | None, typer.Option(help="The objective to size (default: the first)")
    ] = None,
    set_: SetOpt = None,
) -> None:
    """Seeds per candidate to separate min_effect from uniform at the study's family-wise
    level, and what they cost in trainings and hours (from a pilot's noise and tokens/s); then
    the seeds each of the study's contrasts needs to separate min_effect and to call a true 0
    equivalent within +-d."""
    from tlmsearch.config import load_study
    from tlmsearch.evidence.power import build_plan, plan_lines

    try:
        cfg = load_study(study, set_ or [])
        trials = None
        if pilot is not None:
            from tlmsearch.run_dir.tables import load_run

            trials = load_run(pilot).trials
        result = build_plan(
            cfg,
            pilot=trials,
            pilot_name=str(pilot or ""),
            metric=metric,
            min_effect=min_effect,
            power=power,
        )
    except ConfigError as err:
        _bad_input(err)
    for line in plan_lines(result):
        typer.echo(line)


# The shapes `tlmsearch widths` previews: those whose parameters its options can give.
_PREVIEWED = searchable_shapes()


def _preview_params(shape: str, options: dict[str, Any]) -> dict[str, Any]:
    """The parameters ``tlmsearch widths`` gives ``shape``: the options it reads (its registry
    entry) over its example's values; a shape the options cannot describe is an error."""
    from tlmsearch.widths.schedules import ScheduleError

    spec = SHAPES.get(shape)
    if spec is None:
        return {}  # plan_widths / plan_units names the valid shapes
    if not spec.searchable:
        raise ScheduleError(
            "shape",
            f"{shape!r} needs parameters the preview has no option for "
            f"({', '.join(spec.params)}); it previews {', '.join(_PREVIEWED)}",
        )
    given = {n: v for n, v in options.items() if n in spec.params and v is not None}
    return {**spec.example, **given}


def _preview_heads(shape: str, options: dict[str, Any], layers: int, n_head: int) -> list[int]:
    """Heads per layer of a heads schedule at share 1 (``layers * n_head`` in all, in groups of
    one head: the preview knows no n_kv_head); errors name the ``heads.`` field."""
    from tlmsearch.widths.schedules import ScheduleError, plan_units

    def too_few(layer: int, ratio: float) -> str:
        return (
            f"layer {layer} would get no head (its normalised ratio is {ratio:.3f} of {n_head} "
            f"heads a layer); raise the smallest ratio to at least {1 / n_head:.3f} or --n-head"
        )

    try:
        return plan_units(
            shape, layers, layers * n_head, too_few, **_preview_params(shape, options)
        )
    except ScheduleError as err:
        raise ScheduleError("heads." + err.field, err.message) from None


@app.command()
def widths(
    shape: Annotated[
        str, typer.Option(help=f"{', '.join(_PREVIEWED[:-1])} or {_PREVIEWED[-1]}")
    ] = "cosine",
    start: Annotated[float, typer.Option(help="r_start: first layer's ratio")] = 1.5,
    end: Annotated[
        float | None, typer.Option(help="r_end: last layer's ratio (default 2 - start)")
    ] = None,
    layers: Annotated[int, typer.Option(help="n_layer")] = 12,
    d_ff: Annotated[int, typer.Option("--d-ff", help="the uniform width")] = 2048,
    multiple_of: Annotated[int, typer.Option(help="round every width to this")] = 16,
    k: Annotated[float, typer.Option(help="sigmoid steepness")] = 10.0,
    preset: Annotated[
        str | None, typer.Option(help="blocks: wider_early, wider_middle, wider_late")
    ] = None,
    heads_shape: Annotated[
        str | None,
        typer.Option(help="also preview a heads schedule (heads.shape) of --n-head heads a layer"),
    ] = None,
    heads_start: Annotated[float, typer.Option(help="heads.r_start")] = 1.5,
    heads_end: Annotated[
        float | None, typer.Option(help="heads.r_end (default 2 - heads-start)")
    ] = None,
    n_head: Annotated[
        int, typer.Option(min=1, max=4096, help="uniform's query heads per layer (model.n_head)")
    ] = 8,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Preview one schedule's integer width vector (sums to exactly layers * d_ff), and with
    --heads-shape its heads per layer (sum to exactly layers * n_head, heads.share 1)."""
    from tlmsearch.widths.schedules import ScheduleError, plan_widths

    heads: list[int] | None = None
    try:
        params = _preview_params(shape, {"r_start": start, "r_end": end, "k": k, "preset": preset})
        plan = plan_widths(shape, n_layer=layers, d_ff=d_ff, multiple_of=multiple_of, **params)
        if heads_shape is not None:
            options = {"r_start": heads_start, "r_end": heads_end, "k": k}
            heads = _preview_heads(heads_shape, options, layers, n_head)
    except ScheduleError as err:
        typer.secho(f"error: {err}", fg="red", err=True)
        raise typer.Exit(2) from None
    if as_json:
        out = {
            "widths": list(plan.widths),
            "total": plan.total,
            "budget": layers * d_ff,
            "realised_start": plan.realised_start,
            "realised_end": plan.realised_end,
        }
        if heads is not None:
            out["heads"] = heads
        typer.echo(json.dumps(out))
        return
    typer.echo(" ".join(str(w) for w in plan.widths))
    typer.echo(
        f"sum {plan.total} = {layers} x {d_ff}; realised {plan.realised_start:.4f} -> "
        f"{plan.realised_end:.4f}"
    )
    if heads is not None:
        typer.echo(
            f"heads {' '.join(str(h) for h in heads)} (sum {sum(heads)} = {layers} x {n_head})"
        )


data_app = typer.Typer(help="Prepare corpora and token files.", no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("prepare")
def data_prepare(
    sources: Annotated[
        list[str] | None,
        typer.Argument(
            help="classics (built in), text files or folders, .jsonl/.parquet/.csv records or "
            "a datasets folder (kind:path names the kind), or .bin/.npy tokens"
        ),
    ] = None,
    study: Annotated[
        Path | None, typer.Option(help="Take the data section from this study YAML")
    ] = None,
    tokenizer: Annotated[str | None, typer.Option(help="bpe, bytes, file or hf")] = None,
    vocab_size: Annotated[int | None, typer.Option(help="BPE vocabulary size")] = None,
    tokenizer_path: Annotated[
        str | None, typer.Option(help="A tokenizer.json, or a Hugging Face tokenizer folder")
    ] = None,
    text_field: Annotated[
        str | None, typer.Option(help="The records' text column (default: text)")
    ] = None,
    token_vocab_size: Annotated[
        int | None, typer.Option(help="Vocabulary of token files without a sidecar")
    ] = None,
    cache_dir: Annotated[str | None, typer.Option(help="Default: $TLMSEARCH_CACHE")] = None,
    set_: SetOpt = None,
) -> None:
    """Prepare (or find in the cache) token arrays: tokenizer, train/val/test, manifest."""
    from tlmsearch.data.cli import prepare_command

    try:
        prepare_command(
            sources=sources or [],
            study=study,
            tokenizer=tokenizer,
            vocab_size=vocab_size,
            tokenizer_path=tokenizer_path,
            token_vocab_size=token_vocab_size,
            cache_dir=cache_dir,
            text_field=text_field,
            overrides=set_ or [],
            console=_console(),
        )
    except ConfigError as err:
        _bad_input(err)


@app.command()
def train(
    study: Annotated[Path, typer.Argument(help="A study YAML, e.g. studies/quickstart.yaml")],
    set_: SetOpt = None,
    candidate: Annotated[
        str, typer.Option(help='uniform, or JSON parameters: \'{"shape": "cosine"}\'')
    ] = "uniform",
    seed: Annotated[int | None, typer.Option(help="Default: the study's first seed")] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "auto",
) -> None:
    """Train one candidate of a study outside any search: a sanity check before searching."""
    import os

    from tlmsearch.config import load_study

    try:
        cfg = load_study(study, set_ or [])
        for key, value in cfg.train.process_env().items():  # before torch's first tensor
            os.environ.setdefault(key, value)
        from tlmsearch.train.loop import parse_candidate, train_candidate

        cand = parse_candidate(candidate)
        widths_, s = train_candidate(cfg, cand, seed=seed, device=device, progress=True)
    except ConfigError as err:
        _bad_input(err)
    from tlmsearch.widths.heads import heads_schedule

    m = s.metrics
    heads = cfg.model.plan(cand).heads if heads_schedule(cand) is not None else None
    typer.echo(
        f"{s.status}: {s.reason}; widths {list(widths_)}; "
        + (f"heads {list(heads)}; " if heads else "")
        + f"params {s.n_params:,} "
        f"({s.n_params_nonemb:,} non-embedding); "
        + (
            f"val_loss {m['val_loss']:.4f} val_ppl {m['val_ppl']:.2f} val_bpb "
            f"{m['val_bpb']:.4f}"
            + (f" (raw weights: val_bpb {m['val_bpb_raw']:.4f})" if "val_bpb_raw" in m else "")
            + f"; {m['tokens_per_s']:,.0f} tokens/s, MFU {m['mfu']:.1%}; "
            if m
            else ""
        )
        + f"{s.wall_s:.1f} s ({s.setup.get('dtype')}, compile {s.setup.get('compile')}, "
        f"{s.setup.get('threads')} thread(s))"
    )
    if s.status == "diverged":
        raise typer.Exit(1)


@app.command()
def run(
    study: Annotated[Path, typer.Argument(help="A study YAML, e.g. studies/quickstart.yaml")],
    set_: SetOpt = None,
    address: Annotated[
        str | None, typer.Option(help="Join this Ray cluster (default: ray.address or local)")
    ] = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: the study's)")] = None,
) -> None:
    """Run a study: Ray Tune trials sampled and pruned by Optuna, results in the run dir."""
    from tlmsearch.search.cli import run_command

    try:
        code = run_command(study, set_ or [], address=address, name=name, console=_console())
    except ConfigError as err:
        _bad_input(err)
    raise typer.Exit(code)


@app.command()
def slurm(
    study: Annotated[Path, typer.Argument(help="A study YAML, e.g. studies/quickstart.yaml")],
    set_: SetOpt = None,
    name: Annotated[str | None, typer.Option(help="Run name (default: the study's)")] = None,
    nodes: Annotated[int, typer.Option(min=1, help="Nodes: a Ray head, workers on the rest")] = 1,
    time: Annotated[str | None, typer.Option(help="sbatch --time, e.g. 04:00:00")] = None,
    partition: Annotated[str | None, typer.Option(help="sbatch --partition")] = None,
    account: Annotated[str | None, typer.Option(help="sbatch --account")] = None,
    signal_lead: Annotated[
        int, typer.Option(min=1, help="Seconds of SIGTERM notice before the time limit")
    ] = 300,
    setup: Annotated[
        str,
        typer.Option(help="Shell run first, e.g. 'module load cuda; source .venv/bin/activate'"),
    ] = "",
    token: Annotated[
        Path | None, typer.Option(help="Ray's token file (default: made beside the run dir)")
    ] = None,
    sbatch: Annotated[
        list[str] | None, typer.Option("--sbatch", help="More sbatch options, e.g. --qos=low")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the script, submit nothing")
    ] = False,
) -> None:
    """Run a study as one Slurm job: a Ray head and workers, then the driver; preempted or out
    of time, it is requeued and resumes the same run dir (docs/cluster.md#slurm)."""
    from tlmsearch.search.cli import slurm_command
    from tlmsearch.search.execution.slurm import SlurmJob

    job = SlurmJob(
        nodes=nodes,
        time=time,
        partition=partition,
        account=account,
        signal_lead_s=signal_lead,
        setup=setup,
        token=str(token) if token else None,
        sbatch=list(sbatch or []),
    )
    try:
        code = slurm_command(
            study, set_ or [], job, name=name, dry_run=dry_run, console=_console()
        )
    except ConfigError as err:
        _bad_input(err)
    raise typer.Exit(code)


@app.command()
def resume(
    run_dir: Annotated[Path, typer.Argument(help="A run dir, e.g. runs/quickstart")],
    address: Annotated[str | None, typer.Option(help="Join this Ray cluster")] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Run the failed trials again too")
    ] = False,
    trust_checkpoints: TrustOpt = False,
) -> None:
    """Finish a run stopped by Ctrl-C, a crash, kill -9 or a preemption; finished trials are
    kept, stopped ones continue from their checkpoints."""
    from tlmsearch.search.cli import resume_command

    try:
        code = resume_command(
            run_dir,
            address=address,
            retry_failed=retry_failed,
            trust_checkpoints=trust_checkpoints,
            console=_console(),
        )
    except ConfigError as err:
        _bad_input(err)
    raise typer.Exit(code)


@app.command()
def status(
    run_dir: Annotated[Path, typer.Argument(help="A run dir, e.g. runs/quickstart")],
    stats_from: Annotated[
        Path | None,
        typer.Option(
            "--stats-from",
            help="Judge the run by this study YAML's whole stats section (contrasts, "
            "equivalence, level, family, two_by_two): new questions of stored trials; the run "
            "dir is not changed",
        ),
    ] = None,
) -> None:
    """Trials by state and the best candidate so far (works while the run is going)."""
    from tlmsearch.search.cli import status_command

    try:
        status_command(run_dir, console=_console(), stats_from=stats_from)
    except ConfigError as err:
        _bad_input(err)


@app.command()
def fidelity(
    run_dir: Annotated[Path, typer.Argument(help="A ladder run dir (a study with ladder:)")],
) -> None:
    """Rank agreement between the rungs of a ladder run; writes RUN/fidelity.json."""
    from tlmsearch.search.cli import fidelity_command

    try:
        fidelity_command(run_dir, console=_console())
    except ConfigError as err:
        _bad_input(err)


@app.command()
def export(
    run_dir: Annotated[Path, typer.Argument(help="A run dir, e.g. runs/quickstart")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format", help="csv, parquet, yaml (best.yaml) or hf (a Hugging Face model folder)"
        ),
    ] = "yaml",
    out: Annotated[
        Path | None, typer.Option(help="Copy the files to this folder (hf: write it there)")
    ] = None,
) -> None:
    """Write the run's tables (csv, parquet), best.yaml, or the best target as a Hugging Face
    model folder (hf: config with per-layer MLP widths, DeciLM block_configs) from storage."""
    from tlmsearch.search.cli import export_command

    try:
        export_command(run_dir, fmt, out, console=_console())
    except ConfigError as err:
        _bad_input(err)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="A run dir, e.g. runs/quickstart")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="HTML file (default: RUN/report.html)")
    ] = None,
    png: Annotated[
        Path | None,
        typer.Option("--png", help="Also write each figure as PNG into this folder (Chromium)"),
    ] = None,
    x: Annotated[
        str,
        typer.Option(
            help="x of the ratio fronts, as trained: r_start (realised d_ff[0] / mean d_ff) "
            "or taper (realised (d_ff[0] - d_ff[-1]) / mean d_ff)"
        ),
    ] = "r_start",
    top_k: Annotated[int, typer.Option(min=1, help="Candidates in the width profiles")] = 5,
) -> None:
    """Write one self-contained HTML report of a run (opens offline; needs no torch or Ray)."""
    from tlmsearch.report.html import build_run, save_report
    from tlmsearch.report.images import ImageExportError, write_pngs

    try:
        if x not in ("r_start", "taper"):
            raise ConfigError(f"--x: {x!r} is not one of r_start, taper")
        rep, run_data = build_run(run_dir, top_k=top_k, x=x)
    except ConfigError as err:
        _bad_input(err)
    typer.echo(f"report: {save_report(rep, run_data, out)}")
    if png is not None:
        try:
            paths = write_pngs(rep.figures, png)
        except ImageExportError as err:
            typer.secho(f"error: {err}", fg="red", err=True)
            raise typer.Exit(1) from None
        typer.echo(f"{len(paths)} PNG figures in {png}")


@app.command()
def analyze(
    run_dir: Annotated[Path, typer.Argument(help="A run dir, e.g. runs/quickstart")],
    max_windows: Annotated[
        int, typer.Option(min=1, help="Validation windows to read (the first N; CPU: keep small)")
    ] = 64,
    trials: Annotated[
        str | None, typer.Option(help="Only these trial numbers, e.g. 3,7 (default: all kept)")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda")] = "cpu",
    head_ablations: Annotated[
        int,
        typer.Option(
            min=0,
            help="Ablate each attention head alone when a model has at most this many heads "
            "in all (a validation pass per head; 0: none)",
        ),
    ] = 64,
    trust_checkpoints: TrustOpt = False,
) -> None:
    """Per-layer diagnostics of a run's kept weights into RUN/analysis.parquet and the report:
    per MLP, its cosine with and norm relative to the residual stream, and its ablation; per
    attention layer, its heads' attention entropy and its ablation (per head:
    RUN/analysis_heads.parquet)."""
    from tlmsearch.config import load_study
    from tlmsearch.run_dir.tables import load_run

    try:
        run_data = load_run(run_dir)
        from tlmsearch.analysis import NO_ATTENTION, analyze_run, select_kept, validation_windows
        from tlmsearch.train.checkpoints import kept_weights, load_model
        from tlmsearch.train.runtime import batch_shape, resolve_device

        kept = select_kept(kept_weights(run_dir), trials)
        cfg = load_study(RunDir(run_dir).study)
        dev = resolve_device(device)
        val = validation_windows(cfg, max_windows, progress=sys.stderr.isatty())
        batch, _ = batch_shape(cfg.train, cfg.data.seq_len)  # the trials' eval batch
        out = analyze_run(
            run_dir,
            kept,
            lambda path: load_model(path, device=str(dev), trust=trust_checkpoints),
            val=val,
            batch=batch,
            device=dev,
            max_head_ablations=head_ablations,
        )
    except ConfigError as err:
        _bad_input(err)
    df, heads = out
    console = _console()
    n = int(df["val_tokens"].max())
    paths = RunDir(run_data.path)
    console.print(
        f"{len(kept)} model(s), {df['width'].notna().sum()} MLPs and {len(heads)} attention "
        f"heads on {n:,} validation tokens: {paths.analysis}, {paths.analysis_heads}",
        markup=False,
    )
    for (number, cand, seed), sub in df.groupby(["number", "candidate", "seed"], sort=False):
        mlp = sub[sub["width"].notna()]
        ablation = " ".join(f"{v:+.4f}" for v in mlp["ablation_nats"])
        console.print(f"  #{number} {cand} seed {seed}: ablation (nats) {ablation}", markup=False)
        attn = sub[sub["attn_entropy_nats"].notna()]
        if attn.empty:
            console.print(f"    {NO_ATTENTION} (arch {sub['arch'].iloc[0]})", markup=False)
            continue
        ablation = " ".join(f"{v:+.4f}" for v in attn["attn_ablation_nats"])
        entropy = " ".join(f"{v:.3f}" for v in attn["attn_entropy_nats"])
        console.print(
            f"    attention: ablation (nats) {ablation}; entropy (nats) {entropy}", markup=False
        )
        own = heads[heads["number"] == number]
        if len(own) and own["ablation_nats"].isna().all():
            console.print(
                f"    per-head ablation skipped: {len(own)} heads > --head-ablations "
                f"{head_ablations}",
                markup=False,
            )
    from tlmsearch.report.html import write_report

    console.print(f"report: {write_report(run_dir)}", markup=False)


@app.command()
def dashboard(
    run_dir: Annotated[Path, typer.Argument(help="A run dir, e.g. runs/quickstart")],
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port (0: any free)")] = 8050,
    host: Annotated[
        str, typer.Option(help="Address to listen on; other than 127.0.0.1 only if you must")
    ] = "127.0.0.1",
    interval: Annotated[float, typer.Option(min=0.5, help="Seconds between refreshes")] = 5.0,
) -> None:
    """Serve a live view of a run dir's figures that refreshes while the study runs."""
    from tlmsearch.report.dashboard import serve

    try:
        serve(run_dir, host=host, port=port, interval=interval, echo=typer.echo)
    except ConfigError as err:
        _bad_input(err)
    except (socket.gaierror, UnicodeError) as err:  # not an address or a host name
        _bad_input(ConfigError(f"--host {host!r} is not an address to listen on ({err})"))
    except OSError as err:
        typer.secho(f"error: cannot listen on {host}:{port}: {err}", fg="red", err=True)
        raise typer.Exit(1) from None


def main() -> None:  # pragma: no cover - console entry point
    plain_warnings()
    sys.exit(app())


def plain_warnings() -> None:
    """Print a run dir's study.yaml warning (``tlmsearch.config.StudyYamlWarning``: the keys an
    older version wrote that this one drops) as the CLI's other warnings, ``warning: ...``,
    not as Python's file, line and source line; every other warning as before."""
    import warnings

    python = warnings.formatwarning

    def formatwarning(message: Any, category: type, *args: Any, **kw: Any) -> str:
        if category.__name__ == "StudyYamlWarning":  # by name: no config import at start
            return f"warning: {message}\n"
        return python(message, category, *args, **kw)

    warnings.formatwarning = formatwarning
