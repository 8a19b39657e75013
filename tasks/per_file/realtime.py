"""The per-file pass over one chunk of documents, realtime (invariants 1, 3, 5).

Every chunk's documents run as coroutines on the client's one event loop (tasks.api.client), shared by
every chunk in flight: a request waits for the pacer, not for a thread, and a slow document never
idles capacity behind a chunk boundary. For each document:
  skipped            -> skipped, or failed "input:<skip reason>" (no call)
  ledger hit         -> the stored outcome (from_ledger=True, no call: invariant 1)
  persisted response -> gated without a call (crash recovery: invariant 3)
  otherwise          -> call -> persist response -> gate -> repair policy -> ledger (put-if-absent)
                        -> a cost entry per attempt -> a review item for needs_review.
Blocking work (the store, reading the document, the gate) runs on the loop's I/O threads; long
documents on a thread of their own (tasks.per_file.longdoc). The chunk's cost entries are written as
one group at its end. Documents sharing a key are resolved after the first one, from the ledger.
An unexpected error of one document becomes its failed outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from checkpoints.inflight import InFlight, life_of
from checkpoints.store.local import LocalStore
from docmill.errors import (
    ApiCallError,
    BudgetExhausted,
    InputError,
    Interrupted,
    SystemicFailure,
)
from docmill.logs import get_logger, redact
from tasks.api.usage import estimate_input_tokens
from tasks.cost.worst_case import long_worst_usd, over_guard, request_worst_usd, request_worsts
from tasks.per_file.accounting import flush_costs
from tasks.per_file.attempts import Attempts as Attempts  # re-exported: one document's attempts
from tasks.per_file.gate import Action, Decision, Problem, Progress, Verdict, check, next_request
from tasks.per_file.longdoc import review_long
from tasks.per_file.outcome import DocOutcome, DocState
from tasks.per_file.settle import (
    Pass,
    decide_next,
    enqueue_review,
    failed_outcome,
    gated_fields,
    hold_for_cost,
    outcome_from_ledger,
    outcome_from_original,
    prompt_version,
    skipped_outcome,
    write_outcome,
)
from tasks.request import (
    FILE_PASS,
    Payload,
    SendAs,
    file_request,
    goes_long,
    load_payload,
    long_tokens,
    send_as,
)
from tasks.source.readers.bounded import PLAIN_TYPES

if TYPE_CHECKING:
    from docmill.settings import Settings
    from tasks.api.client import AsyncModelClient, ModelClient
    from tasks.per_file.scope import RunScope
    from tasks.source.inventory import Document

# 4xx answers that depend only on the request: written to the ledger, never re-sent.
# (401/403/404/402 depend on the account or config: a resume after fixing it retries them.)
PERMANENT_STATUSES = frozenset({400, 413, 422})
INLINE_MAX = 64 * 1024  # bytes of a local document prepared on the event loop itself (`_cheap`)
# the run stops (a spend limit is a SystemicFailure too): the chunk is not written
STOPS = (SystemicFailure, Interrupted)
log = get_logger("review")
T = TypeVar("T")


def extract_chunk(docs: list[Document], scope: RunScope) -> list[DocOutcome]:
    """One terminal `DocOutcome` per document, in the order given (blocks this thread while the
    documents run on the client's event loop)."""
    p = Pass.of(scope, buffer_costs=True)
    aio = scope.client.aio
    try:
        return aio.loop.run(_review_all(p, docs, aio))
    finally:
        flush_costs(p)  # one cost group per chunk, also when a document raised or the budget ran out


def extract_recorded(
    docs: list[Document], group: str, scope: RunScope, *, settle: Callable[[list[DocOutcome]], bool]
) -> list[DocOutcome]:
    """`extract_chunk` under an in-flight record of `group` (invariant 13: the chunk's request keys
    with their worst cases; at most the client's concurrency of them count as possibly billed while
    they have no result, checkpoints.inflight); `settle(outcomes)`: every document was handled, so
    what a killed earlier life of the chunk saved is in the cost ledger now."""
    client, run_id = scope.client, scope.run_id
    inflight = InFlight(scope.store, run_id)
    life = life_of(client)
    if client.limiter.declared_for != run_id:  # its window is recorded before it grows (the bound's ceiling)
        client.limiter.declare_to(run_id, partial(inflight.declare, life))
    worst = request_worsts(docs, scope.recipe, scope.settings)
    mark = inflight.open_chunk(group, life, client.concurrency, worst)
    try:
        outcomes = extract_chunk(docs, scope)
    except BaseException:
        inflight.close(mark)  # extract_chunk flushed the costs of every answer it got
        raise
    inflight.close(mark, settled=settle(outcomes))
    return outcomes


async def _review_all(p: Pass, docs: list[Document], aio: AsyncModelClient) -> list[DocOutcome]:
    # a document without a key is never called (skipped); the first of a key may call, the others
    # (duplicate content) take its result from the ledger after it
    keys = [p.key(doc) for doc in docs]
    first: set[str | None] = set()
    now: list[int] = []
    later: list[int] = []
    for i, (doc, k) in enumerate(zip(docs, keys, strict=True)):
        if k is not None and (doc.duplicate_of or k in first):
            later.append(i)
        else:
            first.add(k)
            now.append(i)
    aio.occupancy.enter(len(now))
    done = await asyncio.gather(*(_guarded(p, docs[i], keys[i], aio) for i in now), return_exceptions=True)
    for result in done:  # every document ended; a stop (signal, trip, spend limit) ends the chunk
        if isinstance(result, BaseException):
            raise result
    out: dict[int, DocOutcome] = {i: o for i, o in zip(now, done, strict=True) if isinstance(o, DocOutcome)}
    for i in later:
        out[i] = await aio.loop.io(_duplicate, p, docs[i], keys[i])
    return [out[i] for i in range(len(docs))]


def feed(chunks: Iterable[T], client: ModelClient, settings: Settings) -> Iterator[T]:
    """`chunks` handed out as the client's event loop asks for documents: the next chunk once fewer
    than the pacer's window plus a chunk's worth (at least a quarter window) are in the loop, so the
    window stays full and the chunks in flight are as many as it needs (a chunk waiting for its
    slowest document no longer holds capacity). Raises what stops the run (a signal, a trip, a
    spend-limit refusal) instead of handing out more."""
    occupancy, size = client.aio.occupancy, settings.chunk_size

    def room() -> int:
        window = client.limiter.window
        return window + max(size, window // 4)

    for chunk in chunks:
        while not occupancy.wait_below(room):
            client.check_stops()
        client.check_stops()
        yield chunk


def _duplicate(p: Pass, doc: Document, key: str | None) -> DocOutcome:
    try:
        return outcome_from_original(p, doc, str(key))
    except Exception as e:  # one broken document never sinks the chunk
        return _unexpected(doc, key, e)


async def _guarded(p: Pass, doc: Document, key: str | None, aio: AsyncModelClient) -> DocOutcome:
    try:
        if key is None:
            return skipped_outcome(doc)
        return await _review_one(p, doc, key, aio)
    except BudgetExhausted as e:
        return failed_outcome(doc, key, "budget", e.one_line())
    except STOPS:  # the run stops; this chunk is not written, a resume redoes it
        raise
    except InputError as e:
        return failed_outcome(doc, key, "input:unreadable", e.one_line())
    except Exception as e:  # one broken document never sinks the chunk
        return _unexpected(doc, key, e)
    finally:
        aio.occupancy.leave()


def _unexpected(doc: Document, key: str | None, e: Exception) -> DocOutcome:
    return failed_outcome(doc, key, f"unexpected:{type(e).__name__}", f"{type(e).__name__}: {str(e)[:500]}")


@dataclass
class Work:
    """One document between its blocking steps: what is sent of it (its text, or its pages and
    images), attempts, the request to send next and the repair policy's progress."""

    doc: Document
    key: str
    payload: Payload
    tries: Attempts
    request: dict[str, Any]
    progress: Progress
    action: Action | None = None
    message: dict[str, Any] | None = None  # an answer not gated yet (a recovered one)
    estimate: int | None = None  # `request`'s input-token estimate, measured once for guard and pacer
    outcome: DocOutcome | None = None  # set once the document ended


async def _review_one(p: Pass, doc: Document, key: str, aio: AsyncModelClient) -> DocOutcome:
    work = _prepare(p, doc, key) if _cheap(p, doc) else await aio.loop.io(_prepare, p, doc, key)
    if isinstance(work, DocOutcome):
        return work
    if work.message is None and not work.request:  # a long document: its own thread, the client's calls
        return await asyncio.get_running_loop().run_in_executor(None, review_long, p, doc, key, work.payload)
    tries = work.tries
    try:
        if work.message is not None:  # a recovered answer: gated without a call
            work = await aio.loop.io(_after_answer, p, work, work.message, False)
        while work.outcome is None:
            stepped: list[Work] = []
            asked = work  # the step after the answer runs with the answer, in the call's own I/O step

            def then(message: dict[str, Any], asked: Work = asked, stepped: list[Work] = stepped) -> None:
                stepped.append(_after_answer(p, asked, message, True))

            action = work.action.value if work.action else "first"
            await tries.call(aio, work.request, action, then, estimate=work.estimate)
            work = stepped[0]
        return work.outcome
    except ApiCallError as e:
        return await aio.loop.io(_api_failure, p, doc, tries, e)
    except BudgetExhausted as e:  # not written: a resume with a higher cap continues from the responses
        return _unfinished(tries, "budget", e.one_line())


def _cheap(p: Pass, doc: Document) -> bool:
    """Whether preparing `doc` is quick enough for the event loop itself (a local store, a small
    local file of a plain text type that the inventory read as UTF-8: only decoded, in this
    process): one thread hop less a document. Reads from S3, PDFs, images, HTML and Office files,
    and a text in a guessed legacy encoding go to an I/O thread: they are read in a reader process
    (tasks.source.readers.bounded), and waiting there for a free worker would stop the loop."""
    return (
        isinstance(p.store, LocalStore)
        and doc.size <= INLINE_MAX
        and doc.source_uri.startswith("file://")  # every local file's URI (inventory: Path.as_uri)
        and doc.doc_type in PLAIN_TYPES
        and doc.encoding is None
        and send_as(doc, p.recipe) is SendAs.TEXT
    )


def _prepare(p: Pass, doc: Document, key: str) -> DocOutcome | Work:
    """Blocking: the document's ledger hit, or its text, request, cost guard and any answer a crash
    left persisted without a result."""
    record = p.ledger.get(FILE_PASS, key)
    if record is not None:
        if record.get("origin_run") == p.run_id:  # this run wrote it: a chunk run again after a crash
            # whose costs a crash may have kept from being written: every persisted attempt counted
            # again (the cost ledger counts an attempt once, so one already written is harmless)
            Attempts(p, doc.doc_id, key, model=p.model).recovered(Progress(max_tokens=0))
        return outcome_from_ledger(p, doc, record)
    payload = load_payload(doc, p.recipe, p.settings)
    long = goes_long(doc, p.recipe, payload, p.settings)
    max_tokens = int(p.settings.api.max_tokens)
    request = {} if long else file_request(p.recipe, doc, payload, model=p.model, max_tokens=max_tokens)
    estimate = estimate_input_tokens(request) if request else None
    held = _held(p, doc, key, payload.text, request, estimate)
    if held is not None:
        return held
    tries = Attempts(p, doc.doc_id, key, model=p.model)
    progress = Progress(max_tokens=max_tokens)
    recovered = None if long else tries.recovered(progress)  # a long document recovers in its own task
    return Work(doc, key, payload, tries, request, progress, message=recovered, estimate=estimate)


def _after_answer(p: Pass, work: Work, message: dict[str, Any], fresh: bool) -> Work:
    """Blocking: account the answer (a `fresh` one; a recovered one was accounted when recovered),
    gate it, and settle the document (ledger, review queue) or name the request the repair policy
    sends next."""
    tries = work.tries
    if fresh:
        tries.answered(message, work.action.value if work.action else "first", work.request["max_tokens"])
    work.message = None
    verdict = check(p.recipe, work.payload, message)
    if fresh:  # a recovered answer was judged by the breaker of its own life already
        p.client.breaker.answer(*answer_cause(verdict))
    work.progress.note(work.action, message.get("usage"))
    tries.note_verdict(verdict)
    decision = decide_next(p.settings, verdict, work.progress, work.request)
    if decision.action in (Action.ACCEPT, Action.REVIEW):
        work.outcome = _finish(p, work.doc, tries, verdict, decision)
        return work
    work.request = {**next_request(decision, work.request, verdict), "model": tries.model}
    work.estimate = None  # a follow-up: measured when it is sent
    work.action = decision.action
    work.progress.max_tokens = int(work.request["max_tokens"])
    return work


def _held(
    p: Pass, doc: Document, key: str, text: str, request: dict[str, Any], estimate: int | None
) -> DocOutcome | None:
    """needs_review `cost_guard` (settle.hold_for_cost) when the document's worst case passes the
    per-document guard, else None."""
    if request:
        worst = request_worst_usd(p.settings, request, estimate)
    else:
        worst = long_worst_usd(p.settings, p.model, long_tokens(doc, p.recipe, text))
    why = over_guard(p.settings, worst)
    return None if why is None else hold_for_cost(p, doc, key, why)


def answer_cause(verdict: Verdict) -> tuple[str | None, str]:
    """What the circuit breaker hears about one gated answer (tasks.api.breaker): nothing wrong,
    or an invalid answer / refusal keyed by its first error, so only answers invalid alike add up."""
    if verdict.problem not in (Problem.INVALID, Problem.REFUSAL):
        return None, ""
    first = (verdict.errors or [verdict.problem.value])[0]
    return f"{verdict.problem.value}:{first[:60]}", first


def _finish(p: Pass, doc: Document, tries: Attempts, verdict: Verdict, decision: Decision) -> DocOutcome:
    outcome = tries.outcome(**gated_fields(verdict, decision.action, decision.reason))
    return enqueue_review(p, doc, write_outcome(p, outcome), tries=tries.log, errors=verdict.errors)


def _api_failure(p: Pass, doc: Document, tries: Attempts, e: ApiCallError) -> DocOutcome:
    tries.transport_attempts += e.attempts
    log.warning(
        "%s call failed: %s",
        FILE_PASS,
        e.message,
        extra={
            "run_id": p.run_id,
            "doc_id": doc.doc_id,
            "request_id": e.request_id,
            "model": e.model,
            "prompt_version": prompt_version(p.recipe),
            "status": e.status,
            "attempt": e.attempts,
        },
    )
    # an API error may echo request data (headers, keys): mask secrets before it is stored
    outcome = _unfinished(tries, e.failure_type, redact(e.last_error or e.message))
    outcome.retryable = e.status not in PERMANENT_STATUSES  # not ledger-final: resume retries it
    if e.request_id:
        outcome.request_ids.append(str(e.request_id))
    if e.status in PERMANENT_STATUSES:
        outcome = write_outcome(p, outcome)
    return outcome


def _unfinished(tries: Attempts, failure_type: str, error: str) -> DocOutcome:
    """A failed outcome that keeps every attempt's usage and the last (partial) output."""
    last = tries.last_verdict
    return tries.outcome(
        state=DocState.FAILED,
        failure_type=failure_type,
        last_error=error,
        output=last.output if last else None,
        raw_output=last.raw_text if last else None,
        flags=last.flags if last else [],
    )
