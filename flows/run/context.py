"""What one run needs at hand: settings, store, recipe, model clients, and the offline emulator.

Without ANTHROPIC_API_KEY (and without an explicit base URL) docmill starts the built-in
emulator on loopback and says so in one line. With a key it talks to the real API.
"""

from __future__ import annotations

import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from checkpoints.costs import CostEntry, CostLedger, possibly_billed_entry
from checkpoints.keys import safe_segment
from checkpoints.store import open_store
from docmill.sdk import Once, anthropic
from docmill.settings import Settings
from tasks.api.shared_limit import scope_for, shared_limit
from tasks.per_file.scope import RunScope

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore
    from tasks.api.client import ModelClient, PossiblyBilled

OFFLINE_KEY = "offline-emulator-key"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(3)


def holder_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


@dataclass
class Endpoint:
    base_url: str | None
    api_key: str
    offline: bool
    server: Any = None


class StoreJournal:
    """The built-in emulator's batches under the run's store (`emulator/batches/<id>.json`), so a
    run killed during a batch finds them again after a restart (emulator.batch_store.BatchJournal)."""

    PREFIX = "emulator/batches/"

    def __init__(self, store: ObjectStore) -> None:
        self.store = store

    def save(self, batch_id: str, record: dict[str, Any] | None) -> None:
        key = f"{self.PREFIX}{safe_segment(batch_id)}.json"
        if record is None:
            self.store.delete(key)
        else:
            self.store.put_json(key, record)

    def load(self) -> list[dict[str, Any]]:
        return [record for _, record in self.store.json_objects(self.PREFIX)]


@contextmanager
def api_endpoint(
    settings: Settings, *, quiet: bool = False, store: ObjectStore | None = None
) -> Iterator[Endpoint]:
    """The real API, a configured base URL, or an in-process emulator started for this run (its
    batches kept under `store` when given)."""
    if not settings.offline:
        key = settings.anthropic_api_key.get_secret_value() if settings.anthropic_api_key else ""
        yield Endpoint(settings.api.base_url, key, offline=False)
        return
    if settings.api.base_url:
        yield Endpoint(settings.api.base_url, OFFLINE_KEY, offline=True)
        return
    from emulator.server import EmulatorServer
    from emulator.state import EmulatorConfig

    config = EmulatorConfig.from_env()
    if settings.today is not None and config.today is None:  # the emulator reads lifecycles on our day
        config.today = settings.today.isoformat()
    with EmulatorServer(config, journal=StoreJournal(store) if store is not None else None) as server:
        if not quiet:
            print(
                f"docmill: no ANTHROPIC_API_KEY set; using the built-in emulator at {server.base_url} "
                "(offline, nothing is billed)",
                file=sys.stderr,
            )
        yield Endpoint(server.base_url, OFFLINE_KEY, offline=True, server=server)


@dataclass(frozen=True)
class RunContext(RunScope):
    """What one run needs at hand, built once where it starts (flows.entry; a shard worker for
    its part) and passed whole: the run's scope (recipe, run id, store, realtime client, settings:
    tasks.per_file.scope.RunScope, which the per-file passes take as it is), the endpoint, the SDK
    client for batches (`batch_sdk()`: made when a pass first asks for it, `make_clients`), and what the run
    was asked beyond its settings."""

    endpoint: Endpoint
    batch_sdk: Callable[[], anthropic.Anthropic]
    workers: int | None = None  # the per-file pass spread over that many shard workers (flows.workers.spread)
    finish_by: str | None = None  # ISO 8601: batched what can finish by then, the rest realtime (deadline)
    left_behind: tuple[str, ...] = ()  # stopped runs over these documents a --new-run did not continue
    on_progress: Callable[[int, int], None] | None = None  # per-file pass: (documents done, total)

    def manifest_extra(self) -> dict[str, Any]:
        """What the run's manifest keeps of it (`extra`): a continued run takes its workers and
        deadline from there, the report the spend of the runs left behind."""
        kept = {"finish_by": self.finish_by, "workers": self.workers, "left_behind": list(self.left_behind)}
        return {k: v for k, v in kept.items() if v}


def make_clients(settings: Settings, endpoint: Endpoint) -> tuple[ModelClient, Once[anthropic.Anthropic]]:
    """The realtime ModelClient (one transport retry layer) and the raw SDK client for batches, each
    made into an SDK client at its first call (a run that sends nothing never imports the SDK)."""
    from tasks.api.client import ModelClient

    client = ModelClient(settings, base_url=endpoint.base_url, api_key=endpoint.api_key)
    sdk = Once(
        lambda: anthropic.Anthropic(
            api_key=endpoint.api_key,
            base_url=endpoint.base_url,
            max_retries=settings.api.max_attempts - 1,
            timeout=settings.api.timeout_seconds,
        )
    )
    return client, sdk


@contextmanager
def open_clients(
    settings: Settings, endpoint: Endpoint
) -> Iterator[tuple[ModelClient, Once[anthropic.Anthropic]]]:
    """`make_clients`; when the run ends the realtime client's event loop and its I/O threads end
    too (once the last thread waiting on it returns: `ModelClient.close`), not whenever a
    collection finds them: a process that runs many (a worker, a notebook) kept a set per run. A
    chunk task that outlives a stopped run's body is still answered: one waiting on the loop keeps it
    until it returns, a later call makes a new one; the batches' SDK client holds no thread and stays
    open (it may still be looking at its batches: tasks.batch.lifecycle)."""
    client, sdk = make_clients(settings, endpoint)
    try:
        yield client, sdk
    finally:
        client.close()


def record_possibly_billed(ledger: CostLedger, p: PossiblyBilled) -> None:
    """An attempt that may have been billed without a whole answer (a timeout after sending, a broken
    stream) goes into the run's cost ledger at once: exact when the stream reported its final usage,
    else flagged possibly billed at its upper bound."""
    attempt: dict[str, Any] = {
        "run_id": ledger.run_id,
        "pass_name": p.pass_name,
        "doc_id": p.doc_id,
        "key": p.key,
        "attempt": p.attempt,
        "model": p.model,
        "at": p.at,
    }
    if p.usage is not None:
        entry = CostEntry.from_usage(**attempt, usage=p.usage).model_copy(
            update={"usd": p.usd, "possibly_billed": p.possibly, "unanswered": True}
        )
    else:
        entry = possibly_billed_entry(
            **attempt, input_tokens=p.input_tokens, max_tokens=p.max_tokens, usd=p.usd
        )
    ledger.record(f"{p.reason}-{p.key or p.doc_id}-{p.attempt}-{int(p.at * 1000)}", [entry])


@contextmanager
def share_limit(ctx: RunContext, *, name: str) -> Iterator[Any]:
    """This process's client paces at its share of the organisation's limit, shared through the
    store with every other docmill process at the same endpoint (tasks.api.shared_limit); not
    with docmill's built-in emulator (each process has its own) or with the setting off."""
    shared_at = limit_scope(ctx)
    if shared_at is None:
        yield None
        return
    store, scope = shared_at
    holder, lease = f"{holder_id()}:{name}", ctx.settings.shared_limit.lease_seconds
    with shared_limit(store, ctx.client.limiter, scope, holder, name=name, lease_seconds=lease) as m:
        yield m


def limit_scope(ctx: RunContext) -> tuple[ObjectStore, str] | None:
    """Where the organisation's limit is shared (its store and scope: tasks.api.shared_limit), or
    None when it is not shared (the setting off, or docmill's built-in emulator)."""
    conf = ctx.settings.shared_limit
    scope = scope_for(conf.scope, ctx.endpoint.base_url, builtin=ctx.endpoint.server is not None)
    if not conf.enabled or scope is None:
        return None
    return (
        open_store(conf.store, endpoint_url=ctx.settings.s3_endpoint_url) if conf.store else ctx.store
    ), scope


@dataclass(frozen=True)
class RunParams:
    """What a run is asked to do: its source and recipe, the mode asked (flows.run.modes chooses the
    pass), which run (an id, else the one flows.run.continuation picks; `new_run`: never a stopped
    one), the shard workers and the deadline (`--finish-by` as given), the settings given on the
    command line (dotted name -> value, None = not given: only the safe ones apply to a continued
    run), and `submit_only`: stop once the batches are created (the inventory only, if the run goes
    realtime) and keep the run's lease and marker for the flow run that continues it in this process
    (flows.run.early)."""

    source: str
    recipe: str
    mode: str = "realtime"
    run_id: str | None = None
    new_run: bool = False
    workers: int | None = None
    finish_by: str | None = None
    given: Mapping[str, Any] | None = None
    submit_only: bool = False
