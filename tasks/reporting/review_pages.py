"""One document's evidence for `docmill review show` in a terminal: a PDF's or image's cited pages as
image files with each value's evidence boxed and labelled in the pixels, or a text document's
evidence highlighted in the text around it.

A terminal cannot show report.html's boxes (drawn by the browser over the page image), so they are
drawn into a copy of the page (`runs/<run_id>/pages/<sha16>-p<N>-boxed.jpg`) and the command prints
its `store.link` (file:// locally, a presigned URL on S3; `--open` hands it to a viewer). Pages,
marks and snippets come from tasks.reporting.pages; a scanned page gets no box.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict

from PIL import Image, ImageDraw, ImageFont

from tasks.reporting.pages import JPEG_QUALITY, Mark, PageView, media_type_of, page_views, text_views

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from tasks.source.document import Document

BOX = (26, 127, 55)  # the report's green
LABEL_CHARS = 48  # a label's `field = value`, cut beyond this
FONT_PX = 13


class ShownPage(TypedDict):
    """A cited page as `review show --json` lists it."""

    page: int
    image: str | None  # where to open the boxed image (store.link), None when it could not be rendered
    boxed: list[str]  # fields whose evidence is boxed on it
    cited: list[str]  # fields the model cited on it without a text layer (no box)


@dataclass
class Evidence:
    """What `review show` adds for one document: its pages (PDFs, images) or snippets (text)."""

    pages: list[ShownPage] = field(default_factory=list)
    snippets: list[tuple[Mark, str, str, str]] = field(default_factory=list)  # mark, before, evidence, after
    note: str = ""  # why nothing is shown, when nothing is


def _font() -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    try:
        return ImageFont.load_default(size=FONT_PX)
    except (TypeError, OSError):  # a Pillow without FreeType: the bitmap font
        return ImageFont.load_default()


def draw_marks(jpeg: bytes, view: PageView) -> bytes:
    """The page image with each boxed mark outlined and labelled `field = value`, and a caption (its
    number, what is boxed, what is only cited: no text layer) in a white strip under it, as a JPEG."""
    page = Image.open(io.BytesIO(jpeg)).convert("RGB")
    font = _font()
    boxed, cited = view.named(True), view.named(False)
    caption = [f"p. {view.page}" + (f" · boxed: {', '.join(boxed)}" if boxed else "")]
    caption += ["cited by the model, no text layer (no box): " + ", ".join(cited)] if cited else []
    line = FONT_PX + 6
    out = Image.new("RGB", (page.width, page.height + line * len(caption) + 6), "white")
    out.paste(page, (0, 0))
    draw = ImageDraw.Draw(out)
    for m in view.marks:
        if m.box is None:
            continue
        left, top, right, bottom = (
            m.box[0] * page.width,
            m.box[1] * page.height,
            m.box[2] * page.width,
            m.box[3] * page.height,
        )
        draw.rectangle((left - 3, top - 3, right + 3, bottom + 3), outline=BOX, width=3)
        text = f"{m.name} = {m.value}"
        text = text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"
        w = draw.textlength(text, font=font)
        x, y = right + 7, max(0.0, top - 2)  # to the right of the box; else above it, never over it
        if x + w + 4 > page.width:
            x, y = max(0.0, min(left - 3, page.width - w - 4)), top - 3 - line
            y = y if y >= 0 else bottom + 4
        draw.rectangle((x - 2, y, x + w + 2, y + line - 2), fill=BOX)
        draw.text((x, y + 1), text, fill="white", font=font)
    for i, text in enumerate(caption):
        draw.text((4, page.height + 4 + i * line), text, fill="black", font=font)
    buf = io.BytesIO()
    out.save(buf, "JPEG", quality=JPEG_QUALITY + 15, optimize=True)
    return buf.getvalue()


def document_evidence(
    store: ObjectStore, run_id: str, outcome: dict[str, Any], documents: dict[str, Document]
) -> Evidence:
    """The boxed pages (written to the store, linked) or the text snippets of one document."""
    doc = documents.get(str(outcome.get("doc_id")))
    if doc is None:
        return Evidence(note="not in this run's inventory: nothing to show")
    if media_type_of(doc) is None:
        views = text_views([outcome], documents)
        if not views:
            return Evidence(note="its text could not be read again (moved or changed since the run)")
        return Evidence(
            snippets=views[0].snippets, note="" if views[0].snippets else "no value has evidence in its text"
        )
    shown = Evidence()
    for view in page_views(store, run_id, [outcome], documents, max_pages=100):
        image = None
        if view.image is not None:
            key = f"runs/{run_id}/{view.image.removesuffix('.jpg')}-boxed.jpg"
            store.put(key, draw_marks(store.get(f"runs/{run_id}/{view.image}"), view))
            image = store.link(key)
        shown.pages.append(
            {
                "page": view.page,
                "image": image,
                "boxed": view.named(True),
                "cited": view.named(False),
            }
        )
    if not shown.pages:
        shown.note = "no value cites a page"
    return shown


def evidence_lines(evidence: Evidence, *, color: bool = False) -> list[str]:
    """The evidence for a terminal: each page and where its boxed image is, or each value's evidence
    in its surrounding text (highlighted in reverse video on a terminal, else between « »)."""
    on, off = ("\x1b[7m", "\x1b[0m") if color else ("«", "»")
    lines: list[str] = []
    for p in evidence.pages:
        lines.append(
            f"p. {p['page']}: {p['image'] or 'page image not rendered (the file could not be read again)'}"
        )
        if p["boxed"]:
            lines.append("  boxed: " + ", ".join(p["boxed"]))
        if p["cited"]:
            lines.append("  cited by the model, no text layer (no box): " + ", ".join(p["cited"]))
    for mark, before, text, after in evidence.snippets:
        lines.append(f"{mark.name} = {mark.value}  ({mark.support})")
        body = before + on + text.replace("\n", f"{off}\n{on}") + off + after  # marked on every line
        lines += ["    " + row for row in body.splitlines()]
    if evidence.note:
        lines.append(evidence.note)
    return lines
