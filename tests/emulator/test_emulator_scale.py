"""Load: 200 concurrent realtime calls, and a 10,000-request batch created and streamed in seconds."""

from __future__ import annotations

import asyncio
import resource
import time

from emulator.server import EmulatorServer
from tests.fixtures.emulator import async_sdk_client, pass_batch_time, sdk_client

MODEL = "claude-sonnet-4-6"


def test_200_concurrent_requests(emulator: EmulatorServer) -> None:
    async def run() -> tuple[int, float]:
        client = async_sdk_client(emulator, timeout=30.0)
        client = client.with_options(max_retries=0)

        async def one(i: int) -> str:
            msg = await client.messages.create(
                model=MODEL,
                max_tokens=200,
                messages=[
                    {"role": "user", "content": f"<document id='doc-{i}'>\nTotal: {i} EUR\n</document>"}
                ],
            )
            return msg.id

        t0 = time.process_time()  # CPU of the process (client and in-process emulator), not wall
        ids = await asyncio.gather(*(one(i) for i in range(200)))
        elapsed = time.process_time() - t0
        await client.close()
        return len(set(ids)), elapsed

    distinct, elapsed = asyncio.run(run())
    print(f"\n200 concurrent requests: {elapsed:.2f} CPU-s")
    assert distinct == 200
    assert emulator.state.accounting.received == 200 and len(emulator.state.accounting.billed) == 200
    assert elapsed < 20


def test_10k_batch_creates_and_streams_in_seconds(emulator: EmulatorServer) -> None:
    client = sdk_client(emulator, timeout=120.0)
    schema = {
        "type": "object",
        "properties": {"total": {"type": "string"}},
        "required": ["total"],
        "additionalProperties": False,
    }
    requests = [
        {
            "custom_id": f"doc-{i:05d}",
            "params": {
                "model": MODEL,
                "max_tokens": 300,
                "messages": [
                    {"role": "user", "content": f"<document id='d{i}'>\nTotal: {i}.00 EUR\n</document>"}
                ],
                "output_config": {"format": {"type": "json_schema", "schema": schema}},
            },
        }
        for i in range(10_000)
    ]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.process_time()  # CPU of the process (client and in-process emulator), not wall
    batch = client.messages.batches.create(requests=requests)  # type: ignore[arg-type]
    assert batch.processing_status == "in_progress"
    pass_batch_time(emulator)
    batch = client.messages.batches.retrieve(batch.id)  # processes the 10k items
    t_create = time.process_time() - t0
    assert batch.processing_status == "ended" and batch.request_counts.succeeded == 10_000
    t1 = time.process_time()
    seen = 0
    for result in client.messages.batches.results(batch.id):
        assert result.result.type == "succeeded"
        seen += 1
    t_stream = time.process_time() - t1
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(
        f"\n10k batch: create+process {t_create:.2f} CPU-s, stream {t_stream:.2f} CPU-s, peak RSS +{(rss1 - rss0) / 1024:.0f} MB"
    )
    assert seen == 10_000
    assert len(emulator.state.accounting.billed) == 10_000
    assert t_create + t_stream < 30
