""".ci/install.py: `make setup` installs with uv, as pip is configured to install."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("ci_install", ROOT / ".ci" / "install.py")
install = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(install)

# what `pip config list` printed on a machine with a wheel folder and two local indexes
LISTED = """\
:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/elsewhere'
"""


def test_pips_configuration_becomes_uvs_flags_with_pips_precedence() -> None:
    config = install.pip_config(LISTED)
    assert config["find-links"] == "/opt/wheels"  # PIP_FIND_LINKS over pip.conf's global
    flags, env = install.uv_options(config)
    assert flags[:2] == ["--index-strategy", "unsafe-best-match"]
    pairs = list(zip(flags[2::2], flags[3::2], strict=True))
    assert pairs == [
        ("--extra-index-url", "file:///opt/pypi/simple"),
        ("--extra-index-url", "file:///opt/pypi-more/simple"),
        ("--find-links", "/opt/wheels"),
        ("--constraint", "/etc/xdg/pip/constraints.txt"),
    ]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT": "180"}


def test_no_configuration_is_pypi_alone_and_odd_lines_are_skipped() -> None:
    assert install.pip_config("") == {}
    odd = "no equals sign\nsite.index-url='x'\n=nothing\nglobal.no-index='true'\n"
    config = install.pip_config(odd)
    assert config == {"no-index": "true"}  # an unknown section is not pip's: left out
    assert install.uv_options(config) == (
        ["--index-strategy", "unsafe-best-match", "--no-index"],
        {},
    )


@given(
    sections=st.lists(st.sampled_from([":env:", "install", "global"]), min_size=1, max_size=3),
    value=st.text(alphabet="abc/:._-", min_size=1, max_size=12),
)
def test_the_most_specific_section_wins_whatever_the_order(sections, value) -> None:
    rank = {":env:": 2, "install": 1, "global": 0}
    lines = [f"{s}.index-url='{value}{s}'" for s in sections]
    best = max(sections, key=rank.__getitem__)
    assert install.pip_config("\n".join(lines))["index-url"] == value + best


def test_the_setup_installs_through_it() -> None:
    assert '.ci/install.py -e ".[' in (ROOT / "Makefile").read_text()


@pytest.mark.parametrize("uv", ["fails", "missing"])
def test_pip_installs_when_uv_cannot(uv, monkeypatch, capsys) -> None:
    ran: list[list[str]] = []

    def run(cmd, **kwargs):
        ran.append(cmd)
        code = 1 if cmd[0] == "/bin/uv" else 0
        return subprocess.CompletedProcess(cmd, code, stdout=LISTED, stderr="")

    monkeypatch.setattr(install.subprocess, "run", run)
    monkeypatch.setattr(install, "_uv", lambda: "/bin/uv" if uv == "fails" else None)
    assert install.main(["-e", ".[dev]"]) == 0
    assert ran[-1] == [sys.executable, "-m", "pip", "install", "-q", "-e", ".[dev]"]
    said = capsys.readouterr().err
    if uv == "fails":
        assert [c[0] for c in ran] == [sys.executable, "/bin/uv", sys.executable]
        assert "--find-links /opt/wheels" in said and "pip installs instead" in said
    else:
        assert len(ran) == 1 and "no uv" in said


def test_uv_installs_with_pips_configuration(monkeypatch) -> None:
    ran: list[tuple[list[str], dict]] = []

    def run(cmd, **kwargs):
        ran.append((cmd, kwargs.get("env") or {}))
        return subprocess.CompletedProcess(cmd, 0, stdout=LISTED, stderr="")

    monkeypatch.setattr(install.subprocess, "run", run)
    monkeypatch.setattr(install, "_uv", lambda: "/bin/uv")
    assert install.main(["-e", "."]) == 0
    (listed, _), (cmd, env) = ran
    assert listed[-2:] == ["config", "list"]
    assert cmd[:4] == ["/bin/uv", "pip", "install", "-q"] and cmd[-2:] == ["-e", "."]
    assert "--compile-bytecode" in cmd and cmd[cmd.index("--python") + 1] == sys.executable
    assert "--constraint" in cmd and env["UV_HTTP_TIMEOUT"] == "180"
