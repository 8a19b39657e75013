"""HTML building blocks of report.html (a leaf): the templates (templates/*.html.j2, through jinja2
with autoescape on), tables, and a paged table.

A paged table keeps its rows as pre-rendered HTML (or as data a function of the page renders) in
an inline JSON block and shows one page at a time with a filter box (inline script, no network): a report of 10,000+ documents opens as fast
as one of 50. `#q=TEXT` in the address pre-fills every filter (a link to one document).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;color:#1d2330}
main{max-width:1200px;margin:0 auto;padding:24px 32px}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde1e8;padding-bottom:4px}
h3{font-size:15px;margin:16px 0 6px}
.meta{color:#5b6478;margin-bottom:16px} code{background:#eef0f4;padding:1px 4px;border-radius:3px;font-size:12.5px}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{background:#fff;border:1px solid #dde1e8;border-radius:8px;padding:10px 14px;min-width:96px}
.card .n{font-size:24px;font-weight:600} .card .l{color:#5b6478;font-size:12px;text-transform:uppercase}
.ok .n{color:#1a7f37} .warn .n{color:#9a6700} .bad .n{color:#cf222e} .skip .n{color:#6e7781}
table{border-collapse:collapse;background:#fff;border:1px solid #dde1e8;width:100%;margin:6px 0}
th,td{text-align:left;padding:5px 10px;border-bottom:1px solid #eceef2;vertical-align:top}
th{background:#f0f2f5;font-weight:600} td.num{text-align:right;font-variant-numeric:tabular-nums}
.muted{color:#5b6478} .small{font-size:12px} svg{background:#fff;border:1px solid #dde1e8;border-radius:8px}
.badge{display:inline-block;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600;color:#fff}
.b-succeeded{background:#1a7f37} .b-needs_review{background:#9a6700} .b-failed{background:#cf222e}
.b-skipped{background:#8c959f} .b-critical{background:#82071e} .b-high{background:#cf222e}
.b-medium{background:#bc4c00} .b-low{background:#9a6700} .b-info{background:#6e7781}
.b-accept{background:#1f6feb} .b-correct{background:#8250df} .b-reject{background:#57606a}
.ev{border-bottom:1px dotted #1f6feb;cursor:help} .was{color:#6e7781;text-decoration:line-through}
pre.q{background:#f6f8fa;border:1px solid #eceef2;border-radius:4px;padding:4px 8px;margin:4px 0;
white-space:pre-wrap;font-size:12.5px}
details summary{cursor:pointer;color:#1f6feb} .pager{display:flex;gap:8px;align-items:center;margin:6px 0}
.pager input{padding:3px 6px;min-width:260px} tr.grp td{background:#f6f8fa;font-weight:600}
.flag{border-left:4px solid #cf222e;background:#fff;padding:6px 10px;margin:4px 0}
"""

# HTML-escapes a value in a script that builds table rows (PAGES_JS, DOCS_JS), as the templates'
# autoescape does: & < > " '
ESCAPE_JS = """function h(s){return String(s).replace(/[&<>"']/g,function(c){return{'&':'&amp;','<':'&lt;',
'>':'&gt;','"':'&#34;',"'":'&#39;'}[c];});}
"""

PAGER_JS = """
(function(){
var q0=(location.hash.match(/[#&]q=([^&]*)/)||[])[1];q0=q0?decodeURIComponent(q0):'';
document.querySelectorAll('[data-pager]').forEach(function(box){
var rows=JSON.parse(document.getElementById(box.getAttribute('data-pager')).textContent);
var body=box.querySelector('tbody'),info=box.querySelector('.pinfo'),q=box.querySelector('input'),
sel=box.querySelector('select'),size=+box.getAttribute('data-size')||50,page=0,shown=rows,
make=(window.DOCMILL_ROWS||{})[box.id];
function draw(){var n=Math.max(1,Math.ceil(shown.length/size));page=Math.min(Math.max(page,0),n-1);
body.innerHTML=shown.slice(page*size,(page+1)*size).map(function(r){
return typeof r[2]==='string'?r[2]:make(r[2]);}).join('');
info.textContent=shown.length+' of '+rows.length+' · page '+(page+1)+' of '+n;}
function filter(){var t=q.value.toLowerCase(),s=sel?sel.value:'';shown=rows.filter(function(r){
return(!t||r[0].indexOf(t)>=0)&&(!s||r[1]===s);});page=0;draw();}
q.addEventListener('input',filter);if(sel)sel.addEventListener('change',filter);
box.querySelector('.prev').addEventListener('click',function(){page--;draw();});
box.querySelector('.next').addEventListener('click',function(){page++;draw();});
if(q0){q.value=q0;}filter();});
})();
"""


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


def render(name: str, **values: Any) -> str:
    """A whole template (`report.html.j2`) rendered with `values`."""
    return TEMPLATES.get_template(name).render(**values)


def macros(name: str) -> Any:
    """The macros of a template (`kit.html.j2`): each call returns Markup."""
    return TEMPLATES.get_template(name).module


def rendered_rows(name: str, rows: list[Any]) -> list[str]:
    """One string per row of a template that loops over `rows` and appends each row to `out`
    (doc_rows.html.j2): a table's rows kept apart for its paged script, rendered in one pass."""
    out: list[str] = []
    TEMPLATES.get_template(name).render(rows=rows, out=out)
    return [str(row) for row in out]  # plain strings: a Markup row would escape what is added to it


Cell = tuple[Any, bool]  # a table cell: its value (text, or Markup) and whether it is a number


def table(head: list[str], rows: list[list[Cell]], empty: str = "None.") -> Markup:
    return Markup(macros("kit.html.j2").table(head, rows, empty))


def json_text(data: Any) -> Markup:
    """Data for the inline script; `<` escaped so no text in it can end the script element."""
    return Markup(json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("<", "\\u003c"))


@dataclass(frozen=True)
class Paged:
    """A table shown a page at a time, as templates/paged.html.j2 shows it: `first`, the first
    page's rows as markup; `data`, every row for the script (json_text)."""

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
        return table([], [], empty)
    data = [[text.lower(), cat, html] for text, cat, html in (rows if data_rows is None else data_rows)]
    first = Markup("".join(r[2] for r in rows[:size]))
    return Paged(ident, head, first, len(data), json_text(data), choices, size)
