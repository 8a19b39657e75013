"""Fill a JSON schema with values grounded in the documents of one request."""

from __future__ import annotations

import math
import re
import uuid
from typing import Any

from emulator.frames import Frame, located
from emulator.grounding import Label, Line, Prompt
from emulator.item_frames import ItemFrames
from emulator.prose import Found, find
from emulator.roles import Role, roles_of
from emulator.schema_hints import (
    ALNUM,
    SUMMARY_WORDS,
    Out,
    alnum_key,
    as_date,
    as_text,
    constraints,
    effective,
    nullable,
    pattern_of,
)
from emulator.source_code import code_names
from emulator.values import parse_date, parse_number
from emulator.words import strong, tokens

DEFERRED = (Role.EVIDENCE, Role.CONFIDENCE)
VERBATIM = re.compile(r"\bverbatim\b|\bexact text\b|\bcopied exactly\b", re.IGNORECASE)
GENERIC_ITEMS = 3  # items of a list whose name says nothing the filler knows: the first informative lines


def _words_of(member: Any) -> set[str]:
    """An enum member as the words a document would write it in: `purchase_order` -> purchase, order."""
    return {alnum_key(w) for w in re.split(r"[\W_]+", str(member)) if alnum_key(w)}


def field_roles(name: str, schema: dict[str, Any]) -> tuple[Role, ...]:
    """A field's roles from its name, else evidence when its description asks for verbatim text
    (what a model reads too: a recipe's own evidence field, whatever it is called)."""
    roles = roles_of(name)
    if roles:
        return roles
    kinds = {schema.get("type")} | {v.get("type") for v in schema.get("anyOf") or [] if isinstance(v, dict)}
    if kinds & {"string", "array"} and VERBATIM.search(str(schema.get("description") or "")):
        return (Role.EVIDENCE,)
    return ()


class Filler:
    """Fills a JSON schema from the documents of one request."""

    def __init__(self, prompt: Prompt, schema: dict[str, Any]) -> None:
        self.prompt = prompt
        self.root = schema
        self.defs: dict[str, Any] = schema.get("$defs") or schema.get("definitions") or {}
        self.doc = prompt.docs[0]
        self.labels: list[Label] = [lab for doc in prompt.docs for lab in doc.labels]
        self.items = ItemFrames(prompt)
        self.depth = 0
        self._doc_words: set[str] | None = None
        self.in_generic = False  # inside items built from plain lines: their own lists stay empty

    def fill(self) -> Any:
        return self.gen(self.root, "", "", Frame(self.doc, top=True)).value

    def resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        for _ in range(20):
            ref = schema.get("$ref")
            if not isinstance(ref, str):
                break
            target = self.root if ref == "#" else self.defs.get(ref.rsplit("/", 1)[-1])
            schema = {
                **(target or {"type": "object", "properties": {}}),
                **{k: v for k, v in schema.items() if k != "$ref"},
            }
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                for key, value in self.resolve(part).items():
                    if key == "properties":
                        merged["properties"] = {**merged.get("properties", {}), **value}
                    elif key == "required":
                        merged["required"] = [*merged.get("required", []), *value]
                    else:
                        merged.setdefault(key, value)
            schema = merged
        if isinstance(schema.get("type"), list):
            schema = {**schema, "anyOf": [{**schema, "type": t} for t in schema["type"]]}
            del schema["type"]
        return schema

    def gen(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        schema = self.resolve(schema)
        if "const" in schema:
            return Out(schema["const"])
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.enum(schema, name, parent, frame)
        if isinstance(schema.get("anyOf"), list):
            return self.any_of(schema, name, parent, frame)
        kind = schema.get("type") or ("object" if "properties" in schema else "string")
        if self.depth > 12:
            return Out({"object": {}, "array": [], "null": None, "boolean": False, "string": ""}.get(kind, 0))
        self.depth += 1
        try:
            return self.by_type[kind](self, schema, name, parent, frame)
        finally:
            self.depth -= 1

    def any_of(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        variants = [self.resolve(v) for v in schema["anyOf"]]
        first: Out | None = None
        for variant in variants:
            if variant.get("type") == "null":
                continue
            out = self.gen(variant, name, parent, frame)
            if out.found:
                return out
            first = first or out
        if first is None or any(v.get("type") == "null" for v in variants):
            return Out(None)
        return first

    # -- lookups ---------------------------------------------------------------------------------

    def known(self, name: str, parent: str, frame: Frame) -> tuple[Role | None, Any] | None:
        if frame.named.get(name) is not None:
            return None, frame.named[name]
        for role in roles_of(effective(name, parent)):
            if role in frame.known and frame.known[role] is not None:
                return role, frame.known[role]
        return None

    def label(self, name: str, schema: dict[str, Any], accept: Any) -> Label | None:
        ftoks = strong(tokens(name))
        if not ftoks:
            return None
        fset, head = set(ftoks), ftoks[-1]
        hints = set(tokens(f"{schema.get('title', '')} {str(schema.get('description', ''))[:200]}"))
        best, best_score = None, 0.0
        for lab in self.labels:
            inter = fset & lab.toks
            if head not in lab.toks or not (fset <= lab.toks or lab.toks <= fset):
                continue
            score = (
                len(inter) / len(fset | lab.toks)
                + (0.25 if head in lab.toks else 0)
                + 0.05 * len(hints & lab.toks)
            )
            if score > best_score and accept(lab.value):
                best, best_score = lab, score
        return best

    def prose(self, name: str, kind: str, frame: Frame) -> Found | None:
        """A top-level field of a per-file request stated in a sentence (emulator.prose), after its
        labelled lines found nothing."""
        if not (frame.top and self.prompt.per_file):
            return None
        return find(frame.doc, name, kind)

    def fallback_line(self, frame: Frame) -> Line | None:
        if frame.line is not None:
            return frame.line
        return next((line for doc in self.prompt.docs for line in doc.lines), None)

    def line_frames(self, frame: Frame) -> list[Frame]:
        """One item per informative line (two words or more) of the frame's document, the first few:
        what fills a list the filler has no builder for, so a new recipe's lists are not empty."""
        labelled = {lab.line.number for lab in frame.doc.labels}
        wordy = [line for line in frame.doc.lines if len(tokens(line.text)) >= 2]
        prose = [line for line in wordy if line.number not in labelled and not line.text.startswith("#")]
        lines = (prose or wordy)[:GENERIC_ITEMS]
        doc_id = frame.doc.doc_id or (self.prompt.ids[0] if self.prompt.ids else None)
        frames = []
        for line in lines:
            known = {
                Role.EVIDENCE: line,
                Role.EXPLAIN: line.text,
                Role.DESC: line.text,
                **located(line, doc_id),
            }
            frames.append(Frame(frame.doc, line, known))
        return frames

    # -- types -----------------------------------------------------------------------------------

    def obj(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        props: dict[str, Any] = schema.get("properties") or {}
        outs: dict[str, Out] = {}
        deferred = []
        for pname, pschema in props.items():
            roles = field_roles(pname, self.resolve(pschema))
            if roles and roles[0] in DEFERRED and roles[0] not in frame.known:
                deferred.append((pname, roles[0]))
                continue
            outs[pname] = self.gen(pschema, pname, name, frame)
        found = any(o.found for o in outs.values())
        first = next((o.line for o in outs.values() if o.line is not None), None) or frame.line
        for pname, role in deferred:
            if role is Role.CONFIDENCE:
                value = frame.known.get(Role.CONFIDENCE) or (0.9 if found else 0.3)
                outs[pname] = self.gen(
                    props[pname], pname, name, Frame(frame.doc, frame.line, {Role.CONFIDENCE: value})
                )
                continue
            base = pname.rsplit("_", 1)[0] if "_" in pname else ""
            # `X_evidence` beside `X`: X's own line, none when X was not found (never another field's)
            src = outs[base].line if base in outs else first
            outs[pname] = self.evidence(props[pname], src, frame)
        return Out({k: outs[k].value for k in props}, first, found)

    def evidence(self, schema: dict[str, Any], src: Line | str | None, frame: Frame) -> Out:
        schema = self.resolve(schema)
        if schema.get("type") == "array":
            sources = [f.known.get(Role.EVIDENCE) for f in frame.per_doc] if frame.per_doc else [src]
            texts = [as_text(x) for x in sources if x is not None]
            return Out(list(dict.fromkeys(texts)), src, bool(texts))
        if src is None:
            if nullable(schema):
                return Out(None)
            src = self.fallback_line(frame)
        known: dict[Role, Any] = {Role.EVIDENCE: src}
        if isinstance(src, Line):
            known.update(located(src, src.doc_id or (self.prompt.ids[0] if self.prompt.ids else None)))
        sub = Frame(frame.doc, src if isinstance(src, Line) else None, known)
        return Out(self.gen(schema, "evidence", "", sub).value, src, src is not None)

    def string(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        eff = effective(name, parent)
        fmt = schema.get("format")
        if fmt is None and ("date" in tokens(eff) or "YYYY-MM-DD" in str(schema.get("description", ""))):
            fmt = "iso-if-date"
        hit = self.known(name, parent, frame)
        if hit is not None:
            text = as_text(hit[1])
            if fmt not in ("date", "date-time") or parse_date(text):
                return self.limit(
                    schema, Out(as_date(text, fmt), hit[1] if hit[0] is Role.EVIDENCE else frame.line, True)
                )
        roles = roles_of(eff)
        if Role.DOC_ID in roles and frame.top and self.prompt.ids:
            return Out(self.prompt.ids[0], None, True)
        accept = (lambda v: parse_date(v) is not None) if fmt in ("date", "date-time") else bool
        lab = self.label(eff, schema, accept)
        if lab is not None:
            return self.limit(schema, Out(as_date(lab.value, fmt), lab.line, True))
        found = self.prose(eff, "date" if fmt in ("date", "date-time", "iso-if-date") else "text", frame)
        if found is not None:
            return self.limit(schema, Out(as_date(str(found.value), fmt), found.line, True))
        line = self.fallback_line(frame)
        if fmt in ("date", "date-time"):
            return Out(as_date("1970-01-01", fmt))
        if fmt == "uuid":
            return Out(str(uuid.uuid5(uuid.NAMESPACE_URL, eff)))
        return self.limit(schema, Out(line.text[:200] if line else "", None, False))

    def limit(self, schema: dict[str, Any], out: Out) -> Out:
        """Honour `maxLength` and `pattern` (moved into the description by transform_schema)."""
        cap = constraints(schema).get("maxLength")
        if cap is not None and isinstance(out.value, str):
            out.value = out.value[: int(cap)]
        pattern = pattern_of(schema)
        if pattern is not None and isinstance(out.value, str) and not pattern.fullmatch(out.value):
            loose = re.compile(pattern.pattern.lstrip("^").rstrip("$"))
            for line in (line for doc in self.prompt.docs for line in doc.lines):
                match = loose.search(line.text)
                if match and match.group(0) and pattern.fullmatch(match.group(0)):
                    return Out(match.group(0), line, True)
        return out

    def number(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        value: float | None = None
        line: Line | str | None = None
        hit = self.known(name, parent, frame)
        if hit is not None:
            raw = hit[1][0] if isinstance(hit[1], list) and hit[1] else hit[1]
            value = float(raw) if isinstance(raw, int | float) else parse_number(as_text(raw))
            line = frame.line
        if value is None:
            lab = self.label(effective(name, parent), schema, lambda v: parse_number(v) is not None)
            if lab is not None:
                value, line = parse_number(lab.value), lab.line
        if value is None:
            stated = self.prose(effective(name, parent), "number", frame)
            if stated is not None:
                value, line = float(stated.value), stated.line
        found = value is not None
        limits = constraints(schema)
        value = value if value is not None else 0.0
        step = 1 if schema.get("type") == "integer" else 0.01
        low = limits.get("minimum", limits.get("exclusiveMinimum", -math.inf) + step)
        high = limits.get("maximum", limits.get("exclusiveMaximum", math.inf) - step)
        value = min(max(value, low), high)
        return Out(round(value) if schema.get("type") == "integer" else value, line, found)

    def boolean(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        words = {"yes": True, "true": True, "y": True, "paid": True, "no": False, "false": False, "n": False}
        lab = self.label(effective(name, parent), schema, lambda v: v.strip().lower() in words)
        if lab is None:
            return Out(False)
        return Out(words[lab.value.strip().lower()], lab.line, True)

    def null(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        return Out(None)

    def enum(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        members = schema["enum"]
        by_norm = {alnum_key(m): m for m in reversed(members)}
        named = frame.named.get(name)
        if named is not None and alnum_key(named) in by_norm:
            return Out(by_norm[alnum_key(named)], frame.line, True)

        def key_of(text: str) -> str | None:
            """The member a label's value names, whole or by one of its words."""
            return next((k for k in (alnum_key(text), *map(alnum_key, text.split())) if k in by_norm), None)

        lab = self.label(effective(name, parent), schema, lambda v: key_of(v) is not None)
        if lab is not None and (key := key_of(lab.value)) is not None:
            return Out(by_norm[key], lab.line, True)
        for hint in frame.hints:
            if alnum_key(hint) in by_norm:
                return Out(by_norm[alnum_key(hint)], frame.line, True)
        if frame.line is not None:
            words = {alnum_key(w) for w in frame.line.text.split()}
            hit = next((m for m in members if alnum_key(m) in words), None)
            if hit is not None:
                return Out(hit, frame.line, True)
        if self._doc_words is None:
            self._doc_words = {w for doc in self.prompt.docs for w in ALNUM.findall(doc.text.lower())}
        hit = next((m for m in members if _words_of(m) and _words_of(m) <= self._doc_words), None)
        return Out(hit if hit is not None else members[0], None, hit is not None)

    def array(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        items = self.resolve(schema.get("items") or {})
        limits = constraints(schema)
        values: list[Any] = []
        first: Line | str | None = None
        if items.get("type") == "object" or "properties" in items:
            subs = self.items.for_array(name, items, frame)
            generic = subs is None  # a name the filler has no builder for: items over the document's lines
            if generic:
                subs = self.line_frames(frame) if self.prompt.per_file and not self.in_generic else []
            self.in_generic, outer = self.in_generic or generic, self.in_generic
            try:
                for sub in subs or []:
                    out = self.gen(items, "", "", sub)
                    values.append(out.value)
                    first = first or out.line
            finally:
                self.in_generic = outer
        else:
            hit = self.known(name, parent, frame)
            eff = effective(name, parent)
            words = set(tokens(eff))
            if Role.EVIDENCE in roles_of(eff) and frame.per_doc:
                return self.evidence(schema, None, frame)
            if frame.top and eff in ("exports", "imports"):
                values = [n for doc in self.prompt.docs for n in code_names(doc, eff)][:50]
            elif frame.top and words & SUMMARY_WORDS and self.prompt.records:
                frames = self.items.frames_for("conflicts") + self.items.frames_for("claims", None, 2)
                frames += self.items.frames_for("sub_claims", None, 2)
                values = [f.known[Role.EXPLAIN] for f in frames][:10]
            elif hit is not None:
                raw = hit[1] if isinstance(hit[1], list) else [hit[1]]
                values = [
                    self.gen(items, eff, "", Frame(frame.doc, frame.line, {roles_of(eff)[0]: r})).value
                    for r in raw
                ]
            elif Role.DOC_ID in roles_of(eff) and frame.top:
                values = list(self.prompt.ids)
            else:
                lab = self.label(eff, items, bool)
                if lab is not None:
                    values, first = [self.gen(items, eff, parent, frame).value], lab.line
                elif self.prompt.per_file and not self.in_generic and items.get("type", "string") == "string":
                    lines = [f.line for f in self.line_frames(frame) if f.line is not None]
                    values, first = [line.text for line in lines], (lines[0] if lines else None)
        if len(values) < int(schema.get("minItems", 0) or limits.get("minItems", 0)):
            values.append(self.gen(items, "", "", Frame(frame.doc, self.fallback_line(frame))).value)
        if "maxItems" in limits:
            values = values[: int(limits["maxItems"])]
        return Out(values, first, bool(values))

    by_type = {
        "object": obj,
        "array": array,
        "string": string,
        "integer": number,
        "number": number,
        "boolean": boolean,
        "null": null,
    }
