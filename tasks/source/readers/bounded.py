"""Readers run bounded: every parse of a document's bytes happens in a worker process whose memory
and time are capped, so no document can sink a run (invariant 19), whatever library reads it.

    content = read_bounded("pdf", data, limits, Bounds(memory_bytes=512 << 20, seconds=60))

Like Apache Tika's forked parser: a small pool of workers (`tasks.source.readers.worker`, started
from a clean interpreter: no fork of a process whose threads hold locks), each capping its address
space (`RLIMIT_AS`), while the parent gives each document a CPU-time and wall-clock deadline. Past
either the document is `over_limit` and the worker is replaced; a worker that dies otherwise (a
crash in a C library) makes the document `corrupt`. The pool starts lazily once per process, holds
at most `Bounds.processes` workers shared by every thread and is closed at exit; its workers run in
their own session (Ctrl-C is docmill's) and exit when docmill is gone. Documents and Content cross
as pickles over a socket pair (bench/hostile.py measures it).

Valid UTF-8 text of at most `IN_PROCESS_BYTES` is only decoded, which its size bounds, so it is
read in the calling process (`plain_utf8`). `Bounds(enabled=False)` reads in-process (debugging).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from tasks.source.readers import CODE_TYPES, Content, DocType, Limits, read
from tasks.source.readers.content import BinaryContent, ExtractError, OverLimit, Unreadable
from tasks.source.readers.worker import JOBS

MIB = 1024 * 1024
STOP_WAIT = 2.0  # seconds a closing worker gets to exit before SIGKILL
POLL = 0.1  # seconds between looks at a busy worker's CPU time
WALL_FACTOR = 4  # a job may take this many times its CPU deadline on the wall clock (a busy machine)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
# Their reader only decodes (read_plain; JSON: read_json, depth checked first); 1 MiB takes ~1 ms.
PLAIN_TYPES = (
    frozenset({DocType.TXT.value, DocType.MD.value, DocType.CSV.value, DocType.JSON.value}) | CODE_TYPES
)
IN_PROCESS_BYTES = 1 * MIB


@dataclass(frozen=True)
class Bounds:
    """What one reading may take (docmill.settings.FormatSettings fills it)."""

    memory_bytes: int = 512 * MIB  # RLIMIT_AS of each worker (0: no cap)
    seconds: float = 60.0  # CPU time one document may take (0: no deadline); wall clock: 4x that
    processes: int = 2  # workers at most
    enabled: bool = True  # False: read in this process, unbounded (debugging)


# A worker killed by a signal once its peak resident memory passed this share of the address-space
# cap ran out of memory (the cap counts mappings too: pdfium aborted at 121 MiB resident of 200 MiB;
# a reader crashing on a broken file does so near its ~30 MiB baseline)
NEAR_CAP = 0.5


class _Worker:
    """One worker process and this process's end of its socket."""

    def __init__(self, bounds: Bounds) -> None:
        mine, theirs = socket.socketpair()
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "tasks.source.readers.worker",
                    str(theirs.fileno()),
                    str(bounds.memory_bytes),
                    str(bounds.seconds),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            theirs.close()
        self.conn = Connection(mine.detach())
        self.job_cpu = 0.0  # CPU seconds the current job used, as last seen
        self.peak_rss = 0  # bytes, once reaped (kill)

    def call(self, job: tuple[str, tuple[Any, ...]], seconds: float) -> dict[str, Any] | None:
        """The worker's reply, or None when it used more than `seconds` of CPU time on the job, or
        more than WALL_FACTOR times that on the wall clock (the caller kills it). Raises EOFError /
        OSError when the worker died."""
        self.conn.send_bytes(pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL))
        if seconds > 0:
            start_cpu = self.cpu_seconds()
            wall_end = time.monotonic() + seconds * WALL_FACTOR
            while not self.conn.poll(POLL):
                used = self.cpu_seconds()
                if used is None or start_cpu is None:  # no /proc: the wall clock decides alone
                    if time.monotonic() > wall_end - seconds * (WALL_FACTOR - 1):
                        return None
                    continue
                self.job_cpu = used - start_cpu
                if self.job_cpu > seconds or time.monotonic() > wall_end:
                    return None
        reply: dict[str, Any] = pickle.loads(self.conn.recv_bytes())
        return reply

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system) the worker used so far, from /proc; None where absent."""
        try:
            with open(f"/proc/{self.proc.pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
        except (OSError, IndexError, ValueError):
            return None

    def kill(self) -> None:
        """End the worker (if it still runs) and reap it, keeping its peak resident memory: a C
        library that cannot allocate under the address-space cap often aborts the process rather
        than failing the call (pdfium does), and the peak tells that death from a crash."""
        with contextlib.suppress(OSError):
            self.conn.close()
        if self.proc.returncode is not None:
            return
        with contextlib.suppress(OSError):  # not Popen.kill: its poll() would reap, losing the usage
            os.kill(self.proc.pid, signal.SIGKILL)
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)
        except ChildProcessError:  # reaped elsewhere
            self.proc.wait()
            return
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.peak_rss = usage.ru_maxrss * 1024

    def close(self, wait: float) -> None:
        """End-of-file first (the worker exits by itself), SIGKILL if it is still busy after `wait`."""
        with contextlib.suppress(OSError):
            self.conn.close()
        try:
            self.proc.wait(wait)
        except subprocess.TimeoutExpired:
            self.kill()


class ReaderPool:
    """At most `bounds.processes` workers, each serving one call at a time."""

    def __init__(self, bounds: Bounds) -> None:
        self.bounds = bounds
        self.pid = os.getpid()
        self.idle: list[_Worker] = []
        self.busy = 0
        self.started = 0  # workers started in this pool's life (replacements included)
        self.cond = threading.Condition()
        self.closed = False

    def _checkout(self) -> _Worker:
        with self.cond:
            while not self.idle and self.busy >= self.bounds.processes:
                self.cond.wait()
            if self.closed:
                raise RuntimeError("the reader pool is closed")
            self.busy += 1
            if self.idle:
                return self.idle.pop()
        try:
            worker = _Worker(self.bounds)
        except BaseException:
            self._give_back(None)
            raise
        with self.cond:
            self.started += 1
        return worker

    def _give_back(self, worker: _Worker | None) -> None:
        with self.cond:
            self.busy -= 1
            if worker is not None:
                if self.closed:
                    worker.close(STOP_WAIT)
                else:
                    self.idle.append(worker)
            self.cond.notify()

    def call(self, job: tuple[str, tuple[Any, ...]]) -> Any:
        """Run `job` in a worker; its value, or the error it raised, raised again here as an
        ExtractError (OverLimit past a bound, Unreadable("corrupt") when the worker died)."""
        worker = self._checkout()
        started = time.monotonic()
        keep: _Worker | None = None
        try:
            try:
                reply = worker.call(job, self.bounds.seconds)
            except (EOFError, OSError):
                worker.kill()
                raise _died(worker.proc.returncode, self.bounds, worker.peak_rss) from None
            if reply is None:
                worker.kill()
                wall = time.monotonic() - started
                clock = "on the wall clock" if wall >= self.bounds.seconds * WALL_FACTOR else "of CPU time"
                raise OverLimit(
                    "time",
                    self.bounds.seconds,
                    f"reading took longer than formats.read_seconds ({self.bounds.seconds:g} s of CPU time, "
                    f"{self.bounds.seconds * WALL_FACTOR:g} s on the wall clock); stopped after {wall:.1f} s {clock} "
                    f"({worker.job_cpu:.1f} s of CPU)",
                )
            if reply["spent"]:
                worker.close(STOP_WAIT)
            else:
                keep = worker
            return _value(reply, self.bounds)
        except BaseException:
            if keep is None and worker.proc.poll() is None:
                worker.kill()  # interrupted mid-call: its next reply would answer the wrong call
            raise
        finally:
            self._give_back(keep)

    def close(self) -> None:
        with self.cond:
            self.closed = True
            workers, self.idle = self.idle, []
            self.cond.notify_all()
        for worker in workers:
            worker.close(STOP_WAIT)


def _memory_error(bounds: Bounds) -> OverLimit:
    return OverLimit(
        "memory",
        bounds.memory_bytes,
        f"reading needed more than formats.read_memory_bytes ({bounds.memory_bytes // MIB:,} MiB) of "
        "memory; stopped",
    )


def _died(returncode: int | None, bounds: Bounds, peak_rss: int = 0) -> ExtractError:
    """Why a worker ended mid-read: CPU time (SIGXCPU), memory (the OOM killer's SIGKILL, or any
    death by signal after its resident memory came near the cap), or a crash on this file."""
    if returncode == -signal.SIGXCPU:
        return OverLimit(
            "time",
            bounds.seconds,
            f"reading used more CPU time than formats.read_seconds allows ({bounds.seconds:g} s)",
        )
    if returncode == -signal.SIGKILL:  # the kernel's OOM killer
        return _memory_error(bounds)
    if returncode is None or returncode >= 0:
        return Unreadable("corrupt", f"the reader crashed on this file (exit {returncode})")
    if bounds.memory_bytes and peak_rss >= NEAR_CAP * bounds.memory_bytes:
        return _memory_error(bounds)
    return Unreadable("corrupt", f"the reader crashed on this file (signal {-returncode})")


def _value(reply: dict[str, Any], bounds: Bounds) -> Any:
    kind = reply["kind"]
    if kind == "ok":
        return reply["value"]
    if kind == "memory":
        raise _memory_error(bounds)
    if kind == "refused":
        if reply["reason"] == "binary":
            raise BinaryContent(reply["detail"])
        if reply["reason"] == "undecodable":
            raise ExtractError(reply["detail"])
        raise Unreadable(reply["reason"], reply["detail"])
    raise ExtractError(reply["detail"])


_pools: dict[Bounds, ReaderPool] = {}
_pools_lock = threading.Lock()


def pool_for(bounds: Bounds) -> ReaderPool:
    """This process's pool for `bounds` (started on first use, reused after)."""
    with _pools_lock:
        pool = _pools.get(bounds)
        if pool is None or pool.pid != os.getpid():
            if pool is not None and pool.pid != os.getpid():
                _pools.clear()  # a forked child: its parent's workers are not ours to use
            pool = _pools[bounds] = ReaderPool(bounds)
        return pool


@atexit.register
def close_pools() -> None:
    """Stop every worker of this process (at exit; tests)."""
    with _pools_lock:
        pools = [p for p in _pools.values() if p.pid == os.getpid()]
        _pools.clear()
    for pool in pools:
        pool.close()


def plain_utf8(doc_type: str, data: bytes) -> bool:
    """Whether reading `data` as `doc_type` is only a UTF-8 decode of at most IN_PROCESS_BYTES (no
    charset guess; JSON's parser from the standard library, depth checked): bounded by its size, so
    it needs no worker process."""
    if doc_type not in PLAIN_TYPES or len(data) > IN_PROCESS_BYTES:
        return False
    if data.isascii():
        return True
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False  # charset-normalizer's guess: in a worker
    return True


def _bounded(bounds: Bounds, job: str, *args: Any) -> Any:
    """`worker.JOBS[job](*args)` in a bounded worker (in this process when bounds are off)."""
    return JOBS[job](*args) if not bounds.enabled else pool_for(bounds).call((job, args))


def read_bounded(doc_type: str, data: bytes, limits: Limits, bounds: Bounds) -> Content:
    """`tasks.source.readers.read` in a bounded worker (a small UTF-8 text in this process:
    `plain_utf8`); raises what it raises, and OverLimit past a bound."""
    if plain_utf8(doc_type, data):
        return read(doc_type, data, limits)
    content: Content = _bounded(bounds, "read", doc_type, data, limits)
    return content


def part_bytes_bounded(data: bytes, path: list[int], bounds: Bounds) -> bytes:
    """`tasks.source.readers.mail.part_bytes` (an attachment found again in its message), bounded."""
    found: bytes = _bounded(bounds, "part_bytes", data, path)
    return found


def page_range_bounded(data: bytes, pages: Iterable[int], bounds: Bounds) -> bytes:
    """`tasks.source.readers.pdf.page_range` (a PDF of some pages of a PDF), bounded."""
    part: bytes = _bounded(bounds, "page_range", data, list(pages))
    return part
