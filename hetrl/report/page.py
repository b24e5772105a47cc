"""The report as one self-contained HTML page: its pictures inline (base64 PNG), its notes and
the summary table, readable in MLflow's artifact preview."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Sequence

from hetrl.report.table import Link, Table

STYLE = """
body { font-family: system-ui, sans-serif; font-size: 14px; margin: 12px; max-width: 760px;
       color: #222; }
h1 { font-size: 18px; margin: 0 0 4px; } h2 { font-size: 15px; margin: 20px 0 4px; }
.meta, .caption { color: #555; font-size: 12px; } .note { background: #f6f6f0; padding: 6px 8px;
       border-left: 3px solid #c9a227; font-size: 12px; margin: 6px 0; }
pre { background: #f4f4f4; padding: 6px; font-size: 12px; white-space: pre-wrap; }
img { max-width: 100%; height: auto; display: block; }
table { border-collapse: collapse; font-size: 11px; display: block; overflow-x: auto; }
th, td { border: 1px solid #ddd; padding: 2px 5px; text-align: left; white-space: nowrap; }
th { background: #f0f0f0; position: sticky; top: 0; } td.num { text-align: right; }
tr.FAILED td, tr.KILLED td, tr.RUNNING td { color: #a33; }
"""


@dataclass
class Figure:
    title: str
    png: Path
    caption: str


def page(title: str, meta: Sequence[str], command: str, notes: Sequence[str],
         figures: Sequence[Figure], table: Table) -> str:
    """The HTML of the report: its title, a line of facts, the sweep's command, the notes,
    each figure (embedded) with its caption, and the table."""
    parts = [f"<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
             f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
             f"<h1>{escape(title)}</h1>",
             f"<p class=\"meta\">{' · '.join(escape(m) for m in meta)}</p>",
             f"<pre>{escape(command)}</pre>"]
    parts += [f"<p class=\"note\">{escape(note)}</p>" for note in notes]
    for figure in figures:
        data = base64.b64encode(figure.png.read_bytes()).decode("ascii")
        parts += [f"<h2>{escape(figure.title)}</h2>",
                  f"<img alt=\"{escape(figure.title)}\" src=\"data:image/png;base64,{data}\">",
                  f"<p class=\"caption\">{escape(figure.caption)}</p>"]
    parts += ["<h2>Jobs</h2>", _table(table), "</body></html>\n"]
    return "\n".join(parts)


def _table(table: Table) -> str:
    status = table.header.index("status")
    head = "".join(f"<th>{escape(h)}</th>" for h in table.header)
    rows = []
    for row in table.rows:
        cells = "".join(_cell(c) for c in row)
        rows.append(f"<tr class=\"{escape(row[status])}\">{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _cell(cell: str | Link) -> str:
    """One cell: a link opens in a tab of its own; a number aligns right."""
    if isinstance(cell, Link):
        return (f"<td><a href=\"{escape(cell.href)}\" target=\"_blank\" rel=\"noopener\">"
                f"{escape(cell.text)}</a></td>")
    return f"<td class=\"num\">{escape(cell)}</td>" if _number(cell) else (
        f"<td>{escape(cell)}</td>")


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
