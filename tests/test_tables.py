"""One Table, the same cells in the terminal and in the report."""

from __future__ import annotations

import pytest
from rich.console import Console

from tlmsearch.tables import Table


def test_the_terminal_and_the_page_show_the_same_text():
    """A label with brackets is text, not rich markup (the terminal printed 'runs//rung-0')."""
    t = Table("rungs", ("rung", "run dir"), [("0", "runs/[a]/rung-0"), ("1", "<b>x</b>")])
    console = Console(width=120, record=True)
    console.print(t.rich())
    shown = console.export_text()
    assert "runs/[a]/rung-0" in shown and "<b>x</b>" in shown
    page = t.html()
    assert "runs/[a]/rung-0" in page and "&lt;b&gt;x&lt;/b&gt;" in page


def test_a_row_of_the_wrong_width_is_refused():
    with pytest.raises(ValueError, match="a row has 1 cells for 2 columns"):
        Table("t", ("a", "b"), [("only",)])
