"""The emulator's deterministic, grounded "model".

`respond(body)` answers a Messages API request body with content blocks and a stop reason:
schema-valid JSON for `output_config.format`, a `tool_use` block for a forced tool, else a short
text. Values come from the documents in the request (see `emulator.grounding`); evidence strings
are always verbatim lines of a document. `summarize(messages, instructions)` is the compaction
summary. Both are pure: the same input gives the same output.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass
from typing import Any

from emulator.grounding import (
    Frame,
    Label,
    Line,
    Prompt,
    Role,
    block_text,
    claim_frames,
    code_names,
    conflict_frames,
    finding_frames,
    parse_date,
    parse_number,
    read_prompt,
    roles_of,
    row_frames,
    strong,
    tokens,
)


@dataclass
class Out:
    """A generated value, the document line it came from (for sibling evidence), and whether it was found."""

    value: Any
    line: Line | str | None = None
    found: bool = False


ALNUM = re.compile(r"[^\W_]+")
PATTERN = re.compile(r"[{,] ?pattern: (.+?)(?:, \w+: .*)?\}\s*$")
CONSTRAINTS = re.compile(r"\{([^{}]{1,400})\}\s*$")
DEFERRED = (Role.EVIDENCE, Role.CONFIDENCE)


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Field names that defer to their parent's name (`total: {value, evidence}` -> value is the total).
GENERIC = _words("amount content normalized parsed raw str string text val value")
# Words in an array's name that choose how its items are built.
FINDING_WORDS = _words(
    "finding findings issue issues problem problems comment comments warning warnings vulnerability "
    "vulnerabilities smell smells defect defects"
)
CONFLICT_WORDS = _words(
    "conflict conflicts discrepancy discrepancies mismatch mismatches inconsistency inconsistencies "
    "contradiction contradictions disagreement disagreements"
)
ENTITY_WORDS = _words(
    "entity entities vendor vendors party parties organization organizations company companies"
)
CLAIM_WORDS = ENTITY_WORDS | _words(
    "claim claims fact facts group groups match matches duplicate duplicates link links relation relations "
    "cluster clusters agreement agreements shared common"
)
ROW_WORDS = _words(
    "item items line lines row rows position positions product products entry entries charge charges "
    "service services"
)
SUMMARY_WORDS = _words("findings notes highlights summary observations insights")
GROUP_WORDS = _words("name number category kind type vendor buyer")


def _norm(value: Any) -> str:
    return "".join(ch for ch in str(value).lower() if ch.isalnum())


def _constraints(schema: dict[str, Any]) -> dict[str, float]:
    match = CONSTRAINTS.search(str(schema.get("description") or ""))
    out: dict[str, float] = {}
    for part in match.group(1).split(", ") if match else []:
        key, _, raw = part.partition(": ")
        try:
            out[key.strip()] = float(raw)
        except ValueError:
            continue
    return out


def _pattern(schema: dict[str, Any]) -> re.Pattern[str] | None:
    match = PATTERN.search(str(schema.get("description") or ""))
    try:
        return re.compile(match.group(1)) if match else None
    except re.error:
        return None


def _nullable(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "null" or any(v.get("type") == "null" for v in schema.get("anyOf") or [])


class Filler:
    """Fills a JSON schema from the documents of one request."""

    def __init__(self, prompt: Prompt, schema: dict[str, Any]) -> None:
        self.prompt = prompt
        self.root = schema
        self.defs: dict[str, Any] = schema.get("$defs") or schema.get("definitions") or {}
        self.doc = prompt.docs[0]
        self.labels: list[Label] = [lab for doc in prompt.docs for lab in doc.labels]
        self.frames: dict[str, list[Frame]] = {}
        self.depth = 0
        self._doc_words: set[str] | None = None

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
            return Out(
                {"object": {}, "array": [], "null": None, "boolean": False}.get(
                    kind, 0 if kind != "string" else ""
                )
            )
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

    @staticmethod
    def effective(name: str, parent: str) -> str:
        return parent if parent and name.lower() in GENERIC else name

    def known(self, name: str, parent: str, frame: Frame) -> tuple[Role | None, Any] | None:
        if frame.named.get(name) is not None:
            return None, frame.named[name]
        for role in roles_of(self.effective(name, parent)):
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

    def fallback_line(self, frame: Frame) -> Line | None:
        if frame.line is not None:
            return frame.line
        return next((line for doc in self.prompt.docs for line in doc.lines), None)

    # -- types -----------------------------------------------------------------------------------

    def obj(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        props: dict[str, Any] = schema.get("properties") or {}
        outs: dict[str, Out] = {}
        deferred = []
        for pname, pschema in props.items():
            roles = roles_of(pname)
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
            src = outs[base].line if base in outs and outs[base].line is not None else first
            outs[pname] = self.evidence(props[pname], src, frame)
        return Out({k: outs[k].value for k in props}, first, found)

    def evidence(self, schema: dict[str, Any], src: Line | str | None, frame: Frame) -> Out:
        schema = self.resolve(schema)
        if schema.get("type") == "array":
            sources = [f.known.get(Role.EVIDENCE) for f in frame.per_doc] if frame.per_doc else [src]
            texts = [self.as_text(x) for x in sources if x is not None]
            return Out(list(dict.fromkeys(texts)), src, bool(texts))
        if src is None:
            if _nullable(schema):
                return Out(None)
            src = self.fallback_line(frame)
        known: dict[Role, Any] = {Role.EVIDENCE: src}
        if isinstance(src, Line):
            ids = src.doc_id or (self.prompt.ids[0] if self.prompt.ids else None)
            known.update(
                {Role.LINE_START: src.number, Role.LINE_END: src.number, Role.DOC_ID: ids, Role.FILE: ids}
            )
        sub = Frame(frame.doc, src if isinstance(src, Line) else None, known)
        return Out(self.gen(schema, "evidence", "", sub).value, src, src is not None)

    def string(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        eff = self.effective(name, parent)
        fmt = schema.get("format")
        if fmt is None and ("date" in tokens(eff) or "YYYY-MM-DD" in str(schema.get("description", ""))):
            fmt = "iso-if-date"
        hit = self.known(name, parent, frame)
        if hit is not None:
            text = self.as_text(hit[1])
            if fmt not in ("date", "date-time") or parse_date(text):
                return self.limit(
                    schema,
                    Out(self.as_date(text, fmt), hit[1] if hit[0] is Role.EVIDENCE else frame.line, True),
                )
        roles = roles_of(eff)
        if Role.DOC_ID in roles and frame.top and self.prompt.ids:
            return Out(self.prompt.ids[0], None, True)
        accept = (lambda v: parse_date(v) is not None) if fmt in ("date", "date-time") else bool
        lab = self.label(eff, schema, accept)
        if lab is not None:
            return self.limit(schema, Out(self.as_date(lab.value, fmt), lab.line, True))
        line = self.fallback_line(frame)
        if fmt in ("date", "date-time"):
            return Out(self.as_date("1970-01-01", fmt))
        if fmt == "uuid":
            return Out(str(uuid.uuid5(uuid.NAMESPACE_URL, eff)))
        return self.limit(schema, Out(line.text[:200] if line else "", None, False))

    @staticmethod
    def as_text(value: Any) -> str:
        if isinstance(value, Line):
            return value.text
        if isinstance(value, list):
            shown = [Filler.as_text(v) for v in value]
            return shown[0] if len(set(shown)) == 1 else " vs ".join(shown)
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        return str(value)

    @staticmethod
    def as_date(text: str, fmt: Any) -> str:
        day = parse_date(text) if fmt in ("date", "date-time", "iso-if-date") else None
        if day is None:
            return text
        return day.isoformat() + ("T00:00:00Z" if fmt == "date-time" else "")

    def limit(self, schema: dict[str, Any], out: Out) -> Out:
        """Honour `maxLength` and `pattern` (moved into the description by transform_schema)."""
        cap = _constraints(schema).get("maxLength")
        if cap is not None and isinstance(out.value, str):
            out.value = out.value[: int(cap)]
        pattern = _pattern(schema)
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
            value = float(raw) if isinstance(raw, int | float) else parse_number(self.as_text(raw))
            line = frame.line
        if value is None:
            lab = self.label(self.effective(name, parent), schema, lambda v: parse_number(v) is not None)
            if lab is not None:
                value, line = parse_number(lab.value), lab.line
        found = value is not None
        limits = _constraints(schema)
        value = value if value is not None else 0.0
        step = 1 if schema.get("type") == "integer" else 0.01
        low = limits.get(
            "minimum", limits["exclusiveMinimum"] + step if "exclusiveMinimum" in limits else None
        )
        high = limits.get(
            "maximum", limits["exclusiveMaximum"] - step if "exclusiveMaximum" in limits else None
        )
        value = value if low is None else max(value, low)
        value = value if high is None else min(value, high)
        if schema.get("type") == "integer":
            return Out(round(value), line, found)
        return Out(value, line, found)

    def boolean(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        words = {"yes": True, "true": True, "y": True, "paid": True, "no": False, "false": False, "n": False}
        lab = self.label(self.effective(name, parent), schema, lambda v: v.strip().lower() in words)
        if lab is None:
            return Out(False)
        return Out(words[lab.value.strip().lower()], lab.line, True)

    def null(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        return Out(None)

    def enum(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        members = schema["enum"]
        by_norm = {_norm(m): m for m in reversed(members)}
        named = frame.named.get(name)
        if named is not None and _norm(named) in by_norm:
            return Out(by_norm[_norm(named)], frame.line, True)
        lab = self.label(
            self.effective(name, parent),
            schema,
            lambda v: _norm(v) in by_norm or bool(set(map(_norm, v.split())) & set(by_norm)),
        )
        if lab is not None:
            key = (
                _norm(lab.value)
                if _norm(lab.value) in by_norm
                else next(_norm(w) for w in lab.value.split() if _norm(w) in by_norm)
            )
            return Out(by_norm[key], lab.line, True)
        for hint in frame.hints:
            if _norm(hint) in by_norm:
                return Out(by_norm[_norm(hint)], frame.line, True)
        if frame.line is not None:
            words = {_norm(w) for w in frame.line.text.split()}
            hit = next((m for m in members if _norm(m) in words), None)
            if hit is not None:
                return Out(hit, frame.line, True)
        if self._doc_words is None:
            self._doc_words = {w for doc in self.prompt.docs for w in ALNUM.findall(doc.text.lower())}
        hit = next((m for m in members if _norm(m) and _norm(m) in self._doc_words), None)
        return Out(hit if hit is not None else members[0], None, hit is not None)

    def array(self, schema: dict[str, Any], name: str, parent: str, frame: Frame) -> Out:
        items = self.resolve(schema.get("items") or {})
        limits = _constraints(schema)
        values: list[Any] = []
        first: Line | str | None = None
        if items.get("type") == "object" or "properties" in items:
            for sub in self.item_frames(name, items, frame):
                out = self.gen(items, "", "", sub)
                values.append(out.value)
                first = first or out.line
        else:
            hit = self.known(name, parent, frame)
            eff = self.effective(name, parent)
            words = set(tokens(eff))
            if Role.EVIDENCE in roles_of(eff) and frame.per_doc:
                return self.evidence(schema, None, frame)
            if frame.top and eff in ("exports", "imports"):
                values = [n for doc in self.prompt.docs for n in code_names(doc, eff)][:50]
            elif frame.top and words & SUMMARY_WORDS and self.prompt.records:
                frames = self.frames_for("conflicts") + self.frames_for("claims", None, 2)
                frames += self.frames_for("sub_claims", None, 2)
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
        if len(values) < int(schema.get("minItems", 0) or limits.get("minItems", 0)):
            values.append(self.gen(items, "", "", Frame(frame.doc, self.fallback_line(frame))).value)
        if "maxItems" in limits:
            values = values[: int(limits["maxItems"])]
        return Out(values, first, bool(values))

    def item_frames(self, name: str, items: dict[str, Any], frame: Frame) -> list[Frame]:
        """One frame per array item: dispatch on the array's name and its item's fields."""
        if frame.per_doc:
            return frame.per_doc
        words = set(tokens(name))
        props = list(items.get("properties") or {})
        roles = {r for prop in props for r in roles_of(prop)[:1]}
        across = bool(self.prompt.records) and self.prompt.docs[0].doc_id is None
        if words & FINDING_WORDS or Role.LINE_START in roles:
            if across:  # integration: group the per-file findings shared by several files
                return self.frames_for("sub_claims", self.group_fields(props, sub=True), 2)
            return self.frames_for("findings")
        if words & CONFLICT_WORDS:
            return self.frames_for("conflicts")
        if words & CLAIM_WORDS:
            fields = self.group_fields(props, sub=False)
            return self.frames_for("claims", fields, 1 if fields and words & ENTITY_WORDS else 2)
        if words & ROW_WORDS or roles & {Role.QTY, Role.UNIT_PRICE}:
            return self.frames_for("rows")
        return []

    def frames_for(self, kind: str, fields: set[str] | None = None, min_docs: int = 2) -> list[Frame]:
        key = f"{kind}:{sorted(fields or [])}:{min_docs}"
        if key not in self.frames:
            if kind == "claims" or kind == "sub_claims":
                self.frames[key] = claim_frames(self.prompt, fields, min_docs, sub=kind == "sub_claims")
            else:
                self.frames[key] = BUILDERS[kind](self.prompt)
        return self.frames[key]

    def group_fields(self, props: list[str], *, sub: bool) -> set[str] | None:
        """The record field an item groups by: one its schema names too, names and kinds first."""
        fields = {k.rsplit(".", 1)[-1] for _, r in self.prompt.records if ("__sub" in r) == sub for k in r}
        shared = [p for p in props if p in fields]
        preferred = [p for p in shared if set(tokens(p)) & GROUP_WORDS]
        return {(preferred or shared)[0]} if shared else None

    by_type = {
        "object": obj,
        "array": array,
        "string": string,
        "integer": number,
        "number": number,
        "boolean": boolean,
        "null": null,
    }


BUILDERS = {"findings": finding_frames, "conflicts": conflict_frames, "rows": row_frames}


def respond(body: dict[str, Any]) -> dict[str, Any]:
    """Content blocks and stop_reason for a Messages API request body (a dict as sent on the wire)."""
    prompt = read_prompt(body)
    fmt = (body.get("output_config") or {}).get("format")
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and isinstance(fmt.get("schema"), dict):
        value = Filler(prompt, fmt["schema"]).fill()
        text = json.dumps(value, ensure_ascii=False)
        return {"content": [{"type": "text", "text": text}], "stop_reason": "end_turn"}
    tool = _forced_tool(body)
    if tool is not None:
        schema = tool.get("input_schema") or {"type": "object", "properties": {}}
        tool_input = Filler(prompt, schema).fill()
        block = {
            "type": "tool_use",
            "id": "toolu_" + _digest(body)[:24],
            "name": tool["name"],
            "input": tool_input,
        }
        return {"content": [block], "stop_reason": "tool_use"}
    return {"content": [{"type": "text", "text": _text_answer(body, prompt)}], "stop_reason": "end_turn"}


def _forced_tool(body: dict[str, Any]) -> dict[str, Any] | None:
    choice = body.get("tool_choice") or {}
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and t.get("name")]
    if not tools or not isinstance(choice, dict):
        return None
    if choice.get("type") == "tool":
        return next((t for t in tools if t["name"] == choice.get("name")), None)
    if choice.get("type") == "any":
        return tools[0]
    return None


def _digest(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def _text_answer(body: dict[str, Any], prompt: Prompt) -> str:
    last = ""
    for message in body.get("messages") or []:
        if message.get("role") == "user":
            last = " ".join(block_text(message.get("content", "")))
    words = last.split()
    head = " ".join(words[:12]) + (" ..." if len(words) > 12 else "")
    docs = ", ".join(d.doc_id for d in prompt.docs if d.doc_id) or "none"
    return f"Emulated answer ({_digest(body)[:8]}): read {len(words)} words; documents: {docs}. Re: {head}"


SUMMARY_HEADER = "Summary of earlier conversation"
KEEP_DIRECTIVE = "KEEP LINES CONTAINING:"
ALWAYS_KEEP = ("FACT:", "DECISION:")
MAX_LINES = 400
MAX_CHARS = 40_000


def summarize(messages: list[dict[str, Any]], instructions: str | None) -> str:
    """A compaction summary that honours `instructions` in a checkable way.

    Rule: if `instructions` contains a line `KEEP LINES CONTAINING: term1 | term2 | ...`, every line
    of the conversation text containing one of those terms (case-sensitive substring) is kept
    verbatim, in order. Lines starting with `FACT:` or `DECISION:` (after leading spaces) are always
    kept. Without that directive, the first non-empty line of each message is kept instead. All other
    lines are dropped and counted in one line `[dropped N other lines]`. The result starts with
    `Summary of earlier conversation`, and is capped at 400 kept lines / 40,000 characters, keeping
    the newest lines when capping (the count of lines cut is reported as well).
    """
    terms = _keep_terms(instructions)
    kept: list[str] = []
    dropped = 0
    for message in messages:
        first = True
        for raw in "\n".join(block_text(message.get("content", ""))).split("\n"):
            line = raw.rstrip()
            if not line.strip():
                continue
            keep = line.lstrip().startswith(ALWAYS_KEEP)
            keep = keep or any(term in line for term in terms) if terms is not None else keep or first
            first = False
            if keep:
                kept.append(line)
            else:
                dropped += 1
    cut = 0
    while kept and (len(kept) > MAX_LINES or sum(len(x) + 1 for x in kept) > MAX_CHARS):
        kept.pop(0)
        cut += 1
    tail = [f"[dropped {dropped} other lines]"]
    if cut:
        tail.append(f"[cut {cut} older kept lines to fit]")
    return "\n".join([f"{SUMMARY_HEADER} ({len(messages)} messages):", *kept, *tail])


def _keep_terms(instructions: str | None) -> list[str] | None:
    if not instructions or not instructions.strip():
        return None
    for line in instructions.splitlines():
        _head, sep, tail = line.partition(KEEP_DIRECTIVE)
        if sep:
            return [t.strip() for t in tail.split("|") if t.strip()]
    return None
