"""A batch record's lifecycle against the Message Batches API: `submit` (items -> intent ->
`create` -> batch id), `poll`, `results`, `reconcile` an intent without an id, `cancel_run`.
Durable state itself lives in checkpoints.batches.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from checkpoints.batches import BatchPhase, BatchRecord, BatchRecords
from docmill.crash_points import crash_point
from docmill.errors import BatchError
from docmill.logs import current_run, get_logger
from docmill.sdk import Once, anthropic
from tasks.api.retrying import (
    Stop,
    broke_in_transit,
    describe,
    failure,
    is_retryable,
    is_spend_limit,
    spend_limit_error,
    transport,
    wait_seconds,
)
from tasks.batch.spool import BatchBody

if TYPE_CHECKING:
    from anthropic.types.messages import MessageBatch
    from tenacity import Retrying

    from checkpoints.store import ObjectStore
    from docmill.settings import Settings

T = TypeVar("T")
log = get_logger("batch")
LIST_PAGE = 20
COUNT_KINDS = ("processing", "succeeded", "errored", "canceled", "expired")
FIRST_LOOKS: dict[str, threading.Thread] = {}  # run id -> the look after a pass that only created


def resume_hint() -> str:
    """`docmill resume <the run id>` for the run this thread works for."""
    run = current_run()
    return f"`docmill resume {run}`" if run else "`docmill resume` with the run's id (see `docmill runs`)"


class BatchApi:
    """The batch endpoints with one retry layer for reads and cancels (SDK retries off).

    `create` is never blindly re-sent: after an answer that may hide a created batch, the intent
    is reconciled by listing first (invariant 2)."""

    def __init__(
        self, client: Callable[[], anthropic.Anthropic], settings: Settings, *, sleep: Callable[[float], None]
    ) -> None:
        # `client()` makes the SDK client when a batch call is first made (a run whose answers are all
        # in the ledger makes none, and never imports the SDK)
        self._client = Once(lambda: client().with_options(max_retries=0))
        self.settings = settings
        self.sleep = sleep
        self.attempts = int(settings.api.max_attempts)
        self.cap = float(settings.api.backoff_max_seconds)
        self.asked_max = float(settings.api.retry_after_max_seconds)

    @property
    def client(self) -> anthropic.Anthropic:
        return self._client.get()

    def wait(self, exc: BaseException | None, attempt: int) -> float:
        """The transport wait before retry `attempt` (tasks.api.retrying: retry-after capped)."""
        return 0.0 if exc is None else wait_seconds(exc, attempt, self.cap, asked_max=self.asked_max)

    def retrying(
        self, *, stop: Stop | None = None, retry: Callable[[BaseException], bool] = is_retryable
    ) -> Retrying:
        """The transport retry loop (tasks.api.retrying.transport) with this API's attempts and waits."""
        spent = stop or (lambda s: s.attempt_number >= self.attempts)
        wait = lambda s: self.wait(failure(s), s.attempt_number)  # noqa: E731
        return transport(stop=spent, wait=wait, sleep=self.sleep, retry=retry)

    def call(self, what: str, fn: Callable[..., T], *args: Any, **kw: Any) -> T:
        """`fn(*args, **kw)` with transport retries; a spend-limit refusal stops the run, any other
        failure leaves as a `BatchError` naming `what`."""
        retrying = self.retrying()
        try:
            return retrying(fn, *args, **kw)
        except (anthropic.APIStatusError, anthropic.APIConnectionError) as e:
            if isinstance(e, anthropic.APIStatusError) and is_spend_limit(e):
                raise spend_limit_error(e) from e
            n = retrying.statistics.get("attempt_number", 1)
            raise BatchError(
                f"{what} failed after {n} attempt(s): {describe(e)}",
                hint=f"check the API key and network; {resume_hint()} picks the run up again",
            ) from e

    def create(self, body: BatchBody) -> MessageBatch:
        """POST the spooled body streamed from its file with a known `Content-Length` (never a
        chunked upload: some proxies refuse or stall on one). A stalled upload ends as a timeout
        after settings.api.timeout_seconds per write, within the create attempts."""
        headers = {"Content-Type": "application/json", "Content-Length": str(body.size)}
        return self.client.post(
            "/v1/messages/batches",
            cast_to=anthropic.types.messages.MessageBatch,
            content=body.chunks(),
            options={"headers": headers},
        )

    def retrieve(self, batch_id: str) -> MessageBatch:
        return self.call(f"retrieve {batch_id}", self.client.messages.batches.retrieve, batch_id)

    def cancel(self, batch_id: str) -> MessageBatch | None:
        """Cancel; None when it had already ended (nothing left to cancel). Which status the API gives
        for the cancel of an ended batch is not documented (400, 409, or the batch as it is): any
        refusal is judged by what the batch says it is, not by its status code."""
        try:
            batch = self.call(f"cancel {batch_id}", self.client.messages.batches.cancel, batch_id)
        except BatchError as e:
            if not isinstance(e.__cause__, anthropic.APIStatusError) or e.__cause__.status_code >= 500:
                raise
            if self.retrieve(batch_id).processing_status != "ended":
                raise
            return None
        return None if batch.processing_status == "ended" and batch.cancel_initiated_at is None else batch

    def newest_id(self) -> str | None:
        page = self.call("list batches", self.client.messages.batches.list, limit=1)
        return page.data[0].id if page.data else None

    def newest_first(self) -> Iterator[MessageBatch]:
        after: str | None = None
        while True:
            kw: dict[str, Any] = {"limit": LIST_PAGE}
            if after:
                kw["after_id"] = after
            page = self.call("list batches", self.client.messages.batches.list, **kw)
            yield from page.data
            if not page.has_more or not page.data:
                return
            after = page.data[-1].id


def total_counts(batches: list[MessageBatch]) -> dict[str, int]:
    """Request counts summed over batches, every kind present (zeros included)."""
    return {k: sum(int(getattr(b.request_counts, k, 0) or 0) for b in batches) for k in COUNT_KINDS}


def submit(
    api: BatchApi, records: BatchRecords, body: BatchBody, *, run_id: str, n: int, round: int, now: float
) -> BatchRecord:
    """Items, then the intent, then `create`, then the batch id. Returns the record: SUBMITTED, or
    NOT_CREATED when the API refused or never created the batch (the caller resends its items)."""
    records.write_items(n, body.lines)
    rec = BatchRecord(
        run_id=run_id,
        n=n,
        round=round,
        request_count=len(body),
        request_bytes=body.size,
        request_sha256=body.sha256(),
        intent_at=now,
        list_mark=api.newest_id(),
    )
    records.create(rec)
    tries = 0

    def create() -> MessageBatch | list[MessageBatch]:
        """One `create`; after a failed one, first the batches it may have made (adopted, never sent again)."""
        nonlocal tries
        tries += 1
        if tries > 1 and (found := find_candidates(api, rec, set())):
            return found
        crash_point("before_create")
        return api.create(body)

    try:
        made = api.retrying()(create)
    except (anthropic.APIStatusError, anthropic.APIConnectionError) as e:
        if not is_retryable(e):
            records.update(n, partial(_not_created, why=f"create refused: {describe(e)}"))
            if isinstance(e, anthropic.APIStatusError) and is_spend_limit(e):
                raise spend_limit_error(e) from e
            raise BatchError(
                f"batch {n} of run {run_id} was refused: {describe(e)}",
                hint="lower settings.batch.max_requests / max_bytes, or fix the request it names",
            ) from e
        api.sleep(api.wait(e, api.attempts))  # attempts spent: the last failure may hide a batch too
        made = find_candidates(api, rec, set())
        if not made:
            records.update(n, lambda r: _not_created(r, f"create kept failing ({api.attempts} attempts)"))
            raise BatchError(
                f"batch {n} of run {run_id} could not be created after {api.attempts} attempts",
                hint=f"the API is failing; `docmill resume {run_id}` later resends these requests",
            ) from e
    if isinstance(made, list):  # a failed-looking create did create it
        return _adopt(api, records, rec, made, cancel=False, why="create answered with an error")
    crash_point("after_create")
    return records.update(n, partial(_submitted, batches=[made], now=now))


def _submitted(r: BatchRecord, batches: list[MessageBatch], now: float) -> None:
    r.batch_ids = [b.id for b in batches]
    r.phase = BatchPhase.SUBMITTED
    r.submitted_at = now
    r.processing_status = batches[0].processing_status
    r.request_counts = total_counts(batches)


def _not_created(r: BatchRecord, why: str) -> None:
    r.phase = BatchPhase.NOT_CREATED
    r.notes.append(why)


def find_candidates(api: BatchApi, rec: BatchRecord, owned: set[str]) -> list[MessageBatch]:
    """Batches listed after the intent's mark (newer than it), with its request count, not owned by
    another record of the run: the batches its `create` may have made."""
    out = []
    for b in api.newest_first():
        if rec.list_mark is not None and b.id == rec.list_mark:
            break
        if b.id in owned:
            continue
        if sum(total_counts([b]).values()) == rec.request_count:
            out.append(b)
    return out


def _adopt(
    api: BatchApi,
    records: BatchRecords,
    rec: BatchRecord,
    found: list[MessageBatch],
    *,
    cancel: bool,
    why: str,
) -> BatchRecord:
    canceled = [b.id for b in found if cancel and b.processing_status != "ended" and api.cancel(b.id)]
    note = f"{why}: adopted {', '.join(b.id for b in found)}" + (
        f"; canceled {', '.join(canceled)}" if canceled else ""
    )

    def fn(r: BatchRecord) -> None:
        _submitted(r, found, r.intent_at)
        r.canceled_ids.extend(canceled)
        r.notes.append(note + "; results checked by custom_id when they end")

    return records.update(rec.n, fn)


def reconcile(api: BatchApi, records: BatchRecords, rec: BatchRecord, owned: set[str]) -> BatchRecord:
    """An intent without a batch id (a crash around `create`): list the batches made after its
    mark and adopt them (one is simply followed; several are canceled, their results matched by
    custom_id when they end), or record that none was created so its requests are resent."""
    found = find_candidates(api, rec, owned)
    if not found:
        mark = rec.list_mark or "the first batch"
        return records.update(
            rec.n, lambda r: _not_created(r, f"no batch was created after {mark}; requests resent")
        )
    owned.update(b.id for b in found)
    # One batch: the create went through; adopt it and wait for it (its custom_ids are never sent
    # again, invariant 11). Several (a create retried after an answer that hid the first one): the
    # copies are canceled and adopted, their results matched by custom_id when they end.
    return _adopt(api, records, rec, found, cancel=len(found) > 1, why="intent without batch id reconciled")


def poll(api: BatchApi, records: BatchRecords, rec: BatchRecord, now: float) -> BatchRecord:
    """Retrieve the record's batches; write status and counts when they change. Past
    settings.batch.max_wait_seconds the batches are canceled (what ran is kept)."""
    batches = [api.retrieve(bid) for bid in rec.batch_ids]
    ended = all(b.processing_status == "ended" for b in batches)
    canceling = any(b.processing_status == "canceling" for b in batches)
    status = "ended" if ended else "canceling" if canceling else "in_progress"
    counts = total_counts(batches)
    overdue = (
        not ended
        and not rec.canceled_ids
        and now - (rec.submitted_at or rec.intent_at) > api.settings.batch.max_wait_seconds
    )
    canceled = [
        b.id for b in batches if overdue and b.processing_status == "in_progress" and api.cancel(b.id)
    ]
    if status == rec.processing_status and counts == rec.request_counts and not canceled and not ended:
        return rec

    def fn(r: BatchRecord) -> None:
        r.processing_status, r.request_counts = status, counts
        if canceled:
            r.canceled_ids.extend(canceled)
            r.notes.append(f"followed longer than max_wait_seconds; canceled {', '.join(canceled)}")
        if ended and r.phase is BatchPhase.SUBMITTED:
            r.phase, r.ended_at = BatchPhase.ENDED, now

    return records.update(rec.n, fn)


def first_look(
    api: BatchApi, records: BatchRecords, live: list[BatchRecord], clock: Callable[[], float]
) -> None:
    """The look right after creating (`poll`) on a thread, for a pass that stops once its batches are
    created: its caller goes on (flows.run.early) and the next pass of the run joins it before reading
    the records (`join_first_look`). A failure is the next pass's to meet again when it polls."""

    def look() -> None:
        for rec in live:
            try:
                poll(api, records, rec, clock())
            except Exception as exc:
                log.info("first look at batch %d failed: %s", rec.n, exc)

    if live:
        FIRST_LOOKS[records.run_id] = threading.Thread(target=look, name="docmill-first-look", daemon=True)
        FIRST_LOOKS[records.run_id].start()


def join_first_look(run_id: str) -> None:
    look = FIRST_LOOKS.pop(run_id, None)
    if look is not None:
        look.join()


def results(api: BatchApi, batch_id: str) -> Iterator[dict[str, Any]] | None:
    """The result lines of an ended batch as dicts, or None when its results are gone (archived).
    A stream broken by a transient fault (reset, truncated line) is fetched again and resumes after
    the last line handed on (callers still skip repeats by custom_id)."""
    try:
        first = api.call(f"results of {batch_id}", api.client.messages.batches.results, batch_id)
    except BatchError as e:
        if isinstance(e.__cause__, anthropic.NotFoundError):
            return None
        raise
    return _lines(api, batch_id, first)


def _lines(api: BatchApi, batch_id: str, decoder: Any) -> Iterator[dict[str, Any]]:
    """The stream's lines; a stream that breaks in transit (`retrying.broke_in_transit`) is fetched
    again and read on after the last line handed on. Gives up after `api.attempts` breaks in a row
    without a new line in between."""
    done = 0  # lines handed on; a fetched-again stream skips them
    failures = 0  # consecutive breaks without a new line in between
    retrying = api.retrying(stop=lambda _s: failures >= api.attempts, retry=broke_in_transit)
    try:
        for attempt in retrying:
            with attempt:
                if failures:
                    decoder.close()
                    decoder = api.call(
                        f"results of {batch_id}", api.client.messages.batches.results, batch_id
                    )
                seen = 0
                try:
                    for raw in decoder.http_response.iter_lines():
                        if not raw.strip():
                            continue
                        seen += 1
                        if seen <= done:
                            continue
                        line = json.loads(raw)
                        done, failures = done + 1, 0
                        yield line
                except Exception as e:
                    if broke_in_transit(e):
                        failures += 1
                        log.warning("results of %s broke off after %d line(s) (%s)", batch_id, done, e)
                    raise
    except Exception as e:
        if not broke_in_transit(e):
            raise
        raise BatchError(
            f"results of {batch_id} kept breaking off after {done} line(s): {e}", hint="resume the run"
        ) from e
    finally:
        decoder.close()


def cancel_run(
    run_id: str, store: ObjectStore, client: anthropic.Anthropic, settings: Settings
) -> dict[str, Any]:
    """Cancel every in-flight batch of a run (reconciling an intent without id first)."""
    api = BatchApi(lambda: client, settings, sleep=time.sleep)
    records = BatchRecords(store, run_id)
    all_records = records.load_all()
    owned = {bid for r in all_records for bid in r.batch_ids}
    out: dict[str, Any] = {"run_id": run_id, "batches": []}
    for rec in all_records:
        if rec.phase is BatchPhase.INTENT:
            rec = reconcile(api, records, rec, owned)
        if rec.phase not in (BatchPhase.SUBMITTED, BatchPhase.ENDED):
            continue
        seen = [api.cancel(bid) or api.retrieve(bid) for bid in rec.batch_ids]
        asked = [b.id for b in seen if b.cancel_initiated_at is not None and b.id not in rec.canceled_ids]

        def fn(r: BatchRecord, seen: list[MessageBatch] = seen, asked: list[str] = asked) -> None:
            r.canceled_ids.extend(asked)
            r.processing_status = (
                "ended" if all(b.processing_status == "ended" for b in seen) else "canceling"
            )
            r.request_counts = total_counts(seen)
            r.notes.append("cancel requested by docmill cancel" if asked else "cancel: already ended")

        rec = records.update(rec.n, fn)
        out["batches"].append(
            {
                "n": rec.n,
                "batch_ids": rec.batch_ids,
                "status": rec.processing_status,
                "counts": rec.request_counts,
            }
        )
    return out
