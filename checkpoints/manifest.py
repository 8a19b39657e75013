"""The run manifest: `runs/<run_id>/manifest.json`, the truth about a run.

Written once by `create` (put-if-absent) and afterwards only by compare-and-swap (`update`):
read with ETag, apply a function, put-if-match, and on a lost race read again and re-apply.
The config snapshot goes through `redact` so no secret lands in the store.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, Field

from checkpoints import cas
from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore, dumps_json, loads_json
from docmill.errors import AlreadyExists, NotFound, PreconditionFailed

# A config key is secret when one of its words (split on _ - . and camelCase) contains one of
# these, or is/ends with key or token. Word-based so counts such as `max_tokens` survive.
SECRET_MARKERS = ("secret", "password", "passwd", "credential")
SECRET_SUFFIXES = ("key", "token")


class Phase(StrEnum):
    CREATED = "created"
    INVENTORY = "inventory"
    PER_FILE = "per_file"
    INTEGRATION = "integration"
    REPORT = "report"
    DONE = "done"
    FAILED = "failed"
    BUDGET_EXHAUSTED = "budget_exhausted"
    STOPPED = "stopped"  # a systemic failure or a signal stopped it; `docmill resume` continues it
    CANCELED = "canceled"


class RunManifest(BaseModel):
    run_id: str
    created_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    updated_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    source: str = ""
    recipe: str = ""
    recipe_version: str = ""
    mode: Literal["realtime", "batch"] = "realtime"
    phase: Phase = Phase.CREATED
    config: dict[str, Any] = Field(default_factory=dict)
    counts: dict[str, int] = Field(default_factory=dict)
    batches: list[dict[str, Any]] = Field(default_factory=list)
    cost_usd: float = 0.0
    budget_usd: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)


def is_secret_name(name: str) -> bool:
    """True for names like api_key, anthropic_api_key, aws_secret_access_key, auth_token, password,
    s3_credentials, apiKey, SECRETKEY; False for max_tokens, keyword, budget_tokens."""
    words = re.split(r"[^a-z0-9]+", re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower())
    return any(
        any(m in w for m in SECRET_MARKERS) or any(w.endswith(s) for s in SECRET_SUFFIXES) for w in words if w
    )


def redact(config: Any) -> Any:
    """A copy of `config` without any value whose key names a secret (`is_secret_name`),
    recursively through dicts and lists."""
    if isinstance(config, dict):
        return {k: redact(v) for k, v in config.items() if not is_secret_name(str(k))}
    if isinstance(config, list):
        return [redact(v) for v in config]
    return config


def manifest_key(run_id: str) -> str:
    return f"runs/{safe_segment(run_id)}/manifest.json"


class ManifestStore:
    def __init__(self, store: ObjectStore, *, clock: Callable[[], float] = time.time) -> None:
        self.store = store
        self.clock = clock

    def _encode(self, m: RunManifest) -> bytes:
        return dumps_json(m.model_dump(mode="json"))

    def create(self, m: RunManifest) -> RunManifest:
        """Write a new run's manifest; `AlreadyExists` if that run id is taken."""
        m = m.model_copy(update={"config": redact(m.config)})
        if not self.store.put_if_absent(manifest_key(m.run_id), self._encode(m)):
            raise AlreadyExists(
                f"run {m.run_id!r} already exists",
                hint=f"resume it (docmill resume {m.run_id}) or pick another run id",
                run_id=m.run_id,
            )
        return m

    def load(self, run_id: str) -> RunManifest:
        try:
            data = self.store.get(manifest_key(run_id))
        except NotFound as e:
            raise self._missing(run_id) from e
        return RunManifest.model_validate(loads_json(data))

    def _missing(self, run_id: str) -> NotFound:
        return NotFound(
            f"no run {run_id!r} in {self.store.uri}",
            hint="list runs with `docmill runs`; check DOCMILL_STORE",
            run_id=run_id,
        )

    def update(self, run_id: str, fn: Callable[[RunManifest], RunManifest | None]) -> RunManifest:
        """Apply `fn` by compare-and-swap (checkpoints.cas.swap). `fn` may mutate its argument and
        return None, or return a new manifest; it may run more than once, so it must only depend on
        the manifest it is given."""

        def decide(data: bytes | None) -> cas.Write[RunManifest]:
            if data is None:
                raise self._missing(run_id)
            current = RunManifest.model_validate(loads_json(data))
            result = fn(current)
            new = current if result is None else result
            stamp = datetime.fromtimestamp(self.clock(), UTC)
            new = new.model_copy(update={"updated_at": stamp, "config": redact(new.config)})
            return cas.Write(self._encode(new), new)

        def exhausted() -> PreconditionFailed:
            return PreconditionFailed(
                f"manifest of run {run_id!r} kept changing: {cas.MAX_ATTEMPTS} compare-and-swap attempts lost",
                hint="another process is updating this run; check its lease (only one driver per run)",
                run_id=run_id,
                attempts=cas.MAX_ATTEMPTS,
            )

        new = cas.swap(self.store, manifest_key(run_id), decide, exhausted=exhausted)
        assert new is not None  # `decide` never gives up
        return new

    def set_phase(self, run_id: str, phase: Phase, **counts: Any) -> RunManifest:
        """The run's phase (and counts to keep beside it), by compare-and-swap."""

        def fn(m: RunManifest) -> RunManifest:
            m.phase = phase
            m.counts.update({k: int(v) for k, v in counts.items()})
            return m

        return self.update(run_id, fn)

    def list_runs(self) -> Iterator[str]:
        """Run ids that have a manifest, sorted."""
        for child in self.store.list_children("runs/"):
            if child.endswith("/"):
                run_id = child[:-1]
                if self.store.exists(manifest_key(run_id)):
                    yield run_id
