"""Everything the emulator remembers: config, virtual clock, faults, rate limits, cache,
batches and accounting. One `EmulatorState` per server; `reset()` empties it between tests.

Handlers run on one asyncio loop, so state is mutated from one thread only.
"""

from __future__ import annotations

import itertools
import json
import os
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import UTC, date, datetime
from typing import Any

from docmill.models import CACHE_MIN_TOKENS, CACHE_MIN_TOKENS_UNKNOWN, THINKING_TOKENS_BY_EFFORT
from docmill.prices import Price, price_on
from emulator import catalog, model_rules
from emulator.accounting import Accounting
from emulator.batch_store import BatchStore
from emulator.caching import PromptCache
from emulator.clock import VirtualClock, rfc3339
from emulator.faults import FaultPlan, parse_rules
from emulator.validation import Rules, validate_message_body

ENV_PREFIX = "DOCMILL_EMULATOR_"
# Shown in anthropic-ratelimit-* headers when no limit of that kind is configured (a high tier).
GENEROUS_LIMITS = {"requests": 4_000, "input-tokens": 2_000_000, "output-tokens": 400_000}


@dataclass
class EmulatorConfig:
    """Knobs. Every field can be set from env `DOCMILL_EMULATOR_<FIELD>` (JSON for dicts/lists).

    Where the real API's behaviour is uncertain the default is the harsher case (reference §00):
    aliases answer with dated ids, retired models are refused, cache minimums are the larger
    reported values and the output schema is not part of the cached prefix.
    """

    seed: int = 0
    require_auth: bool = True
    cache_min_tokens: int = CACHE_MIN_TOKENS_UNKNOWN  # a model outside the table: the largest known minimum
    cache_min_tokens_by_model: dict[str, int] = field(default_factory=lambda: dict(CACHE_MIN_TOKENS))
    cache_counts_output_schema: bool = False  # True: output_config.format's schema is in the cached prefix
    extra_models: dict[str, dict[str, float]] = field(default_factory=dict)  # served beyond docmill's
    # model table, billed at these prices ({"input", "output"} USD/MTok): a model docmill does not know
    unpriced_price: dict[str, float] | None = None  # what a served model with no published price is
    # billed at ({"input", "output", ...}); None: the dearest published rates of the table that day
    thinking_tokens_by_effort: dict[str, int] = field(default_factory=lambda: dict(THINKING_TOKENS_BY_EFFORT))
    # thinking tokens of one adaptive answer per effort (5.x think by default; billed as output)
    model_thinking: bool = True  # False: no model thinks (answers as before adaptive thinking)
    resolve_aliases: bool = True  # answer a pre-4.6 alias with its dated id (SDK types/model.py)
    end_of_life: dict[str, str] = field(default_factory=catalog.table_end_of_life)  # model -> ISO date
    today: str | None = None  # YYYY-MM-DD model lifecycles are read at; None: the virtual clock's date
    grammar_max_complexity: int | None = None  # None: no "compiled grammar is too large" rule
    output_tokens_per_second: float = 0.0  # > 0: answer time grows with output tokens (0: instant)
    public_base_url: str | None = None  # results_url base; None: the listening socket's address
    ratelimit_header_defaults: dict[str, int] = field(default_factory=lambda: dict(GENEROUS_LIMITS))
    # limits shown in anthropic-ratelimit-* headers for kinds with no configured limit
    reject_chunked_bodies: bool = False  # answer a chunked upload 411, as some proxies do
    record_requests: bool = False  # keep every /v1 request body in accounting.requests (shape tests)
    cancel_ended_status: int = 400  # cancel of an ended batch: 400, 409 or 200 (real answer unknown)
    latency_ms: float = 0.0
    requests_per_minute: int | None = None
    input_tokens_per_minute: int | None = None
    output_tokens_per_minute: int | None = None
    input_limit_counts_cache_reads: bool = False  # current models: cache reads are not counted
    system_message_models: list[str] = field(default_factory=list)  # take `role: system` mid-conversation
    allow_max_tokens_zero: bool = False  # max_tokens 0 (cache pre-warming, SDK docstring): refused by default
    batch_seconds_per_request: float = 0.0
    batch_base_seconds: float = 60.0  # virtual seconds before a batch's first item ends: a batch is
    # `in_progress` when created and for a while after (docmill polls it); tests that want batches quick
    # speed the clock up (`clock_speed`) or advance it, never set this to 0
    batch_cancel_seconds: float = 0.0
    batch_expiry_seconds: float = 24 * 3600.0
    batch_archive_seconds: float = 29 * 24 * 3600.0
    max_batch_requests: int = 100_000
    max_batch_bytes: int = 256 * 1024 * 1024
    max_message_bytes: int = 32 * 1024 * 1024
    frozen_clock: bool = False
    clock_speed: float = 1.0
    compaction_secret: str = "docmill-emulator-compaction"

    def min_cache_tokens(self, model: str) -> int:
        by_model = self.cache_min_tokens_by_model
        return by_model.get(model, by_model.get(catalog.price_id(model), self.cache_min_tokens))

    def update(self, values: Mapping[str, Any]) -> None:
        unknown = set(values) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown emulator config fields: {sorted(unknown)}")
        for name, value in values.items():
            setattr(self, name, value)

    @classmethod
    def from_env(cls) -> EmulatorConfig:
        config = cls()
        for f in fields(cls):
            raw = os.environ.get(ENV_PREFIX + f.name.upper())
            if raw is not None:
                setattr(config, f.name, _parse_env(str(f.type), raw))
        return config


def _parse_env(kind: str, raw: str) -> Any:
    """An env string as the field's type (`kind` is the annotation text, e.g. "int | None")."""
    if kind.endswith("| None") and not raw.strip():
        return None
    base = kind.removesuffix(" | None").split("[")[0]
    if base == "bool":
        return raw.strip().lower() in ("1", "true", "yes", "on")
    if base in ("dict", "list"):
        return json.loads(raw)
    return {"int": int, "float": float}.get(base, str)(raw)


@dataclass
class Bucket:
    """A token bucket refilling `limit` per 60 s of virtual time."""

    limit: int
    level: float
    updated: float

    def refill(self, now: float) -> None:
        self.level = min(float(self.limit), self.level + (now - self.updated) * self.limit / 60.0)
        self.updated = now

    def wait_for(self, amount: float) -> float:
        """Seconds until `amount` is available (0 if it is now)."""
        need = min(amount, float(self.limit)) - self.level
        return 0.0 if need <= 0 else need * 60.0 / self.limit


class RateLimiter:
    """requests/min, input tokens/min and output tokens/min buckets (None = unlimited)."""

    def __init__(self, config: EmulatorConfig, clock: VirtualClock) -> None:
        self.clock = clock
        now = clock.now()
        limits = {
            "requests": config.requests_per_minute,
            "input-tokens": config.input_tokens_per_minute,
            "output-tokens": config.output_tokens_per_minute,
        }
        self.buckets = {k: Bucket(v, float(v), now) for k, v in limits.items() if v}

    @property
    def active(self) -> bool:
        return bool(self.buckets)

    def check(self, input_tokens: int, max_tokens: int = 1) -> tuple[float, str | None]:
        """(seconds to wait, which limit) before a request may run: `input_tokens` as the input limit
        counts them, `max_tokens` of output reserved (the API estimates output by max_tokens at the
        start and corrects it at the end: `settle_output`). Debits on success."""
        now = self.clock.now()
        wants = {"requests": 1.0, "input-tokens": float(input_tokens), "output-tokens": float(max_tokens)}
        worst, which = 0.0, None
        for kind, bucket in self.buckets.items():
            bucket.refill(now)
            wait = bucket.wait_for(wants[kind])
            if wait > worst:
                worst, which = wait, kind
        if which is None:
            for kind, bucket in self.buckets.items():
                bucket.level -= wants[kind]
        return worst, which

    def settle_output(self, reserved: int, used: int) -> None:
        """The answer used `used` of the `reserved` output tokens: the rest goes back."""
        if "output-tokens" in self.buckets:
            bucket = self.buckets["output-tokens"]
            bucket.refill(self.clock.now())
            bucket.level = min(float(bucket.limit), bucket.level + reserved - used)

    def headers(self) -> dict[str, str]:
        out: dict[str, str] = {}
        now = self.clock.now()
        for kind, bucket in self.buckets.items():
            bucket.refill(now)
            remaining = max(0, int(bucket.level))
            if kind != "requests":
                remaining = int(round(remaining, -3)) if remaining >= 1000 else remaining
            reset = now + (bucket.limit - max(bucket.level, 0)) * 60.0 / bucket.limit
            out.update(limit_headers(kind, bucket.limit, remaining, rfc3339(reset)))
        return out


def limit_headers(kind: str, limit: object, remaining: object, reset: str) -> dict[str, str]:
    """The `anthropic-ratelimit-<kind>-{limit,remaining,reset}` headers of one limit."""
    prefix = f"anthropic-ratelimit-{kind}"
    return {f"{prefix}-limit": str(limit), f"{prefix}-remaining": str(remaining), f"{prefix}-reset": reset}


def with_tokens_headers(headers: dict[str, str]) -> dict[str, str]:
    """Add `anthropic-ratelimit-tokens-*`: the token limit (input or output) most restrictive now,
    i.e. with the fewest tokens remaining, as the API's rate-limit headers describe them."""
    kinds = [k for k in ("input-tokens", "output-tokens") if f"anthropic-ratelimit-{k}-remaining" in headers]
    if not kinds:
        return headers
    tightest = min(kinds, key=lambda k: int(headers[f"anthropic-ratelimit-{k}-remaining"]))
    for part in ("limit", "remaining", "reset"):
        headers[f"anthropic-ratelimit-tokens-{part}"] = headers[f"anthropic-ratelimit-{tightest}-{part}"]
    return headers


def exhausted_headers(now: float, retry_after: float) -> dict[str, str]:
    """Rate-limit headers for an injected 429 when no real bucket is configured."""
    reset = rfc3339(now + retry_after)
    out: dict[str, str] = {}
    for kind, limit in (("requests", "50"), ("input-tokens", "30000"), ("output-tokens", "8000")):
        out.update(limit_headers(kind, limit, "0" if kind == "requests" else limit, reset))
    return with_tokens_headers(out)


def ratelimit_headers(limiter: RateLimiter, defaults: Mapping[str, int]) -> dict[str, str]:
    """`anthropic-ratelimit-*` headers for every answer: the configured buckets, and for a kind
    with no configured limit the generous default, full (the API sends them on every response)."""
    out: dict[str, str] = {}
    now = rfc3339(limiter.clock.now())
    for kind, limit in defaults.items():
        out.update(limit_headers(kind, limit, limit, now))
    out.update(limiter.headers())
    return with_tokens_headers(out)


class EmulatorState:
    def __init__(self, config: EmulatorConfig | None = None) -> None:
        self.config = config or EmulatorConfig.from_env()
        self._known: set[str] = catalog.table_models()
        self.accounting = Accounting()
        self.reset()
        for rule in parse_rules(os.environ.get(ENV_PREFIX + "FAULTS") or "[]"):
            self.faults.add(rule)
        self._ids = itertools.count(1)
        self.in_flight = 0  # API requests being answered now (a test waits for 0 before a reset)
        self._salt = secrets.token_hex(3)

    @property
    def models(self) -> set[str]:
        """Every model id the emulator knows: docmill's table (with dated ids) and `extra_models`;
        the retired ones among them answer 404 too (`retired`)."""
        return self._known | set(self.config.extra_models)

    def served(self) -> set[str]:
        """The models answered on the emulator's day (`/v1/models`): known and not retired."""
        return {m for m in self.models if self.retired(m) is None}

    def validate(self, body: Any, **kw: Any) -> None:
        """`validation.validate_message_body` with this emulator's models, their output limits (docmill's
        model table), retirement, the grammar rule and the knobs, then the per-model rules (thinking,
        effort, sampling: `emulator.model_rules`)."""
        rules = Rules(
            models=self.models,
            retired=self.retired,
            grammar_limit=self.config.grammar_max_complexity,
            system_message_models=frozenset(self.config.system_message_models),
            allow_max_tokens_zero=self.config.allow_max_tokens_zero,
        )
        validate_message_body(body, rules=rules, **kw)
        model_rules.check_model_params(body, legacy=kw.get("legacy", False))

    def day(self) -> date:
        """The emulator's day: the `today` knob, else the virtual clock's date (UTC)."""
        if self.config.today:
            return date.fromisoformat(self.config.today)
        return datetime.fromtimestamp(self.clock.now(), tz=UTC).date()

    def retired(self, model: str) -> str | None:
        """The end-of-life date of `model` when the emulator's day is past it, else None."""
        return catalog.retired_on(model, self.config.end_of_life, self.day())

    def price_for(self, model: str) -> Price:
        """What an answer of `model` is billed at: an `extra_models` entry, docmill's dated price on the
        emulator's day (docmill.prices, the pipeline's own cost path), or for a model with no published
        price the `unpriced_price` knob, else the dearest published rates that day."""
        extra = self.config.extra_models.get(model)
        if extra is not None:
            return Price.from_mapping(model, extra, source="emulator extra_models", confirmed="override")
        price = price_on(model, self.day())
        if price is not None:
            return price
        if self.config.unpriced_price is not None:
            return Price.from_mapping(
                model, self.config.unpriced_price, source="emulator knob", confirmed="override"
            )
        return catalog.dearest_price(self.day())

    def answer_model(self, model: str) -> str:
        """The `model` an answer carries: a pre-4.6 alias resolves to its dated id (knob)."""
        return catalog.dated_aliases().get(model, model) if self.config.resolve_aliases else model

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_emu{next(self._ids):010d}{self._salt}"

    def configure(self, values: Mapping[str, Any]) -> None:
        """Change knobs at runtime (rate limits rebuild their buckets)."""
        self.config.update(values)
        self.clock.set_rate(frozen=self.config.frozen_clock, speed=self.config.clock_speed)
        self.limiter = RateLimiter(self.config, self.clock)

    def drain(self, timeout: float = 10.0) -> bool:
        """Wait until no API request is being answered (one a client gave up on still finishes
        and is billed, as on the real API); True when drained."""
        deadline = time.monotonic() + timeout
        while self.in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.in_flight

    def reset(self, config: EmulatorConfig | None = None) -> None:
        """Forget everything (accounting, cache, batches, faults, clock offset); keep the server running."""
        if config is not None:
            self.config = config
        self.clock = VirtualClock(frozen=self.config.frozen_clock, speed=self.config.clock_speed)
        self.accounting.reset()
        self.cache = PromptCache()
        self.faults = FaultPlan(self.config.seed)
        self.limiter = RateLimiter(self.config, self.clock)
        self.batches = BatchStore()
