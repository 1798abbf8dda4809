"""The HTML report, the CLI commands, the live dashboard, PNG export errors, the import guard."""

from __future__ import annotations

import json
import select
import socket
import subprocess
import sys
import threading
import time
import types
import urllib.request
from pathlib import Path

import pytest
from fixtures_run import make_run, make_trials, random_trials, study_dict
from proc_sockets import is_loopback, tree_listeners
from typer.testing import CliRunner

from tlmsearch.cli import app
from tlmsearch.config import PartialStudy
from tlmsearch.report import dashboard, images
from tlmsearch.report.html import build, render, write_report
from tlmsearch.run_dir.tables import load_run, write_results

PLOTLY_BANNER = "* plotly.js v"  # the licence header at the top of the bundle

EDGE_CASES = {
    "empty": {"trials": [], "curves": []},
    "one_trial": {
        "trials": make_trials(shapes=("cosine",), ratios=(1.5,), seeds=(0,), baseline=False)[0]
    },
    "all_pruned": dict(zip(("trials", "curves"), make_trials(pruned=range(99)), strict=True)),
    "failed": dict(zip(("trials", "curves"), make_trials(failed=(0, 3)), strict=True)),
    "single_seed": {"seeds": (0,)},
    "single_shape": {"shapes": ("cosine",)},
    "multi_objective": {
        "study": study_dict(
            objectives=[{"metric": "val_bpb"}, {"metric": "tokens_per_s"}, {"metric": "params"}]
        )
    },
}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run(tmp_path_factory.mktemp("run") / "synthetic", pruned=(3,), failed=(5,))


def test_page_order_one_plotlyjs_and_offline(run_dir):
    path = write_report(run_dir)
    assert path == run_dir / "report.html"
    text = path.read_text()
    assert text.count(PLOTLY_BANNER) == 1, "plotly.js must be embedded exactly once"
    assert "<script src=" not in text and "<link " not in text  # nothing fetched at load
    ids = [f.id for f in build(load_run(run_dir)).figures]
    # what a newcomer sees first; one objective: the effects stand where a front would
    assert ids[:2] == ["fig-ratio-front", "fig-deltas"]
    pos = [text.index(f'id="{i}"') for i in ids]
    assert pos == sorted(pos)
    assert text.index("id='summary'") > pos[1]
    assert "RuntimeError: out of memory" in text  # failed trials are listed with their reason


@pytest.mark.parametrize("case", list(EDGE_CASES))
def test_every_figure_has_content_in_edge_cases(tmp_path, case):
    run = load_run(make_run(tmp_path / case, **EDGE_CASES[case]))
    report = build(run)
    n_pareto = 4 if case == "multi_objective" else 0
    assert sum(f.id.startswith("fig-pareto") for f in report.figures) == n_pareto
    assert [f.id for f in report.figures].count("fig-deltas") == 1
    for f in report.figures:
        notes = [a.text for a in f.fig.layout.annotations or []]
        assert len(f.fig.data) or notes, f"{case}: {f.id} would be a blank plot"
    html = render(report, "t")
    assert html.count('class="plotly-graph-div"') == len(report.figures)


def test_report_says_what_the_study_supports_and_shows_the_race(tmp_path):
    study = study_dict(seeds=(0, 1, 2))
    plain = write_report(make_run(tmp_path / "plain", study=study, seeds=(0, 1, 2))).read_text()
    assert plain.index("id='conclusions-box'") < plain.index('id="fig-separation"')
    assert plain.index('id="fig-separation"') < plain.index("id='effects-box'")
    assert "beats uniform on 3/3 seeds" in plain and "noise units" in plain
    assert "<h3>Effects vs uniform</h3>" in plain and "<h3>Race</h3>" not in plain
    snr = plain[plain.index("<h3>Signal-to-noise</h3>") : plain.index("<h3>Supported</h3>")]
    assert "arXiv 2508.13144" in snr and "over 7 candidates, uniform included" in snr
    assert "sd over the last evals of 21 trials, detrended" in snr  # the run's curves
    study["search"]["racing"] = {"max_seeds": 3, "confidence": 0.95}
    raced = write_report(make_run(tmp_path / "raced", study=study, seeds=(0, 1, 2))).read_text()
    assert "<h3>Race</h3>" in raced and "up to 3 of seeds [0, 1, 2]" in raced
    assert "Uniform (the baseline) completed seeds 0, 1, 2" in raced


def test_one_objective_shows_effects_not_a_front_against_tokens_per_s(tmp_path):
    """At equal FLOPs tokens/s differences are noise: no metric-vs-throughput front, and the
    page says why and what stands instead; with two objectives the fronts come back first."""
    one = build(load_run(make_run(tmp_path / "one")))
    assert not any(f.id.startswith("fig-pareto") for f in one.figures)
    deltas = next(f for f in one.figures if f.id == "fig-deltas")
    assert "no Pareto front" in deltas.note and "equal FLOPs" in deltas.note
    titles = [f.fig.layout.title.text for f in one.figures]
    assert not any("tokens/s" in (t or "") for t in titles)
    html = render(one, "t")
    order = [html.index(x) for x in ("id='no-pareto'", 'id="fig-deltas"', "id='summary'")]
    assert order == sorted(order)
    study = study_dict(objectives=[{"metric": "val_bpb"}, {"metric": "tokens_per_s"}])
    two = build(load_run(make_run(tmp_path / "two", study=study)))
    ids = [f.id for f in two.figures]
    assert ids[:2] == ["fig-ratio-front", "fig-pareto-0"] and "fig-deltas" in ids
    assert all(not f.note for f in two.figures)


def test_switch_between_perplexity_and_bits_per_byte(run_dir):
    fig = build(load_run(run_dir)).figures[0].fig
    buttons = fig.layout.updatemenus[0].buttons
    assert [b.label for b in buttons] == ["val perplexity", "val bits per byte"]
    ppl, bpb = (b.args[0]["visible"] for b in buttons)
    assert all(v != w for v, w in zip(ppl, bpb, strict=True))  # each trace in one view only
    visible_now = [bool(t.visible in (None, True)) for t in fig.data]
    assert visible_now == ppl


def test_user_text_is_escaped(tmp_path):
    trials, curves = make_trials(failed=(1,))
    trials[1]["reason"] = "<script>alert(1)</script>"
    text = write_report(make_run(tmp_path / "x", trials=trials, curves=curves)).read_text()
    assert "<script>alert(1)</script>" not in text.split("</head>", 1)[1].replace("\\u003c", "<")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_hundreds_of_trials_stay_few_traces(tmp_path):
    trials, curves = random_trials(500)
    report = build(load_run(make_run(tmp_path / "big", trials=trials, curves=curves)))
    for f in report.figures:
        assert len(f.fig.data) <= 12, f"{f.id} draws one trace per trial"


# -------------------------------------------------------------------------------------------------
# CLI


def test_cli_report_writes_and_prints_path(run_dir, tmp_path):
    out = tmp_path / "sub" / "r.html"
    res = CliRunner().invoke(app, ["report", str(run_dir), "-o", str(out), "--x", "taper"])
    assert res.exit_code == 0, res.output
    assert f"report: {out}" in res.output and out.stat().st_size > 1_000_000


def test_cli_report_bad_input(tmp_path):
    res = CliRunner().invoke(app, ["report", str(tmp_path / "missing")])
    assert res.exit_code == 2 and "does not exist" in res.output
    res = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert res.exit_code == 2 and "not a run dir" in res.output


def test_cli_png_without_chromium_says_what_to_install(run_dir, tmp_path, monkeypatch):
    monkeypatch.setattr(images, "find_chromium", lambda: None)
    out = tmp_path / "r.html"
    res = CliRunner().invoke(app, ["report", str(run_dir), "-o", str(out), "--png", str(tmp_path)])
    assert res.exit_code == 1
    assert "apt-get install -y chromium" in res.output and "BROWSER_PATH" in res.output
    assert out.exists(), "the HTML report is written before PNG export is tried"


def test_find_chromium_honours_browser_path(monkeypatch, tmp_path):
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-browser"))
    assert images.find_chromium() is None
    exe = tmp_path / "chromium"
    exe.write_text("")
    monkeypatch.setenv("BROWSER_PATH", str(exe))
    assert images.find_chromium() == str(exe)


# -------------------------------------------------------------------------------------------------
# import guard: the report needs only the run dir, not torch or Ray

_BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('torch', 'ray'):
            raise ImportError(f'{name} is blocked in this test')
sys.meta_path.insert(0, Block())
from tlmsearch.cli import app
try:
    app(['report', sys.argv[1]])
except SystemExit as e:
    assert not e.code, e.code
from pathlib import Path
from tlmsearch.report.dashboard import make_server, optuna_dashboard_hint
from tlmsearch.run_dir.tables import load_run
print(optuna_dashboard_hint(Path(sys.argv[1]), load_run(sys.argv[1]).study))
make_server(sys.argv[1], port=0).server_close()
assert not {'torch', 'ray'} & set(sys.modules), sorted(sys.modules)
print('ok without torch and ray')
"""


def test_report_and_dashboard_work_without_torch_or_ray(run_dir):
    res = subprocess.run(
        [sys.executable, "-c", _BLOCK, str(run_dir)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ok without torch and ray" in res.stdout and "report.html" in res.stdout
    assert "optuna-dashboard sqlite:///" in res.stdout


# -------------------------------------------------------------------------------------------------
# live dashboard


def _get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.status, r.read()


def test_dashboard_serves_and_refreshes(tmp_path):
    run = make_run(tmp_path / "live", status="running", seeds=(0,))
    server = dashboard.make_server(run, port=0, interval=1.0)
    host, port = server.server_address[:2]
    assert host == "127.0.0.1"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://{host}:{port}"
        status, page = _get(base + "/")
        assert status == 200 and b"plotly.min.js" in page and b"fig-ratio-front" in page
        assert _get(base + "/plotly.min.js")[1].count(PLOTLY_BANNER.encode()) == 1
        first = json.loads(_get(base + "/state.json")[1])
        assert "complete: <b>7</b>" in first["header"]
        trials, curves = make_trials(seeds=(0, 1))  # the study moves on
        write_results(run, trials, curves)
        second = json.loads(_get(base + "/state.json")[1])
        assert second["stamp"] != first["stamp"] and "complete: <b>14</b>" in second["header"]
        assert set(second["figures"]) == set(first["figures"])
        assert "beats uniform on 2/2 seeds" in second["conclusions"]
        assert "<h3>Effects vs uniform</h3>" in second["effects"]
        with pytest.raises(urllib.error.HTTPError):
            _get(base + "/etc/passwd")
    finally:
        server.shutdown()
        server.server_close()


def test_dashboard_command_listens_on_loopback_only(tmp_path):
    """`tlmsearch dashboard RUN` with its defaults: every socket it listens on is on loopback."""
    run = make_run(tmp_path / "live", status="running", seeds=(0,))
    code = "import sys; from tlmsearch.cli import main; sys.argv[0] = 'tlmsearch'; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "dashboard", str(run), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline, line = time.time() + 60, ""
        while "live dashboard of" not in line and time.time() < deadline:
            if select.select([proc.stdout], [], [], 1.0)[0]:
                line = proc.stdout.readline()
                assert line, f"dashboard exited with {proc.wait()}"
        assert "http://127.0.0.1:" in line, line
        found = tree_listeners(proc.pid)
        assert found and all(is_loopback(s.host) for s in found), found
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback (::1)")
@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_dashboard_serves_on_ipv6_loopback(tmp_path, host):
    """`--host ::1` was refused: the server made an IPv4 socket for every address."""
    server = dashboard.make_server(make_run(tmp_path / "live", seeds=(0,)), host=host, port=0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = dashboard.url_of(server)
        assert url.startswith("http://[::1]:"), url
        assert _get(url)[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_a_name_listens_on_its_ipv4_address_when_it_has_one(monkeypatch):
    """Where /etc/hosts lists ``::1 localhost`` first, --host localhost stays on 127.0.0.1
    (ssh tunnels to 127.0.0.1 keep working); an IPv6-only name gets its IPv6 address."""
    v6 = (socket.AF_INET6, socket.SOCK_STREAM, 6, "", ("::1", 8050, 0, 0))
    v4 = (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", 8050))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [v6, v4])
    assert dashboard.listen_address("localhost", 8050) == (socket.AF_INET, ("127.0.0.1", 8050))
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [v6])
    assert dashboard.listen_address("ip6-localhost", 8050) == (socket.AF_INET6, v6[4])
    assert dashboard.listen_address("", 8050) == (socket.AF_INET, ("", 8050))  # every interface


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        (("127.0.0.1", 1), True),
        (("127.0.0.2", 1), True),
        (("::1", 1, 0, 0), True),
        (("::ffff:127.0.0.1", 1, 0, 0), True),
        (("", 1), False),
        (("0.0.0.0", 1), False),
        (("10.1.2.3", 1), False),
        (("fe80::1%eth0", 1, 0, 2), False),
    ],
)
def test_the_warning_judges_the_address_listened_on(address, loopback):
    server = types.SimpleNamespace(server_address=address)
    assert dashboard.is_loopback(server) is loopback


@pytest.mark.parametrize("host", ["a..b", "bad host", "[::1"])
def test_dashboard_bad_host_is_exit_2(tmp_path, host):
    run = make_run(tmp_path / "live", seeds=(0,))
    result = CliRunner().invoke(app, ["dashboard", str(run), "--port", "0", "--host", host])
    assert result.exit_code == 2, result.output
    assert f"--host {host!r} is not an address to listen on" in result.output


def test_optuna_dashboard_hint(tmp_path):
    def study(**storage: str) -> PartialStudy:
        return PartialStudy.model_validate({"storage": storage})

    hint = dashboard.optuna_dashboard_hint(tmp_path, study())
    assert hint.startswith(f"optuna-dashboard sqlite:///{tmp_path}/optuna.db --host 127.0.0.1")
    assert "optuna.journal" in dashboard.optuna_dashboard_hint(tmp_path, study(optuna="journal"))
    url = "postgresql://u@127.0.0.1/db"
    assert url in dashboard.optuna_dashboard_hint(tmp_path, study(optuna=url))
    used = "sqlite:////elsewhere/optuna.db"
    assert used in dashboard.optuna_dashboard_hint(tmp_path, study(), {"storage": used})


@pytest.mark.parametrize("n_objectives", [1, 2])
def test_a_report_builds_the_evidence_once_per_objective(tmp_path, monkeypatch, n_objectives):
    """Every ranking, effect, separation, sweep, summary and race of the page reads the study's
    one Evidence per objective (it was built four times for the first objective, and the race
    and rankings were derived again beside it). The report itself calls a statistic only to
    rank a front metric the study does not judge (val_ppl)."""
    import inspect

    from tlmsearch import evidence, stats

    objectives = [
        {"metric": "val_bpb", "direction": "minimize"},
        {"metric": "params", "direction": "minimize"},
    ][:n_objectives]
    run = make_run(tmp_path / "run", study=study_dict(objectives=objectives), pruned=(3,))
    data = load_run(run)
    builds, by_report = [], []
    real_build = evidence.Evidence.build.__func__

    def counted_build(cls, trials, value, *args, **kwargs):
        builds.append(value)
        return real_build(cls, trials, value, *args, **kwargs)

    def watched(name, real):
        def call(trials, value, *args, **kwargs):
            caller = inspect.stack()[1].frame.f_globals["__name__"]
            if caller.startswith("tlmsearch.report"):
                by_report.append((name, value))
            return real(trials, value, *args, **kwargs)

        return call

    monkeypatch.setattr(evidence.Evidence, "build", classmethod(counted_build))
    for name in ("rank", "pairwise", "effects", "mcb", "block_noise", "paired_deltas"):
        monkeypatch.setattr(stats, name, watched(name, getattr(stats, name)))
    report = build(data)
    from tlmsearch.run_dir.tables import metric_column

    assert sorted(builds) == sorted(metric_column(o["metric"]) for o in objectives)
    assert by_report == [("rank", "val_ppl"), ("paired_deltas", "val_bpb")]
    assert report.effects is not None and len(report.effects.table)


def test_the_shipped_page_carries_no_test_hooks(tmp_path):
    """The browser tests add their render probe themselves (tests/report_checks.py)."""
    page = write_report(make_run(tmp_path / "run")).read_text()
    assert "render-status" not in page and "tlmsearchErrors" not in page


def test_a_report_renders_a_race_lane_without_a_decision(tmp_path):
    """A candidate the race has not decided (still racing, or stopped by a prune) has no
    decision (separated is NA): the page says so instead of failing (it raised 'boolean value
    of NA is ambiguous', so the live dashboard of a race died)."""
    study = study_dict(seeds=(0, 1, 2))
    study["search"]["racing"] = {"max_seeds": 3, "confidence": 0.95}
    run = make_run(tmp_path / "run", study=study, seeds=(0, 1, 2), pruned=(4,))
    page = write_report(run).read_text()
    assert "Effects vs uniform" in page
    assert "not decided (racing, or stopped by a prune)" in page
