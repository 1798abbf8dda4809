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
    try:
        pio.write_images(
            [f.fig for f in figures],
            paths,
            format="png",
            width=width,
            height=[f.fig.layout.height or 500 for f in figures],
            scale=scale,
        )
    except Exception as err:
        raise ImageExportError(f"PNG export failed with {browser}: {err}. {INSTALL_HINT}") from err
    finally:
        if env_before is None:
            os.environ.pop("BROWSER_PATH", None)
        else:
            os.environ["BROWSER_PATH"] = env_before
    return paths
