"""Inventory over real folders, a real generated corpus and a real S3 (SeaweedFS) prefix."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from checkpoints.keys import safe_key
from checkpoints.store import open_store
from docmill.errors import InputError
from docmill.settings import InventorySettings, Settings
from tasks.source.doc_names import glob_match, make_doc_id
from tasks.source.inventory import Document, SkipReason, inventory, load_text, summarize_inventory
from tasks.source.readers import extract_text, html_to_text

ROOT = Path(__file__).resolve().parents[3]


def make_settings(**inv: object) -> Settings:
    return Settings(inventory=InventorySettings(**inv))  # type: ignore[arg-type]


def pdf_bytes(text: str | None) -> bytes:
    """A real one-page PDF (Helvetica text), or a blank page when text is None."""
    w = PdfWriter()
    page = w.add_blank_page(612, 792)
    if text is not None:
        font = DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
        fonts = DictionaryObject({NameObject("/F1"): w._add_object(font)})
        page[NameObject("/Resources")] = DictionaryObject({NameObject("/Font"): fonts})
        stream = DecodedStreamObject()
        stream.set_data(f"BT /F1 12 Tf 72 700 Td ({text}) Tj ET".encode("latin-1"))
        page[NameObject("/Contents")] = w._add_object(stream)
    buf = io.BytesIO()
    w.write(buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict]]:
    out = tmp_path_factory.mktemp("corpus") / "invoices"
    cmd = [
        sys.executable,
        str(ROOT / "examples/make_invoices.py"),
        "--out",
        str(out),
        "--count",
        "40",
        "--seed",
        "7",
    ]
    subprocess.run(cmd, check=True, capture_output=True)
    truth = [json.loads(line) for line in (out.parent / "invoices.truth.jsonl").read_text().splitlines()]
    return out, truth


def test_generated_corpus_statuses_reasons_and_duplicates(corpus: tuple[Path, list[dict]]) -> None:
    out, truth = corpus
    expected = {r["doc_id"]: r for r in truth if r["record"] == "document"}
    docs = list(inventory(str(out), make_settings()))
    assert [d.doc_id for d in docs] == sorted(expected)
    for d in docs:
        t = expected[d.doc_id]
        assert d.status == t["expected_status"], d
        assert (d.skip_reason.value if d.skip_reason else None) == t["expected_skip_reason"], d
        assert d.duplicate_of == t["duplicate_of"], d
        assert d.sha256 == t["sha256"] and d.size == t["size"]
        assert d.source_uri.startswith("file://")
    summary = summarize_inventory(docs)
    assert summary["total"] == 40
    assert summary["by_reason"] == {
        "binary": 1,
        "duplicate": 2,
        "empty": 1,
        "unsupported_type": 1,
    }
    assert summary["by_status"] == {"ok": 35, "skipped": 5}  # the Latin-1 file is read (guessed cp1252)
    ok = [d for d in docs if d.status == "ok"]
    for d in ok:
        text = load_text(d)
        if expected[d.doc_id]["fields"] is None:  # the legacy-encoded note: read, its encoding guessed
            assert d.encoding == "cp1252" and "Müller & Söhne" in text
            continue
        assert expected[d.doc_id]["fields"]["invoice_number"] in text


def test_include_exclude_globs(corpus: tuple[Path, list[dict]]) -> None:
    out, _ = corpus
    docs = list(inventory(str(out), make_settings(include=["**/*.txt", "*.csv"], exclude=["misc/**"])))
    assert docs and all(d.doc_type in ("txt", "csv") for d in docs)
    assert not any(d.doc_id.startswith("misc/") for d in docs)
    assert any(d.doc_id.startswith("inbox/") or "/" in d.doc_id for d in docs if d.doc_type == "csv")

    assert glob_match("a.txt", "**/*")
    assert glob_match("x/y/a.txt", "**/*.txt")
    assert glob_match("x/y/a.csv", "*.csv")  # no slash: matches the file name at any depth
    assert not glob_match("x/a.csv", "x/*.txt")
    assert glob_match("x/y/z/a.md", "x/**/a.md")
    assert glob_match("x/a.md", "x/**/a.md")
    assert not glob_match("xa.md", "x/**")
    assert glob_match("r1.txt", "r[0-9].txt") and not glob_match("rx.txt", "r[!a-z].txt")


def test_doc_types_narrow_what_is_taken(corpus: tuple[Path, list[dict]]) -> None:
    out, _ = corpus
    docs = list(inventory(str(out), make_settings(), doc_types={"json"}))
    assert {d.doc_type for d in docs if d.status == "ok"} == {"json"}
    assert {d.skip_reason for d in docs if d.doc_type == "md"} == {SkipReason.UNSUPPORTED_TYPE}


def test_oversized_is_hashed_but_skipped(tmp_path: Path) -> None:
    (tmp_path / "small.txt").write_text("x" * 100)
    (tmp_path / "big.txt").write_text("y" * 101)
    docs = {d.doc_id: d for d in inventory(str(tmp_path), make_settings(max_document_bytes=100))}
    assert docs["small.txt"].status == "ok"
    big = docs["big.txt"]
    assert big.skip_reason == SkipReason.OVERSIZED and big.size == 101
    assert big.sha256 == __import__("hashlib").sha256(b"y" * 101).hexdigest()


def test_unsafe_names_get_safe_distinct_ids(tmp_path: Path) -> None:
    names = ["we\nird.txt", "back\\slash.txt", "tab\there.txt", "ok name.txt", ".~reserved.txt"]
    for i, name in enumerate(names):
        (tmp_path / name).write_text(f"content {i}")
    docs = list(inventory(str(tmp_path), make_settings()))
    assert len(docs) == len(names)
    ids = [d.doc_id for d in docs]
    assert len(set(ids)) == len(ids)
    for d in docs:
        assert safe_key(d.doc_id) == d.doc_id
        assert d.status == "ok"
        assert load_text(d).startswith("content ")
    assert "ok name.txt" in ids


@hsettings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=80))
def test_make_doc_id_always_safe(name: str) -> None:
    doc_id = make_doc_id(name)
    assert safe_key(doc_id) == doc_id
    assert ".." not in doc_id.split("/") and not doc_id.startswith("/")


def test_bad_files_never_crash(tmp_path: Path) -> None:
    (tmp_path / "broken.txt").symlink_to(tmp_path / "nowhere")
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "bad.pdf").write_bytes(b"%PDF-1.4 garbage that is not a pdf")
    (tmp_path / "blank.pdf").write_bytes(pdf_bytes(None))
    (tmp_path / "good.pdf").write_bytes(pdf_bytes("Invoice number: INV-9"))
    (tmp_path / "bad.json").write_text('{"a": [1')
    (tmp_path / "spaces.md").write_text("   \n\t\n")
    (tmp_path / "bom.txt").write_bytes("\ufeffTotal: 5".encode())
    docs = {d.doc_id: d for d in inventory(str(tmp_path), make_settings())}
    reason = {k: (d.skip_reason.value if d.skip_reason else None) for k, d in docs.items()}
    assert reason == {
        "bad.json": "undecodable",
        "bad.pdf": "corrupt",
        "blank.pdf": "empty",
        "bom.txt": None,
        "broken.txt": "unreadable",
        "good.pdf": None,
        "pipe.txt": "unreadable",
        "spaces.md": "empty",
    }
    assert load_text(docs["good.pdf"]) == "Invoice number: INV-9"
    assert load_text(docs["bom.txt"]) == "Total: 5"
    assert "PDF" in (docs["bad.pdf"].skip_detail or "")


def test_load_text_errors_are_one_line_input_errors(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("hello")
    (tmp_path / "e.txt").write_text("")
    docs = {d.doc_id: d for d in inventory(str(tmp_path), make_settings())}
    with pytest.raises(InputError, match=r"e\.txt was skipped \(empty\)"):
        load_text(docs["e.txt"])
    (tmp_path / "a.txt").write_text("changed")
    with pytest.raises(InputError, match="changed since the inventory") as ei:
        load_text(docs["a.txt"])
    assert "\n" not in ei.value.one_line()
    (tmp_path / "a.txt").unlink()
    with pytest.raises(InputError, match=r"cannot read a\.txt"):
        load_text(docs["a.txt"])


def test_missing_source_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a folder"):
        list(inventory(str(tmp_path / "nope"), make_settings()))


def test_single_file_source(tmp_path: Path) -> None:
    (tmp_path / "one.csv").write_text("field,value\nTotal,5\n")
    [doc] = inventory(str(tmp_path / "one.csv"), make_settings())
    assert doc.doc_id == "one.csv" and doc.status == "ok" and "Total,5" in load_text(doc)


def test_extraction_per_type() -> None:
    page = (
        "<html><head><title>T</title><style>p{color:red}</style><script>alert('x')</script></head>"
        "<body><p>Vendor: Castle &amp; Finch</p><ul><li>one</li><li>two</li></ul></body></html>"
    )
    assert html_to_text(page) == "T\nVendor: Castle & Finch\none\ntwo"
    assert (
        extract_text("json", b'{"total": 5, "name": "\xc3\xa9"}') == '{\n  "total": 5,\n  "name": "\u00e9"\n}'
    )
    assert extract_text("csv", b"a,b\n1,2\n") == "a,b\n1,2\n"
    assert extract_text("py", b"print(1)\n") == "print(1)\n"


def test_s3_source(s3_store_uri: str) -> None:
    store = open_store(s3_store_uri)
    store.put("in/a.txt", b"Invoice number: INV-1")
    store.put("in/sub/b.txt", b"Invoice number: INV-1")
    store.put("in/sub/c.html", b"<p>Total: 3</p>")
    store.put("in/empty.md", b"")
    store.put("in/x.xyz", b"?")
    store.put("other/z.txt", b"not in the source")
    source = f"{s3_store_uri}/in"
    docs = list(inventory(source, Settings()))
    assert [d.doc_id for d in docs] == ["a.txt", "empty.md", "sub/b.txt", "sub/c.html", "x.xyz"]
    by_id = {d.doc_id: d for d in docs}
    assert by_id["sub/b.txt"].duplicate_of == "a.txt"
    assert by_id["empty.md"].skip_reason == SkipReason.EMPTY
    assert by_id["x.xyz"].skip_reason == SkipReason.UNSUPPORTED_TYPE
    assert by_id["sub/c.html"].source_uri == f"{source}/sub/c.html"
    assert load_text(by_id["sub/c.html"], Settings()) == "Total: 3"
    assert load_text(by_id["a.txt"], Settings()) == "Invoice number: INV-1"


def test_document_round_trips_as_json() -> None:
    d = Document(doc_id="a.txt", source_uri="file:///a.txt", sha256="0" * 64, size=1, doc_type="txt")
    assert Document.model_validate_json(d.model_dump_json()) == d


def test_json_nested_1e5_levels_is_undecodable_not_a_crash(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (src / "deep-obj.json").write_text('{"a":' * 100_000 + "1" + "}" * 100_000)
    (src / "ok.txt").write_text("INVOICE 1\n")
    docs = {d.doc_id: d for d in inventory(str(src), make_settings())}
    assert docs["deep.json"].skip_reason is SkipReason.UNDECODABLE
    assert "nested deeper" in str(docs["deep.json"].skip_detail)
    assert docs["deep-obj.json"].skip_reason is SkipReason.UNDECODABLE
    assert docs["ok.txt"].status == "ok"


def test_utf16_and_utf32_with_bom_are_text(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    text = "Rechnung Nr. 7 — Müller GmbH, Total 12.00 EUR\n"
    for enc in ("utf-16", "utf-16-be", "utf-32", "utf-32-be"):
        bom = {"utf-16-be": b"\xfe\xff", "utf-32-be": b"\x00\x00\xfe\xff"}.get(enc, b"")
        (src / f"{enc}.txt").write_bytes(bom + text.encode(enc))
    (src / "nul.txt").write_bytes(b"abc\x00def")
    (src / "utf16-no-bom.txt").write_bytes(text.encode("utf-16-le"))
    docs = {d.doc_id: d for d in inventory(str(src), make_settings())}
    for enc in ("utf-16", "utf-16-be", "utf-32", "utf-32-be"):
        assert docs[f"{enc}.txt"].status == "ok", docs[f"{enc}.txt"]
        assert load_text(docs[f"{enc}.txt"]) == text
    assert docs["nul.txt"].skip_reason is SkipReason.BINARY
    assert docs["utf16-no-bom.txt"].skip_reason is SkipReason.BINARY  # no BOM: NUL bytes, binary


def test_symlinks_outside_the_source_are_not_read(tmp_path: Path) -> None:
    src, outside = tmp_path / "src", tmp_path / "outside"
    src.mkdir()
    (outside / "folder").mkdir(parents=True)
    (outside / "secret.txt").write_text("SECRET outside the source\n")
    (outside / "folder" / "inner.txt").write_text("inner file\n")
    (src / "real.txt").write_text("INVOICE 1\n")
    (src / "link-out.txt").symlink_to(outside / "secret.txt")
    (src / "link-in.txt").symlink_to(src / "real.txt")
    (src / "linked-folder").symlink_to(outside / "folder", target_is_directory=True)
    docs = {d.doc_id: d for d in inventory(str(src), make_settings())}
    assert docs["link-out.txt"].skip_reason is SkipReason.OUTSIDE_SOURCE
    assert docs["link-out.txt"].sha256 == "" and docs["link-out.txt"].size == 0  # never read
    assert docs["link-in.txt"].status == "ok"  # inside the source: read (real.txt is its duplicate)
    assert docs["real.txt"].duplicate_of == "link-in.txt"
    assert docs["linked-folder"].skip_reason is SkipReason.SYMLINKED_FOLDER  # mentioned, not dropped
    assert "linked-folder/inner.txt" not in docs
    followed = {d.doc_id: d for d in inventory(str(src), make_settings(follow_symlinks=True))}
    assert followed["link-out.txt"].status == "ok"
    assert followed["linked-folder/inner.txt"].status == "ok"
    assert "linked-folder" not in followed


def test_symlink_loop_with_follow_terminates(tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "a").mkdir(parents=True)
    (src / "a" / "x.txt").write_text("x\n")
    (src / "a" / "loop").symlink_to(src, target_is_directory=True)
    docs = [d.doc_id for d in inventory(str(src), make_settings(follow_symlinks=True))]
    assert docs == ["a/x.txt"]


def test_estimate_of_a_source_with_a_deeply_nested_json(tmp_path: Path) -> None:
    from tasks.cost.estimate import estimate_source

    src = tmp_path / "src"
    src.mkdir()
    (src / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (src / "inv.txt").write_text("INVOICE 7\nTotal: 10.00 EUR\n")
    lines = estimate_source(str(src), "invoices", make_settings()).lines()
    assert any("1 skipped" in line for line in lines), lines
