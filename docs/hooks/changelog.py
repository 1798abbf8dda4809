"""MkDocs hook: the site's changelog page shows the repository's CHANGELOG.md (one file, no
copy). docs/changelog.md itself only points there, for readers of the docs folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if page.file.src_uri == "changelog.md":
        return CHANGELOG.read_text(encoding="utf-8")
    return markdown
