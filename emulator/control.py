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


def _bad(message: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=400)


async def _json(request: Request) -> Any:
    raw = await request.body()
    return json.loads(raw) if raw.strip() else {}


def routes(state: EmulatorState) -> list[Route]:
    def clock() -> dict[str, Any]:
        now = state.clock.now()
        return {"now": now, "iso": rfc3339(now), "offset": state.clock.offset}

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True})

    async def accounting(request: Request) -> JSONResponse:
        return JSONResponse(state.accounting.snapshot())

    async def faults_get(request: Request) -> JSONResponse:
        return JSONResponse({"rules": state.faults.snapshot()})

    async def faults_add(request: Request) -> JSONResponse:
        try:
            added = [state.faults.add(rule) for rule in parse_rules((await request.body()).decode() or "{}")]
        except (ValueError, TypeError, KeyError) as e:
            return _bad(f"bad fault rule: {e}")
        return JSONResponse({"added": [asdict(r) for r in added], "rules": state.faults.snapshot()})

    async def faults_clear(request: Request) -> JSONResponse:
        state.faults.clear()
        return JSONResponse({"rules": []})

    async def clock_get(request: Request) -> JSONResponse:
        return JSONResponse(clock())

    async def clock_advance(request: Request) -> JSONResponse:
        try:
            seconds = float((await _json(request)).get("seconds", 0))
        except (ValueError, TypeError, AttributeError) as e:
            return _bad(f"bad clock advance: {e}")
        state.clock.advance(seconds)
        return JSONResponse(clock())

    async def config_get(request: Request) -> JSONResponse:
        return JSONResponse(asdict(state.config))

    async def config_set(request: Request) -> JSONResponse:
        try:
            state.configure(await _json(request))
        except (ValueError, TypeError, AttributeError) as e:
            return _bad(f"bad config: {e}")
        return JSONResponse(asdict(state.config))

    async def reset(request: Request) -> JSONResponse:
        state.reset()
        return JSONResponse({"ok": True})

    table: list[tuple[str, Callable[[Request], Awaitable[JSONResponse]], str]] = [
        ("/_emulator/health", health, "GET"),
        ("/_emulator/accounting", accounting, "GET"),
        ("/_emulator/faults", faults_get, "GET"),
        ("/_emulator/faults", faults_add, "POST"),
        ("/_emulator/faults", faults_clear, "DELETE"),
        ("/_emulator/clock", clock_get, "GET"),
        ("/_emulator/clock/advance", clock_advance, "POST"),
        ("/_emulator/config", config_get, "GET"),
        ("/_emulator/config", config_set, "POST"),
        ("/_emulator/reset", reset, "POST"),
    ]
    return [Route(path, fn, methods=[method]) for path, fn, method in table]
