"""Items across documents: values several documents share (claims, entities), values that differ (conflicts)."""

from __future__ import annotations

from typing import Any

from emulator.frames import Frame
from emulator.grounding import Line, Prompt
from emulator.roles import Role, roles_of
from emulator.words import tokens


def _norm(value: Any) -> str:
    if isinstance(value, int | float):
        return f"{float(value):.4f}"
    return str(value).strip().casefold()


def _by_doc(prompt: Prompt) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for doc_id, record in prompt.records:
        if "__sub" not in record:
            out.setdefault(doc_id, record)
    return out


def _evidence_for(prompt: Prompt, doc_id: str, record: dict[str, Any], name: str) -> Line | str | None:
    ev = record.get(name + ".__evidence", record.get("__evidence"))
    if isinstance(ev, str) and ev.strip() and ev in prompt.full_text:
        return ev
    value = str(record.get(name, ""))
    for doc in prompt.docs:
        if doc.doc_id == doc_id and value:
            return next((line for line in doc.lines if value in line.text), None)
    return None


def _member_frames(prompt: Prompt, items: list[tuple[str, dict[str, Any]]], name: str) -> list[Frame]:
    frames = []
    for doc_id, record in items:
        doc = next((d for d in prompt.docs if d.doc_id == doc_id), prompt.docs[0])
        ev = _evidence_for(prompt, doc_id, record, name)
        known = {
            Role.DOC_ID: doc_id,
            Role.FILE: doc_id,
            Role.VALUE: record.get(name),
            Role.FIELD: _leaf(name),
            Role.DESC: record.get(name),
            Role.CONFIDENCE: 0.9,
        }
        if ev is not None:
            known[Role.EVIDENCE] = ev
        named = {_leaf(k): v for k, v in record.items() if "__" not in k}
        frames.append(Frame(doc, ev if isinstance(ev, Line) else None, known, named=named))
    return frames


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _group_frame(prompt: Prompt, members: list[tuple[str, dict[str, Any]]], name: str, explain: str) -> Frame:
    per_doc = _member_frames(prompt, members, name)
    known: dict[Role, Any] = {
        Role.FIELD: _leaf(name),
        Role.VALUE: [f.known[Role.VALUE] for f in per_doc],
        Role.DOC_ID: [d for d, _ in members],
        Role.EXPLAIN: explain,
        Role.CONFIDENCE: 0.9,
        Role.DESC: members[0][1].get(name),
    }
    evidence = next((f.known[Role.EVIDENCE] for f in per_doc if Role.EVIDENCE in f.known), None)
    if evidence is not None:
        known[Role.EVIDENCE] = evidence
    named = {k: v for k, v in per_doc[0].named.items() if roles_of(k)[:1] != (Role.EXPLAIN,)}
    named[_leaf(name)] = members[0][1].get(name)
    return Frame(per_doc[0].doc, per_doc[0].line, known, per_doc=per_doc, named=named)


def _is_meta(name: str) -> bool:
    # `state` is docmill's own bookkeeping in integration records, not something documents say
    return (
        "__" in name or name == "state" or bool({Role.CONFIDENCE, Role.EVIDENCE} & set(roles_of(_leaf(name))))
    )


def claim_frames(
    prompt: Prompt, fields: set[str] | None = None, min_docs: int = 2, sub: bool = False
) -> list[Frame]:
    """String values shared by `min_docs`+ documents' records (or nested sub-records), per field."""
    records = [(d, r) for d, r in prompt.records if "__sub" in r] if sub else list(_by_doc(prompt).items())
    groups: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for doc_id, record in records:
        for name, value in record.items():
            if fields is not None and _leaf(name) not in fields:
                continue
            if isinstance(value, str) and value.strip() and not _is_meta(name):
                groups.setdefault((name, _norm(value)), {}).setdefault(doc_id, record)
    frames = []
    for (name, _), by_doc in groups.items():
        members = list(by_doc.items())
        if len(members) >= min_docs:
            value = members[0][1][name]
            shown = ", ".join(d for d, _ in members[:5]) + (
                f" and {len(members) - 5} more" if len(members) > 5 else ""
            )
            explain = f"{_leaf(name)} {value!s} appears in {len(members)} documents: {shown}"
            frames.append(_group_frame(prompt, members, name, explain))
    return frames[:50]


def conflict_frames(prompt: Prompt) -> list[Frame]:
    """Records sharing a key field (name has `number` or `id`) whose other fields differ."""
    records = _by_doc(prompt)
    frames = []
    names = list(dict.fromkeys(n for r in records.values() for n in r if not _is_meta(n)))
    keys = [n for n in names if {"number", "id"} & set(tokens(_leaf(n))) or _leaf(n).endswith("id")]
    for key in keys:
        groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for doc_id, record in records.items():
            if record.get(key) not in (None, ""):
                groups.setdefault(_norm(record[key]), []).append((doc_id, record))
        for members in groups.values():
            if len(members) < 2:
                continue
            for name in names:
                values = {_norm(r.get(name)) for _, r in members if r.get(name) is not None}
                if name == key or len(values) < 2:
                    continue
                shown = " vs ".join(f"{r.get(name)} ({d})" for d, r in members)
                explain = f"{_leaf(key)} {members[0][1][key]}: {_leaf(name)} differs: {shown}"
                frame = _group_frame(prompt, members, name, explain)
                frame.known[Role.KEY] = members[0][1][key]
                frames.append(frame)
    return frames[:50]
