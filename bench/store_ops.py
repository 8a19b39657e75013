"""Store operations per document for a 1,000-document realtime run, on both backends.

Simulates the store traffic of the per-file pass as tasks/review.py makes it (no model calls):
per document a ledger read, a listing of the key's persisted responses (crash recovery), the
response persisted and the result put-if-absent; per chunk of 50 one cost group, the chunk's
outcome file, a manifest compare-and-swap and a lease renewal; then the report's cost totals.
Then a resume of the finished run (every document already in the ledger). Each run is made twice,
side by side: as docmill runs it (a per-chunk in-flight record, checkpoints/inflight.py: one listing of
the chunk's earlier lives and a put before the chunk, a delete after) and without that record, to show
what invariant 13 costs.
Operations are counted by wrapping the store; the S3 side runs against a throwaway SeaweedFS.

    .venv/bin/python bench/store_ops.py [--docs 1000] [--chunk 50] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checkpoints.costs import CostEntry, CostLedger
from checkpoints.inflight import InFlight, Mark
from checkpoints.keys import idempotency_key, sha256_hex
from checkpoints.lease import Lease
from checkpoints.ledger import ResponseLog, ResultsLedger
from checkpoints.manifest import ManifestStore, Phase, RunManifest
from checkpoints.store import ObjectStore, open_store
from tests.fixtures.seaweed import DUMMY_CREDENTIALS, SeaweedServer

MODEL = "claude-sonnet-4-6"
PASS = "file"


class CountingStore(ObjectStore):
    """Delegates to a real store and counts calls by operation (list = one per call)."""

    def __init__(self, inner: ObjectStore) -> None:
        self.inner = inner
        self.uri = inner.uri
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _n(self, op: str) -> None:
        with self._lock:
            self.counts[op] += 1

    def get(self, key: str) -> bytes:
        self._n("get")
        return self.inner.get(key)

    def get_with_etag(self, key: str) -> tuple[bytes, str]:
        self._n("get")
        return self.inner.get_with_etag(key)

    def put(self, key: str, data: bytes) -> str:
        self._n("put")
        return self.inner.put(key, data)

    def put_if_absent(self, key: str, data: bytes) -> bool:
        self._n("put_if_absent")
        return self.inner.put_if_absent(key, data)

    def put_if_match(self, key: str, data: bytes, etag: str) -> str:
        self._n("put_if_match")
        return self.inner.put_if_match(key, data, etag)

    def exists(self, key: str) -> bool:
        self._n("exists")
        return self.inner.exists(key)

    def list(self, prefix: str = "") -> Iterator[str]:
        self._n("list")
        return self.inner.list(prefix)

    def list_children(self, prefix: str) -> Iterator[str]:
        self._n("list")
        return self.inner.list_children(prefix)

    def delete(self, key: str) -> None:
        self._n("delete")
        self.inner.delete(key)


@dataclass
class PhaseResult:
    per_doc: Counter[str]  # ops while processing documents (chunks included)
    extra: Counter[str]  # ops after that: the report's cost totals, the final manifest CAS
    wall: float


def simulate(
    store: CountingStore, docs: int, chunk: int, concurrency: int, run_id: str, inflight: bool = True
) -> dict[str, PhaseResult]:
    """One realtime run, then a resume of it. Returns per-phase counts and wall times."""
    ledger, responses = ResultsLedger(store), ResponseLog(store)
    costs, manifests = CostLedger(store, run_id), ManifestStore(store)
    doc_ids = [f"invoices/{i:05d}.pdf" for i in range(docs)]

    def one_doc(doc_id: str) -> CostEntry | None:
        key = idempotency_key(
            PASS, "1", "p" * 64, "s" * 64, MODEL, sha256_hex(doc_id.encode()), {"max_tokens": 4096}
        )
        if ledger.get(PASS, key) is not None:
            return None
        responses.attempts(PASS, key)  # a crash's persisted answers are gated, not sent again
        usage = {"input_tokens": 1800, "output_tokens": 350}
        responses.put(PASS, key, 1, {"id": f"msg_{key[-12:]}", "usage": usage, "content": [{"type": "text"}]})
        entry = CostEntry.from_usage(
            run_id=run_id, pass_name=PASS, doc_id=doc_id, key=key, attempt=1, model=MODEL, usage=usage
        )
        ledger.put(PASS, key, {"doc_id": doc_id, "output": {"total": 1}, "usage": usage, "usd": entry.usd})
        return entry

    def run_chunks(lease: Lease) -> None:
        with ThreadPoolExecutor(concurrency) as pool:
            for c in range(0, docs, chunk):
                part = doc_ids[c : c + chunk]
                worst = dict.fromkeys((f"k{c}-{i}" for i in range(len(part))), 0.05)
                mark = (
                    InFlight(store, run_id).open_chunk(f"{c // chunk:06d}", "bench", concurrency, worst)
                    if inflight
                    else Mark("")
                )
                entries = [e for e in pool.map(one_doc, part) if e is not None]
                done = len(entries)
                if entries:  # one cost group per chunk
                    costs.record(f"file-{c // chunk:05d}", entries)
                if inflight:
                    InFlight(store, run_id).close(mark, settled=True)
                store.put_json(f"runs/{run_id}/outcomes/{c // chunk:05d}.json", {"docs": part, "sent": done})

                def add(m: RunManifest, d: int = done) -> None:
                    m.counts["sent"] = m.counts.get("sent", 0) + d

                manifests.update(run_id, add)
                lease.renew()

    phases: dict[str, PhaseResult] = {}
    t0 = time.perf_counter()
    manifests.create(RunManifest(run_id=run_id, source="bench", recipe="invoices"))
    with Lease(store, run_id, "bench", ttl_seconds=600) as lease:
        run_chunks(lease)
        docs_counts = Counter(store.counts)
        costs.totals()  # the report reads every cost record
        manifests.update(run_id, lambda m: setattr(m, "phase", Phase.DONE))
    phases["run"] = PhaseResult(docs_counts, Counter(store.counts) - docs_counts, time.perf_counter() - t0)

    store.counts.clear()
    t1 = time.perf_counter()
    with Lease(store, run_id, "bench-resume", ttl_seconds=600) as lease:
        run_chunks(lease)
    phases["resume"] = PhaseResult(Counter(store.counts), Counter(), time.perf_counter() - t1)
    return phases


KINDS = ["exists", "get", "put", "put_if_absent", "put_if_match", "list", "delete"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--docs", type=int, default=1000)
    ap.add_argument("--chunk", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=8)
    a = ap.parse_args(argv)

    results: dict[str, dict[str, PhaseResult]] = {}
    bare: dict[str, dict[str, PhaseResult]] = {}
    with tempfile.TemporaryDirectory(prefix="docmill-bench-") as tmp:
        local = CountingStore(open_store(Path(tmp) / "store"))
        results["local"] = simulate(local, a.docs, a.chunk, a.concurrency, "bench-run")
        local = CountingStore(open_store(Path(tmp) / "store-bare"))
        bare["local"] = simulate(local, a.docs, a.chunk, a.concurrency, "bench-run", inflight=False)
        os.environ.update(DUMMY_CREDENTIALS)
        with SeaweedServer(Path(tmp) / "weed") as srv:
            bucket = srv.create_bucket()
            s3 = CountingStore(open_store(f"s3://{bucket}/bench", endpoint_url=srv.endpoint))
            s3.put("warmup", b"x")
            s3.counts.clear()
            results["s3"] = simulate(s3, a.docs, a.chunk, a.concurrency, "bench-run")
            s3 = CountingStore(open_store(f"s3://{bucket}/bench-bare", endpoint_url=srv.endpoint))
            bare["s3"] = simulate(s3, a.docs, a.chunk, a.concurrency, "bench-run", inflight=False)

    n = a.docs
    print(f"store ops per document: {n} documents, chunks of {a.chunk}, {a.concurrency} threads")
    print(f"{'':26}{'local':>10}{'s3 (SeaweedFS)':>16}")
    for phase, title in (("run", "realtime run"), ("resume", "resume of finished run")):
        print(f"-- {title}")
        rows = [results["local"][phase], results["s3"][phase]]
        for kind in KINDS:
            vals = [r.per_doc.get(kind, 0) / n for r in rows]
            if any(vals):
                print(f"  {kind:24}{vals[0]:>10.3f}{vals[1]:>16.3f}")
        totals = [sum(r.per_doc.values()) / n for r in rows]
        print(f"  {'total / document':24}{totals[0]:>10.3f}{totals[1]:>16.3f}")
        extra = [sum(r.extra.values()) for r in rows]
        if any(extra):
            print(
                f"  {'+ report/finish ops':24}{extra[0]:>10d}{extra[1]:>16d}  (cost totals read, final CAS)"
            )
        print(f"  {'wall time (s)':24}{rows[0].wall:>10.2f}{rows[1].wall:>16.2f}")
        print(f"  {'ms / document':24}{rows[0].wall * 1000 / n:>10.2f}{rows[1].wall * 1000 / n:>16.2f}")
        without = [sum(bare[b][phase].per_doc.values()) / n for b in ("local", "s3")]
        ratio = [t / w if w else 0.0 for t, w in zip(totals, without, strict=True)]
        print(f"  {'without in-flight recs':24}{without[0]:>10.3f}{without[1]:>16.3f}  (ops / document)")
        print(f"  {'ratio with / without':24}{ratio[0]:>10.3f}{ratio[1]:>16.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
