"""Line items of a document: rows of a text table, or the objects of a JSON document's first list."""

from __future__ import annotations

import json
from typing import Any

from emulator.frames import Frame, located
from emulator.grounding import Doc, Prompt
from emulator.records import flatten
from emulator.roles import Role
from emulator.values import DATE_RE, NUMBER, numbers_in


def row_frames(prompt: Prompt) -> list[Frame]:
    frames = []
    for doc in prompt.docs:
        if doc.text.lstrip().startswith(("{", "[")):
            frames.extend(_json_rows(doc))
            continue
        values = {lab.line.number: lab.value for lab in doc.labels}
        for line in doc.table_rows:
            text = values.get(line.number, line.text).lstrip("-*•| \t")
            if "|" in text:
                desc = next((seg.strip() for seg in text.split("|") if seg.strip()), text)
            else:
                match = NUMBER.search(DATE_RE.sub(" ", text))
                desc = text[: match.start()].rstrip(" :,-=x×@\t") if match and match.start() > 0 else text
            rest = text.split("|", 1)[1] if "|" in text else text[len(desc) :]
            nums = numbers_in(rest) or numbers_in(line.text)
            qty, unit, amount = 1.0, None, nums[-1]
            low = line.text.lower()
            if len(nums) >= 3:
                qty, unit = nums[0], nums[1]
            elif len(nums) == 2 and (" x " in low or "×" in low or "@" in low or float(nums[0]).is_integer()):
                qty = nums[0]
                unit = round(amount / qty, 2) if qty else amount
            known = {
                Role.DESC: desc or text,
                Role.VALUE: desc or text,
                Role.QTY: qty,
                Role.UNIT_PRICE: unit if unit is not None else amount,
                Role.AMOUNT: amount,
                Role.EVIDENCE: line,
                Role.CONFIDENCE: 0.9,
                **located(line, doc.doc_id),
            }
            frames.append(Frame(doc, line, known))
    return frames[:50]


def _json_rows(doc: Doc) -> list[Frame]:
    """Line items of a JSON document: the objects of its first list of objects."""
    try:
        obj = json.loads(doc.text)
    except ValueError:
        return []
    rows = (
        next((v for v in obj.values() if isinstance(v, list) and v and isinstance(v[0], dict)), [])
        if isinstance(obj, dict)
        else obj
    )
    frames = []
    for item in rows[:50] if isinstance(rows, list) else []:
        if not isinstance(item, dict):
            continue
        named: dict[str, Any] = {}
        flatten(item, "", named)
        first = next((v for v in named.values() if isinstance(v, str) and v), None)
        quoted = json.dumps(first, ensure_ascii=False) if first else None
        line = next((ln for ln in doc.lines if quoted and quoted in ln.text), None)
        known: dict[Role, Any] = {Role.DESC: first, Role.CONFIDENCE: 0.9, Role.DOC_ID: doc.doc_id}
        if line is not None:
            known.update({Role.EVIDENCE: line, Role.LINE_START: line.number, Role.LINE_END: line.number})
        frames.append(Frame(doc, line, known, named=named))
    return frames
