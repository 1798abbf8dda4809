"""A live view of a run dir: the report's figures, refreshed while a study runs.

A stdlib HTTP server on 127.0.0.1 (another address only when asked) reads nothing but the run
dir: the page polls ``/state.json``, which rebuilds the figures when trials.parquet, curves,
run.json, study.yaml or analysis.parquet changed (their sizes and mtimes form a stamp), and
redraws with ``Plotly.react``. plotly.js is served from the installed plotly package: no
network needed.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from tlmsearch.report.html import (
    build,
    conclusions_html,
    effects_html,
    failed_html,
    figures_dict,
    header_html,
    render,
    summary_html,
)
from tlmsearch.run_dir import RunDir
from tlmsearch.run_dir.tables import load_run

if TYPE_CHECKING:
    from tlmsearch.config import StudyConfig

# what a running study rewrites (tlmsearch.run_dir): the page reloads when one changes
WATCHED = tuple(
    p.name
    for p in (
        RunDir(".").table("trials"),
        RunDir(".").table("curves"),
        RunDir(".").status,
        RunDir(".").study,
        RunDir(".").analysis,
    )
)

_POLL = """<script>
(function(){
  var stamp=%(stamp)s, ids=%(ids)s;
  function tick(){
    fetch('state.json?since='+encodeURIComponent(stamp),{cache:'no-store'})
      .then(function(r){return r.json();})
      .then(function(s){
        if(s.stamp===stamp){return;}
        stamp=s.stamp;
        if(JSON.stringify(Object.keys(s.figures))!==JSON.stringify(ids)){location.reload();return;}
        ids.forEach(function(id){var f=s.figures[id];Plotly.react(id,f.data,f.layout);});
        document.getElementById('header').innerHTML=s.header;
        document.getElementById('summary-box').innerHTML=s.summary;
        document.getElementById('failed-box').innerHTML=s.failed;
        document.getElementById('conclusions-box').innerHTML=s.conclusions;
        document.getElementById('effects-box').innerHTML=s.effects;
        document.getElementById('live').textContent='updated '+new Date().toLocaleTimeString();
        document.dispatchEvent(new Event('tlmsearch-redrawn'));
      })
      .catch(function(e){document.getElementById('live').textContent='offline: '+e;});
  }
  setInterval(tick,%(ms)d);
})();
</script>"""


def run_stamp(run_dir: Path) -> str:
    """Changes whenever a file the report reads is rewritten (writers replace files atomically)."""
    parts = []
    for name in WATCHED:
        p = run_dir / name
        st = p.stat() if p.exists() else None
        parts.append(f"{name}:{st.st_mtime_ns}:{st.st_size}" if st else f"{name}:-")
    return "|".join(parts)


def optuna_dashboard_hint(
    run_dir: Path, config: StudyConfig, status: dict[str, Any] | None = None
) -> str:
    """The optuna-dashboard command for this run's Optuna storage.

    run.json's ``storage`` (what the run really used) wins over the study's ``storage``.
    """
    from tlmsearch.errors import ConfigError
    from tlmsearch.search.sampling.storage import dashboard_command, storage_url

    url = (status or {}).get("storage")
    if not url:
        try:
            url = storage_url(config.storage, run_dir)
        except (ConfigError, TypeError, ValueError) as err:
            return f"optuna-dashboard <storage URL> (study.yaml's storage is unusable: {err})"
    return dashboard_command(url)


class _State:
    """The last built page and figures, rebuilt only when the run dir's stamp changes."""

    def __init__(self, run_dir: Path, interval: float) -> None:
        self.run_dir = run_dir
        self.interval = interval
        self.lock = threading.Lock()
        self.stamp = ""
        self.payload: dict[str, Any] = {}
        self.page = ""

    def refresh(self) -> None:
        with self.lock:
            stamp = run_stamp(self.run_dir)
            if stamp == self.stamp:
                return
            run = load_run(self.run_dir)
            report = build(run)
            figures = figures_dict(report)
            poll = _POLL % {
                "stamp": json.dumps(stamp),
                "ids": json.dumps(list(figures)),
                "ms": int(self.interval * 1000),
            }
            live = f"<p class='sub'>live view of {self.run_dir} · <span id='live'>…</span></p>"
            self.page = render(
                report,
                f"tlmsearch live: {run.name}",
                embed_plotlyjs=False,
                head_extra="<script src='plotly.min.js'></script>",
                tail_extra=live + poll,
            )
            self.payload = {
                "stamp": stamp,
                "figures": figures,
                "header": header_html(report.summary),
                "summary": summary_html(report.summary),
                "failed": failed_html(report.failed),
                "conclusions": conclusions_html(report),
                "effects": effects_html(report),
            }
            self.stamp = stamp


def make_server(
    run_dir: str | Path, host: str = "127.0.0.1", port: int = 8050, interval: float = 5.0
) -> ThreadingHTTPServer:
    """An HTTP server for the live page (port 0: any free port; see ``server.server_address``)."""
    from plotly.offline import get_plotlyjs

    run = load_run(run_dir)  # fails early, with a readable error, on a wrong path
    state = _State(run.path, interval)
    state.refresh()
    plotlyjs = get_plotlyjs().encode()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet: the terminal shows the URLs
            pass

        def _send(self, body: bytes, kind: str, status: int = 200) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Baseline", "no-store")
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = urlparse(self.path).path
            try:
                if path in ("/", "/index.html"):
                    state.refresh()
                    self._send(state.page.encode(), "text/html; charset=utf-8")
                elif path == "/state.json":
                    state.refresh()
                    self._send(json.dumps(state.payload).encode(), "application/json")
                elif path == "/plotly.min.js":
                    self._send(plotlyjs, "application/javascript")
                else:
                    self._send(b"not found", "text/plain", 404)
            except Exception as err:  # a half-written or broken run dir: say so, keep serving
                self._send(f"{type(err).__name__}: {err}".encode(), "text/plain", 500)

    family, address = listen_address(host, port)

    class Server(ThreadingHTTPServer):
        address_family = family

    return Server(address, Handler)


def listen_address(host: str, port: int) -> tuple[socket.AddressFamily, tuple]:
    """The socket family and address to bind for ``--host``: an IPv6 literal (``::1``, also in
    URL brackets, scope ids kept) on IPv6; a name on its IPv4 address when it has one (as
    before: ``localhost`` stays 127.0.0.1 where /etc/hosts lists ``::1`` first), else on its
    IPv6 one; ``""`` on every IPv4 interface, as the stdlib server takes it.
    Raises ``socket.gaierror`` (or ``UnicodeError``) for what is no address or name."""
    if host == "":
        return socket.AF_INET, ("", port)
    found = socket.getaddrinfo(
        bare_host(host), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    family, _, _, _, address = next((a for a in found if a[0] == socket.AF_INET), found[0])
    return family, address


def bare_host(host: str) -> str:
    """``[::1]`` (as written in URLs) -> ``::1``."""
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(server: ThreadingHTTPServer) -> bool:
    """Whether the server listens on a loopback address only (127.0.0.0/8, ::1, ::ffff:127.x)."""
    import ipaddress

    try:
        ip = ipaddress.ip_address(str(server.server_address[0]).split("%")[0])
    except ValueError:  # "" (every interface)
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def url_of(server: ThreadingHTTPServer) -> str:
    """The http URL a server listens on, an IPv6 address in brackets."""
    host, port = server.server_address[:2]
    return f"http://[{host}]:{port}/" if ":" in str(host) else f"http://{host}:{port}/"


def serve(
    run_dir: str | Path,
    host: str = "127.0.0.1",
    port: int = 8050,
    interval: float = 5.0,
    echo: Any = print,
) -> None:
    """Serve the live page until Ctrl-C."""
    from tlmsearch.errors import ConfigError
    from tlmsearch.search.ladder import is_ladder_run, rung_dirs

    if is_ladder_run(run_dir):  # its trials live in the rungs' run dirs
        rungs = rung_dirs(Path(run_dir))
        example = rungs[-1] if rungs else RunDir(run_dir).rung(0)
        raise ConfigError(
            f"{run_dir} is a ladder run: watch one rung, e.g. tlmsearch dashboard {example}"
        )
    server = make_server(run_dir, host, port, interval)
    run = Path(run_dir)
    echo(f"live dashboard of {run}: {url_of(server)} (Ctrl-C stops it)")
    if not is_loopback(server):
        echo(f"warning: listening on {host}, reachable from other machines; no authentication")
    data = load_run(run)
    hint = optuna_dashboard_hint(run, data.study, data.status)
    echo(f"Optuna's own dashboard of this run: {hint}")
    try:
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
