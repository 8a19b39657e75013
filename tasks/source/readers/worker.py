"""The child side of `tasks.source.readers.bounded`: one reader process, capped in memory and CPU time.

    python -m tasks.source.readers.worker FD MEMORY_BYTES SECONDS

FD is this end of a socket pair. The process caps its address space (`RLIMIT_AS`; 0: no cap),
ignores SIGINT (Ctrl-C is the parent's), then answers jobs one at a time: a pickled `(name in JOBS,
args)` in, a pickled `Reply` out. A job that brought the process within `NEAR_LIMIT` of its cap ran
out of memory, whatever the reader raised: the reply says `memory` and the process exits. Each job
also lowers `RLIMIT_CPU` to the CPU time used plus twice the deadline (SIGXCPU even with the parent
gone); end-of-file on the socket, or `docmill.lifeline` when the parent is gone, ends the process.
"""

from __future__ import annotations

import contextlib
import math
import pickle
import resource
import signal
import sys
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, Literal, TypedDict

from docmill.lifeline import die_with_parent
from tasks.source.readers import ExtractError, read
from tasks.source.readers.mail import part_bytes
from tasks.source.readers.pdf import page_range

NEAR_LIMIT = 32 * 1024 * 1024  # peak address space this close to the cap: the reader ran out of memory
CPU_MARGIN = 5  # seconds of CPU on top of twice the deadline before SIGXCPU

JOBS: dict[str, Callable[..., Any]] = {
    "read": read,  # (doc_type, data, limits) -> Content
    "part_bytes": part_bytes,  # (message bytes, index path) -> an attachment's bytes
    "page_range": page_range,  # (pdf bytes, pages) -> a PDF of those pages
}


class Reply(TypedDict):
    """One job's outcome. kind: ok (value), refused (an ExtractError: reason, detail; reason "binary"
    for BinaryContent), memory (past the address-space cap), error (any other exception: detail).
    `spent`: the process came near its cap and exits after this reply (the parent replaces it)."""

    kind: Literal["ok", "refused", "memory", "error"]
    value: Any
    reason: str
    detail: str
    spent: bool


def peak_address_space() -> int:
    """This process's peak virtual memory (VmPeak), in bytes; 0 where /proc is absent."""
    with contextlib.suppress(OSError), open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmPeak:"):
                return int(line.split()[1]) * 1024
    return 0


def _caused_by_memory(error: BaseException | None) -> bool:
    seen = 0
    while error is not None and seen < 20:
        if isinstance(error, MemoryError):
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False


def run_job(name: str, args: tuple[Any, ...], memory_bytes: int) -> Reply:
    """Run one job and say how it ended (never raises for what a document does). The process
    exits after a job that brought it near its cap: a job that failed there ran out of memory,
    whatever its library called the failure."""
    try:
        value = JOBS[name](*args)
    except Exception as e:  # MemoryError included
        near = bool(memory_bytes) and peak_address_space() >= memory_bytes - NEAR_LIMIT
        if near or _caused_by_memory(e):
            return Reply(kind="memory", value=None, reason="over_limit", detail=type(e).__name__, spent=True)
        if isinstance(e, ExtractError):
            return Reply(kind="refused", value=None, reason=e.reason, detail=str(e), spent=False)
        detail = f"{type(e).__name__}: {e}".splitlines()[0][:200] if str(e) else type(e).__name__
        return Reply(kind="error", value=None, reason="", detail=detail, spent=False)
    near = bool(memory_bytes) and peak_address_space() >= memory_bytes - NEAR_LIMIT
    return Reply(kind="ok", value=value, reason="", detail="", spent=near)


def _cap_cpu(seconds: float) -> None:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used = usage.ru_utime + usage.ru_stime
    soft = math.ceil(used + 2 * seconds + CPU_MARGIN)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, resource.RLIM_INFINITY))


def serve(conn: Connection, memory_bytes: int, seconds: float) -> None:
    """Answer jobs until end-of-file, or until a job ran out of memory."""
    while True:
        try:
            name, args = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if seconds > 0:
            _cap_cpu(seconds)
        reply = run_job(name, args, memory_bytes)
        try:
            conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
        except MemoryError:  # the answer itself does not fit
            spent = Reply(kind="memory", value=None, reason="over_limit", detail="reply", spent=True)
            conn.send_bytes(pickle.dumps(spent))
            return
        if reply["spent"]:
            return


def main(argv: list[str]) -> None:
    fd, memory_bytes, seconds = int(argv[1]), int(argv[2]), float(argv[3])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()
    if memory_bytes > 0:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    serve(Connection(fd), memory_bytes, seconds)


if __name__ == "__main__":
    main(sys.argv)
