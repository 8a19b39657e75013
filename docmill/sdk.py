"""The anthropic SDK and its HTTP library (httpx2), imported when a name of theirs is first read.

Importing the SDK costs over a second of start-up (its types, httpx2, aiohttp), and a run that sends
nothing (every answer in the ledger, every chunk unchanged) has no use for it. So product code never
writes `import anthropic`; it writes

    from docmill.sdk import anthropic, httpx2

and uses them as the modules: `anthropic.Anthropic(...)`, `anthropic.transform_schema(schema)`,
`except anthropic.APIStatusError`, `httpx2.Limits(...)`. Here they are `LazyModule`s: the first
attribute read imports the real module, once, and hands the attribute on. The type checker sees the
real modules (`TYPE_CHECKING`), so annotations and narrowing work on them.

What keeps this correct without a test per call site:
- An annotation is never evaluated at run time (`from __future__ import annotations` everywhere).
- An `except anthropic.X` clause reads `anthropic.X` only when an exception reaches it; the clauses
  that name SDK errors guard SDK calls, so by then the SDK is loaded (made a client, sent). If another
  exception reaches such a clause first, the read imports the SDK and the clause is still right.
- A module-level value that needs an SDK class (a tuple of errors, a subclass) is made when first
  needed, not at import (tasks.api.client.endings, tasks.api.answers.broken_class).
- Clients are made on first use (`Once`): the run's context holds the way to make them, not them.

`tests/flows/test_flows_no_sdk.py` runs the CLI over a source whose answers are all in the ledger
(batch and realtime) and fails if the SDK was imported; `tests/layout/test_mechanisms.py` fails on
an import of `anthropic` or `httpx2` anywhere else in product code (one under `if TYPE_CHECKING:`,
for annotations, is fine).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

T = TypeVar("T")


class LazyModule:
    """A module imported when one of its attributes is first read (then read from it directly)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> Any:
        module = self._module
        if module is None:
            module = self._module = importlib.import_module(self._name)
        return getattr(module, attr)

    def __repr__(self) -> str:
        state = "imported" if self._module is not None else "not imported yet"
        return f"<lazy module {self._name!r} ({state})>"


class Once(Generic[T]):
    """`make()` called the first time the value is asked for (`get` or a call), from any thread, and
    the same value handed out after; `made` says whether it was (to close only what exists)."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._value: T | None = None
        self.made = False

    def get(self) -> T:
        if not self.made:
            with self._lock:
                if not self.made:
                    self._value = self._make()
                    self.made = True
        return self._value  # type: ignore[return-value]  # set above, T may include None

    __call__ = get


if TYPE_CHECKING:
    import anthropic as anthropic
    import httpx2 as httpx2
else:
    anthropic = LazyModule("anthropic")
    httpx2 = LazyModule("httpx2")
