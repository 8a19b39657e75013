"""CPU per call of the one retry mechanism (tasks.api.retrying) against a bare call, side by side.

The per-file pass makes every request through `retrying.transport_async` (tenacity's `AsyncRetrying`)
on one event loop, and the thread client through `retrying.transport` (`Retrying`). This prints the
CPU microseconds each adds to a call that succeeds at once (the common case), measured against the
same call without a retry layer, interleaved `--repeat` times (medians). Compare with the few ms of
CPU per document bench/realtime.py (a) reports. The machine may be shared: the ratio is what counts.

    .venv/bin/python bench/retry_overhead.py [--calls 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tasks.api.retrying import transport, transport_async


async def answer(x: int) -> int:
    return x


def answer_now(x: int) -> int:
    return x


async def no_wait(_seconds: float) -> None:
    return None


async def loop_bare(calls: int) -> float:
    t = time.process_time()
    for i in range(calls):
        await answer(i)
    return (time.process_time() - t) / calls * 1e6


async def loop_tenacity(calls: int) -> float:
    t = time.process_time()
    for i in range(calls):
        retrying = transport_async(stop=lambda _s: False, wait=lambda _s: 0.0, sleep=no_wait, reraise=False)
        await retrying(answer, i)
    return (time.process_time() - t) / calls * 1e6


def thread_bare(calls: int) -> float:
    t = time.process_time()
    for i in range(calls):
        answer_now(i)
    return (time.process_time() - t) / calls * 1e6


def thread_tenacity(calls: int) -> float:
    t = time.process_time()
    for i in range(calls):
        retrying = transport(stop=lambda _s: False, wait=lambda _s: 0.0, sleep=lambda _s: None, reraise=False)
        retrying(answer_now, i)
    return (time.process_time() - t) / calls * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rows: dict[str, list[float]] = {
        "loop bare": [],
        "loop tenacity": [],
        "thread bare": [],
        "thread tenacity": [],
    }
    for _ in range(a.repeat):
        rows["loop bare"].append(asyncio.run(loop_bare(a.calls)))
        rows["loop tenacity"].append(asyncio.run(loop_tenacity(a.calls)))
        rows["thread bare"].append(thread_bare(a.calls))
        rows["thread tenacity"].append(thread_tenacity(a.calls))
    print(f"CPU us per call that answers at once, medians of {a.repeat} x {a.calls} calls")
    for name, values in rows.items():
        print(f"  {name:16} {statistics.median(values):8.2f}")
    for face in ("loop", "thread"):
        added = statistics.median(rows[f"{face} tenacity"]) - statistics.median(rows[f"{face} bare"])
        print(f"  {face}: the retry layer adds {added:.1f} us a call")


if __name__ == "__main__":
    main()
