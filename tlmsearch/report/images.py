"""PNG export of the report's figures through kaleido, which drives a Chromium.

kaleido 1.x brings no browser of its own: it needs Chrome or Chromium on the machine (Debian:
``apt-get install -y chromium``), or one named by ``BROWSER_PATH``. When either piece is
missing, :class:`ImageExportError` says what to install instead of a stack trace.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from tlmsearch.report.html import Figure

INSTALL_HINT = (
    "PNG export needs kaleido (pip install 'tlmsearch[images]' or pip install kaleido) and a "
    "Chrome/Chromium: on Debian/Ubuntu run 'apt-get install -y chromium', elsewhere install "
    "Chrome or set BROWSER_PATH to a Chrome/Chromium binary. The HTML report needs neither."
)
_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")


class ImageExportError(RuntimeError):
    """No way to draw PNGs here; the message says what to install."""


def find_chromium() -> str | None:
    """The browser kaleido would use: BROWSER_PATH, else kaleido's search, else PATH."""
    if os.environ.get("BROWSER_PATH"):
        return os.environ["BROWSER_PATH"] if Path(os.environ["BROWSER_PATH"]).exists() else None
    try:
        from choreographer.browsers.chromium import Chromium

        found = Chromium.find_browser(skip_local=False)
        if found:
            return str(found)
    except Exception:  # kaleido's helper missing or changed: fall back to PATH
        pass
    return next((p for p in map(shutil.which, _NAMES) if p), None)


def write_pngs(
    figures: Sequence[Figure], out_dir: str | Path, width: int = 1200, scale: float = 1.5
) -> list[Path]:
    """Write ``<out_dir>/<figure id>.png`` for each figure; return the paths."""
    try:
        import kaleido  # noqa: F401
    except ImportError:
        raise ImageExportError(f"kaleido is not installed. {INSTALL_HINT}") from None
    browser = find_chromium()
    if browser is None:
        raise ImageExportError(f"no Chrome/Chromium found. {INSTALL_HINT}")
    import plotly.io as pio

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{f.id.removeprefix('fig-')}.png" for f in figures]
    env_before = os.environ.get("BROWSER_PATH")
    os.environ["BROWSER_PATH"] = browser  # make kaleido use the browser found above
    todo = list(range(len(figures)))
    try:
        # kaleido 1.5 can return without writing a file (seen with stdin at /dev/null, as under
        # nohup, CI or pytest: the first figure went missing): check, and draw the missing again
        for _ in range(3):
            pio.write_images(
                [figures[i].fig for i in todo],
                [paths[i] for i in todo],
                format="png",
                width=width,
                height=[figures[i].fig.layout.height or 500 for i in todo],
                scale=scale,
            )
            todo = [i for i in todo if not paths[i].is_file()]
            if not todo:
                break
    except Exception as err:
        raise ImageExportError(f"PNG export failed with {browser}: {err}. {INSTALL_HINT}") from err
    finally:
        if env_before is None:
            os.environ.pop("BROWSER_PATH", None)
        else:
            os.environ["BROWSER_PATH"] = env_before
    if todo:
        missing = ", ".join(paths[i].name for i in todo)
        raise ImageExportError(f"kaleido with {browser} wrote no file for {missing} (3 tries)")
    return paths
