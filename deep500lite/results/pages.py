"""HTML for the dashboard and ``history --plot FILE.html``: pages, tables and Plotly figures, all escaped.

Every string that comes from a results file (recipe and benchmark names, labels, machines,
commits, paths) goes through :func:`esc` (``html.escape``) in the HTML, and through
:func:`plot_text` in figures (Plotly reads a little HTML in names and hover texts; entities show
as the characters). Figures travel as JSON in ``<script type="application/json">`` blocks with
``<``, ``>`` and ``&`` written as ``\\u003c``, ``\\u003e``, ``\\u0026`` (:func:`json_script`), so no
value can close the script; :data:`RENDER_JS` hands each to ``Plotly.newPlot``.
"""

from __future__ import annotations

import html
import json

__all__ = ["Raw", "esc", "plot_text", "json_script", "figure_block", "table", "page", "RENDER_JS", "STYLE"]


class Raw(str):
    """HTML built from escaped parts, put into a page as it is."""


def esc(text) -> str:
    """``text`` escaped for HTML text and attribute values (a :class:`Raw` stays as it is)."""
    if isinstance(text, Raw):
        return str(text)
    return html.escape("" if text is None else str(text), quote=True)


def plot_text(text) -> str:
    """``text`` for a Plotly name, title or hover text: shown as written, never read as markup."""
    return html.escape("" if text is None else str(text), quote=False)


def json_script(value) -> str:
    """``value`` as JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return (text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def figure_block(div_id: str, figure: dict, caption: str = "") -> str:
    """A ``<div>`` for a figure and the figure's JSON (drawn by :data:`RENDER_JS`)."""
    cap = f"<p class='caption'>{esc(caption)}</p>" if caption else ""
    return (f"<figure><div id='{esc(div_id)}' class='d5-chart'></div>{cap}"
            f"<script type='application/json' class='d5-figure' data-target='{esc(div_id)}'>{json_script(figure)}"
            "</script></figure>\n")


def table(headers, rows, cls: str = "") -> str:
    """An HTML table; every cell is escaped unless it is :class:`Raw`."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>\n" for row in rows)
    return f"<table class='{esc(cls)}'><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>\n"


#: Draws every figure of a page; marks each chart ``data-drawn`` when Plotly has drawn it.
RENDER_JS = """
(function () {
  var blocks = document.querySelectorAll("script.d5-figure");
  Array.prototype.forEach.call(blocks, function (block) {
    var fig = JSON.parse(block.textContent);
    var div = document.getElementById(block.getAttribute("data-target"));
    Plotly.newPlot(div, fig.data, fig.layout, {responsive: true, displaylogo: false}).then(function () {
      div.setAttribute("data-drawn", "1");
    });
  });
})();
"""

STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } .slower { color: #b00020; font-weight: bold; } .faster { color: #00701a; }
.d5-chart { width: 100%; height: 420px; } figure { margin: 0 0 1.5em; } .caption { color: #555; font-size: 0.85em; }
nav { margin-bottom: 1em; } code { background: #f4f4f4; padding: 0 0.2em; }
"""


def page(title: str, body: str, *, scripts=(), scripts_inline: str | None = None, nav: str = "") -> str:
    """A whole HTML page: ``body`` (HTML), Plotly from ``scripts`` (files) or inlined, then :data:`RENDER_JS`."""
    tags = "".join(f"<script src='{esc(s)}'></script>" for s in scripts)
    if scripts_inline is not None:
        tags += "<script>" + scripts_inline.replace("</script", "<\\/script") + "</script>"
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            "<meta name='viewport' content='width=device-width, initial-scale=1'><link rel='icon' href='data:,'>"
            f"<title>{esc(title)}</title><style>{STYLE}</style></head>\n<body>\n{nav}<h1>{esc(title)}</h1>\n{body}"
            f"{tags}<script>{RENDER_JS}</script>\n</body></html>\n")
