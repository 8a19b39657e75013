"""Pages you can see (report.html's "Pages with evidence"): for every PDF or image with evidence,
the cited pages as images with each value's evidence boxed and labelled; for a text document, each
value's evidence in the text around it.

The images go beside the report, not in it: JPEG files under `runs/<run_id>/pages/` (`<sha256 of
the document, 16 hex>-p<N>.jpg`), linked by a relative URL and loaded when a document is opened.
Embedded, a 10,000-document report would be hundreds of MB a browser parses at once; beside it,
report.html grows by a few hundred bytes per cited page, and it opens offline wherever its folder
is (mailed alone, it shows the boxes' labels and says where the images are). Keyed by content hash
and page, an image is rendered once for every later report. `LONG_EDGE` px greyscale JPEG keeps a
page near 15-110 KB and 25-50 ms of CPU; `MAX_PAGES` bounds the images one report renders
(documents that need review and the least supported values first; the rest keep their labels until
a later report renders them). A box is drawn only where the gate found the evidence in the text
layer (tasks.per_file.boxes); a scanned page shows the model's page citation, never a made-up box.
"""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass, field
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from tasks.provenance import SUPPORT_ORDER, field_value, support_of, weakest
from tasks.reporting.htmlkit import ESCAPE_JS, asset, rendered_rows
from tasks.reporting.results import evidence_places
from tasks.source.document import Document
from tasks.source.loading import load_bytes, load_content
from tasks.source.readers.pdf_text import PDFIUM_LOCK

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

LONG_EDGE = 1000  # px: a Letter page at ~90 dpi, small print still legible
JPEG_QUALITY = 60
MAX_TEXT_DOCS = 1000  # text documents whose evidence is shown in its surrounding text
CONTEXT = 120  # characters of text shown each side of a text document's evidence
MAX_PAGES = 1000  # page images one report renders at most (~25-50 ms CPU each: under a minute)
log = logging.getLogger(__name__)


@dataclass
class Mark:
    """One value's evidence on a page: its field, value, support class and box (None: no box)."""

    name: str
    value: Any
    support: str
    box: list[float] | None = None  # left, top, right, bottom as shares of the page


@dataclass
class PageView:
    """A cited page of a document, its image (relative URL, None when over budget or unrenderable)
    and the marks on it."""

    doc_id: str
    page: int
    image: str | None = None
    width: int = 0
    height: int = 0
    marks: list[Mark] = field(default_factory=list)
    snippets: list[tuple[Mark, str, str, str]] = field(
        default_factory=list
    )  # text documents: before, evidence, after

    def named(self, boxed: bool) -> list[str]:
        """The fields boxed on this page (`boxed`), or cited on it without a box (no text layer)."""
        return sorted({m.name for m in self.marks if (m.box is not None) == boxed})


def cited_pages(outcome: dict[str, Any]) -> dict[int, list[Mark]]:
    """Page -> the marks of the values whose evidence is on it (a boxed value: one mark per box)."""
    output = outcome.get("output") or {}
    pages: dict[int, list[Mark]] = {}
    for name, where in evidence_places(outcome):
        if where.get("page") is None:
            continue
        top = "." not in name and "[" not in name
        value = field_value(output.get(name)) if top else None
        support = support_of(outcome, name) if top else "verified"
        boxes = where.get("boxes") or []
        if boxes:
            for b in boxes:
                pages.setdefault(int(b[0]), []).append(Mark(name, value, support, [float(v) for v in b[1:5]]))
        else:
            pages.setdefault(int(where["page"]), []).append(Mark(name, value, support))
    return pages


def render_page(data: bytes, media_type: str, page: int) -> tuple[bytes, int, int]:
    """(JPEG bytes, width, height) of one page of a PDF, or of an image, at LONG_EDGE px."""
    from PIL import Image

    if media_type == "application/pdf":
        import pypdfium2 as pdfium

        with PDFIUM_LOCK:
            doc = pdfium.PdfDocument(data)
            try:
                pdf_page = doc[page - 1]
                w, h = pdf_page.get_size()
                bitmap = pdf_page.render(scale=LONG_EDGE / max(w, h, 1), grayscale=True)
                img = bitmap.to_pil()
                bitmap.close()
                pdf_page.close()
            finally:
                doc.close()
    else:
        img = Image.open(io.BytesIO(data))
        img.thumbnail((LONG_EDGE, LONG_EDGE))
    img = img.convert("L")
    buf = io.BytesIO()
    img.save(buf, "JPEG", quality=JPEG_QUALITY, optimize=True)
    return buf.getvalue(), img.width, img.height


def page_views(
    store: ObjectStore,
    run_id: str,
    outcomes: list[dict[str, Any]],
    documents: dict[str, Any],
    *,
    max_pages: int = MAX_PAGES,
) -> list[PageView]:
    """The cited pages of every PDF and image outcome, their images written beside the report once
    (`documents`: doc id -> its inventory `Document`). A document that cannot be
    read any more (moved, changed) keeps its marks without image."""
    views: list[PageView] = []
    rendered = 0
    for o in outcomes:
        doc = documents.get(str(o.get("doc_id")))
        media = media_type_of(doc)
        if doc is None or media is None:
            continue
        data: bytes | None = None
        for number, marks in sorted(cited_pages(o).items()):
            view = PageView(str(o["doc_id"]), number, marks=marks)
            views.append(view)
            name = f"pages/{doc.sha256[:16]}-p{number}.jpg"
            key = f"runs/{run_id}/{name}"
            size = store.get_json_or_none(key + ".json")
            if size is None and rendered < max_pages:
                try:
                    data = data if data is not None else load_bytes(doc)
                    jpeg, w, h = render_page(data, media, number)
                except Exception as e:  # a page that cannot be shown: its marks stay, without image
                    log.info("no image for %s page %s: %s", o["doc_id"], number, type(e).__name__)
                    continue
                store.put(key, jpeg)
                size = {"width": w, "height": h}
                store.put_json(key + ".json", size)
                rendered += 1
            if size is not None:
                view.image, view.width, view.height = name, int(size["width"]), int(size["height"])
    return views


def run_documents(store: ObjectStore, run_id: str, only: set[str] | None = None) -> dict[str, Document]:
    """doc id -> its inventory `Document`, for every document of a run's inventory (of `only`, when
    given: a nightly's report builds the records of the few documents it lists, not of all)."""
    documents: dict[str, Document] = {}
    if only is not None and not only:
        return documents
    for key in store.list(f"runs/{run_id}/inventory/"):
        for d in store.get_json_or_none(key) or []:
            if only is not None and d.get("doc_id") not in only:
                continue
            try:
                documents[d["doc_id"]] = Document.model_validate(d)
            except Exception:  # an inventory record of an older layout: no page images for it
                continue
    return documents


def report_pages(store: ObjectStore, run_id: str, outcomes: list[dict[str, Any]]) -> list[PageView]:
    """`page_views` for a run: its documents from the inventory, their bytes re-read (and checked
    against their hash) from where the inventory found them. Only outcomes with evidence to show
    (a cited page, a span of text) need their documents: without any (a nightly that lists only its
    failures and skips) the inventory is not read."""
    shown = [o for o in outcomes if cited_pages(o) or _spans(o)]
    documents = run_documents(store, run_id, {str(o.get("doc_id")) for o in shown})
    wanted = [o for o in shown if o.get("doc_id") in documents]
    wanted.sort(key=lambda o: (o.get("state") != "needs_review", weakest(o)))  # the budget goes there first
    media = [o for o in wanted if media_type_of(documents[str(o["doc_id"])]) and cited_pages(o)]
    texts = [o for o in wanted if not media_type_of(documents[str(o["doc_id"])]) and _spans(o)][
        :MAX_TEXT_DOCS
    ]
    return page_views(store, run_id, media, documents) + text_views(texts, documents)


def _spans(outcome: dict[str, Any]) -> list[tuple[str, int, int]]:
    """(field, start, end) of every top-level evidence found in the text, in text order."""
    out = []
    for name, where in evidence_places(outcome):
        if where.get("start") is not None and "." not in name and "[" not in name:
            out.append((name, int(where["start"]), int(where["end"])))
    return sorted(out, key=itemgetter(1))


def text_views(outcomes: list[dict[str, Any]], documents: dict[str, Any]) -> list[PageView]:
    """Text, Markdown, HTML, e-mail and Office documents: each value's evidence highlighted in the
    text around it (`CONTEXT` characters each side), the document's text read again."""
    views = []
    for o in outcomes:
        doc = documents[str(o["doc_id"])]
        try:
            text = load_content(doc)[0].text
        except Exception as e:  # moved or changed since the run: no snippet, the table still has the evidence
            log.info("no text for %s: %s", o["doc_id"], type(e).__name__)
            continue
        output = o.get("output") or {}
        view = PageView(str(o["doc_id"]), 0)
        for name, start, end in _spans(o):
            mark = Mark(name, field_value(output.get(name)), support_of(o, name))
            before = ("…" if start > CONTEXT else "") + text[max(0, start - CONTEXT) : start]
            after = text[end : end + CONTEXT] + ("…" if end + CONTEXT < len(text) else "")
            view.snippets.append((mark, before, text[start:end], after))
        views.append(view)
    return views


def media_type_of(doc: Any) -> str | None:
    """How a document's pages are shown: "application/pdf" or "image" (a page image), else None (its
    text)."""
    if doc is None or getattr(doc, "status", "ok") != "ok":
        return None
    if doc.doc_type == "pdf":
        return "application/pdf"
    return "image" if getattr(doc, "send_as", None) == "image" else None


PAGES_CSS = asset("pages.css")


def _figure(view: PageView) -> tuple[Any, ...]:
    """A page as templates/pages_rows.html.j2 shows it: the evidence highlighted in the text around it
    (a text, e-mail or Office document), or the page image with each value's box and the fields the
    model cited on a page without a text layer."""
    if view.snippets:
        return ("snippets", [(m.name, m.support, m.value, *texts) for m, *texts in view.snippets])
    boxes = [
        (
            m.name,
            m.value,
            f"left:{m.box[0] * 100:.1f}%;top:{m.box[1] * 100:.1f}%;"
            f"width:{(m.box[2] - m.box[0]) * 100:.1f}%;height:{(m.box[3] - m.box[1]) * 100:.1f}%",
        )
        for m in view.marks
        if m.box is not None
    ]
    boxed, cited = ", ".join(view.named(True)), ", ".join(view.named(False))
    ratio = f"aspect-ratio:{view.width}/{view.height}" if view.width else "height:200px"
    return ("page", view.page, view.image, ratio, boxes, boxed, cited)


def _by_doc(views: list[PageView]) -> list[tuple[str, list[PageView], str, str, str]]:
    """Per document: its id, its pages, the support classes of its marks (least supported first,
    joined), the least of them and the text a filter matches (its id and fields)."""
    by_doc: dict[str, list[PageView]] = {}
    for v in views:
        by_doc.setdefault(v.doc_id, []).append(v)
    out = []
    for doc_id, pages in by_doc.items():
        marks = [m for v in pages for m in v.marks] + [s[0] for v in pages for s in v.snippets]
        seen = {m.support for m in marks}
        classes = [c for c in SUPPORT_ORDER if c in seen]
        text = " ".join([doc_id, *(m.name for m in marks)])
        out.append((doc_id, pages, ", ".join(classes), classes[0] if classes else "", text))
    return out


def pages_rows(views: list[PageView]) -> list[tuple[str, str, str]]:
    """Rows for a paged table (filter text, least support class, row HTML): one per document. The
    HTML of the first rows is in the page for a reader without scripts; `pages_data` carries all of
    them, built by `PAGES_JS` in the browser."""
    docs = _by_doc(views)
    shaped = [(doc_id, classes, [_figure(v) for v in pages]) for doc_id, pages, classes, _, _ in docs]
    html = rendered_rows("pages_rows.html.j2", shaped)
    return [(text, least, row) for (*_, least, text), row in zip(docs, html, strict=True)]


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def pages_data(views: list[PageView]) -> list[tuple[str, str, list[Any]]]:
    """The rows of `pages_rows` as data (filter text, least support class, row data), under a third of
    their HTML's size: `[doc_id, classes, pages, snippets]`, a page `[number, image, width, height,
    [[field, value, left, top, right, bottom], ...], [cited field, ...]]`, a snippet `[field,
    support, value, before, evidence, after]`; `PAGES_JS` turns one into the row's HTML."""
    rows = []
    for doc_id, pages, classes, least, text in _by_doc(views):
        figures = [
            [
                v.page,
                v.image,
                v.width,
                v.height,
                [
                    [m.name, _text(m.value), *(round(b, 4) for b in m.box)]
                    for m in v.marks
                    if m.box is not None
                ],
                v.named(False),
            ]
            for v in pages
            if not v.snippets
        ]
        snippets = [
            [m.name, m.support, _text(m.value), before, evidence, after]
            for v in pages
            for m, before, evidence, after in v.snippets
        ]
        rows.append((text, least, [doc_id, classes, figures, snippets]))
    return rows


# Builds a row of "Pages with evidence" from `pages_data`, the same HTML as `pages_rows` (`_figure`,
# `_snippets`); registered for the paged table with id "pages" (htmlkit.PAGER_JS).
PAGES_JS = "\n(function(){\n" + ESCAPE_JS + asset("pages_rows.js")
