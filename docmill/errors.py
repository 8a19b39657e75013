"""One root exception and a handful of subclasses with structured fields.

Messages say how to fix the problem. Errors reach the user at one boundary (the CLI)
as one line; set DOCMILL_RAISE_ERRORS=1 to see the traceback instead.
"""

from __future__ import annotations

from typing import Any


class DocmillError(Exception):
    """Root of every error docmill raises on purpose."""

    hint: str = ""

    def __init__(self, message: str, *, hint: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint
        self.fields = fields
        for name, value in fields.items():
            setattr(self, name, value)

    def one_line(self) -> str:
        text = f"{type(self).__name__}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class ConfigError(DocmillError):
    """Settings, recipe or command-line input that cannot work."""


class InputError(DocmillError):
    """A source or document that cannot be read as given."""


class StoreError(DocmillError):
    """The object store failed in a way that is not retried further."""


class NotFound(StoreError):
    """The object does not exist."""


class AlreadyExists(StoreError):
    """A put-if-absent found the key already written."""


class PreconditionFailed(StoreError):
    """A compare-and-swap lost: the object changed since it was read."""


class UnsafeKey(StoreError):
    """An object key that cannot be made safe (.., absolute, control characters)."""


class TransientStoreError(StoreError):
    """A store fault that outlived its retries (503 SlowDown, 5xx, resets, timeouts)."""


class LeaseHeld(DocmillError):
    """Another process drives this run and its lease has not expired."""


class RunOverlap(LeaseHeld):
    """Another live run of the same recipe and model covers the same documents."""


class ApiCallError(DocmillError):
    """A call to the model failed for good (non-retryable 4xx, or retries exhausted)."""


class BudgetExhausted(DocmillError):
    """The run's cost cap would be exceeded by the next request."""


class GateError(DocmillError):
    """Model output failed validation and its repair budget is spent."""


class BatchError(DocmillError):
    """A Message Batch could not be created, followed or collected."""


class ContextError(DocmillError):
    """A long task could not be kept inside its token budget."""


class PinnedFactLost(ContextError):
    """A pinned fact is missing from the request that follows a compaction."""
