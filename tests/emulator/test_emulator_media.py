"""The emulator takes PDFs and images as the API does (issue 24): the real SDK sends base64
`document` and `image` blocks; over 100 pages, an encrypted or invalid PDF, a wrong media type or an
oversized image answer 400 with the API's message; pages and pixels are billed as the API bills
them (count_tokens and usage agree); answers are grounded in the text layer, or in the OCR hint a
test embedded in a scan, with the page each excerpt is on."""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic
import pytest

from examples import formats as F
from tests.fixtures.emulator import sdk_client
from tests.fixtures.formats import invoice

MODEL = "claude-sonnet-4-6"
SCHEMA = {
    "type": "object",
    "properties": {
        "total": {
            "type": "object",
            "properties": {"value": {"type": "string"}, "evidence": {"type": "string"}},
            "required": ["value", "evidence"],
            "additionalProperties": False,
        }
    },
    "required": ["total"],
    "additionalProperties": False,
}


def pdf_block(data: bytes, title: str = "doc.pdf") -> dict[str, Any]:
    source = {"type": "base64", "media_type": "application/pdf", "data": base64.b64encode(data).decode()}
    return {"type": "document", "source": source, "title": title}


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()},
    }


def ask(client: anthropic.Anthropic, *blocks: dict[str, Any], schema: bool = False) -> Any:
    extra = {"output_config": {"format": {"type": "json_schema", "schema": SCHEMA}}} if schema else {}
    content = [*blocks, {"type": "text", "text": "Extract the total."}]
    return client.messages.create(
        model=MODEL, max_tokens=500, messages=[{"role": "user", "content": content}], **extra
    )


@pytest.mark.parametrize(
    ("block", "message"),
    [
        (
            pdf_block(F.text_pdf([["page"]] * 101, share_content=True)),
            "messages.0.content.0.pdf.source.base64.data: A maximum of 100 PDF pages may be provided.",
        ),
        (
            pdf_block(F.text_pdf([invoice(1)], encrypt=True)),
            "messages.0.content.0.pdf.source.base64.data: encrypted PDFs are not supported",
        ),
        (
            pdf_block(b"%PDF-1.4 not really"),
            "messages.0.content.0.pdf.source.base64.data: The PDF specified was not valid.",
        ),
        (
            image_block(F.png_image(["x"]), "image/tiff"),
            "messages.0.content.0.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        ),
        (
            image_block(F.jpg_image(["x"]), "image/png"),
            "messages.0.content.0.image.source.base64.data: Image does not match the provided media type image/png",
        ),
    ],
)
def test_refused_as_the_api_refuses(emulator: Any, block: dict[str, Any], message: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        ask(sdk_client(emulator), block)
    assert e.value.status_code == 400 and e.value.body["error"]["message"] == message  # type: ignore[index]
    assert not emulator.state.accounting.billed  # a refused request is not billed


def test_an_image_over_8000_px_is_image_dimensions_too_large(emulator: Any) -> None:
    with pytest.raises(anthropic.BadRequestError) as e:
        ask(sdk_client(emulator), image_block(F.huge_png_header(9000, 100)))
    body: Any = e.value.body
    assert body["error"]["details"] == {
        "error_code": "image_dimensions_too_large",
        "max_side_length_pixels": 8000,
        "paths": ["messages.0.content.0"],
    }


def test_pages_and_pixels_are_billed_as_the_api_bills_them(emulator: Any) -> None:
    client = sdk_client(emulator)
    scan = pdf_block(F.scanned_pdf([invoice(1), invoice(2)]))
    plain = client.messages.count_tokens(
        model=MODEL, messages=[{"role": "user", "content": "Extract the total."}]
    )
    counted = client.messages.count_tokens(
        model=MODEL,
        messages=[{"role": "user", "content": [scan, {"type": "text", "text": "Extract the total."}]}],
    )
    assert counted.input_tokens - plain.input_tokens == 2 * 1600 + 3  # two page images, no text layer
    answer = ask(client, scan)
    assert answer.usage.input_tokens == counted.input_tokens
    photo = image_block(F.png_image(invoice(3), width=850, height=500))
    assert ask(client, photo).usage.input_tokens - plain.input_tokens == 567 + 3  # 850 x 500 / 750


def test_answers_are_grounded_in_the_text_layer_or_the_scan_hint_with_pages(emulator: Any) -> None:
    client = sdk_client(emulator)
    scan = F.scanned_pdf([invoice(1)[:6], invoice(1)[6:]])
    out = json.loads(ask(client, pdf_block(scan), schema=True).content[0].text)
    assert out["total"] == {"value": "1,190.00", "evidence": "[page 2] Total: 1,190.00"}
    text = F.text_pdf([["Cover letter, nothing to see here at all on this page."], invoice(2)])
    out = json.loads(ask(client, pdf_block(text), schema=True).content[0].text)
    assert out["total"]["evidence"] == "[page 2] Total: 1,190.00"
    blind = F.scanned_pdf([invoice(3)], ocr_hint=False)  # no hint: the emulator cannot read pixels
    out = json.loads(ask(client, pdf_block(blind), schema=True).content[0].text)
    assert "1,190.00" not in json.dumps(out)
