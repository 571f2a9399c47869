"""The evaluation report: ``results.json``, ``results.csv``, ``results.md`` and a self-contained ``report.html``.

The HTML file needs nothing else to render offline: CSS is inline, figures are
embedded as base64 PNG data URIs, and no font, script or stylesheet is fetched.
Every text is HTML-escaped; every file is written atomically.
"""
from __future__ import annotations

import base64
import html
import os
from datetime import datetime
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from ..data_prep.atomic import atomic_write_text
from ..data_prep.errors import VoxanonError
from .results import Result, to_csv, to_json
from .tables import (Table, condition_groups, condition_heading, condition_tables, group_attackers, long_table,
                     markdown_tables_by_condition, markdown_tables_by_family, table_notes, validate_results)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A figure: (caption, path of a PNG file).
FigureFile = tuple[str, str | os.PathLike]

_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; margin: 24px;
       color: #1d1d1f; background: #fff; line-height: 1.4; }
h1 { margin: 0 0 4px 0; font-size: 1.6em; }
h2 { margin-top: 28px; border-bottom: 1px solid #ccc; padding-bottom: 4px; font-size: 1.25em; }
h3 { margin: 18px 0 6px 0; font-size: 1.05em; }
h4 { margin: 10px 0 4px 0; font-size: 0.95em; color: #333; }
.date { color: #555; margin-bottom: 12px; }
/* Wide tables scroll inside their own box instead of widening the page past the window. */
.table-scroll { max-width: 100%; overflow-x: auto; margin-bottom: 8px; }
table { border-collapse: collapse; font-size: 0.9em; }
ul.table-notes { font-size: 0.9em; color: #333; padding-left: 20px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; white-space: nowrap; }
th { background: #eef1f5; text-align: left; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.missing { color: #999; text-align: center; }
tbody tr:nth-child(even) { background: #f8f9fb; }
table.notes tr:nth-child(n) { background: none; }
table.notes th { background: none; border: none; padding-right: 16px; vertical-align: top; }
table.notes td { border: none; white-space: pre-wrap; overflow-wrap: anywhere;
                 font-family: ui-monospace, "DejaVu Sans Mono", monospace; }
h1, h2, h3, h4, summary { overflow-wrap: anywhere; }
.figures { display: flex; flex-wrap: wrap; gap: 16px; align-items: flex-start; }
figure { margin: 0; max-width: 600px; flex: 1 1 480px; }
figure img { width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #333; margin-top: 4px; }
details summary { cursor: pointer; font-weight: 600; margin: 8px 0; }
"""


def _figure_png(caption: str, path: str | os.PathLike) -> bytes:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise VoxanonError(f"figure {caption!r}: cannot read {path}: {error.strerror or error}") from error
    if not data.startswith(PNG_SIGNATURE):
        raise VoxanonError(f"figure {caption!r}: {path} is not a PNG file")
    return data


def _html_table(table: Table) -> str:
    def cell(tag: str, text: str, numeric: bool) -> str:
        css = "missing" if text == "-" and tag == "td" else ("num" if numeric else "")
        attribute = f' class="{css}"' if css else ""
        return f"<{tag}{attribute}>{html.escape(text)}</{tag}>"

    head = "".join(cell("th", text, numeric) for text, numeric in zip(table.header, table.numeric))
    body = "\n".join("<tr>" + "".join(cell("td", text, numeric) for text, numeric in zip(row, table.numeric))
                     + "</tr>" for row in table.rows)
    return (f'<div class="table-scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n'
            "</table></div>")


def _html_notes(notes: Mapping[str, object]) -> str:
    rows = "\n".join(f"<tr><th>{html.escape(str(key))}</th><td>{html.escape(str(value))}</td></tr>"
                     for key, value in notes.items())
    return f'<div class="table-scroll"><table class="notes">\n{rows}\n</table></div>'


def render_html(results: Sequence[Result], figures: Sequence[tuple[str, bytes]], title: str, date: str,
                notes: Mapping[str, object], remarks: Sequence[str] = ()) -> str:
    """The report page; ``figures`` holds (caption, PNG bytes); ``remarks`` are listed under the tables."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        "<header>",
        f"<h1>{html.escape(title)}</h1>",
        f'<div class="date">{html.escape(date)}</div>',
    ]
    if notes:
        parts.append(_html_notes(notes))
    parts += ["</header>", "<h2>Results by condition</h2>"]
    for condition, group in condition_groups(results):
        parts.append(f"<h3>{html.escape(condition_heading(condition, group_attackers(group)))}</h3>")
        for title, table in condition_tables(group):
            parts += ([f"<h4>{html.escape(title)}</h4>"] if title else []) + [_html_table(table)]
    table_explanations = table_notes(results) + list(remarks)
    if table_explanations:
        items = "".join(f"<li>{html.escape(note)}</li>" for note in table_explanations)
        parts.append(f'<ul class="table-notes">{items}</ul>')
    if figures:
        parts += ["<h2>Figures</h2>", '<div class="figures">']
        for caption, png in figures:
            source = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
            parts.append(f'<figure><img src="{source}" alt="{html.escape(caption)}">'
                         f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        parts.append("</div>")
    parts += [
        "<h2>All results</h2>",
        f"<details>\n<summary>{len(results)} labelled results (set, system, condition, attacker, model, metric, variant)</summary>",
        _html_table(long_table(results)),
        "</details>",
        "</body>",
        "</html>",
    ]
    return "\n".join(parts) + "\n"


def render_markdown(results: Sequence[Result], figures: Sequence[FigureFile], title: str, date: str,
                    notes: Mapping[str, object], out_dir: Path, remarks: Sequence[str] = ()) -> str:
    """``results.md``: header, tables by condition (``remarks`` under them, e.g. what was not computed), every
    metric in tables by metric family (none wider than :data:`~voxanon.eval.tables.MAX_COLUMNS` columns;
    ``results.csv`` has every record), links to the figures."""
    lines = [f"# {title}", "", date, ""]
    lines += [f"- **{key}**: {value}" for key, value in notes.items()]
    if notes:
        lines.append("")
    lines += ["## Results by condition", "", markdown_tables_by_condition(results)]
    if remarks:
        lines += [*(f"- {remark}" for remark in remarks), ""]
    lines += ["## All metrics", "", markdown_tables_by_family(results)]
    if figures:
        lines += ["## Figures", ""]
        lines += [f"![{caption}]({Path(os.path.relpath(Path(path).resolve(), out_dir.resolve())).as_posix()})"
                  for caption, path in figures]
        lines.append("")
    return "\n".join(lines)


def write_report(out_dir: str | os.PathLike, results: Iterable[Result], figures: Sequence[FigureFile], title: str,
                 notes: Mapping[str, object] | None = None, remarks: Sequence[str] = ()) -> Path:
    """Write results.json, results.csv, results.md and report.html into ``out_dir``; returns the HTML path.

    ``figures`` are (caption, PNG path) pairs, embedded into the HTML; ``notes`` (protocol,
    encoder, data paths, versions, ...) are shown under the title, ``remarks`` (what was not
    computed, and why) under the tables.
    """
    out_dir = Path(out_dir)
    results = validate_results(results)
    notes = dict(notes or {})
    pngs = [(str(caption), _figure_png(str(caption), path)) for caption, path in figures]
    date = datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    atomic_write_text(out_dir / "results.json", to_json(results))
    atomic_write_text(out_dir / "results.csv", to_csv(results))
    atomic_write_text(out_dir / "results.md", render_markdown(results, figures, title, date, notes, out_dir,
                                                                     remarks))
    report = out_dir / "report.html"
    atomic_write_text(report, render_html(results, pngs, title, date, notes, remarks))
    return report
