"""Named points where a crash test stops this process: the one hook every package calls.

`crash_point(name)` does nothing unless a test asked for it, in one of two ways:
- in this process, by setting `HOOK` (it gets every point's name: it may raise, count, or kill);
- in a child process, by `DOCMILL_CRASH_AT=name` or `name#n` in its environment at start (or `arm`
  in a forked child): the process SIGKILLs itself at the n-th pass through that point (the first
  when `#n` is left out).

The variable is read once, at import: a point on a hot path (one per batch result) costs two checks.

The points, in the order a run passes them: the batch lifecycle's `before_create`, `after_create`,
`polling`, `streaming_results`, `before_ledger_write`; a long task's `compaction_archived`,
`compaction_returned`, `compaction_checkpointed`, `exchange_returned`, `exchange_checkpointed`.
"""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable

ENV = "DOCMILL_CRASH_AT"
HOOK: Callable[[str], None] | None = None
_passes: Counter[str] = Counter()
_armed: tuple[str, int] | None = None


def arm(spec: str | None) -> None:
    """Kill this process at `spec` (`name` or `name#n`, as DOCMILL_CRASH_AT); None: at no point."""
    global _armed
    want, _, nth = (spec or "").partition("#")
    _armed = (want, int(nth or 1)) if want else None
    _passes.clear()


def crash_point(name: str) -> None:
    if HOOK is not None:
        HOOK(name)
    if _armed is None or _armed[0] != name:
        return
    _passes[name] += 1
    if _passes[name] >= _armed[1]:
        os.kill(os.getpid(), signal.SIGKILL)


arm(os.environ.get(ENV))
