"""PNG export: a file kaleido did not write is drawn again, then an error (no browser needed)."""

from __future__ import annotations

from pathlib import Path

import plotly.graph_objects as go
import pytest

from tlmsearch.report import images
from tlmsearch.report.html import Figure

# write_pngs checks that kaleido is installed before it calls it (the calls are faked below)
pytest.importorskip(
    "kaleido", reason="PNG export needs the images extra: pip install -e '.[images]' (make setup)"
)


def _figures() -> list[Figure]:
    return [Figure(f"fig-{n}", n, go.Figure()) for n in ("a", "b")]


def _fake(monkeypatch: pytest.MonkeyPatch, skip_first: int) -> list[list[str]]:
    """kaleido that leaves the first figure unwritten on its first ``skip_first`` calls."""
    calls: list[list[str]] = []
    import plotly.io as pio

    def write_images(figs, paths, **kw):
        calls.append([Path(p).name for p in paths])
        for i, p in enumerate(paths):
            if not (i == 0 and len(calls) <= skip_first):
                Path(p).write_bytes(b"\\x89PNG")

    monkeypatch.setattr(pio, "write_images", write_images)
    monkeypatch.setattr(images, "find_chromium", lambda: "/usr/bin/chromium")
    return calls


def test_a_missing_png_is_drawn_again(tmp_path, monkeypatch) -> None:
    calls = _fake(monkeypatch, skip_first=1)
    paths = images.write_pngs(_figures(), tmp_path)
    assert all(p.is_file() for p in paths)
    assert calls == [["a.png", "b.png"], ["a.png"]]  # only the missing one again


def test_a_png_never_written_is_an_error_not_a_silent_path(tmp_path, monkeypatch) -> None:
    _fake(monkeypatch, skip_first=99)
    with pytest.raises(images.ImageExportError, match=r"wrote no file for a\.png"):
        images.write_pngs(_figures(), tmp_path)
