"""What the emulator billed, and every request it received (billed or not).

Errors are never billed. A dated model id is priced as its alias (docmill.prices). Batch items are
billed (at 50 %) when their batch processes them.
`GET /_emulator/accounting` returns `Accounting.snapshot()`; in-process tests read
`server.state.accounting` directly.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from docmill.prices import Price, usd_at


def body_hash(body: Any) -> str:
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class BilledRequest:
    """One billed request: a realtime message, a compaction, or one succeeded batch item."""

    seq: int
    path: str
    body_sha256: str
    model: str
    batch: bool
    usage: dict[str, Any]
    usd: float
    request_id: str | None
    custom_id: str | None = None
    batch_id: str | None = None
    at: float = 0.0

    @property
    def input_tokens(self) -> int:
        return int(self.usage.get("input_tokens") or 0)

    @property
    def output_tokens(self) -> int:
        return int(self.usage.get("output_tokens") or 0)


@dataclass(frozen=True)
class ReceivedRequest:
    """One /v1 request as sent (kept only with the `record_requests` knob): for request-shape tests."""

    method: str
    path: str
    betas: tuple[str, ...]
    body: Any


@dataclass
class Accounting:
    billed: list[BilledRequest] = field(default_factory=list)
    received: int = 0
    received_by_path: Counter[str] = field(default_factory=Counter)
    errors_by_status: Counter[int] = field(default_factory=Counter)
    requests: list[ReceivedRequest] = field(default_factory=list)  # with config.record_requests

    def note_received(self, path: str) -> None:
        self.received += 1
        self.received_by_path[path] += 1

    def note_error(self, status: int) -> None:
        self.errors_by_status[status] += 1

    def bill(
        self,
        *,
        body: Any,
        price: Price,
        path: str,
        model: str,
        usage: dict[str, Any],
        request_id: str | None,
        batch: bool = False,
        custom_id: str | None = None,
        batch_id: str | None = None,
        at: float = 0.0,
    ) -> BilledRequest:
        """Record one billed request at `price` (the state's `price_for(model)`: docmill's dated table
        on the emulator's day, an `extra_models` entry, or the unpriced-model rate)."""
        record = BilledRequest(
            seq=len(self.billed) + 1,
            path=path,
            body_sha256=body_hash(body),
            model=model,
            batch=batch,
            usage=usage,
            usd=usd_at(price, usage, batch=batch),
            request_id=request_id,
            custom_id=custom_id,
            batch_id=batch_id,
            at=at,
        )
        self.billed.append(record)
        return record

    def total_usd(self) -> float:
        return sum(r.usd for r in self.billed)

    def snapshot(self) -> dict[str, Any]:
        return {
            "received": self.received,
            "received_by_path": dict(self.received_by_path),
            "errors_by_status": {str(k): v for k, v in self.errors_by_status.items()},
            "billed_count": len(self.billed),
            "total_usd": self.total_usd(),
            "billed": [asdict(r) for r in self.billed],
        }

    def reset(self) -> None:
        self.billed.clear()
        self.received = 0
        self.received_by_path.clear()
        self.errors_by_status.clear()
        self.requests.clear()
