"""HTML building blocks of report.html (a leaf): the templates (templates/*.html.j2, through jinja2
with autoescape on) and a paged table: its rows as pre-rendered HTML (or as data a function of the
page renders) in an inline JSON block, one page shown at a time with a filter box (inline script, no
network), so a report of 10,000+ documents opens as fast as one of 50. `#q=TEXT` in the address
pre-fills every filter (a link to one document).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup


def _shown(v: Any) -> Any:
    """What a template prints for a value: None prints nothing, not "None"."""
    return "" if v is None else v


# report.html's templates (templates/*.html.j2, package data), every value escaped unless the code
# marks it as markup (Markup, or `|safe` on docmill's own CSS and scripts).
TEMPLATES = Environment(
    loader=PackageLoader("tasks.reporting", "templates"),
    autoescape=True,
    undefined=StrictUndefined,
    keep_trailing_newline=True,
    finalize=_shown,
    extensions=["jinja2.ext.do"],
)


def asset(name: str) -> str:
    """A file of templates/ as it is (docmill's own CSS and scripts, put in the page unescaped)."""
    return str(TEMPLATES.loader.get_source(TEMPLATES, name)[0])  # type: ignore[union-attr]


CSS = asset("report.css")
# HTML-escapes a value in a script that builds table rows (PAGES_JS, DOCS_JS), as the templates'
# autoescape does: & < > " '
ESCAPE_JS = asset("escape.js")
PAGER_JS = asset("pager.js")


def render(name: str, **values: Any) -> str:
    return TEMPLATES.get_template(name).render(**values)


def macros(name: str) -> Any:
    """The macros of a template: each call returns Markup."""
    return TEMPLATES.get_template(name).module


def rendered_rows(name: str, rows: list[Any]) -> list[str]:
    """One string per row of a template that loops over `rows` and appends each row to `out`
    (doc_rows.html.j2): a table's rows kept apart for its paged script, rendered in one pass."""
    out: list[str] = []
    TEMPLATES.get_template(name).render(rows=rows, out=out)
    return [str(row) for row in out]  # plain strings: a Markup row would escape what is added to it


@dataclass(frozen=True)
class Paged:
    """A table shown a page at a time, as templates/paged.html.j2 shows it: `first`, the first
    page's rows as markup; `data`, every row for the script."""

    ident: str
    head: list[str]
    first: Markup
    count: int
    data: Markup
    choices: tuple[str, ...]
    size: int


Part = Paged | Markup  # a part of the page: markup, or a paged table the page includes in place


TEMPLATES.tests["paged"] = lambda part: isinstance(part, Paged)


def paged_table(
    ident: str,
    head: list[str],
    rows: list[tuple[str, str, str]],
    *,
    choices: tuple[str, ...] = (),
    size: int = 50,
    empty: str = "None.",
    data_rows: list[tuple[str, str, Any]] | None = None,
) -> Paged | Markup:
    """A table shown a page at a time. `rows`: (text to filter on, category for the select, row
    HTML — one or more `<tr>`). The first page is rendered in the page as well (readable with
    scripts off); the script re-renders it with paging and filtering. `data_rows`: the same rows
    with data in place of their HTML, which a function the page registers as
    `window.DOCMILL_ROWS[ident]` turns into HTML when a row is shown (`rows` then needs only the
    first page): a large table's rows in a fraction of the bytes. No rows: the `empty` note."""
    if not rows:
        return Markup(macros("kit.html.j2").table([], [], empty))
    data = [[text.lower(), cat, html] for text, cat, html in (rows if data_rows is None else data_rows)]
    first = Markup("".join(r[2] for r in rows[:size]))
    # `<` escaped: no text in the data can end the script element
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c")
    return Paged(ident, head, first, len(data), Markup(text), choices, size)
