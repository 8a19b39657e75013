"""Doc ids are one-to-one: no two names (plain, escaped, hashed) and no attachment share an id.

The proof for escaped ids is a left inverse: `raw_name` below reads the raw name back from an
escaped id (written here from the rules in tasks.source.doc_names' docstring, not from its code), so
two names with one escaped id would read back as one name. Hashed ids rest on sha256.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from checkpoints.keys import fitted_key, safe_key
from docmill.errors import InputError
from docmill.settings import Settings
from tasks.source.doc_names import attachment_doc_id, make_doc_id, parent_of
from tasks.source.document import Document
from tasks.source.inventory import inventory, one_per_id
from tasks.source.readers import doc_type_for

ESCAPE = re.compile(r"%(u[0-9A-F]{4}|[0-9A-F]{2})")
MARK = re.compile(r"~([0-9a-f]{8})$")


def _unescape(seg: str) -> str:
    return "" if seg == "%" else ESCAPE.sub(lambda m: chr(int(m.group(1).lstrip("u"), 16)), seg)


def raw_name(doc_id: str) -> str | None:
    """The raw name an escaped id was made from (None when `doc_id` is not an escaped id)."""
    head, _, last = doc_id.rpartition("/")
    stem, dot, ext = last.rpartition(".")
    m = MARK.search(stem) if dot and stem else None
    if m is not None:
        last, mark = stem[: m.start()] + "." + ext, m.group(1)
    elif (m := MARK.search(last)) is not None:
        last, mark = last[: m.start()], m.group(1)
    else:
        return None
    segs = ([*head.split("/")] if head else []) + [last]
    name = "/".join(_unescape(s) for s in segs)
    digest = hashlib.sha256(b"name\0" + name.encode("utf-8", "surrogatepass")).hexdigest()
    return name if digest[:8] == mark else None


PIECES = st.sampled_from(
    [
        "",
        ".",
        "..",
        ".~",
        "%",
        "%0A",
        "%2E",
        "~",
        "\n",
        "\\",
        "\x00",
        "\u202e",
        "\ud800",
        "C:",
        "a.eml",
        ".EML",
        "x",
        "1-",
        "~0123abcd",
        "~0123abcd.txt",
        "y" * 250,  # with any other piece: over 255 bytes, a hashed id
        "unsafe",
        "/",
        "é",
        ".pdf",
        ".txt",
    ]
)  # the pieces that trip sanitizers
SEGMENT = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=5).map("".join)
NAME = st.lists(SEGMENT, min_size=1, max_size=4).map("/".join)


def _ids_of(names: set[str]) -> dict[str, str]:
    ids: dict[str, str] = {}
    for n in names:
        doc_id = make_doc_id(n)
        assert safe_key(doc_id) == doc_id, (n, doc_id)
        assert ids.setdefault(doc_id, n) == n, f"{n!r} and {ids[doc_id]!r} share {doc_id!r}"
    return ids


@hsettings(max_examples=60, deadline=None)
@given(st.lists(NAME, min_size=1, max_size=8))
def test_no_two_names_share_an_id_even_when_a_name_is_another_id(names: list[str]) -> None:
    pool = set(names)
    pool |= {make_doc_id(n) for n in names}  # a file literally named like another's id
    pool |= {make_doc_id(make_doc_id(n)) for n in names}
    pool |= {attachment_doc_id(make_doc_id(n), 1, "a.pdf") for n in names}  # an S3 key shaped like one
    ids = _ids_of(pool)
    hashed = [name for doc_id, name in ids.items() if doc_id.startswith("unsafe/") and doc_id != name]
    pool |= {make_doc_id(n) for n in hashed}  # a file named like a hashed id
    ids = _ids_of(pool)
    for doc_id, name in ids.items():
        if doc_id != name and not doc_id.startswith("unsafe/"):
            assert raw_name(doc_id) == name  # escaped: the name reads back


@hsettings(max_examples=150, deadline=None)
@given(NAME)
def test_escaped_ids_read_back_and_plain_ids_are_the_name(name: str) -> None:
    doc_id = make_doc_id(name)
    if doc_id == name:
        assert raw_name(doc_id) is None  # a plain id never looks escaped
    elif not doc_id.startswith("unsafe/"):
        assert raw_name(doc_id) == name


@hsettings(max_examples=60, deadline=None)
@given(st.lists(NAME, min_size=1, max_size=6), st.lists(st.tuples(st.integers(0, 5), NAME), max_size=8))
def test_attachment_ids_never_meet_a_file_or_each_other(
    names: list[str], parts: list[tuple[int, str]]
) -> None:
    raw_messages = {n + ".eml" for n in names if doc_type_for(n + ".eml") == "eml"} or {"m.eml"}
    messages = sorted(make_doc_id(n) for n in raw_messages)
    taken = _ids_of(set(names) | raw_messages | {f"{m}/1-a.pdf" for m in messages})
    assert not any(parent_of(doc_id) for doc_id in taken)  # a file's id names no message
    for m in messages:
        assert m.lower().endswith(".eml")  # a message's id: no plain or escaped name has it as a folder
    for k, (which, part) in enumerate(parts):
        parent = messages[which % len(messages)]
        doc_id = attachment_doc_id(parent, k + 1, part)
        assert safe_key(doc_id) == doc_id
        assert doc_id not in taken, f"attachment {part!r} of {parent!r} meets {taken.get(doc_id)!r}"
        assert parent_of(doc_id) == parent  # the exports' parent column
        taken[doc_id] = f"attachment {k + 1} of {parent}"
    # an attachment of an attachment (a forwarded message) stays under its own message
    nested = attachment_doc_id(attachment_doc_id(messages[0], 1, "fwd.eml"), 1, "a.pdf")
    assert nested not in taken


def test_ordinary_names_keep_their_ids() -> None:
    """Ids are in stored results and integration keys: ordinary names never change id."""
    for name in [
        "a.txt",
        "inbox/2024/Invoice 7 (copy).pdf",
        "~$lock.docx",
        "100% report.pdf",
        "unsafe/x",
        "a~b.txt",
        "x~12345678.tar.gz",
        "mail.eml",
        "é/ü.pdf",
        "C/x",
    ]:
        assert make_doc_id(name) == name
    assert attachment_doc_id("mail.eml", 2, "invoice.pdf") == "mail.eml/2-invoice.pdf"


def test_the_reported_collision_is_gone(tmp_path: Path) -> None:
    """`x<newline>y.txt` and a file named like its (old or new) id: three files, three ids."""
    (tmp_path / "x\ny.txt").write_text("vendor A")
    (tmp_path / "x_y~f4d32cd0.txt").write_text("vendor B")
    (tmp_path / make_doc_id("x\ny.txt")).write_text("vendor C")
    (tmp_path / "unsafe").mkdir()
    long_name = "y" * 250 + "\n.txt"  # escaped form too long: hashed
    (tmp_path / long_name).write_text("vendor D")
    (tmp_path / make_doc_id(long_name)).parent.mkdir(exist_ok=True)
    (tmp_path / make_doc_id(long_name)).write_text("vendor E")
    docs = list(inventory(str(tmp_path), Settings()))
    assert len({d.doc_id for d in docs}) == len(docs) == 5
    assert all(d.status == "ok" for d in docs)


def _doc(doc_id: str, uri: str) -> Document:
    return Document(doc_id=doc_id, source_uri=uri, sha256="0" * 64, size=1, doc_type="txt")


def test_two_documents_with_one_id_stop_the_inventory() -> None:
    docs = [_doc("a.txt", "file:///1"), _doc("b.txt", "file:///2"), _doc("a.txt", "file:///3")]
    seen = []
    with pytest.raises(InputError, match=r"two files have the document id 'a\.txt'.*file:///3"):
        for d in one_per_id(docs):
            seen.append(d.doc_id)
    assert seen == ["a.txt", "b.txt"]


def test_a_plain_id_never_takes_the_store_key_of_a_long_one() -> None:
    """A review item's key is the id shortened with `~<12 hex>` when the id's last segment is long:
    a file named like that shortened key is escaped, so the two items never share a key."""
    long_id = make_doc_id("inbox/" + "a" * 252)
    key = fitted_key(long_id, ".json")
    twin = key.removesuffix(".json")
    assert twin != long_id and make_doc_id(twin) != twin
    assert fitted_key(make_doc_id(twin), ".json") != key
