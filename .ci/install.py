"""Install packages into this interpreter's environment with uv, as pip is configured to.

    python .ci/install.py -e ".[dev]"     (what `make setup` runs with .venv's python)

uv installs tlmsearch's ~150 packages, bytecode compiled, in about 40 s where pip takes about
150 s on 2 cores (docs/benchmarks.md, "Quickstart wall time"), so the README's two commands spend
their time on the study and the tests, not on the install. uv reads none of pip's
configuration, so this script hands it pip's own: the index, extra indexes, find-links folders,
constraint files, trusted hosts, certificate and timeout that `pip config list` reports
(pip.conf files and PIP_* variables), and pip's rule for several indexes (the best version
across all of them). A machine whose pip is set up for a private index or a wheel folder gets
the same packages either way.

Without a uv for this platform, when pip's configuration cannot be read or sets something uv
is not handed here (a proxy, a client certificate, binary-only rules, ...), or when uv fails,
pip installs the same arguments (slower, and says so first).
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import os
import shlex
import subprocess
import sys

# pip option -> uv pip install option (repeatable ones: each value of pip's list its own flag)
FLAGS = {
    "index-url": "--index-url",
    "extra-index-url": "--extra-index-url",
    "find-links": "--find-links",
    "constraint": "--constraint",
    "trusted-host": "--allow-insecure-host",
}
# read here too (the rest of uv_options); other install settings are pip's alone
HANDED = {*FLAGS, "no-index", "cert", "timeout"}
# pip's settings that change nothing uv installs (pip's own output, checks and caches)
PIPS_OWN = {
    "disable-pip-version-check",
    "no-cache-dir",
    "cache-dir",
    "quiet",
    "verbose",
    "progress-bar",
    "no-color",
    "no-input",
    "root-user-action",
    "retries",
    "log",
    "config-file",
}
ALIASES = {"default-timeout": "timeout"}  # pip's --timeout has both names
TRUE = ("y", "yes", "t", "true", "on", "1")  # pip's strtobool


def pip_config(text: str) -> dict[str, str]:
    """``pip config list``'s ``section.key=value`` lines (each value as Python's repr, a
    multi-line one with its newlines escaped) -> {key: value}, by pip's precedence: a PIP_*
    variable (section ``:env:``) over ``install``, over ``global``."""
    rank = {":env:": 2, "install": 1, "global": 0}
    found: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        section, dot, key = name.strip().rpartition(".")
        if not (sep and dot) or section not in rank:
            continue
        try:
            value = str(ast.literal_eval(value.strip()))
        except (SyntaxError, ValueError):
            value = value.strip()
        key = ALIASES.get(key, key)
        if key not in found or rank[section] >= found[key][0]:
            found[key] = (rank[section], value)
    return {key: value for key, (_, value) in found.items()}


def not_handed(config: dict[str, str]) -> list[str]:
    """pip's settings that would change what gets installed but are not handed to uv here."""
    return sorted(k for k in config if k not in HANDED and k not in PIPS_OWN)


def uv_options(config: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """pip's configuration -> (uv flags, environment variables) that install the same packages.
    pip's lists (several indexes, folders, files, hosts) are separated by whitespace, newlines
    included."""
    flags = ["--index-strategy", "unsafe-best-match"]  # pip's rule: best version of all indexes
    for key, flag in FLAGS.items():
        for value in config.get(key, "").split():
            flags += [flag, value]
    if config.get("no-index", "").strip().lower() in TRUE:
        flags.append("--no-index")
    env = {}
    if config.get("cert"):
        env["SSL_CERT_FILE"] = config["cert"]
    with contextlib.suppress(KeyError, ValueError):  # none, or not a number: uv's default
        env["UV_HTTP_TIMEOUT"] = str(max(1, round(float(config["timeout"]))))
    return flags, env


def _uv() -> str | None:
    """The uv binary of this environment, installed with pip when missing; None without one."""
    for attempt in range(2):
        try:
            from uv import find_uv_bin

            return find_uv_bin()
        except (ImportError, FileNotFoundError):
            if attempt:
                return None
            # a platform without a uv wheel: pip says why; the install goes on with pip
            subprocess.run([sys.executable, "-m", "pip", "install", "-q", "uv"], check=False)
            importlib.invalidate_caches()  # see the package pip just put there
    return None


def main(args: list[str]) -> int:
    pip = [sys.executable, "-m", "pip", "install", "-q", *args]
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    )
    config = pip_config(listed.stdout)
    left_out = not_handed(config)
    if listed.returncode != 0:
        why = f"`pip config list` failed ({listed.stderr.strip()[-300:]})"
    elif left_out:
        why = f"pip's configuration sets {', '.join(left_out)}, not handed to uv"
    elif (uv := _uv()) is None:  # fetched only when it would be used
        why = "no uv for this platform"
    else:
        flags, env = uv_options(config)
        # --compile-bytecode: as pip does, or the first processes that import ray and pandas
        # compile their .pyc files themselves
        cmd = [uv, "pip", "install", "-q", "--compile-bytecode", "--python", sys.executable]
        cmd += [*flags, *args]
        done = subprocess.run(cmd, env={**os.environ, **env})
        if done.returncode == 0:
            return 0
        why = f"uv failed ({shlex.join(cmd)})"
    print(f"install: {why}; pip installs instead (a few minutes)", file=sys.stderr)
    return subprocess.run(pip).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
