"""Install packages into this interpreter's environment with uv, as pip is configured to.

    python .ci/install.py -e ".[dev]"     (what `make setup` runs with .venv's python)

uv installs tlmsearch's ~150 packages in about 15 s where pip takes about 150 s
(docs/benchmarks.md, "The test suite"), so the README's two commands spend their time on the
study and the tests, not on the install. uv reads none of pip's configuration, so this script
hands it pip's own: the index, extra indexes, find-links folders, constraint files, trusted
hosts and certificate that `pip config list` reports (pip.conf files and PIP_* variables), and
pip's rule for several indexes (the best version across all of them). A machine whose pip is
set up for a private index or a wheel folder gets the same packages either way.

Without a uv for this platform, or when uv fails, pip installs the same arguments (slower, and
says so first).
"""

from __future__ import annotations

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


def pip_config(text: str) -> dict[str, str]:
    """``pip config list``'s ``section.key='value'`` lines -> {key: value}, by pip's precedence:
    a PIP_* variable (section ``:env:``) over ``install``, over ``global``."""
    rank = {":env:": 2, "install": 1, "global": 0}
    found: dict[str, tuple[int, str]] = {}
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        section, dot, key = name.strip().rpartition(".")
        if not (sep and dot) or section not in rank:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if key not in found or rank[section] >= found[key][0]:
            found[key] = (rank[section], value)
    return {key: value for key, (_, value) in found.items()}


def uv_options(config: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """pip's configuration -> (uv flags, environment variables) that install the same packages.
    pip's lists (several indexes, folders, files) are whitespace-separated."""
    flags = ["--index-strategy", "unsafe-best-match"]  # pip's rule: best version of all indexes
    for key, flag in FLAGS.items():
        for value in config.get(key, "").split():
            flags += [flag, value]
    if config.get("no-index", "").lower() in ("1", "true", "yes", "on"):
        flags.append("--no-index")
    env = {}
    if config.get("cert"):
        env["SSL_CERT_FILE"] = config["cert"]
    timeout = config.get("timeout") or config.get("default-timeout")
    if timeout:
        env["UV_HTTP_TIMEOUT"] = timeout
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
    uv = _uv()
    if uv is not None:
        listed = subprocess.run(
            [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
        )
        flags, env = uv_options(pip_config(listed.stdout))
        # --compile-bytecode: as pip does, or every process of the first test run compiles
        # the .pyc files of torch, ray and pandas itself
        cmd = [uv, "pip", "install", "-q", "--compile-bytecode", "--python", sys.executable]
        cmd += [*flags, *args]
        done = subprocess.run(cmd, env={**os.environ, **env})
        if done.returncode == 0:
            return 0
        print(f"install: uv failed ({shlex.join(cmd)}); pip installs instead", file=sys.stderr)
    else:
        print("install: no uv for this platform; pip installs (a few minutes)", file=sys.stderr)
    return subprocess.run(pip).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
