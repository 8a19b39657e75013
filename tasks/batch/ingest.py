"""Gating batch answers in worker processes, so ingesting results uses more than one core.

Gating an answer (read the document again, check its sha256, extract its text, parse the JSON,
validate it, look up every evidence excerpt) is pure CPU and needs nothing but the recipe, the
settings, the document and the message. `Prechecker` sends chunks of (document, message) to a small
pool of processes ('spawn': the engine has threads alive, and a forkserver started before an
`os.fork` is unusable in the child) and gives back, per answer, the
gate's `Verdict` or why the document could not be read. Everything with an effect (the repair
policy, the ledger write, the review queue, costs, batch records, lifecycle points) stays in the
engine's process, exactly as without the pool; a chunk that cannot be gated remotely (the pool
broke, the recipe does not pickle) is gated in-process instead.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import sys
import types
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from docmill.errors import InputError
from docmill.lifeline import watch_parent_then
from tasks.per_file.gate import check
from tasks.request import load_payload
from tasks.source.inventory import Document

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.recipes import Recipe

T = TypeVar("T")
R = TypeVar("R")


def gate_processes(cpus: int | None) -> int:
    """Worker processes gating answers on a machine with `cpus` cores: one per core beside the
    engine's own process (which routes and writes while they gate), at least one, at most two.
    Each starts an interpreter that imports the gate and the request builder (~2.5 s of CPU on a
    loaded 2-core machine), so a worker without a core of its own only adds CPU."""
    return max(1, min(2, (cpus or 2) - 1))


PROCESSES = gate_processes(os.cpu_count())
CHUNK = 128  # answers per task sent to a worker (amortizes pickling and wake-ups)
STATS: Counter[str] = Counter()  # chunks handed to the worker processes (for tests and benches)
# A batch with fewer requests is gated in-process. A worker moves the gate's CPU off the engine's
# process, it does not remove any, and adds its own: an interpreter importing the gate, a reader
# process of its own for formats read outside the engine, every answer and verdict pickled. On 2
# shared cores that was 3.8-4.5 s more CPU than in-process at 2,000 answers (two workers), and at
# 10,000 answers (one worker) 1.06-1.14x the whole run's CPU and 1.16-1.22x its wall time
# (bench/curator_batch.py's docmill command, two pairs, load 2.5-3.7)
MIN_RESULTS = 20_000

# per answer: ("verdict", Verdict) or ("unreadable", InputError.one_line())
Gated = tuple[str, Any]

_recipe: Any = None
_settings: Any = None


def _init(recipe: Recipe, settings: Settings) -> None:
    global _recipe, _settings
    _recipe, _settings = recipe, settings


def gate_one(recipe: Recipe, settings: Settings, doc: dict[str, Any], message: dict[str, Any]) -> Gated:
    """The gate's verdict on one answer for its document, or why the document could not be read."""
    try:
        payload = load_payload(Document.model_validate(doc), recipe, settings)
    except InputError as e:
        return "unreadable", e.one_line()
    return "verdict", check(recipe, payload, message)


def _gate_chunk(chunk: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[Gated]:
    return [gate_one(_recipe, _settings, doc, message) for doc, message in chunk]


@contextmanager
def _script_hidden() -> Iterator[None]:
    """Start processes without handing them the running script. A spawned child imports the
    parent's `__main__` again; a user's script that drives docmill without an
    `if __name__ == "__main__":` guard would then run a second docmill run in every worker (new
    batches, billed again). The workers need docmill's modules only. A recipe defined in that
    script does not unpickle in a worker, which then fails and the chunk is gated in-process."""
    main = sys.modules.get("__main__")
    if main is None or not (getattr(main, "__file__", None) or getattr(main, "__spec__", None)):
        yield  # interactive: nothing to run again
        return
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


class Prechecker:
    """A lazily started process pool gating chunks of answers; `close()` stops it."""

    def __init__(self, recipe: Recipe, settings: Settings) -> None:
        self.recipe, self.settings = recipe, settings
        self.pool: ProcessPoolExecutor | None = None
        self.usable = True
        try:
            pickle.dumps((recipe, settings))
        except Exception:  # a recipe built in a test function, say: gate in-process
            self.usable = False

    def start(self) -> None:
        """Start the worker processes now (their interpreters start while the batches run)."""
        if not self.usable or self.pool is not None:
            return
        try:
            ctx = multiprocessing.get_context("spawn")
            # a worker exits with the engine's process, however it ends (even while it starts up)
            init = pickle.dumps((_init, self.recipe, self.settings))
            self.pool = ProcessPoolExecutor(
                PROCESSES, mp_context=ctx, initializer=watch_parent_then, initargs=(init,)
            )
            with _script_hidden():  # every worker starts here (spawned on submit, one per submit)
                for _ in range(PROCESSES):
                    self.pool.submit(_gate_chunk, [])
        except Exception:  # cannot start processes here: gate in-process
            self.close()
            self.usable = False

    def submit(self, chunk: list[tuple[dict[str, Any], dict[str, Any]]]) -> Future[list[Gated]]:
        self.start()
        if self.pool is not None:
            try:
                future = self.pool.submit(_gate_chunk, chunk)
                STATS["chunks_in_workers"] += 1
                return future
            except Exception:  # broken, shut down, cannot start: gate in-process from now on
                self.close()
                self.usable = False
        return done_future([gate_one(self.recipe, self.settings, doc, message) for doc, message in chunk])

    def result(
        self, future: Future[list[Gated]], i: int, doc: dict[str, Any], message: dict[str, Any]
    ) -> Gated:
        """Answer `i` of a chunk; gated in-process if the worker died."""
        try:
            return future.result()[i]
        except Exception:
            return gate_one(self.recipe, self.settings, doc, message)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None


def done_future(value: R) -> Future[R]:
    f: Future[R] = Future()
    f.set_result(value)
    return f


def ordered_map(pool: Executor, fn: Callable[[T], R], items: Iterable[T], window: int) -> Iterator[R]:
    """`fn` over `items` in `pool`, results in input order, at most `window` in flight."""
    queue: deque[Future[R]] = deque()
    for x in items:
        queue.append(pool.submit(fn, x))
        if len(queue) >= window:
            yield queue.popleft().result()
    while queue:
        yield queue.popleft().result()
