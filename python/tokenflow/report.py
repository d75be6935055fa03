"""The HTML report of ``tokenflow demo``: one self-contained file (figures embedded as base64
PNG, no scripts, no external resources), each figure with its two-line explanation, the numbers
behind it and the command that recomputes it."""
from __future__ import annotations

import base64
import datetime
import html
import math
import platform
from pathlib import Path

from . import __version__

_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }
h1 { font-size: 1.6em; margin-bottom: 0.2em; }
h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 0.2em; }
.meta, .note { color: #666; font-size: 0.9em; }
figure { margin: 0.5em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
p.explanation { margin: 0.3em 0; line-height: 1.4; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0; }
td, th { border: 1px solid #ddd; padding: 0.2em 0.6em; text-align: left; }
th { background: #f6f6f6; }
code { background: #f3f3f3; padding: 0.1em 0.3em; }
"""


def format_number(value) -> str:
    """Numbers for people: 4 significant digits, lists shortened, dicts as "key: value, ...", None as '-'.

    >>> format_number({2: 97, 3: 3}), format_number(0.123456), format_number([1, 2.5])
    ('2: 97, 3: 3', '0.1235', '[1, 2.5]')
    """
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return f"{value:.4g}"
    if isinstance(value, dict):  # e.g. runs per rank: "2: 97, 3: 3"
        return ", ".join(f"{k}: {format_number(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        items = [format_number(v) for v in value]
        return "[" + ", ".join(items if len(items) <= 8 else items[:4] + ["..."] + items[-3:]) + "]"
    return str(value)


def _image(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img src="data:image/png;base64,{data}" alt="{html.escape(alt)}">'


def write_report(path, entries, summary: dict, images_dir) -> None:
    """Writes report.html from figure entries (file, title, explanation, numbers, command)."""
    images_dir = Path(images_dir)
    quick = summary.get("quick", False)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>tokenflow demo</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>tokenflow demo</h1>",
        '<p class="meta">'
        + html.escape(f"tokenflow {__version__} · {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} · "
                      f"{platform.node()} · computed in {summary.get('wall_seconds', float('nan')):.1f} s"
                      + (" · quick mode (reduced sizes)" if quick else ""))
        + "</p>",
        "<p>Tokens as particles of a measure moving by attention: each figure below was computed by the "
        "C++ engine, and sits next to what the theory predicts. Every number comes from the data "
        "files beside this report.</p>",
    ]
    for e in entries:
        parts.append(f'<section id="{html.escape(Path(e["file"]).stem)}">')
        parts.append(f"<h2>{html.escape(e['title'])}</h2>")
        for line in e["explanation"].split("\n"):
            parts.append(f'<p class="explanation">{html.escape(line)}</p>')
        parts.append(f"<figure>{_image(images_dir / e['file'], e['title'])}</figure>")
        rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(format_number(v))}</td></tr>"
                       for k, v in e["numbers"].items())
        parts.append(f"<table>{rows}</table>")
        note = f"Recompute: <code>{html.escape(e.get('command', ''))}</code>"
        if e.get("wall_seconds") is not None:
            note += f" ({e['wall_seconds']:.1f} s here)"
        parts.append(f'<p class="note">{note}</p></section>')
    pending = summary.get("pending", [])
    if pending:
        parts.append("<h2>Not in this build yet</h2><ul>")
        for p in pending:
            parts.append(f"<li><b>{html.escape(p['name'])}</b>: {html.escape(p['title'])} "
                         f"(needs {html.escape(p['needs'])})</li>")
        parts.append("</ul>")
    parts.append("</body></html>")
    Path(path).write_text("\n".join(parts) + "\n", encoding="utf-8")
