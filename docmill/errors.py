"""One root exception and a handful of subclasses with structured fields.

Messages say how to fix the problem. Errors reach the user at one boundary (the CLI)
as one line; set DOCMILL_RAISE_ERRORS=1 to see the traceback instead.
"""

from __future__ import annotations

from typing import Any


class DocmillError(Exception):
    """Root of every error docmill raises on purpose. Each class declares its fields (with a
    default) below its docstring, so callers read `e.status`, never `getattr(e, "status", None)`;
    a field a class does not declare is a TypeError at the raise site."""

    hint: str = ""
    run_id: str | None = None
    doc_id: str | None = None
    key: str | None = None

    def __init__(self, message: str, *, hint: str | None = None, **fields: Any) -> None:
        super().__init__(message)
        self.message = message
        if hint is not None:
            self.hint = hint
        declared = self.declared_fields()
        for name, value in fields.items():
            if name not in declared:
                raise TypeError(f"{type(self).__name__} declares no field {name!r}")
            setattr(self, name, value)

    @classmethod
    def declared_fields(cls) -> set[str]:
        names: set[str] = set()
        for klass in cls.__mro__:
            names.update(getattr(klass, "__annotations__", {}))
        return names - {"hint"}

    @property
    def fields(self) -> dict[str, Any]:
        """The declared fields that were given a value (for logs and records)."""
        return {n: getattr(self, n) for n in sorted(self.declared_fields()) if n in self.__dict__}

    def one_line(self) -> str:
        text = f"{type(self).__name__}: {self.message}"
        return f"{text} ({self.hint})" if self.hint else text


class ConfigError(DocmillError):
    """Settings, recipe or command-line input that cannot work."""


class InputError(DocmillError):
    """A source or document that cannot be read as given."""


class StoreError(DocmillError):
    """The object store failed in a way that is not retried further."""

    code: str | None = None
    status: int | None = None
    attempts: int = 0


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

    holder: str | None = None
    expires_at: float | None = None


class RunOverlap(LeaseHeld):
    """Another live run of the same recipe and model covers the same documents."""


class ApiCallError(DocmillError):
    """A call to the model failed for good (non-retryable 4xx, or retries exhausted)."""

    status: int | None = None
    request_id: str | None = None
    attempts: int = 0
    failure_type: str = "transport_exhausted"
    model: str | None = None
    last_error: str | None = None
    errors: tuple[str, ...] | list[str] = ()
    fell_back: bool = False


class SystemicFailure(DocmillError):
    """Calls keep failing the same systemic way (auth, model, endpoint, every answer invalid alike):
    the run stops (phase `stopped`, exit 3) until the cause is fixed and the run resumed."""

    cause: str = ""  # auth, billing, permission, model_not_found, not_a_message, connection_refused, ...
    calls: int = 0
    last_error: str = ""


class SpendLimitReached(SystemicFailure):
    """The API refused with a spend-limit 429 (error_code `enforced_spend_limit_reached`,
    `contract_spend_limit_reached`, ...): every call would meet it, so the run stops as on any
    systemic failure (phase `stopped`, exit 3, resumable; every worker stops)."""

    error_code: str | None = None
    request_id: str | None = None
    hint = "raise the spend limit in the Anthropic Console (or wait for it to reset), then `docmill resume RUN_ID`"


class OrchestratorUnavailable(DocmillError):
    """Prefect's temporary API server did not start in time (twice): exit 3, nothing was sent."""

    setting: str = ""  # the setting that gives it more time
    seconds: float = 0.0
    detail: str = ""  # what Prefect said (its exit code, its last output line)


class Interrupted(DocmillError):
    """SIGINT / SIGTERM: no new request was sent after the signal; in-flight answers were kept."""

    signal_name: str = ""  # SIGINT or SIGTERM


class BudgetExhausted(DocmillError):
    """The run's cost cap would be exceeded by the next request."""

    spent_usd: float = 0.0
    cap_usd: float | None = None


class BatchError(DocmillError):
    """A Message Batch could not be created, followed or collected."""


class ContextError(DocmillError):
    """A long task could not be kept inside its token budget."""


class PinnedFactLost(ContextError):
    """A pinned fact is missing from the request that follows a compaction."""

    missing: tuple[str, ...] | list[str] = ()
    task_id: str | None = None
