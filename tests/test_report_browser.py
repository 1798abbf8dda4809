"""The report in a real browser: headless Chromium, offline, from a copy of the run dir.

The page records its own render status (which plot divs rendered, any JavaScript error) into a
hidden element; ``--dump-dom`` reads it back after the scripts ran, and Chromium's console log
on stderr is checked for uncaught errors too. A screenshot lands in the test's tmp dir.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from fixtures_run import make_run, study_dict
from report_checks import with_checks

from tlmsearch.report.html import write_report
from tlmsearch.report.images import find_chromium

CHROMIUM = find_chromium()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="no Chromium binary: apt-get install -y chromium (.ci/with-services.sh does)",
    ),
]
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--host-resolver-rules=MAP * ~NOTFOUND",  # offline: no name resolves
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=10000",  # let every script and timer finish before dumping
]


def chromium(page: Path, profile: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()]
    return subprocess.run(args, capture_output=True, text=True, timeout=90)


def render_status(page: Path, profile: Path) -> tuple[dict, list[str]]:
    res = chromium(page, profile, "--window-size=1400,2000", "--dump-dom")
    found = re.search(r'<pre id="render-status"[^>]*>([^<]*)</pre>', res.stdout)
    assert found, f"no render status in the page (rc {res.returncode}): {res.stderr[-2000:]}"
    uncaught = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln and "Uncaught" in ln]
    return json.loads(found.group(1)), uncaught


@pytest.fixture(scope="module")
def copied_report(tmp_path_factory) -> Path:
    """A report written in one run dir, then opened from a copy of that dir (as a user would)."""
    base = tmp_path_factory.mktemp("browser")
    study = study_dict(
        objectives=[{"metric": "val_bpb"}, {"metric": "tokens_per_s"}, {"metric": "params"}]
    )
    run = make_run(base / "run", study=study, pruned=(3,), failed=(5,))
    page = write_report(run)
    page.write_text(with_checks(page.read_text()))  # the test's render probe, not shipped
    copy = base / "copy"
    shutil.copytree(run, copy)
    return copy / "report.html"


def test_report_renders_every_figure_offline_without_errors(copied_report, tmp_path):
    status, uncaught = render_status(copied_report, tmp_path / "profile")
    ids = re.findall(
        r'<div id="(fig-[a-z0-9-]+)" class="plotly-graph-div"', copied_report.read_text()
    )
    assert (
        len(ids) == 11
    )  # fronts, 4 Pareto (3 pairs + 3D), widths, curves, parcoords, imp, deltas, told-apart
    assert status["plotly"] is True
    assert status["errors"] == [] and uncaught == []
    assert status["empty"] == [] and sorted(status["rendered"]) == sorted(ids)
    shot = tmp_path / "report.png"
    res = chromium(
        copied_report, tmp_path / "profile", "--window-size=1400,3000", f"--screenshot={shot}"
    )
    assert shot.exists() and shot.stat().st_size > 20_000, res.stderr[-2000:]
    print(f"screenshot: {shot}")


def test_the_check_catches_a_broken_page(copied_report, tmp_path):
    """Negative baseline: a script error and a plot div that never renders are both reported."""
    text = copied_report.read_text()
    bad = '<div id="fig-broken" class="plotly-graph-div"></div><script>undefinedFn()</script>'
    head, _, tail = text.rpartition("</body>")
    broken = f"{head}{bad}</body>{tail}"
    page = tmp_path / "broken.html"
    page.write_text(broken)
    status, uncaught = render_status(page, tmp_path / "profile")
    assert status["empty"] == ["fig-broken"]
    assert any("undefinedFn" in e for e in status["errors"]) and uncaught


def test_live_dashboard_redraws_when_the_run_dir_changes(tmp_path, monkeypatch):
    """The page polls state.json; after the study writes new results it redraws in place."""
    import threading

    from fixtures_run import make_trials

    from tlmsearch.report import dashboard
    from tlmsearch.run_dir.tables import write_results

    run = make_run(tmp_path / "live", status="running", seeds=(0,))
    calls = []
    refresh = dashboard._State.refresh

    def counting(self):  # the study finishes more trials once the page has polled a few times
        calls.append(1)
        if len(calls) == 4:
            write_results(run, *make_trials(seeds=(0, 1)))
        return refresh(self)

    monkeypatch.setattr(dashboard._State, "refresh", counting)
    render = dashboard.render
    monkeypatch.setattr(dashboard, "render", lambda *a, **k: with_checks(render(*a, **k)))
    server = dashboard.make_server(run, port=0, interval=0.5)
    host, port = server.server_address[:2]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        # The same flags, but the dashboard on loopback must resolve.
        flags = [f for f in FLAGS if not f.startswith(("--host-resolver", "--virtual-time"))]
        args = [
            CHROMIUM,
            *flags,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=30000",
            "--dump-dom",
            f"http://{host}:{port}/",
        ]
        res = subprocess.run(args, capture_output=True, text=True, timeout=90)
    finally:
        server.shutdown()
        server.server_close()
    assert len(calls) > 4, "the page never polled"
    header = re.search(r'<p class="sub" id="header">(.*?)</p>', res.stdout).group(1)
    assert "complete: <b>14</b>" in header  # it was 7 when the page loaded
    assert "updated" in re.search(r'<span id="live">(.*?)</span>', res.stdout).group(1)
    status = json.loads(re.search(r'<pre id="render-status"[^>]*>([^<]*)', res.stdout).group(1))
    # one objective: fronts, deltas, widths, curves, parcoords, imp, told-apart (no Pareto)
    assert status["errors"] == [] and status["empty"] == [] and len(status["rendered"]) == 7


def test_png_export_with_chromium(copied_report, tmp_path):
    from tlmsearch.report.html import build
    from tlmsearch.report.images import write_pngs
    from tlmsearch.run_dir.tables import load_run

    figures = build(load_run(copied_report.parent)).figures[:2]  # fronts and Pareto: enough
    paths = write_pngs(figures, tmp_path / "png")
    assert [p.name for p in paths] == ["ratio-front.png", "pareto-0.png"]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 10_000
