"""What a /v1 handler gets (`Call`: the parsed request with its id, key, betas and API version) and
the handlers' type. It sits below the modules with handlers (server, batches), so batches needs
nothing from server.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from emulator.faults import FaultRule

if TYPE_CHECKING:
    from emulator.state import EmulatorState

OLD_API_VERSIONS = frozenset({"2023-01-01", "2023-06-01"})


class Call:
    """What a /v1 handler gets: the parsed request plus its id, key and betas."""

    def __init__(self, request: Request, state: EmulatorState, request_id: str, api_key: str) -> None:
        self.request = request
        self.state = state
        self.request_id = request_id
        self.api_key = api_key
        raw = request.headers.get("anthropic-beta", "")
        self.betas = frozenset(b.strip() for b in raw.split(",") if b.strip())
        self.version = request.headers.get("anthropic-version", "")
        self.legacy = self.version in OLD_API_VERSIONS
        self.body: Any = None
        self.shape: FaultRule | None = None
        self.drop: FaultRule | None = None  # stream_drop: cut the SSE stream mid-way
        self.stall: FaultRule | None = None  # stall: silence mid-answer
        self.extra_headers: dict[str, str] = {}

    @property
    def base_url(self) -> str:
        """The emulator's own address (for `results_url`), never taken from the request's Host:
        the `public_base_url` knob, else the listening socket's address."""
        configured = self.state.config.public_base_url
        if configured:
            return configured.rstrip("/") + "/"
        server = self.request.scope.get("server")
        if not server:
            return str(self.request.base_url)
        host, port = server[0], server[1]
        host = f"[{host}]" if ":" in str(host) else host
        return f"http://{host}:{port}/"


Handler = Callable[[Call], Awaitable[Response | dict[str, Any]]]


def list_page(data: list[dict[str, Any]], *, has_more: bool) -> dict[str, Any]:
    """A page of a list endpoint (models, batches): its items and where it starts and ends."""
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"data": data, "has_more": has_more, "first_id": first, "last_id": last}
