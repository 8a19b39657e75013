"""What a batch record's item list holds: one `WorkItem` per request.

A `WorkItem` is one line of `runs/<run_id>/batches/<n>.items.jsonl.gz` (checkpoints.batches): the
custom_id (= the document's idempotency key), the document, and, for follow-up rounds, the exact
request to send (a repair or a larger-max_tokens retry) plus what was tried and spent so far. A
first-round item stores no request: it is rebuilt from the document, byte for byte, by
`tasks.request.file_request`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from tasks.per_file.gate import Action, Progress


@dataclass
class WorkItem:
    """One document's request in a batch round, and everything tried for it so far."""

    custom_id: str
    doc: dict[str, Any]
    max_tokens: int
    request: dict[str, Any] | None = None  # None: the first-round request, rebuilt from `doc`
    action: str | None = None  # the gate Action that produced `request` (repair, retry_larger)
    rounds: int = 0  # batch rounds that ended without an answer (errored, expired, canceled)
    attempts: int = 0  # answered attempts
    repairs: int = 0
    repair_tokens: int = 0
    truncation_retries: int = 0
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    request_ids: list[str] = field(default_factory=list)
    last_error: str | None = None

    @property
    def doc_id(self) -> str:
        return str(self.doc["doc_id"])

    def note(self, action: Action | None, usage: dict[str, Any] | None) -> Progress:
        """Record one answered attempt through the gate's one counter (`Progress.note`); the gate's
        view of what was tried, for the shared repair policy."""
        max_tokens = int((self.request or {}).get("max_tokens") or self.max_tokens)
        progress = Progress(
            max_tokens, self.attempts, self.repairs, self.repair_tokens, self.truncation_retries
        )
        progress.note(action, usage)
        self.attempts, self.repairs = progress.attempts, progress.repairs
        self.repair_tokens, self.truncation_retries = progress.repair_tokens, progress.truncation_retries
        return progress

    def to_line(self) -> dict[str, Any]:
        """Compact dict: defaults left out (first-round items are just custom_id, doc, max_tokens).
        Built field by field rather than with `dataclasses.asdict`, whose deep copy of the document
        record was most of the cost of spooling a request; what is not a default is copied, so the
        line shares only the document record, which nothing changes once an item holds it."""
        out: dict[str, Any] = {"custom_id": self.custom_id, "doc": self.doc, "max_tokens": self.max_tokens}
        for name, default in _DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = copy.deepcopy(value)
        return out

    @classmethod
    def from_line(cls, data: dict[str, Any]) -> WorkItem:
        return cls(**data)


# the fields a line leaves out when they hold their default (`to_line`)
_DEFAULTS: dict[str, Any] = {
    f.name: f.default if f.default_factory is MISSING else f.default_factory()
    for f in fields(WorkItem)
    if f.name not in ("custom_id", "doc", "max_tokens")
}


def decode_item(raw: dict[str, bytes], cid: Any) -> WorkItem | None:
    """The WorkItem of `cid`, decoded from its encoded line each time (never cached: 100k decoded
    items cost far more memory than their lines; only carried items are kept)."""
    line = raw.get(cid) if isinstance(cid, str) else None
    return None if line is None else WorkItem.from_line(json.loads(line))
