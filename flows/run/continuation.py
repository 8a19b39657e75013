"""Which run a start drives, and with which settings (invariant 11: every way back is the same way back).

`choose_run` picks, in order: the run id given; the run bound to this Prefect flow run (a retry of a
flow run continues its docmill run); a stopped run of the same recipe, model and source (the same
`docmill run` command again continues it, unless `--new-run`); else a new run id, unless a stopped
run over the same documents still has batch requests not collected (a new run would send their
custom_ids again: `RunOverlap`, exit 5; continue that run instead).

`pinned_settings` makes a continued run the same run: every setting that shapes idempotency keys,
requests or cost comes from its manifest; only the safe ones (`SAFE`: budget cap, concurrency) may
be given anew, and what was overridden or kept is said in one line each.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from checkpoints.active import ActiveRuns, sources_overlap
from checkpoints.batches import BatchRecords
from checkpoints.keys import safe_segment
from checkpoints.lease import live_lease
from checkpoints.manifest import ManifestStore, Phase, RunManifest
from docmill.errors import ConfigError, NotFound, RunOverlap
from docmill.settings import Settings
from tasks.request import answered_by

if TYPE_CHECKING:
    from checkpoints.store import ObjectStore

# Settings that shape keys, requests or cost: a continued run keeps its manifest's values.
SHAPING = (
    "api.model",
    "api.integration_model",
    "api.fallback_model",
    "api.max_tokens",
    "api.max_attempts",
    "api.overloads_before_fallback",
    "gate",
    "batch",
    "context",
    "inventory",
    "prices",
    "chunk_size",
)
# Settings a continued run may be given anew (explicit flags or arguments only).
SAFE = ("cost.max_cost_usd", "api.concurrency")
BINDINGS = "bindings/prefect/"  # <flow_run_id>.json = {"run_id"}: written once per flow run


@dataclass
class Choice:
    run_id: str
    manifest: RunManifest | None  # None: a new run
    lines: list[str] = field(default_factory=list)  # what the user is told, one line each
    left_behind: list[str] = field(default_factory=list)  # stopped runs a `--new-run` did not continue


def source_id(source: str) -> str:
    """A source as runs compare them: an s3:// prefix as given, a folder as an absolute path."""
    if "://" in source and not source.startswith("file://"):
        return source
    return os.path.abspath(os.path.expanduser(source.removeprefix("file://")))


def _load(store: ObjectStore, run_id: str) -> RunManifest | None:
    try:
        return ManifestStore(store).load(run_id)
    except NotFound:
        return None


def stopped_runs(store: ObjectStore, recipe: str, model: str, source: str) -> list[RunManifest]:
    """The unfinished runs of this recipe, model and source that no live process drives, newest first."""
    now, found = time.time(), []
    for run_id, info in ActiveRuns(store).items():
        if (info.get("recipe"), info.get("model"), info.get("source")) != (recipe, model, source):
            continue
        if live_lease(store, run_id, now) is not None:
            continue  # driven: the overlap check refuses a second driver (exit 5)
        m = _load(store, run_id)
        if m is not None and m.phase is not Phase.DONE:
            found.append((float(info.get("started_at") or 0), m))
    return [m for _, m in sorted(found, key=lambda f: f[0], reverse=True)]


def batches_in_flight(store: ObjectStore, recipe: str, model: str, source: str) -> list[tuple[str, int]]:
    """(run id, requests) of stopped runs of this recipe and model over documents of `source` whose
    batch requests are not collected yet (created, maybe still running)."""
    now, out = time.time(), []
    for run_id, info in ActiveRuns(store).items():
        if (info.get("recipe"), info.get("model")) != (recipe, model):
            continue
        if not sources_overlap(str(info.get("source") or ""), source) or live_lease(store, run_id, now):
            continue  # elsewhere, or live (the overlap check refuses a second driver)
        n = sum(r.request_count for r in BatchRecords(store, run_id).load_all() if r.live)
        if n:
            out.append((run_id, n))
    return out


def _binding_key(flow_run_id: str) -> str:
    return f"{BINDINGS}{safe_segment(flow_run_id)}.json"


def choose_run(
    store: ObjectStore,
    settings: Settings,
    source: str,
    recipe: str,
    *,
    run_id: str | None,
    new_run: bool,
    flow_run_id: str | None,
    new_id: Any,
) -> Choice:
    """The run to drive (see the module docstring); `new_id()` names a new one."""
    if flow_run_id and run_id is None:
        bound = store.get_json_or_none(_binding_key(flow_run_id))
        if isinstance(bound, dict) and bound.get("run_id"):
            rid = str(bound["run_id"])
            line = f"docmill: continuing run {rid} (bound to Prefect flow run {flow_run_id}, retried)"
            return Choice(rid, _load(store, rid), [line])
    choice = _choose(store, settings, source, recipe, run_id=run_id, new_run=new_run, new_id=new_id)
    if flow_run_id:
        key = _binding_key(flow_run_id)
        if not store.put_json(key, {"run_id": choice.run_id}, if_absent=True):
            won = str((store.get_json_or_none(key) or {}).get("run_id") or choice.run_id)
            if won != choice.run_id:
                return Choice(
                    won, _load(store, won), [f"docmill: continuing run {won} (bound to {flow_run_id})"]
                )
    return choice


def _choose(
    store: ObjectStore,
    settings: Settings,
    source: str,
    recipe: str,
    *,
    run_id: str | None,
    new_run: bool,
    new_id: Any,
) -> Choice:
    if run_id is not None:
        m = _load(store, run_id)
        return Choice(run_id, m, [f"docmill: continuing run {run_id}"] if m is not None else [])
    model, source = settings.api.model, source_id(source)
    if not new_run and not settings.allow_overlapping_runs:
        for m in stopped_runs(store, recipe, model, source)[:1]:  # the newest
            line = (
                f"docmill: continuing stopped run {m.run_id} (same recipe, model and source; "
                "--new-run starts a fresh one)"
            )
            return Choice(m.run_id, m, [line])
    if not settings.allow_overlapping_runs:  # a new run never sends a batch's custom_ids again
        for other, n in batches_in_flight(store, recipe, model, source):
            raise RunOverlap(
                f"run {other} stopped with {n} batch request(s) not collected yet; a new run over the "
                "same documents would send them again",
                hint=f"continue it (`docmill resume {other}`, or the same `docmill run` without --new-run); "
                "start a fresh run once it is done",
                run_id=other,
            )
    left = [m.run_id for m in stopped_runs(store, recipe, model, source)] if new_run else []
    return Choice(str(new_id()), None, left_behind=left)  # their spend stays in `runs` and this run's report


def _get(tree: dict[str, Any], dotted: str) -> tuple[bool, Any]:
    node: Any = tree
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False, None
        node = node[part]
    return True, node


def set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    """`tree[a][b] = value` for `dotted` "a.b"; a dict value is merged into the dict it replaces."""
    *path, leaf = dotted.split(".")
    for part in path:
        tree = tree[part]
    if isinstance(value, dict) and isinstance(tree.get(leaf), dict):
        tree[leaf] = {**tree[leaf], **value}  # keys the manifest lacks (redacted, newer) stay
    else:
        tree[leaf] = value


def pinned_settings(
    settings: Settings, m: RunManifest, given: dict[str, Any] | None = None
) -> tuple[Settings, list[str]]:
    """`settings` with the run's own shaping and safe values from its manifest, then the safe values
    in `given` (dotted name -> value; None means not given). Returns lines naming what was
    overridden and what was kept although asked otherwise. A run answered by the API is not continued
    by the emulator, nor the other way round (ConfigError): the driver and every shard worker."""
    who = answered_by(settings).get("answered_by", "API")
    if m.extra.get("answered_by", who) != who:  # one run's answers come from one of them
        raise ConfigError(
            f"run {m.run_id} was answered by the {m.extra['answered_by']}; this process would ask the {who} "
            f"(ANTHROPIC_API_KEY is {'not ' if settings.offline else ''}set)",
            hint="continue it as it was started, or start a new one with `docmill run SOURCE --new-run`",
        )
    given = {k: v for k, v in (given or {}).items() if v is not None}
    now = settings.model_dump(mode="json")
    tree = settings.model_dump()
    kept: list[str] = []
    for name in SHAPING:
        found, value = _get(m.config, name)
        if not found:
            continue
        set_dotted(tree, name, value)
        asked = given.get(name)
        if asked is not None and asked != value:
            kept.append(f"{name}={value} (asked {asked})")
    own: dict[str, Any] = {"cost.max_cost_usd": m.budget_usd}
    found, conc = _get(m.config, "api.concurrency")
    if found:
        own["api.concurrency"] = conc
    changed = []
    for name in SAFE:
        value = given.get(name, own.get(name, _get(now, name)[1]))
        set_dotted(tree, name, value)
        if name in given and name in own and own[name] != value:
            changed.append(f"{name} {own[name]} -> {value}")
    lines = []
    if changed:
        lines.append(f"docmill: run {m.run_id} continues with {', '.join(changed)} (safe to change)")
    if kept:
        lines.append(f"docmill: run {m.run_id} keeps its own {', '.join(kept)}; --new-run to change them")
    return Settings.model_validate(tree), lines
