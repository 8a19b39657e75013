"""The one settings tree. Env prefix DOCMILL_, nested fields with `__`
(e.g. DOCMILL_API__CONCURRENCY=16). Precedence: explicit argument > env var > default.

DOCMILL_STORE points every piece of state at one root (a folder or s3://bucket/prefix),
which is how tests isolate themselves.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from functools import lru_cache
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from docmill.models import CACHE_MIN_TOKENS


class ApiSettings(BaseModel):
    """How docmill talks to Claude."""

    model: str = Field(
        "claude-sonnet-5-5", description="Pinned model id for the per-file pass (the current Sonnet)."
    )
    integration_model: str = Field(
        "claude-sonnet-5-5", description="Pinned model id for the integration pass (the current Sonnet)."
    )
    fallback_model: str | None = Field(
        "claude-haiku-5-5",
        description="Model that takes a document only after the primary keeps failing with overload "
        "(a current model of another family, cheaper than the default: it never raises the cap's worst "
        "case); None: no fallback.",
    )
    base_url: str | None = Field(
        None, description="API base URL; None means the real API when a key is set, else the emulator."
    )
    concurrency: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="Optional ceiling on requests in flight at once per process. Without it the pacer "
        "keeps as many in flight as the rate limits need at the observed latency (Little's law).",
    )
    requests_per_minute: int = Field(
        4000, ge=1, description="Request limit assumed until the API's anthropic-ratelimit headers say."
    )
    input_tokens_per_minute: int = Field(
        2_000_000, ge=1, description="Input-token limit assumed until the API's headers say."
    )
    output_tokens_per_minute: int | None = Field(
        None, ge=1, description="Output-token limit assumed until the API's headers say; None: unknown."
    )
    input_limit_counts_cache_reads: bool = Field(
        False,
        description="Count cache reads against the input-token limit when pacing (the API does not for "
        "current models; set it for an endpoint or an older model that does).",
    )
    ramp_seconds: float = Field(
        20.0, ge=0, description="Seconds over which the send rate ramps from ramp_start to the limit."
    )
    ramp_start: float = Field(
        0.25, gt=0, le=1, description="Share of the limit the send rate starts at (and ramps from)."
    )
    max_attempts: int = Field(5, ge=1, description="Transport attempts per request (429, 5xx, 529, resets).")
    backoff_max_seconds: float = Field(30.0, ge=0, description="Cap on one transport backoff wait.")
    timeout_seconds: float = Field(
        120.0,
        gt=0,
        description="HTTP timeout per request (per read while an answer streams; an unstreamed answer "
        "above 2,048 max_tokens gets it in proportion).",
    )
    http_client: Literal["aiohttp", "httpx"] = Field(
        "aiohttp",
        description="HTTP client of the realtime requests (every one goes out from the client's event "
        "loop): aiohttp (the SDK's aiohttp extra: ~0.4 ms less CPU per request than httpx, measured in "
        "bench/realtime.py) or httpx (the SDK's default).",
    )
    stream_min_max_tokens: int = Field(
        8192,
        ge=1,
        description="Calls with max_tokens at least this stream the answer; below it an answer comes whole, "
        "waited for timeout_seconds x max(1, max_tokens / 2,048). A per-file answer (~300 tokens, "
        "max_tokens 4,096) streamed cost ~1 ms more CPU per call.",
    )
    timeout_resends: int = Field(
        1,
        ge=0,
        description="Times a request that timed out after it was sent (possibly billed) is sent again.",
    )
    max_tokens: int = Field(4096, ge=1, description="max_tokens for a per-file call.")
    cache_min_tokens: dict[str, int] = Field(
        default_factory=lambda: dict(CACHE_MIN_TOKENS),
        description="Minimum cacheable prompt prefix per model (tokens); below it nothing is cached. "
        "Models outside the table: 4096.",
    )
    retry_after_max_seconds: float = Field(
        60.0,
        ge=0,
        allow_inf_nan=False,
        description="Cap on a server-asked wait (retry-after); a longer ask is logged and waited this long.",
    )
    circuit_breaker_calls: int = Field(
        20,
        ge=1,
        description="Calls in a row failing the same systemic way (auth, model, endpoint, every answer "
        "invalid alike) that stop the run (exit 3, phase stopped).",
    )
    overloads_before_fallback: int = Field(
        3, ge=1, description="Consecutive overload failures of the primary model before the fallback."
    )


class GateSettings(BaseModel):
    """The code gate after each model answer."""

    repair_attempts: int = Field(2, ge=0, description="Re-asks with the validation errors per document.")
    repair_token_budget: int = Field(20_000, ge=0, description="Output+input tokens repairs may spend.")
    truncation_max_tokens: int = Field(
        8192, ge=1, description="max_tokens for the one retry after truncation."
    )
    unverified_evidence: Literal["accept", "review"] = Field(
        "accept",
        description="Evidence on a page without a text layer (scans, images) cannot be checked "
        "verbatim: accept marks it unverified (never verified), review sends the document to review.",
    )


class BatchSettings(BaseModel):
    """Message Batches mode."""

    max_requests: int = Field(100_000, ge=1, le=100_000, description="Requests per batch at most.")
    max_bytes: int = Field(
        248 * 1024 * 1024,
        ge=1024,
        le=256 * 1024 * 1024,
        description="Bytes per batch body at most: the API takes 256 MB; the default keeps an 8 MB margin.",
    )
    poll_seconds: float = Field(
        1.0,
        ge=0,
        description="First poll interval after the look right after create; doubles up to poll_max_seconds "
        "(a batch that ends in a second is noticed within a second). An interval runs from the start "
        "of a look: the time a look takes is not waited again.",
    )
    poll_max_seconds: float = Field(
        300.0, ge=0, description="Longest poll interval: an ended batch is noticed within this."
    )
    max_wait_seconds: float = Field(26 * 3600.0, ge=0, description="Give up following a batch after this.")
    resubmit_attempts: int = Field(3, ge=1, description="Batch rounds a request may take (errors, expiry).")
    auto_threshold: int = Field(200, ge=1, description="--mode auto uses batches from this many documents.")
    repairs_realtime: bool = Field(
        False, description="Send gate repairs realtime instead of as a second batch round."
    )


class ContextSettings(BaseModel):
    """Long tasks: token budgets and compaction."""

    budget_tokens: int = Field(150_000, ge=1000, description="Token budget of one long task's request.")
    document_budget_tokens: int = Field(
        60_000, ge=500, description="A document above this is split and extracted chunk by chunk."
    )


class IntegrationSettings(BaseModel):
    """The cross-document integration pass."""

    mode: Literal["incremental", "full", "skip"] = Field(
        "incremental",
        description="incremental: merge only new or changed per-file results into the stored "
        "integration state of this source, recipe and model; full: integrate everything again; skip: none.",
    )
    slice_records: int = Field(
        40, ge=1, description="Per-file results per model call of the integration pass at most."
    )
    slice_chars: int = Field(
        24_000, ge=1000, description="Characters of per-file results per integration call at most."
    )
    max_tokens: int = Field(
        8192, ge=256, description="max_tokens of one integration call (a cut answer is split, not re-asked)."
    )
    digest_chars: int = Field(
        3000,
        ge=200,
        description="Size of each code-built digest (existing state; this run's delta) in a call.",
    )
    read_records: int = Field(
        100,
        ge=1,
        description="Results the model reads in full per run at most, for recipes whose entities, "
        "duplicates, conflicts and gaps code builds; above it, a code-built digest of the delta plus "
        "this many results by priority (conflicts and duplicates first).",
    )
    workers: int = Field(8, ge=1, le=64, description="Integration calls in flight at once.")


class CostSettings(BaseModel):
    """Spending."""

    max_cost_usd: float | None = Field(
        None, ge=0, allow_inf_nan=False, description="Hard cap per run; None means no cap."
    )
    max_doc_cost_usd: float | None = Field(
        2.0,
        ge=0,
        allow_inf_nan=False,
        description="Per-document guard: a document whose worst case (from its request's tokens) costs "
        "more goes to review before it is sent; None: no guard.",
    )


class InventorySettings(BaseModel):
    """What documents are taken in."""

    max_document_bytes: int = Field(20 * 1024 * 1024, ge=1, description="Larger documents are skipped.")
    include: list[str] = Field(default_factory=lambda: ["**/*"], description="Glob patterns to take.")
    exclude: list[str] = Field(default_factory=list, description="Glob patterns to skip.")
    follow_symlinks: bool = Field(
        False,
        description="Read symlinks that resolve outside the source and walk symlinked folders "
        "(otherwise: skipped as outside_source / symlinked_folder).",
    )
    trust_stamps: bool = Field(
        True,
        description="A run reuses what the last inventory of the same source recorded for a file whose "
        "size, mtime, ctime and inode are unchanged, without reading it (tasks.source.known_files); false: every "
        "file is read and hashed on every run.",
    )


class SharedLimitSettings(BaseModel):
    """The organisation's rate limits, shared by every docmill process that uses this store
    (tasks.api.shared_limit): each paces at its share, no split by hand."""

    enabled: bool = Field(
        True,
        description="Share the limits through the store (limits/<scope>.json) with every other docmill "
        "process using it; off: this process assumes the whole limit is its own.",
    )
    scope: str = Field(
        "default",
        min_length=1,
        description="Name of the shared pool: one per organisation (API key) and endpoint. Processes with "
        "different API keys that use one store must use different scopes.",
    )
    lease_seconds: float = Field(
        15.0,
        gt=0,
        description="A member's lease: renewed every third of it; a process that dies gives its share back "
        "within this time.",
    )
    store: str | None = Field(
        None,
        description="Where the pool lives (a folder or s3://bucket/prefix) when runs of one organisation use "
        "different stores; None: the run's store.",
    )


class WorkerSettings(BaseModel):
    """`docmill run --workers N`: one run spread over Prefect workers (flows.workers.spread, flows.workers.shard_worker)."""

    deployment: str = Field(
        "shard-worker/shard-worker",
        description="The Prefect deployment (flow/deployment) whose runs work on a spread run's shards "
        "(deploy/prefect.yaml registers it).",
    )
    shards_per_worker: int = Field(
        4, ge=1, le=64, description="Shards per worker: more balance the tail, fewer cost less bookkeeping."
    )
    claim_seconds: float = Field(
        60.0,
        gt=0,
        description="A shard claim's lease, renewed every quarter of it: a shard whose worker stops "
        "renewing is claimed by another after this time (at once when its process is known dead).",
    )
    poll_seconds: float = Field(
        2.0, gt=0, description="How often an idle worker looks for a shard and the driver for progress."
    )


class DeadlineSettings(BaseModel):
    """`--finish-by TIME`: batch what can finish in time, realtime the rest near the deadline
    (tasks.deadline)."""

    margin_seconds: float = Field(
        60.0,
        ge=0,
        description="Kept free before the deadline (plus margin_fraction of the time given): the integration "
        "pass and the report come after the per-file pass.",
    )
    margin_fraction: float = Field(
        0.05, ge=0, lt=1, description="Share of the time between start and deadline kept free as well."
    )
    cancel_seconds: float = Field(
        60.0,
        ge=0,
        description="Time a batch cancel is assumed to take to settle (until one was measured).",
    )
    latency_seconds: float = Field(
        30.0,
        gt=0,
        description="Seconds a realtime answer is assumed to take (until answers were measured).",
    )
    poll_seconds: float = Field(
        30.0, gt=0, description="How often batches are checked while a deadline is set (at most)."
    )
    batches: int = Field(
        4,
        ge=1,
        le=1000,
        description="The batch pass is cut into at least this many batches, so their ends show progress "
        "(the API counts a batch's requests as processing until the whole batch ends).",
    )


class FormatSettings(BaseModel):
    """How documents of each format are read and sent (docs/formats.md)."""

    pdf_text_min_chars: int = Field(
        40,
        ge=0,
        description="A PDF page whose text layer has fewer visible characters is textless "
        "(scanned); a PDF with a textless page is sent to the API as a PDF (document block).",
    )
    pdf_send_as: Literal["auto", "text", "pdf"] = Field(
        "auto",
        description="auto: PDFs with a textless page go as PDF, others as their text; text or "
        "pdf: always so (a recipe's own pdf_mode wins; a PDF without any text always goes as PDF).",
    )
    max_pdf_pages: int = Field(1000, ge=1, description="Longer PDFs are skipped (over_limit).")
    max_attachments: int = Field(
        100,
        ge=0,
        description="Attachments of one e-mail taken as documents; the rest are skipped (over_limit).",
    )
    max_nesting: int = Field(
        5, ge=0, description="Messages attached inside messages followed this deep; deeper: over_limit."
    )
    max_unzipped_bytes: int = Field(
        200 * 1024 * 1024, ge=1, description="An Office file unpacking to more is skipped (over_limit)."
    )
    max_zip_ratio: int = Field(
        100, ge=1, description="An Office file compressed more than this (unpacked:packed) is a zip bomb."
    )
    allow_macros: bool = Field(
        False, description="Read the text of macro-enabled Office files (macros never run); else skipped."
    )
    read_memory_bytes: int = Field(
        512 * 1024 * 1024,
        ge=0,
        description="Address space (RLIMIT_AS) of each reader process: a document whose reading needs more "
        "is skipped (over_limit, memory). A worker's libraries take about 100 MiB of it. 0: no cap.",
    )
    read_seconds: float = Field(
        60.0,
        ge=0,
        description="CPU time one document's reading may take (and 4x that on the wall clock, for a busy "
        "machine): past it the reader process is killed and the document skipped (over_limit, time). "
        "0: no deadline.",
    )
    read_processes: int = Field(
        2,
        ge=1,
        description="Reader processes at most (started on first use, reused; one document each at a time).",
    )
    read_bounded: bool = Field(
        True,
        description="Read documents in bounded reader processes (tasks.source.readers.bounded). False reads them in "
        "docmill's own process, unbounded: for debugging a reader only.",
    )


class StoreSettings(BaseModel):
    """How the object store behaves."""

    retry_attempts: int = Field(
        5, ge=1, description="Attempts per store call on transient faults (5xx, SlowDown)."
    )
    retry_wait_seconds: float = Field(
        0.2, ge=0, description="First backoff wait; grows exponentially with jitter."
    )
    fsync: bool = Field(True, description="Local backend: fsync each object before it is renamed into place.")


class Settings(BaseSettings):
    """Every docmill setting. Env prefix DOCMILL_, nested with `__`."""

    model_config = SettingsConfigDict(
        env_prefix="DOCMILL_", env_nested_delimiter="__", extra="ignore", validate_default=True
    )

    store: str = Field("./docmill-store", description="State root: a folder or s3://bucket/prefix.")
    s3_endpoint_url: str | None = Field(None, description="Custom S3 endpoint (SeaweedFS, MinIO).")
    anthropic_api_key: SecretStr | None = Field(
        None,
        validation_alias="ANTHROPIC_API_KEY",
        description="Real API key; read from ANTHROPIC_API_KEY. Never logged or written.",
    )
    log_format: Literal["json", "text"] = Field("text", description="Log line format.")
    raise_errors: bool = Field(False, description="Show tracebacks instead of one-line errors.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        "WARNING", description="Level of docmill's own log lines (INFO: one per API call)."
    )

    @property
    def offline(self) -> bool:
        """No API key: calls go to docmill's emulator (its built-in one, or api.base_url's)."""
        return not (self.anthropic_api_key and self.anthropic_api_key.get_secret_value())

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    shutdown_grace_seconds: float = Field(
        30.0,
        ge=0,
        allow_inf_nan=False,
        description="After SIGINT/SIGTERM: how long requests in flight may take to answer (nothing new is sent).",
    )
    chunk_size: int = Field(50, ge=1, le=1000, description="Documents per Prefect task.")
    chunk_workers: int = Field(
        64,
        ge=1,
        le=1024,
        description="Most chunks (Prefect tasks) running at once in one process. A realtime run starts "
        "the next chunk when the pacer's window wants more documents, so this only caps the window at "
        "chunk_workers x chunk_size documents.",
    )
    allow_overlapping_runs: bool = Field(
        False,
        description="Start a run even while another live run of the same recipe and model covers "
        "the same source (documents both are sending may then be paid for twice).",
    )
    report_link_seconds: int = Field(
        7 * 24 * 3600,
        ge=0,
        le=7 * 24 * 3600,
        description="Lifetime of the presigned S3 link to report.html in a flow run's artifacts (at most "
        "7 days); anyone with the link can read the report until then. 0: the s3:// path, no presigning.",
    )
    report_unchanged_rows: int = Field(
        200,
        ge=0,
        description="The report's per-document tables leave out documents unchanged since an earlier run "
        "(succeeded, reused from the ledger) when there are more than this many: a nightly over a large "
        "archive shows what changed and the totals; every document stays in the exports.",
    )
    flow_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="Retries of a failed Prefect flow run (each continues the same docmill run).",
    )
    flow_retry_delay_seconds: int = Field(
        120,
        ge=0,
        description="Wait before each retry of a failed Prefect flow run, in whole seconds (Prefect's "
        "flow-run policy holds an int).",
    )
    recipe: str = Field(
        "invoices",
        description="The recipe when none is given (`docmill run` without --recipe, a deployment's "
        "recipe parameter left null): a built-in name or path/to/module.py:NAME.",
    )
    allow_empty: bool = Field(
        False, description="A source with no files is a run of 0 documents instead of an error (exit 2)."
    )
    chunk_limit_name: str | None = Field(
        None, description="Prefect global concurrency limit held per chunk (strict); None: no limit."
    )
    runtime_dir: str | None = Field(
        None,
        description="Folder for the pid files of helper processes docmill starts (the Prefect server), "
        "so a later start stops any a killed run left; None: $XDG_RUNTIME_DIR/docmill or <tmp>/docmill-<uid>.",
    )
    today: date | None = Field(
        None,
        description="The day model lifecycles (and dated prices) are read at, YYYY-MM-DD; None: today in "
        "UTC. Set it to check a configuration against a coming retirement, or in tests.",
    )
    prefect_prespawn: bool = Field(
        True,
        description="Start Prefect's temporary API server first thing when a run goes through Prefect with "
        "no PREFECT_API_URL (it boots while docmill imports and checks its inputs, ~6 s sooner); false: "
        "when the flow run first asks for it.",
    )
    prefect_min_documents: int = Field(
        20_000,
        ge=0,
        description="`docmill run` that would start Prefect's temporary server (no PREFECT_API_URL) first "
        "counts the documents that need an API call (a stat per unchanged file, the listing of a source "
        "never inventoried: flows.run.small); with fewer than this it runs without Prefect and says so in "
        "one line. The server costs ~15 s of CPU (bench/curator_batch.py, with and without --no-prefect), "
        "what a batch run spends on ~5,000 documents: past 20,000 it is at most a quarter of the run's "
        "own. 1: only a run with nothing to send; 0: always through Prefect.",
    )
    prefect_early_batches: bool = Field(
        True,
        description="`docmill run --mode batch` (or auto) through Prefect, with an API key or base URL: "
        "inventory the source and create the batches before the flow run starts (Prefect's temporary "
        "server boots meanwhile), then the flow run continues that run; false: everything inside the "
        "flow run.",
    )
    prefect_start_timeout_seconds: float = Field(
        120.0,
        gt=0,
        allow_inf_nan=False,
        description="How long the temporary Prefect API server may take to start (it is tried twice) when "
        "PREFECT_API_URL is not set; a busy machine needs more than Prefect's own 30 s.",
    )
    prices: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Extra or overriding model prices, USD/MTok, over the dated table and the prices file: "
        '{"model": {"input": 3, "output": 15}} (optional: cache_write_5m, cache_write_1h, cache_read, batch, '
        "bands); shown by `estimate` and `doctor`.",
    )
    prices_file: str | None = Field(
        None,
        description="A JSON file of price overrides in the shape of DOCMILL_PRICES (over the dated table "
        "docmill/data/prices.json; DOCMILL_PRICES wins over it).",
    )
    api: ApiSettings = Field(default_factory=ApiSettings)
    gate: GateSettings = Field(default_factory=GateSettings)
    batch: BatchSettings = Field(default_factory=BatchSettings)
    context: ContextSettings = Field(default_factory=ContextSettings)
    cost: CostSettings = Field(default_factory=CostSettings)
    integration: IntegrationSettings = Field(default_factory=IntegrationSettings)
    inventory: InventorySettings = Field(default_factory=InventorySettings)
    formats: FormatSettings = Field(default_factory=FormatSettings)
    store_io: StoreSettings = Field(default_factory=StoreSettings)
    shared_limit: SharedLimitSettings = Field(default_factory=SharedLimitSettings)
    workers: WorkerSettings = Field(default_factory=WorkerSettings)
    deadline: DeadlineSettings = Field(default_factory=DeadlineSettings)

    def on_day(self) -> date:
        """`today`, else the real date in UTC: the one place the pipeline reads the calendar."""
        return self.today if self.today is not None else datetime.now(UTC).date()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """Settings from the environment, read once per process (tests call `get_settings.cache_clear()`)."""
    return Settings()
