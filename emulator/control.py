"""Control endpoints under /_emulator/ (no auth, not counted as API requests).

GET    /_emulator/health              {"ok": true}
GET    /_emulator/accounting          billed requests, received counts, total usd
GET    /_emulator/faults              the fault plan
POST   /_emulator/faults              add one rule or a list of rules (see faults.FaultRule)
DELETE /_emulator/faults              clear the fault plan
GET    /_emulator/clock               {"now": epoch seconds, "iso": ..., "offset": ...}
POST   /_emulator/clock/advance       {"seconds": N}: move the virtual clock forward
GET    /_emulator/config              current knobs
POST   /_emulator/config              change knobs (e.g. {"batch_seconds_per_request": 0.5})
POST   /_emulator/reset               forget accounting, cache, batches, faults, clock offset

A POST whose body is not what it should be answers 400 `{"ok": false, "error": ...}`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from emulator.clock import rfc3339
from emulator.faults import parse_rules

if TYPE_CHECKING:
    from emulator.state import EmulatorState


Answer = Callable[[bytes], Any]  # a request body -> the JSON answered


def _json(raw: bytes) -> Any:
    return json.loads(raw) if raw.strip() else {}


def routes(state: EmulatorState) -> list[Route]:
    def clock(raw: bytes = b"") -> dict[str, Any]:
        now = state.clock.now()
        return {"now": now, "iso": rfc3339(now), "offset": state.clock.offset}

    def add_faults(raw: bytes) -> dict[str, Any]:
        added = [state.faults.add(rule) for rule in parse_rules(raw.decode() or "{}")]
        return {"added": [asdict(r) for r in added], "rules": state.faults.snapshot()}

    def clear_faults(raw: bytes) -> dict[str, Any]:
        state.faults.clear()
        return {"rules": []}

    def advance(raw: bytes) -> dict[str, Any]:
        state.clock.advance(float(_json(raw).get("seconds", 0)))
        return clock()

    def configure(raw: bytes) -> dict[str, Any]:
        state.configure(_json(raw))
        return asdict(state.config)

    def reset(raw: bytes) -> dict[str, Any]:
        state.reset()
        return {"ok": True}

    def endpoint(answer: Answer, bad: str | None) -> Callable[[Request], Awaitable[JSONResponse]]:
        async def handle(request: Request) -> JSONResponse:
            if bad is None:
                return JSONResponse(answer(b""))
            try:
                return JSONResponse(answer(await request.body()))
            except (ValueError, TypeError, KeyError, AttributeError) as e:
                return JSONResponse({"ok": False, "error": f"bad {bad}: {e}"}, status_code=400)

        return handle

    # path, method, what it answers, what its body is called in a 400 (None: it reads no body)
    table: list[tuple[str, str, Answer, str | None]] = [
        ("/_emulator/health", "GET", lambda raw: {"ok": True}, None),
        ("/_emulator/accounting", "GET", lambda raw: state.accounting.snapshot(), None),
        ("/_emulator/faults", "GET", lambda raw: {"rules": state.faults.snapshot()}, None),
        ("/_emulator/faults", "POST", add_faults, "fault rule"),
        ("/_emulator/faults", "DELETE", clear_faults, None),
        ("/_emulator/clock", "GET", clock, None),
        ("/_emulator/clock/advance", "POST", advance, "clock advance"),
        ("/_emulator/config", "GET", lambda raw: asdict(state.config), None),
        ("/_emulator/config", "POST", configure, "config"),
        ("/_emulator/reset", "POST", reset, None),
    ]
    return [Route(path, endpoint(answer, bad), methods=[method]) for path, method, answer, bad in table]
