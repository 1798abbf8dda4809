""".ci/install.py: `make setup` installs with uv, as pip is configured to install."""

from __future__ import annotations

import importlib.util
import os
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
:env:.disable-pip-version-check='1'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/xdg/pip/constraints.txt'
global.extra-index-url='file:///opt/pypi/simple file:///opt/pypi-more/simple'
global.find-links='/opt/elsewhere'
global.timeout='60'
"""


def test_pips_configuration_becomes_uvs_flags_with_pips_precedence() -> None:
    config = install.pip_config(LISTED)
    assert config["find-links"] == "/opt/wheels"  # PIP_FIND_LINKS over pip.conf's global
    assert config["timeout"] == "180"  # PIP_DEFAULT_TIMEOUT is pip's --timeout too: it wins
    assert install.not_handed(config) == []
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


def test_pips_own_listing_of_multi_line_values_is_read(tmp_path) -> None:
    """pip.conf's usual form for several indexes or hosts, one a line: `pip config list`
    prints the value's repr, newlines escaped; each becomes a flag of its own."""
    conf = tmp_path / "pip.conf"
    conf.write_text(
        "[global]\nextra-index-url =\n    https://a.example/simple\n    https://b.example/simple\n"
        "trusted-host = a.example\n    b.example\n[install]\nfind-links = C:\\wheels\n"
    )
    env = {**os.environ, "PIP_CONFIG_FILE": str(conf)}
    for var in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST"):
        env.pop(var, None)
    listed = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, env=env
    )
    assert listed.returncode == 0, listed.stderr
    flags, _ = install.uv_options(install.pip_config(listed.stdout))
    pairs = set(zip(flags[2::2], flags[3::2], strict=False))
    assert {
        ("--extra-index-url", "https://a.example/simple"),
        ("--extra-index-url", "https://b.example/simple"),
        ("--allow-insecure-host", "a.example"),
        ("--allow-insecure-host", "b.example"),
        ("--find-links", "C:\\wheels"),
    } <= pairs


def test_no_configuration_is_pypi_alone_and_odd_lines_are_skipped() -> None:
    assert install.pip_config("") == {}
    odd = "no equals sign\nsite.index-url='x'\n=nothing\nglobal.no-index='t'\n"
    config = install.pip_config(odd)
    assert config == {"no-index": "t"}  # a section pip does not print: left out
    assert install.uv_options(config) == (
        ["--index-strategy", "unsafe-best-match", "--no-index"],
        {},
    )


def test_a_setting_uv_is_not_handed_sends_the_install_to_pip(monkeypatch, capsys) -> None:
    listed = LISTED + "global.proxy='http://proxy.example:3128'\n"
    ran, _ = _fake_run(monkeypatch, listed, uv_code=0)
    assert install.main(["-e", "."]) == 0
    assert [c[0] for c in ran] == [sys.executable, sys.executable]  # config list, then pip
    assert "sets proxy, not handed to uv" in capsys.readouterr().err


def _fake_run(monkeypatch, listed: str, uv_code: int, config_code: int = 0) -> tuple[list, list]:
    """subprocess.run as main calls it, recorded: (each command, the environment it was given);
    ``pip config list`` prints ``listed``, uv exits ``uv_code``."""
    ran: list[list[str]] = []
    envs: list[dict] = []

    def run(cmd, **kwargs):
        ran.append(cmd)
        envs.append(kwargs.get("env") or {})
        code = uv_code if cmd[0] == "/bin/uv" else config_code if "config" in cmd else 0
        return subprocess.CompletedProcess(cmd, code, stdout=listed, stderr="broken")

    monkeypatch.setattr(install.subprocess, "run", run)
    monkeypatch.setattr(install, "_uv", lambda: "/bin/uv")
    return ran, envs


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


@pytest.mark.parametrize("uv", ["fails", "missing", "no config"])
def test_pip_installs_when_uv_cannot(uv, monkeypatch, capsys) -> None:
    ran, _ = _fake_run(monkeypatch, LISTED, uv_code=1, config_code=int(uv == "no config"))
    if uv == "missing":
        monkeypatch.setattr(install, "_uv", lambda: None)
    assert install.main(["-e", ".[dev]"]) == 0
    assert ran[-1] == [sys.executable, "-m", "pip", "install", "-q", "-e", ".[dev]"]
    said = capsys.readouterr().err
    if uv == "fails":
        assert [c[0] for c in ran] == [sys.executable, "/bin/uv", sys.executable]
        assert "--find-links /opt/wheels" in said and "pip installs instead" in said
    else:
        assert "/bin/uv" not in [c[0] for c in ran]
        assert ("no uv" if uv == "missing" else "pip config list` failed (broken)") in said


def test_uv_installs_with_pips_configuration(monkeypatch) -> None:
    ran, envs = _fake_run(monkeypatch, LISTED, uv_code=0)
    assert install.main(["-e", "."]) == 0
    listed, cmd = ran
    assert listed[-2:] == ["config", "list"]
    assert cmd[:4] == ["/bin/uv", "pip", "install", "-q"] and cmd[-2:] == ["-e", "."]
    assert "--compile-bytecode" in cmd and cmd[cmd.index("--python") + 1] == sys.executable
    assert "--constraint" in cmd and envs[1]["UV_HTTP_TIMEOUT"] == "180"
