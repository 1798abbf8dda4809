"""Fuzzing ``tlmsearch validate`` and ``tlmsearch widths``: bad input is exit 2, never a crash.

Mutations of the shipped studies (their search spaces by name, inline, in a file of their own,
or overridden with ``--set``; the quickstart with every tracker on): wrong types, huge and
negative numbers, NaN/inf, deleted, misspelled and unknown keys, lists for mappings, deep
nesting, alias bombs, broken YAML. Every field of the study schema (read from the pydantic
models, so a key added tomorrow is fuzzed without being listed here) is also set to such values,
present in a shipped study or not. Every case must end with exit 0 or 2 and no traceback,
within a time limit, and the whole loop runs in a child process under an address-space cap
(``RLIMIT_AS``): a size that is not bounded before something is allocated fails here instead of
taking the machine down.
Deterministic: case i is drawn from ``random.Random(f"{seed}/{i}")``. The suite's seed is the
run's (pytest-randomly's ``--randomly-seed``, 0 without it), so every run fuzzes cases no run
before it tried; a failure prints the seed and the line that replays its case.

By hand, more cases or one case replayed::

    python tests/test_fuzz_studies.py --cases 20000 --seed 7
    python tests/test_fuzz_studies.py --case 1234 --show
"""

from __future__ import annotations

import argparse
import copy
import itertools
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
CASES = 1200  # validate cases a run; then WIDTHS_CASES of the widths command
WIDTHS_CASES = 150
MEMORY_CAP = 1 << 30  # address space for the whole loop; the imports alone take ~170 MB
CASE_SECONDS = 20  # a case slower than this is a finding (validate should answer in ~1 s)

# Values a user (or a typo) can put anywhere: each is a type, size or sign something must reject.
INTS = [0, -1, -7, 1, 2, 3, 7, 1024, 1025, 2**20, 2**20 + 1, 2**21 + 1, 2**31, 2**32]
HUGE = [2**63, 10**15, 10**15 + 1, 10**18, 10**100, -(2**63)]
FLOATS = [0.0, -0.5, 0.5, 1e-9, 1.5, 2.0, 1e15, 1e308, -1e308, 5e-324, math.nan, math.inf]
STRINGS = ["", "median", "1.5", "cosine", "wider_early", "uniform", "0x10", "1e400", "two"]
STRINGS += ["mup", "standard"]  # train.parametrization's values, for the checks that follow
ODD = [True, False, None, -math.inf, "é∂ƒ", "a" * 300, "\t", "null", "~", "~nosuchuser/t.npy"]
ODD += ["x" * 300 + ".npy", "~nosuchuser"]
CONTAINERS = [[], [1, 2], ["median"], [1.5, "median"], [True], [[1]], {}, {"a": 1}, {"low": 1}]
NASTY: list[Any] = [*INTS, *HUGE, *FLOATS, *STRINGS, *ODD, *CONTAINERS]
# As YAML text, for --set values and edits of the file's text.
NASTY_TEXT = [
    *("9223372036854775808", "1e400", "-1e400", ".nan", ".inf", "-.inf", "1" * 5000),
    *("0x" + "f" * 40, "[1, 2", "{a: 1", "'x", "!!python/object:os.system x", "*undefined"),
    *("&a [1, *a]", "[]", "{}", "", "~", "yes", "off", "1_000_000", "0o777", "2**63", "-0"),
    *("1e-320", ": :", "- -", "[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]"),
]
# The data section's own surface: source strings with and without a kind prefix, text fields and
# tokenizer folders (validate must judge them without reading a file).
SOURCES = ["jsonl:", "jsnl:x.jsonl", "datasets:~nosuchuser/ds", "parquet:/nonexistent/", "text::"]
SOURCES += ["csv:" + "x" * 300, "a.jsonl.gz", "C:x.parquet", "http://x/y.jsonl", "hf", "\x00:x"]
DATA_EDITS: list[dict[str, Any]] = [
    {"sources": SOURCES},
    {"sources": "jsonl:"},
    {"text_field": ""},
    {"text_field": "t" * 300},
    {"text_field": None},
    {"text_field": ["text"]},
    {"tokenizer": {"kind": "hf"}},
    {"tokenizer": {"kind": "hf", "path": ""}},
    {"tokenizer": {"kind": "hf", "path": "~nosuchuser/tok"}},
    {"tokenizer": {"kind": "hf", "path": ["a"]}},
    {"tokenizer": {"kind": "HF", "path": "tok"}},
]
NASTY += SOURCES
KEYS = [
    "n_layr",
    "choices",
    "r_start",
    "dimensions",
    "type",
    "value",
    "x",
    "",
    "1",
    "when",
    "train.lr",
    "model.d_model",
    "train.nope",
    "model.init_std",
    "train.compile",
    "lr.shape",
    "lr.r_start",
    "lr.part",
    "lr.width_power",
    "lr.embedding",
    "init.shape",
    "init.part",
    "lr.ratios",
    "lr.",
    "lr.nope",
]
WIDTH_VALUES = ["0", "-1", "nan", "inf", "-inf", "1e308", "5e-324", "9223372036854775808"]
WIDTH_VALUES += ["1e-20", "1" * 30, "abc", "", "2.5", "1000", "1025", "1e6", "700", "1e-4"]


# -------------------------------------------------------------------------------------------------
# Cases (plain data in, a study file and CLI arguments out)


def _load(path: Path) -> Any:
    import yaml

    return yaml.safe_load(path.read_text())


def _dump(doc: Any) -> str:
    import yaml

    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _bases() -> list[dict[str, Any]]:
    """The shipped studies, and the quickstart with each shipped space inline."""
    bases = [_load(p) for p in sorted((ROOT / "studies").glob("*.yaml"))]
    quick = _load(ROOT / "studies" / "quickstart.yaml")
    for path in sorted((ROOT / "search_spaces").glob("*.yaml")):
        study = {**copy.deepcopy(quick), "space": _load(path)}
        if path.stem == "continuous":  # a grid needs a finite space
            study["search"] = {**study["search"], "sampler": "tpe"}
        bases.append(study)
    # every tracker on (tracking:), so edits reach their fields and values
    tracking = {
        "mlflow": {"uri": "http://127.0.0.1:5000", "experiment": "quick"},
        "wandb": {"project": "quick", "mode": "offline", "dir": "wandb"},
        "tensorboard": True,
    }
    bases.append({**copy.deepcopy(quick), "tracking": tracking})
    # setting dimensions (train.X / model.X) of every kind: log range, bool, name, int, fixed
    dims = {
        "train.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
        "train.thp": {"type": "categorical", "choices": [True, False]},
        "train.lr_schedule": {"type": "categorical", "choices": ["cosine", "wsd"]},
        "train.warmup_tokens": {"type": "int", "low": 0, "high": 40000, "step": 10000},
        "model.init_std": {"type": "fixed", "value": 0.01},
    }
    study = copy.deepcopy(quick)
    study["space"]["dimensions"] = {**study["space"]["dimensions"], **dims}
    study["search"] = {**study["search"], "sampler": "random", "n_trials": 4}
    bases.append(study)
    return bases


def schema_fields() -> list[tuple[str, ...]]:
    """Every field path of ``StudyConfig``, nested models included: ``("racing", ...)`` too."""
    import typing

    from pydantic import BaseModel

    from tlmsearch.config import StudyConfig

    def models_in(annotation: Any) -> list[type[BaseModel]]:
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            return [annotation]
        return [m for arg in typing.get_args(annotation) for m in models_in(arg)]

    def walk(model: type[BaseModel], prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
        out = []
        for name, field in model.model_fields.items():
            key = (*prefix, field.alias or name)
            out.append(key)
            for sub in models_in(field.annotation):
                out += walk(sub, key)
        return out

    return walk(StudyConfig, ())


def set_field(rng: random.Random, doc: Any, fields: list[tuple[str, ...]]) -> Any:
    """Set one schema field (creating its parents) to a nasty value, or a nasty ``--set``."""
    if not isinstance(doc, dict):
        return doc
    path = rng.choice(fields)
    node = doc
    for key, after in itertools.pairwise(path):
        value = node.get(key)
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            value = rng.choice(value)  # objectives: one of the list's entries
        elif isinstance(value, dict) and after not in value and value:
            inner = list(value.values())  # space.dimensions: one dimension by name
            value = rng.choice(inner) if all(isinstance(v, dict) for v in inner) else value
        if not isinstance(value, dict):
            value = node[key] = {}
        node = value
    node[path[-1]] = _nasty(rng, node.get(path[-1]))
    return doc


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


def _get(node: Any, path: tuple) -> Any:
    for p in path:
        node = node[p]
    return node


def _nasty(rng: random.Random, like: Any = None) -> Any:
    if isinstance(like, int | float) and not isinstance(like, bool) and rng.random() < 0.4:
        factor = rng.choice([2**40, 10**9, -1, 0.5, 1e300, 1e-300, 3, 1000])
        try:
            value = like * factor
            return int(value) if isinstance(like, int) and math.isfinite(value) else value
        except OverflowError:  # an int past float range, from an earlier edit
            return math.inf
    value = copy.deepcopy(rng.choice(NASTY))
    if isinstance(value, list) and rng.random() < 0.1:
        value = value * rng.choice([10, 10, 1000])  # a long list
    return value


def _misspell(rng: random.Random, key: str) -> str:
    i = rng.randrange(max(1, len(key)))
    typos = [key[:i] + key[i + 1 :], key[:i] + key[i : i + 1] + key[i:], key.upper(), key + "s"]
    return rng.choice(typos) or "x"


def mutate_tree(rng: random.Random, doc: Any) -> Any:
    """One edit at a random node: replace, delete, misspell, add a key, wrap, swap, repeat."""
    paths = _paths(doc)
    path = rng.choice(paths)
    ops = ["replace", "replace", "replace", "delete", "misspell", "add_key", "wrap", "swap", "dup"]
    op = rng.choice(ops)
    if not path:  # the document itself
        if op == "add_key" and isinstance(doc, dict):
            doc[rng.choice(KEYS)] = _nasty(rng)
            return doc
        return rng.choice([doc, [doc], {"study": doc}])
    parent, last = _get(doc, path[:-1]), path[-1]
    value = parent[last]
    if op == "delete":
        del parent[last]
    elif op == "misspell" and isinstance(last, str):
        parent[_misspell(rng, last)] = parent.pop(last)
    elif op == "add_key" and isinstance(value, dict):
        value[rng.choice(KEYS)] = _nasty(rng)
    elif op == "wrap":
        if isinstance(value, dict):
            parent[last] = list(value.values()) or [value]
        elif isinstance(value, list):
            parent[last] = {str(i): v for i, v in enumerate(value)}
        else:
            parent[last] = rng.choice([[value], {"value": value}])
    elif op == "swap":
        other = rng.choice(paths)
        parent[last] = copy.deepcopy(_get(doc, other)) if other else {"x": 1}
    elif op == "dup" and isinstance(value, list) and value:
        value.extend([rng.choice(value)] * rng.choice([1, 1, 5, 300]))
    else:
        parent[last] = _nasty(rng, value)
    return doc


def mutate_text(rng: random.Random, text: str) -> str:
    """One edit of the YAML text: truncation, a stray character, a line lost or doubled or
    shifted, deep nesting, an alias bomb, a scalar YAML reads oddly."""
    lines = text.splitlines()
    ops = ["truncate", "insert", "delete_line", "dup_line", "indent", "nest", "bomb", "scalar"]
    op = rng.choice(ops)
    i = rng.randrange(max(1, len(lines)))
    if op == "truncate":
        return text[: rng.randrange(len(text) + 1)]
    if op == "insert":
        pos = rng.randrange(len(text) + 1)
        junk = rng.choice([":", "[", "{", "]", "}", "-", "\t", "&a", "*a", "!!", "%", "\x00", "'"])
        return text[:pos] + junk + text[pos:]
    if op == "delete_line" and lines:
        del lines[i]
    elif op == "dup_line" and lines:
        lines.insert(i, lines[i])
    elif op == "indent" and lines:
        lines[i] = " " * rng.choice([1, 2, 3, 5]) + lines[i]
    elif op == "nest":  # past what a recursive parser can take
        depth = rng.choice([50, 300, 600])
        inner = "[" * depth + "]" * depth if rng.random() < 0.5 else "{a: " * depth + "}" * depth
        key = rng.choice(["model", "space", "name", "train", "search", "objectives", "x"])
        lines.append(f"{key}: {inner}")
    elif op == "bomb":  # 10**9 leaves by alias: cheap to parse, ruinous to walk or print
        lines += ["x0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
        lines += [f"x{k}: &a{k} [{', '.join([f'*a{k - 1}'] * 10)}]" for k in range(1, 9)]
        key = rng.choice(["x8", "model", "name", "description", "space", "search"])
        lines.append(f"{key}: *a8")
    elif lines and ":" in lines[i]:
        lines[i] = f"{lines[i].split(':', 1)[0]}: {rng.choice(NASTY_TEXT)}"
    return "\n".join(lines) + "\n"


def overrides(rng: random.Random, doc: Any) -> list[str]:
    """``--set`` options: at real keys mostly, with bad values; some malformed."""
    out = []
    keys = [p for p in _paths(doc) if p and all(isinstance(k, str) for k in p)]
    for _ in range(rng.choice([1, 1, 2, 3])):
        r = rng.random()
        if r < 0.1:
            out += ["--set", rng.choice(["oops", "=1", "a..b=1", ".=x", "model.=1", "a b=1"])]
            continue
        path = ".".join(rng.choice(keys)) if keys and r < 0.8 else rng.choice(KEYS) + ".x"
        value = rng.choice(NASTY_TEXT) if rng.random() < 0.5 else json.dumps(_nasty(rng))
        out += ["--set", f"{path}={value}"]
    return out


def widths_args(rng: random.Random) -> list[str]:
    args = ["widths", "--shape"]
    args.append(rng.choice(["cosine", "linear", "sigmoid", "blocks", "uniform", "custom", "x"]))
    options = [("--start", "1.5"), ("--end", "0.5"), ("--layers", "12"), ("--d-ff", "2048")]
    options += [("--multiple-of", "16"), ("--k", "10")]
    for opt, good in options:
        if rng.random() < 0.6:
            args += [opt, good if rng.random() < 0.5 else rng.choice(WIDTH_VALUES)]
    if rng.random() < 0.3:
        args += ["--preset", rng.choice(["wider_early", "uniform", "nope", ""])]
    if rng.random() < 0.3:
        args.append("--json")
    return args


def make_case(
    i: int, seed: int, n_validate: int, bases: list[dict], tmp: Path, fields: list[tuple]
) -> list[str]:
    """Write case i's files under ``tmp`` and return its CLI arguments."""
    rng = random.Random(f"{seed}/{i}")
    if i >= n_validate:
        return widths_args(rng)
    doc: Any = copy.deepcopy(rng.choice(bases))
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        doc = set_field(rng, doc, fields) if rng.random() < 0.3 else mutate_tree(rng, doc)
    if rng.random() < 0.04 and isinstance(doc, dict):
        if not isinstance(doc.get("data"), dict):
            doc["data"] = {}
        edit = copy.deepcopy(rng.choice(DATA_EDITS))
        if "sources" in edit and isinstance(edit["sources"], list):
            edit["sources"] = rng.sample(SOURCES, rng.randint(1, 3))
        doc["data"].update(edit)
    args = []
    kind = rng.random()
    if kind < 0.12 and isinstance(doc, dict) and isinstance(doc.get("space"), dict):
        text = _dump(mutate_tree(rng, copy.deepcopy(doc["space"])))  # a space file of its own
        (tmp / "space.yaml").write_text(mutate_text(rng, text) if rng.random() < 0.4 else text)
        doc["space"] = str(tmp / "space.yaml")
    elif kind < 0.3:
        args += overrides(rng, doc)
    text = _dump(doc)
    if rng.random() < 0.25:
        text = mutate_text(rng, text)
    if rng.random() < 0.01:
        (tmp / "study.yaml").write_bytes(b"name: \xff\xfe\n" + text.encode())  # not UTF-8
    else:
        (tmp / "study.yaml").write_text(text)
    no_config = ["--no-config"] if rng.random() < 0.7 else []
    return ["validate", str(tmp / "study.yaml"), *args, *no_config]


# -------------------------------------------------------------------------------------------------
# The loop (in a child process, under the memory cap)


def peak_rss() -> int:
    """Peak resident memory of this process, in bytes.

    VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across exec, so a child of a
    large pytest process would report its parent's peak.
    """
    import resource

    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        unit = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB elsewhere
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit
    line = next(x for x in status.splitlines() if x.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


class CaseTimeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout(f"no answer within {CASE_SECONDS} s")


def run_cases(n_validate: int, n_widths: int, seed: int, tmp: Path, only: int | None) -> dict:
    import signal
    import traceback

    import typer.main
    import typer.testing

    from tlmsearch.cli import app

    # CliRunner rebuilds the click command from the typer app on every call (~a third of a
    # case's time); one command serves every case.
    command = typer.main.get_command(app)
    typer.testing._get_command = lambda _app: command  # type: ignore[attr-defined]
    bases, runner, fields = _bases(), typer.testing.CliRunner(), schema_fields()
    exits: dict[str, int] = {}
    crashes: list[dict[str, Any]] = []
    longest, slowest = 0, (0.0, -1)
    signal.signal(signal.SIGALRM, _alarm)
    start = time.perf_counter()
    indices = [only] if only is not None else range(n_validate + n_widths)
    for i in indices:
        args = make_case(i, seed, n_validate, bases, tmp, fields)
        t0 = time.perf_counter()
        signal.alarm(CASE_SECONDS)
        try:
            result = runner.invoke(app, args)
        finally:
            signal.alarm(0)
        slowest = max(slowest, (time.perf_counter() - t0, i))
        exits[str(result.exit_code)] = exits.get(str(result.exit_code), 0) + 1
        longest = max(longest, len(result.output))
        exc = result.exception
        crashed = exc is not None and not isinstance(exc, SystemExit)
        silent = args[0] == "validate" and result.exit_code == 2 and "error: " not in result.output
        if crashed or silent or result.exit_code not in (0, 2):
            tb = "".join(traceback.format_exception(*result.exc_info)) if crashed else ""
            crash = {"case": i, "args": args, "exit": result.exit_code, "error": repr(exc)[:300]}
            crashes.append({**crash, "traceback": tb[-2000:], "output": result.output[-500:]})
            print(json.dumps(crashes[-1]), file=sys.stderr, flush=True)
        if only is not None:
            print(result.output, file=sys.stderr)
    return {
        "cases": len(indices),
        "exits": exits,
        "crashes": crashes,
        "seconds": round(time.perf_counter() - start, 1),
        "peak_rss_bytes": peak_rss(),
        "memory_cap_bytes": MEMORY_CAP,
        "longest_output_chars": longest,
        "slowest_case": {"case": slowest[1], "seconds": round(slowest[0], 2)},
    }


def main(argv: list[str]) -> None:
    import resource

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=CASES, help="validate cases")
    parser.add_argument("--widths-cases", type=int, default=WIDTHS_CASES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--case", type=int, default=None, help="replay this one case")
    parser.add_argument("--show", action="store_true", help="with --case: print its files")
    parser.add_argument("--tmp", type=Path, default=None, help="where case files are written")
    opts = parser.parse_args(argv)
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    sys.path.insert(0, str(ROOT))
    with tempfile.TemporaryDirectory() as default_tmp:
        tmp = opts.tmp or Path(default_tmp)
        tmp.mkdir(parents=True, exist_ok=True)
        summary = run_cases(opts.cases, opts.widths_cases, opts.seed, tmp, opts.case)
        if opts.show:
            for f in sorted(tmp.glob("*.yaml")):
                print(f"--- {f}\n{f.read_text(errors='replace')[:3000]}", file=sys.stderr)
    print(json.dumps(summary))


# -------------------------------------------------------------------------------------------------
# The test


@pytest.mark.slow  # a fuzzer: many studies through the CLI
def test_fuzzed_studies_exit_0_or_2_within_a_memory_cap(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seed = request.config.getoption("randomly_seed", None)
    seed = seed if isinstance(seed, int) else 0  # the run's: new cases every run
    pythonpath = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, __file__, "--tmp", str(tmp_path), "--seed", str(seed)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": pythonpath},
        timeout=900,
    )
    replay = f"python tests/test_fuzz_studies.py --seed {seed} --case N --show"
    assert proc.returncode == 0, f"fuzz seed {seed} ({replay}):\n{proc.stderr[-3000:]}"
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    print({k: v for k, v in summary.items() if k != "crashes"})  # shown with pytest -s
    assert summary["cases"] == CASES + WIDTHS_CASES
    crashes = json.dumps(summary["crashes"][:5], indent=1)
    assert not summary["crashes"], f"fuzz seed {seed}, replay a case: {replay}\n{crashes}"
    assert set(summary["exits"]) <= {"0", "2"}, summary["exits"]
    assert summary["peak_rss_bytes"] < MEMORY_CAP


# -------------------------------------------------------------------------------------------------
# Models built by other code (model.arch: hf, plugins): validating them imports transformers and
# torch, which the capped loop above must not, so they are fuzzed here in-process.

HF_KEYS = [
    "model_type",
    "config",
    "num_key_value_heads",
    "hidden_act",
    "attention_bias",
    "rope_parameters",
    "layer_types",
    "mlp_bias",
    "head_dim",
    "hidden_size",
    "intermediate_size",
    "num_kv_heads",
    "sliding_window",
]
HF_TYPES = ["llama", "qwen2", "mistral", "lama", "bert", "gpt2", "t5", "", "hf", "LLAMA"]
PLUGINS = [
    "plugin_model:build",
    "plugin_model:raises",
    "plugin_model:wrong_logits",
    "plugin_model:nothing",
    "plugin_model:NOT_CALLABLE",
    "no_such_mod_q:build",
    "plugin_model:one_site_short",
    "json:loads",
    "tlmsearch.models:build_model",
    "a.b.c:d",
    "plugin_model:",
    ":build",
    "plugin_model:build:x",
    "1mod:build",
]
HF_CASES = 80


def hf_case(rng: random.Random, tmp: Path) -> dict[str, Any]:
    """A quickstart whose model is an hf family or a plugin, with nasty values put in."""
    doc = _load(ROOT / "studies" / "quickstart.yaml")
    doc.pop("target", None)  # one model: half the time per case
    model = doc["model"]
    if rng.random() < 0.3:
        model["arch"] = rng.choice(PLUGINS)
        if rng.random() < 0.3:
            model["hf"] = {"model_type": "llama"}
        return doc
    model["arch"] = "hf" if rng.random() < 0.9 else rng.choice(["transformer", "titans"])
    hf: Any = {"model_type": rng.choice(HF_TYPES)}
    for _ in range(rng.choice([0, 1, 1, 2, 3])):
        key = rng.choice(HF_KEYS)
        hf[key] = _nasty(rng) if rng.random() < 0.6 else rng.choice([*HF_TYPES, 1, 2, 3, 4])
    if "config" in hf and rng.random() < 0.5:
        path = tmp / "config.json"
        path.write_text(
            rng.choice(
                [
                    '{"model_type": "qwen2", "layer_types": ["a", "b"]}',
                    '{"model_type": "llama"}',
                    "[1]",
                    "{",
                    '{"x": 1}',
                ]
            )
        )
        hf["config"] = str(path)
    model["hf"] = hf if rng.random() < 0.9 else rng.choice(NASTY)
    return doc


@pytest.mark.slow  # a fuzzer: many studies through the CLI
def test_fuzzed_hf_and_plugin_models_exit_0_or_2_naming_the_model(tmp_path: Path) -> None:
    import typer.testing

    from tlmsearch.cli import app

    runner = typer.testing.CliRunner()
    exits: dict[int, int] = {}
    for i in range(HF_CASES):
        rng = random.Random(f"hf/{i}")
        doc = hf_case(rng, tmp_path)
        (tmp_path / "study.yaml").write_text(_dump(doc))
        result = runner.invoke(app, ["validate", str(tmp_path / "study.yaml"), "--no-config"])
        exits[result.exit_code] = exits.get(result.exit_code, 0) + 1
        crashed = result.exception is not None and not isinstance(result.exception, SystemExit)
        assert not crashed and result.exit_code in (0, 2), (i, doc["model"], result.output)
        if result.exit_code == 2:
            assert "error: " in result.output and "model" in result.output, (i, result.output)
    assert exits.get(0, 0) >= 3 and exits.get(2, 0) >= 40, exits  # deterministic: {2: 76, 0: 4}


if __name__ == "__main__":
    main(sys.argv[1:])
