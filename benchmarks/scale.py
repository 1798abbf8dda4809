"""Search at scale: the real driver (Ray Tune, the Optuna searcher and storage, the pruner, the
ledger, the tables, the report) at hundreds to thousands of trials, with the simulator backend
(``train.backend: simulate``: a surrogate blackbox, no training), so what is timed is the
driver's own cost per trial.

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/scale.py [--sizes 100,1000]
[--storages sqlite,journal,postgresql] [--sampler tpe] [--kill-at 0.5]``. PostgreSQL needs
``TLMSEARCH_TEST_PG_URL`` (``export TLMSEARCH_TEST_PG_URL=$(.ci/services.sh start)``).

The study: ``search_spaces/continuous.yaml`` (shape x r_start x r_end, sigmoid's k and midpoint)
on a 4-layer model, one seed, a surrogate whose best candidate is cosine-like (r_start 1.6,
r_end 0.4), 4 evals a trial, the median pruner, 2 trials at once, ``tlmsearch run`` in a
subprocess. Per row:

- ``ms_median`` / ``ms_p99``: a trial's driver overhead, Optuna's ``datetime_complete -
  datetime_start`` (ask -> Ray schedules it -> its evals reported and pruned or not -> tell); the
  simulated trial itself takes ~0 s. ``growth``: the median of the last tenth of the trials over
  the first tenth's (flat = 1).
- ``s_per_trial``: the run's wall time (Ray's start included) over its trials;
  ``cpu_ms_per_trial``: the driver process's own CPU time (user + system, its start, the
  final tables and report included; Ray's processes not counted) over its trials, which a
  loaded machine stretches less than wall time.
- ``storage_mb``: optuna.db, optuna.journal, or PostgreSQL's database growth.
- ``driver_mb``: the driver process's peak RSS (``VmHWM``; Ray's own processes not counted).
- ``status_s``, ``export_s``, ``report_s``: ``tlmsearch status / export --format csv / report``,
  each a fresh process (Python's and the imports' start included); status of the run that
  ended reads its tables, ``status_storage_s`` is status as it reads a run still going (the
  Optuna storage); ``evidence_s``: building the
  Evidence from trials.parquet in process; ``html_mb``: report.html; ``fcp_ms`` / ``load_ms``:
  headless Chromium's first contentful paint and load event of the report (every figure drawn),
  measured in the browser (none without a Chromium).
- ``--kill-at F``: SIGKILL the driver once F of the trials finished, ``tlmsearch resume``, and
  check the study ends with every planned trial finished once (``resume_ok``).
- ``--profile DIR``: the driver runs under cProfile on its main thread's CPU clock
  (``time.thread_time``: what the driver itself spends, whatever the load beside it), written
  to DIR/NAME.prof, and the row's milliseconds per trial by component (:data:`COMPONENTS`)
  are printed; ``--components FILE.prof --trials N`` prints them for a kept profile.
- ``--status-of RUN ...``: ``tlmsearch status`` of kept runs that ended, from their tables and
  from their storage, alternating (``--rounds``).
- ``--ray-floor``: Ray Tune alone at ``--sizes`` trials, set up as the driver sets it up, with a
  trainable that only reports 4 results: the floor under a trial's driver overhead that
  tlmsearch's own work (ask, ledger, pruner, tell) adds to.

A driver run (``--sizes``, ``--storages``) ends with the goals (:data:`GOALS`) at each storage's
largest size, met or not.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-c", "from tlmsearch.cli import main; main()"]  # `tlmsearch`
# `tlmsearch` under cProfile on the main thread's CPU clock, the profile written to argv[1]
PROFILED = """import cProfile, sys, time
out = sys.argv.pop(1)
from tlmsearch.cli import main
prof = cProfile.Profile(time.thread_time)
try:
    prof.runcall(main)
finally:
    prof.dump_stats(out)
"""
# The driver's parts a trial pays for: (label, file, function), cumulative, nested as shown.
COMPONENTS = [
    ("Ray Tune's loop, all", "tune_controller.py", "step"),
    ("  ask: the searcher's suggest", "searcher.py", "suggest"),
    ("    TPE: relative sample", "baseline.py", "sample_relative"),
    ("    TPE: search space", "baseline.py", "infer_relative_search_space"),
    ("    twin lookup", "samplers.py", "find_twin"),
    ("    Optuna's ask (queue, new trial)", "study.py", "ask"),
    ("  results: the pruning scheduler", "pruning.py", "on_trial_result"),
    ("    the ledger", "ledger.py", "record"),
    ("    Optuna's report", "_trial.py", "report"),
    ("    the median pruner", "_trial.py", "should_prune"),
    ("  tell", "study.py", "tell"),
    ("  Ray's CSV/JSON/TensorBoard loggers", "logger.py", "on_trial_result"),
    ("  the mid-run tables", "progress.py", "_write"),
    ("  Ray's experiment state", "tune_controller.py", "checkpoint"),
    (
        "study reads (Optuna get_all_trials), across the above",
        "_cached_storage.py",
        "get_all_trials",
    ),
    ("user-attribute writes, across the above", "storage.py", "set_user_attrs"),
]


def components(prof: Path, trials: int) -> list[dict[str, Any]]:
    """Milliseconds per trial (and calls) of each of :data:`COMPONENTS` in a profile."""
    import pstats

    found: dict[tuple[str, str], list[float]] = {}
    for (path, _line, name), (_cc, calls, _tt, cum, _callers) in pstats.Stats(
        str(prof)
    ).stats.items():
        got = found.setdefault((Path(path).name, name), [0.0, 0])
        got[0], got[1] = got[0] + cum, got[1] + calls
    rows = []
    for label, file, name in COMPONENTS:
        cum, calls = found.get((file, name), [0.0, 0])
        rows.append(
            {"component": label, "ms_per_trial": round(1000 * cum / trials), "calls": calls}
        )
    return rows


SURROGATE = {
    "offset": -0.01,
    "curvature": 0.05,
    "optimum": {"r_start": 1.6, "r_end": 0.4},
    "noise_sd": 0.01,
    "seed_sd": 0.005,
}


def study(
    name: str, runs: Path, n: int, storage: str, sampler: str, tpe_history: int | None = 300
) -> dict[str, Any]:
    """The benchmark's study (see the module docstring)."""
    optuna = {"sqlite": None, "journal": "journal"}.get(storage)
    if storage == "postgresql":
        optuna = os.environ["TLMSEARCH_TEST_PG_URL"]
    return {
        "name": name,
        "space": str(ROOT / "search_spaces" / "continuous.yaml"),
        "model": {
            "n_layer": 4,
            "d_model": 64,
            "n_head": 2,
            "d_ff": 256,
            "multiple_of": 8,
            "vocab_size": 256,
        },
        "data": {"tokenizer": {"kind": "bytes"}, "seq_len": 32},
        "train": {
            "tokens": 8192,
            "batch_tokens": 512,
            "warmup_tokens": 1024,
            "eval_every_tokens": 2048,
            "backend": "simulate",
            "simulate": {"surrogate": SURROGATE},
        },
        "search": {
            "sampler": sampler,
            "n_trials": n,
            "pruner": "median",
            "concurrency": 2,
            "seeds": [0],
            "tpe_history": tpe_history,
        },
        "storage": {"runs_dir": str(runs), "optuna": optuna},
        "ray": {"num_cpus": 2, "cpus_per_trial": 1},
    }


def _peak_rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _cpu_s(pid: int) -> float:
    """The process's own CPU seconds so far (user + system; not its children's)."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return float("nan")


def _tree(root: int) -> list[int]:
    """``root``'s live descendants (Ray's helpers outlive a SIGKILLed driver)."""
    kids: dict[int, list[int]] = {}
    for e in Path("/proc").iterdir():
        if e.name.isdigit():
            with contextlib.suppress(OSError):
                ppid = int((e / "stat").read_text().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(e.name))
    out, todo = [], [root]
    while todo:
        got = kids.get(todo.pop(), [])
        out += got
        todo += got
    return out


def drive(
    args: list[str], log: Path, env: dict[str, str], stop: Any = None, prof: Path | None = None
) -> tuple[float, float, float]:
    """Run ``tlmsearch ARGS``, polling the driver's peak RSS and CPU time; SIGKILL it (and the
    Ray helpers it started) once ``stop()`` is true. -> (wall seconds, peak RSS MiB, CPU
    seconds of the driver process, as last seen: within 0.5 s of its end)."""
    t0, peak, cpu = time.time(), 0.0, 0.0
    with log.open("a") as out:
        cli = CLI if prof is None else [sys.executable, "-c", PROFILED, str(prof)]
        proc = subprocess.Popen([*cli, *args], stdout=out, stderr=out, env=env, cwd=ROOT)
    try:
        while proc.poll() is None:
            peak = max(peak, _peak_rss_mb(proc.pid))
            cpu = max(cpu, _cpu_s(proc.pid))
            if stop is not None and stop():
                helpers = _tree(proc.pid)
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                for pid in helpers:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                break
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            proc.kill()
    if stop is None and proc.returncode != 0:
        raise SystemExit(f"`tlmsearch {' '.join(args)}` exited {proc.returncode}: see {log}")
    return time.time() - t0, peak, cpu


def _timed(args: list[str], env: dict[str, str]) -> float:
    t = time.time()
    subprocess.run([*CLI, *args], env=env, cwd=ROOT, check=True, capture_output=True)
    return time.time() - t


def _status_from_storage(run: Path, env: dict[str, str]) -> float:
    """``tlmsearch status`` as it reads a run still going: from the storage (run.json without
    the stamp of the tables the run's end wrote, for that call only)."""
    path = run / "run.json"
    kept = path.read_text()
    info = json.loads(kept)
    info.pop("tables", None)
    path.write_text(json.dumps(info))
    try:
        return _timed(["status", str(run)], env)
    finally:
        path.write_text(kept)


def status_times(runs: list[Path], rounds: int) -> None:
    """``tlmsearch status`` of each ended run from its tables and from its storage, the two
    alternating, ``rounds`` times: one line a run and way, the seconds of each round."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(rounds):
        for run in runs:
            times.setdefault((str(run), "tables"), []).append(_timed(["status", str(run)], env))
            times.setdefault((str(run), "storage"), []).append(_status_from_storage(run, env))
    for (run, way), secs in times.items():
        print(f"{run}: status from its {way}: " + ", ".join(f"{t:.2f}" for t in secs) + " s")


def _url(cfg: dict[str, Any], run: Path) -> str:
    from tlmsearch.config import study_from_mapping
    from tlmsearch.search.sampling.storage import storage_url

    return storage_url(study_from_mapping(cfg).storage, run.resolve())


def _finished(url: str, name: str) -> int:
    import optuna

    from tlmsearch.search.sampling.storage import open_storage

    with contextlib.suppress(Exception):
        study = optuna.load_study(study_name=name, storage=open_storage(url))
        return sum(t.state.is_finished() for t in study.get_trials(deepcopy=False))
    return 0


def _overheads(url: str, name: str) -> tuple[np.ndarray, int]:
    """Each finished trial's start-to-tell seconds in trial order, and how many trials there
    are (finished or not)."""
    import optuna

    from tlmsearch.search.sampling.storage import open_storage

    trials = optuna.load_study(study_name=name, storage=open_storage(url)).get_trials()
    secs = [
        (t.datetime_complete - t.datetime_start).total_seconds()
        for t in trials
        if t.state.is_finished() and t.datetime_start and t.datetime_complete
    ]
    return np.array(secs), len(trials)


def _ms(secs: np.ndarray) -> dict[str, float]:
    """A row's ``ms_median`` and ``ms_p99`` from per-trial seconds (the driver's rows and the
    Ray Tune floor's alike)."""
    return {
        "ms_median": round(1000 * float(np.median(secs)), 1),
        "ms_p99": round(1000 * float(np.quantile(secs, 0.99)), 1),
    }


def _pg_size() -> float:
    import sqlalchemy

    from tlmsearch.search.sampling.storage import open_storage

    eng = open_storage(os.environ["TLMSEARCH_TEST_PG_URL"]).engine
    with eng.connect() as c:
        return c.execute(sqlalchemy.text("select pg_database_size(current_database())")).scalar()


# The goals at a storage's largest size: (what, the row's key, the bound, unit); each is met at
# or below its bound. Also: the median flat from the smallest size to the largest (ratio <= 1.5),
# the whole study within 15 minutes, and a killed and resumed study with nothing lost.
GOALS = (
    ("median", "ms_median", 50, "ms"),
    ("p99", "ms_p99", 250, "ms"),
    ("status", "status_s", 5, "s"),
    ("status mid-run", "status_storage_s", 5, "s"),
    ("report", "report_s", 60, "s"),
    ("report.html", "html_mb", 25, "MB"),
    ("first paint", "fcp_ms", 5000, "ms"),
    ("driver memory", "driver_mb", 2048, "MB"),
)
FLAT, STUDY_S = 1.5, 15 * 60


def _against(what: str, value: float, bound: float, unit: str = "") -> str:
    """``what value unit (goal <= bound unit): met``: ms whole, s, min and MB to 0.1, a ratio
    (no unit) to 0.01, with more digits where fewer would print a value on the bound's other
    side (5.04 s against 5 s, not "5.0 s ... not met")."""
    digits = 0 if unit == "ms" else 1 if unit else 2
    while digits < 6 and (round(value, digits) <= bound) != (value <= bound):
        digits += 1
    text = f"{value:,.{digits}f}" + (f" {unit}" if unit else "")
    goal = f"{bound:,g} {unit}" if unit else f"{bound:g}"
    return f"{what} {text} (goal <= {goal}): {'met' if value <= bound else 'not met'}"


def goals(rows: list[dict[str, Any]]) -> list[str]:
    """One line per goal and storage, at that storage's largest size: the measured value, the
    bound and whether it is met, or why it was not measured. Flat is judged both ways: the
    median at the largest size over the smallest's (rows of several sizes), and ``growth``
    within the largest run (its last tenth of trials over its first).

    >>> rows = [{"storage": "sqlite", "trials": 5000, "ms_median": 70.0, "ms_p99": 200.0,
    ...          "growth": 1.2, "s_per_trial": 0.1, "resume_ok": True},
    ...         {"storage": "sqlite", "trials": 100, "ms_median": 40.0}]
    >>> for line in goals(rows): print(line)
    sqlite, 5,000 trials: median 70 ms (goal <= 50 ms): not met
    sqlite, 5,000 trials: p99 200 ms (goal <= 250 ms): met
    sqlite, 5,000 trials: status: not measured
    sqlite, 5,000 trials: report: not measured
    sqlite, 5,000 trials: report.html: not measured
    sqlite, 5,000 trials: first paint: not measured (no Chromium, or no paint reported)
    sqlite, 5,000 trials: driver memory: not measured
    sqlite, 5,000 trials: median at 5,000 over 100 trials 1.75 (goal <= 1.5): not met
    sqlite, 5,000 trials: median, last tenth over first 1.20 (goal <= 1.5): met
    sqlite, 5,000 trials: the study 8.3 min (goal <= 15 min): met
    sqlite, 5,000 trials: killed and resumed, nothing lost (goal: nothing lost): met
    """
    lines = []
    for storage in dict.fromkeys(r["storage"] for r in rows):
        mine = sorted((r for r in rows if r["storage"] == storage), key=lambda r: r["trials"])
        small, big = mine[0], mine[-1]
        head = f"{storage}, {big['trials']:,} trials"
        for what, key, bound, unit in GOALS:
            if big.get(key) is None:
                why = " (no Chromium, or no paint reported)" if key == "fcp_ms" else ""
                lines.append(f"{head}: {what}: not measured{why}")
            else:
                lines.append(f"{head}: {_against(what, float(big[key]), bound, unit)}")
        if small is not big and small.get("ms_median") and big.get("ms_median") is not None:
            ratio = float(big["ms_median"]) / float(small["ms_median"])
            what = f"median at {big['trials']:,} over {small['trials']:,} trials"
            lines.append(f"{head}: {_against(what, ratio, FLAT)}")
        if big.get("growth") is not None:
            what = "median, last tenth over first"
            lines.append(f"{head}: {_against(what, float(big['growth']), FLAT)}")
        if big.get("s_per_trial") is not None:
            minutes = float(big["s_per_trial"]) * big["trials"] / 60
            lines.append(f"{head}: {_against('the study', minutes, STUDY_S / 60, 'min')}")
        if "resume_ok" in big:
            said = "nothing lost" if big["resume_ok"] else "NOT every trial once"
            met = "met" if big["resume_ok"] else "not met"
            lines.append(f"{head}: killed and resumed, {said} (goal: nothing lost): {met}")
        else:
            lines.append(f"{head}: killed and resumed: not run (--kill-at 0.5)")
    return lines


def measure(
    tmp: Path,
    n: int,
    storage: str,
    sampler: str,
    kill_at: float | None,
    history: int | None = 300,
    profile: Path | None = None,
) -> dict:
    """One row of the table (see the module docstring)."""
    name = f"scale-{storage}-{n}-{int(time.time())}"
    runs = tmp / "runs"
    cfg = study(name, runs, n, storage, sampler, history)
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run, log = runs / name, tmp / f"{name}.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    url = _url(cfg, run)
    pg0 = _pg_size() if storage == "postgresql" else 0.0
    row: dict[str, Any] = {"storage": storage, "trials": n}
    prof = None if profile is None else profile / f"{name}.prof"
    if kill_at is None:
        wall, peak, cpu = drive(["run", str(path)], log, env, prof=prof)
    else:
        polled, ready = [0.0], [False]

        def stop() -> bool:  # every 5 s: a poll reads the whole study from the storage
            if time.time() - polled[0] < 5.0:
                return False
            polled[0] = time.time()
            # the driver says how many trials it runs once its storage exists: a poll before
            # then would make the SQLite tables while the driver does, and the driver dies
            ready[0] = ready[0] or "trial(s) to run" in log.read_text(errors="replace")
            return ready[0] and _finished(url, name) >= kill_at * n

        wall, peak, cpu = drive(["run", str(path)], log, env, stop)
        killed_at = _finished(url, name)
        w2, p2, c2 = drive(["resume", str(run)], log, env)
        wall, peak, cpu = wall + w2, max(peak, p2), cpu + c2
        row["killed_at"] = killed_at
    secs, total = _overheads(url, name)
    k = max(1, len(secs) // 10)
    row.update(
        {
            **_ms(secs),
            "growth": round(float(np.median(secs[-k:]) / np.median(secs[:k])), 2),
            "s_per_trial": round(wall / len(secs), 3),
            "cpu_ms_per_trial": round(1000 * cpu / len(secs), 1),
            "driver_mb": round(peak),
        }
    )
    if kill_at is not None:  # every planned trial once: n sampled + uniform's, none twice
        import pandas as pd

        t = pd.read_parquet(run / "trials.parquet")  # a re-run trial stands for the killed one
        once = not t.duplicated(["params_json", "seed"]).any()
        row["resume_ok"] = len(t) == n + 1 and once and set(t["state"]) <= {"COMPLETE", "PRUNED"}
        row["requeued"] = total - len(t)
    files = {"sqlite": run / "optuna.db", "journal": run / "optuna.journal"}
    size = _pg_size() - pg0 if storage == "postgresql" else files[storage].stat().st_size
    row["storage_mb"] = round(size / 2**20, 2)
    row["status_s"] = round(_timed(["status", str(run)], env), 2)
    row["status_storage_s"] = round(_status_from_storage(run, env), 2)
    row["export_s"] = round(_timed(["export", str(run), "--format", "csv"], env), 2)
    row["evidence_s"] = round(_evidence_s(run), 2)
    row["report_s"] = round(_timed(["report", str(run)], env), 2)
    row["html_mb"] = round((run / "report.html").stat().st_size / 2**20, 2)
    row.update(first_paint(run / "report.html"))
    if storage == "postgresql":
        _drop(url, name)
    if prof is not None:
        _print_components(prof, len(secs))
    return row


def _print_components(prof: Path, trials: int) -> None:
    import pandas as pd

    print(f"{prof} ({trials} trials, the driver's main-thread CPU):", flush=True)
    print(pd.DataFrame(components(prof, trials)).to_string(index=False), flush=True)


# Appended to a copy of the report: the browser's own paint timings and its load event (the
# report's figures are drawn by inline scripts, so at load every figure has rendered).
PAINT = """<pre id="paint-times" style="display:none"></pre><script>
window.addEventListener('load',function(){setTimeout(function(){
  var p={};performance.getEntriesByType('paint').forEach(function(e){p[e.name]=e.startTime;});
  p.load=performance.timing.loadEventStart-performance.timing.navigationStart;
  document.getElementById('paint-times').textContent=JSON.stringify(p);},0);});
</script>"""


def first_paint(html: Path) -> dict[str, float]:
    """Headless Chromium's first contentful paint and load (ms) of a copy of ``html``;
    {} without a Chromium (``apt-get install chromium``)."""
    import re

    from tlmsearch.report.images import find_chromium

    exe = find_chromium()
    if exe is None:
        return {}
    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "report.html"
        text = html.read_text()
        page.write_text(text.replace("</body>", PAINT + "</body>", 1))
        out = subprocess.run(
            [
                exe,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                f"--user-data-dir={tmp}/profile",
                "--dump-dom",
                page.as_uri(),
            ],
            capture_output=True,
            text=True,
            timeout=300,
        ).stdout
    found = re.search(r'<pre id="paint-times"[^>]*>(.*?)</pre>', out, re.S)
    if not found or not found.group(1).strip():
        return {}
    times = json.loads(found.group(1))
    fcp = times.get("first-contentful-paint")  # none when the browser reported no paint
    return {"fcp_ms": None if fcp is None else round(fcp), "load_ms": round(times["load"])}


def _evidence_s(run: Path) -> float:
    import pandas as pd

    from tlmsearch.config import study_from_mapping
    from tlmsearch.evidence import study_evidence

    cfg = study_from_mapping(yaml.safe_load((run / "study.yaml").read_text()))
    trials = pd.read_parquet(run / "trials.parquet")
    curves = pd.read_parquet(run / "curves.parquet")
    t = time.time()
    study_evidence(trials, cfg, curves=curves)
    return time.time() - t


def _drop(url: str, name: str) -> None:
    import optuna

    from tlmsearch.search.sampling.storage import open_storage

    with contextlib.suppress(Exception):
        optuna.delete_study(study_name=name, storage=open_storage(url))


def ray_floor(sizes: list[int], evals: int = 4) -> list[dict[str, Any]]:
    """Ray Tune alone, as tlmsearch's driver sets it up (an embedded Ray of 2 CPUs, 2 trials at
    once, actors reused, Ray's loggers and frequent experiment state off) with a function
    trainable that reports ``evals`` results and nothing else: no searcher, no storage, no
    pruner. Per trial: start to completion as Tune's callbacks see it (median, p99: from its
    actor's start, so a trial's wait as PENDING is not in it, where the driver rows' start at
    Optuna's ask), the wall and the driver's CPU of ``Tuner.fit`` over the trials (Ray's own
    start not in them, unlike the driver rows'); ``timed``: the trials the callbacks saw."""
    from ray import tune

    from tlmsearch.config import RayConfig
    from tlmsearch.search.execution.cluster import lean_tune, start_ray, stop_ray

    def trainable(config: dict) -> None:  # nested: Ray pickles it by value, whatever the module
        for step in range(config["evals"]):
            tune.report({"loss": 1.0 / (step + 1), "tokens": step + 1})

    class Clock(tune.Callback):
        def __init__(self) -> None:
            self.start: dict[str, float] = {}
            self.secs: list[float] = []

        def on_trial_start(self, iteration, trials, trial, **info) -> None:
            self.start[trial.trial_id] = time.perf_counter()

        def on_trial_complete(self, iteration, trials, trial, **info) -> None:
            self.secs.append(time.perf_counter() - self.start.pop(trial.trial_id))

    rows = []
    owned = start_ray(RayConfig(num_cpus=2)).get("owned", True)  # False: a Ray already running
    try:
        with tempfile.TemporaryDirectory(prefix="tlmsearch-floor-") as tmp, lean_tune():
            for n in sizes:
                clock = Clock()
                tuner = tune.Tuner(
                    tune.with_resources(trainable, {"cpu": 1}),
                    param_space={"evals": evals},
                    tune_config=tune.TuneConfig(
                        num_samples=n, max_concurrent_trials=2, reuse_actors=True
                    ),
                    run_config=tune.RunConfig(
                        storage_path=tmp, name=f"floor-{n}", callbacks=[clock], verbose=0
                    ),
                )
                t0, c0 = time.time(), time.process_time()
                result = tuner.fit()
                if result.errors:
                    raise SystemExit(
                        f"ray_floor: {len(result.errors)} trial(s) failed: {result.errors[0]}"
                    )
                wall, cpu = time.time() - t0, time.process_time() - c0
                secs = np.array(clock.secs)
                rows.append(
                    {
                        "ray_tune_alone": n,
                        **_ms(secs),
                        "s_per_trial": round(wall / n, 3),
                        "cpu_ms_per_trial": round(1000 * cpu / n, 1),
                        "timed": len(secs),
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    finally:
        if owned:
            stop_ray()
    return rows


def sampler_ms(
    sizes: list[int], sampler: str, history: int | None, asks: int = 20
) -> list[dict[str, Any]]:
    """The study's sampler alone (no Ray, no storage): ms per ask (the candidate drawn, as the
    searcher draws it) with n finished candidates already in an in-memory study."""
    import optuna

    from tlmsearch.config import study_from_mapping
    from tlmsearch.search.sampling.samplers import make_sampler

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cfg = study_from_mapping(
        study("tpe", Path(tempfile.gettempdir()), 10, "sqlite", sampler, history)
    )
    space = cfg.space
    rng = np.random.default_rng(0)
    rows = []
    for n in sizes:
        st = optuna.create_study(sampler=make_sampler(cfg))
        warm = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
        done = []
        for _ in range(n):  # n random candidates with a bowl's value, told at once
            t = warm.ask()
            c = space.suggest(t)
            v = (c["r_start"] - 1.6) ** 2 + (c["r_end"] - 0.4) ** 2 + rng.normal(0, 0.01)
            done.append(
                optuna.trial.create_trial(params=t.params, distributions=t.distributions, value=v)
            )
        st.add_trials(done)
        t0 = time.time()
        for _ in range(asks):
            space.suggest(st.ask())  # left running: constant_liar counts them, as live
        rows.append(
            {
                "sampler": sampler,
                "tpe_history": history,
                "finished": n,
                "ms_per_ask": round(1000 * (time.time() - t0) / asks, 1),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def evidence_s(sizes: list[int], seeds: int = 1) -> list[dict[str, Any]]:
    """The statistics alone at k candidates (no Ray, no storage): seconds for the rows model
    (``stats.row_noise``) and for every contrast of a study of k one-setting candidates and
    uniform on ``seeds`` seeds, all equal (``stats.contrasts.contrast_table``)."""
    import pandas as pd

    from tlmsearch import stats
    from tlmsearch.stats.contrasts import contrast_table

    rng = np.random.default_rng(0)
    stats.row_noise(
        pd.DataFrame(
            {
                "candidate": ["u", "c"] * 2,
                "is_baseline": [True, False] * 2,
                "seed": [0, 0, 1, 1],
                "state": "COMPLETE",
                "v": [1.0, 1.1, 1.2, 1.0],
            }
        ),
        "v",
    )  # imports, once
    rows = []
    for k in sizes:
        t = pd.DataFrame(
            [
                {
                    "candidate": f"c{c}" if c else "u",
                    "is_baseline": c == 0,
                    "seed": s,
                    "state": "COMPLETE",
                    "v": 2.0 + 0.01 * rng.standard_normal(),
                }
                for c in range(k + 1)
                for s in range(max(seeds, 2))
            ]
        )
        t0 = time.time()
        model = stats.row_noise(t, "v")
        t1 = time.time()
        table = contrast_table(t, "v", models={"": model}, margin=0.01)
        t2 = time.time()
        rows.append(
            {
                "candidates": k,
                "seeds": max(seeds, 2),
                "contrasts": len(table),
                "row_noise_s": round(t1 - t0, 2),
                "contrasts_s": round(t2 - t1, 2),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000", help="trials per study, comma-separated")
    ap.add_argument("--storages", default="sqlite,journal", help="sqlite,journal,postgresql")
    ap.add_argument("--sampler", default="tpe")
    ap.add_argument(
        "--kill-at",
        type=float,
        default=None,
        help="SIGKILL the driver once this share finished, then resume",
    )
    ap.add_argument("--keep", type=Path, default=None, help="keep the run dirs here")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    ap.add_argument("--tpe-history", default="300", help="search.tpe_history, or all")
    ap.add_argument(
        "--sampler-only",
        action="store_true",
        help="time the sampler's asks alone at --sizes finished trials",
    )
    ap.add_argument(
        "--ray-floor",
        action="store_true",
        help="Ray Tune alone (a trainable that only reports) at --sizes trials: the floor",
    )
    ap.add_argument(
        "--evidence-only",
        action="store_true",
        help="time the rows model and every contrast at --sizes candidates",
    )
    ap.add_argument(
        "--profile", type=Path, default=None, help="profile the driver, NAME.prof files here"
    )
    ap.add_argument("--components", type=Path, default=None, help="a kept profile to break down")
    ap.add_argument(
        "--status-of",
        type=Path,
        nargs="+",
        default=None,
        help="time `tlmsearch status` of these ended runs from their tables and their storage",
    )
    ap.add_argument("--rounds", type=int, default=3, help="--status-of: rounds, alternating")
    ap.add_argument("--trials", type=int, default=None, help="--components: the run's trials")
    args = ap.parse_args()
    if args.status_of:
        status_times(args.status_of, args.rounds)
        return
    if args.components:
        _print_components(args.components, args.trials or 1)
        return
    if args.evidence_only:
        evidence_s([int(x) for x in args.sizes.split(",")], seeds=3)
        return
    if args.ray_floor:
        ray_floor([int(x) for x in args.sizes.split(",")])
        return
    if args.sampler_only:
        history = None if args.tpe_history == "all" else int(args.tpe_history)
        sampler_ms([int(x) for x in args.sizes.split(",")], args.sampler, history)
        return
    history = None if args.tpe_history == "all" else int(args.tpe_history)
    rows = []
    with tempfile.TemporaryDirectory(prefix="tlmsearch-scale-") as tmp:
        base = args.keep or Path(tmp)
        base.mkdir(parents=True, exist_ok=True)
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
        for storage in args.storages.split(","):
            for n in (int(x) for x in args.sizes.split(",")):
                rows.append(
                    measure(base, n, storage, args.sampler, args.kill_at, history, args.profile)
                )
                print(json.dumps(rows[-1]), flush=True)
    import pandas as pd

    print(pd.DataFrame(rows).to_string(index=False))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print("\n".join(goals(rows)))


if __name__ == "__main__":
    main()
