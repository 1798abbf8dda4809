"""One table, shown in the terminal and in the report: its cells are built once, as text.

A leaf (docs/contributing.md, rule 19): the CLI renders a :class:`Table` with rich, the report
as HTML, so the two never disagree about a number or a column.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Table:
    """``columns`` and ``rows`` of text; ``notes``: lines said after it (one per row that needs
    one).

    >>> t = Table("agreement", ("rungs", "tau"), [("0 -> 1", "+0.80")], caption="95% CI")
    >>> t.html().split("<tr>")[2].split("</tr>")[0]  # text is escaped
    '<td>0 -&gt; 1</td><td>+0.80</td>'
    """

    title: str
    columns: Sequence[str]
    rows: Sequence[Sequence[str]]
    caption: str = ""
    notes: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        for row in self.rows:
            if len(row) != len(self.columns):
                raise ValueError(
                    f"{self.title}: a row has {len(row)} cells for "
                    f"{len(self.columns)} columns: {row}"
                )

    def rich(self) -> Any:
        """A ``rich.table.Table`` (the terminal)."""
        from rich.table import Table as RichTable
        from rich.text import Text

        t = RichTable(title=self.title, caption=self.caption or None)
        for col in self.columns:
            t.add_column(col)
        for row in self.rows:  # Text: a label's "[a]" is text, as in the HTML, not rich markup
            t.add_row(*(Text(str(c)) for c in row))
        return t

    def html(self) -> str:
        """The report's HTML: a heading, the table, its caption and notes."""
        e = html.escape
        head = "".join(f"<th>{e(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{e(str(c))}</td>" for c in row) + "</tr>" for row in self.rows
        )
        out = f"<h3>{e(self.title)}</h3><table><tr>{head}</tr>{body}</table>"
        if self.caption:
            out += f"<p class='sub'>{e(self.caption)}</p>"
        return out + "".join(f"<p class='sub'>{e(n)}</p>" for n in self.notes)
