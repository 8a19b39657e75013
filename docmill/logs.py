"""Structured log lines: human text by default, JSON one setting away (DOCMILL_LOG_FORMAT=json).

Every line carries the docmill run id (set once per run with `bind_run`), and may carry
doc_id, request_id, model, prompt version, stop reason, usage and latency as extra fields.
Secrets never reach a line: known secret values are masked wherever they appear.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_run_id: ContextVar[str | None] = ContextVar("docmill_run_id", default=None)
_SECRET_PATTERNS = [
    re.compile(r"sk-ant-[A-Za-z0-9_\-]{8,}"),
    re.compile(
        r"(?i)(authorization|x-api-key|aws_secret_access_key|api_key)([\"']?\s*[:=]\s*[\"']?)([^\s\"',}]+)"
    ),
]
_EXTRA_FIELDS = (
    "doc_id",
    "request_id",
    "model",
    "prompt_version",
    "stop_reason",
    "usage",
    "latency_ms",
    "attempt",
    "status",
    "batch_id",
    "chunk",
    "phase",
    "cost_usd",
)


_process_run_id: str | None = None  # threads of a pool do not inherit the context: fall back to this


def current_run() -> str | None:
    """The run id bound to this context or process, if any."""
    return _run_id.get() or _process_run_id


def bind_run(run_id: str | None) -> None:
    """Tag every later log line of this context (and of threads it starts) with the run id."""
    global _process_run_id
    _run_id.set(run_id)
    _process_run_id = run_id


def redact(text: str) -> str:
    """Mask API keys and credentials in free text."""
    for value in _secret_values():
        if value and len(value) >= 6:
            text = text.replace(value, "***")
    text = _SECRET_PATTERNS[0].sub("sk-ant-***", text)
    return _SECRET_PATTERNS[1].sub(lambda m: f"{m.group(1)}{m.group(2)}***", text)


def _secret_values() -> list[str]:
    names = ("ANTHROPIC_API_KEY", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "ANTHROPIC_AUTH_TOKEN")
    return [os.environ[n] for n in names if os.environ.get(n)]


class _Formatter(logging.Formatter):
    def __init__(self, fmt: str) -> None:
        super().__init__()
        self.fmt = fmt

    def format(self, record: logging.LogRecord) -> str:
        fields: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + "Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "run_id": getattr(record, "run_id", None) or current_run(),
            "msg": record.getMessage(),
        }
        for name in _EXTRA_FIELDS:
            if hasattr(record, name):
                fields[name] = getattr(record, name)
        if record.exc_info:
            fields["error"] = self.formatException(record.exc_info)
        if self.fmt == "json":
            return redact(json.dumps({k: v for k, v in fields.items() if v is not None}, default=str))
        extras = " ".join(f"{k}={fields[k]}" for k in _EXTRA_FIELDS if k in fields)
        run = f"[{fields['run_id']}] " if fields["run_id"] else ""
        return redact(
            f"{fields['ts']} {fields['level']:<7} {run}{fields['msg']}" + (f" {extras}" if extras else "")
        )


def configure(fmt: str = "text", level: int | str | None = None, stream: Any = None) -> None:
    """Route the `docmill` logger to a stream in the chosen format (idempotent).

    `fmt` is "json" (one object per line) or "text"; the level defaults to DOCMILL_LOG_LEVEL
    (e.g. INFO for one line per API call), else WARNING."""
    if level is None:
        from docmill.settings import get_settings

        level = get_settings().log_level.upper()
    logger = logging.getLogger("docmill")
    for h in list(logger.handlers):
        if getattr(h, "_docmill", False):
            logger.removeHandler(h)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_Formatter(fmt))
    handler._docmill = True  # type: ignore[attr-defined]
    handler.setLevel(level)  # the stream keeps its level when a flow lowers the logger's for Prefect
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(f"docmill.{name}")


@contextmanager
def to_prefect_run(level: int = logging.INFO) -> Iterator[None]:
    """Inside a Prefect flow run: docmill's log lines (from every thread of this process) go to the
    flow run's Logs tab through Prefect's API log handler, tagged `[docmill run <id>]` and redacted.

    The handler is Prefect's own `APILogHandler`, attached to the `docmill` logger at `level`, so the
    lines reach the API whatever `PREFECT_LOGGING_LEVEL` the worker's flow-run process has (workers
    run at WARNING; a run logger at that level drops every INFO line, and plain Python loggers reach
    only the worker's log file). Lines from threads without a Prefect context (docmill's own pools)
    are attached to the flow run by its id. Outside a flow run this does nothing."""
    from prefect.context import FlowRunContext
    from prefect.logging.handlers import APILogHandler

    ctx = FlowRunContext.get()
    if ctx is None or ctx.flow_run is None:
        yield
        return
    flow_run_id = ctx.flow_run.id

    class _RunHandler(APILogHandler):
        def prepare(self, record: logging.LogRecord) -> dict[str, Any]:
            if getattr(record, "flow_run_id", None) is None:
                record = logging.makeLogRecord({**record.__dict__, "flow_run_id": flow_run_id})
            return super().prepare(record)

    handler = _RunHandler(level=level)
    handler.setFormatter(_PrefectFormatter())
    logger = logging.getLogger("docmill")
    before = logger.level
    if before == logging.NOTSET or before > level:
        logger.setLevel(level)
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(before)


class _PrefectFormatter(logging.Formatter):
    """`[docmill run <id>] message` (plus the error's last line), redacted: the Logs tab's line."""

    def format(self, record: logging.LogRecord) -> str:
        run = getattr(record, "run_id", None) or current_run() or "-"
        text = f"[docmill run {run}] {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        return redact(text)
