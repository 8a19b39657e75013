"""Named points where a crash test stops this process: the one hook every package calls.

`crash_point(name)` does nothing unless a test asked for it, in one of two ways:
- in this process, by setting `HOOK` (it gets every point's name: it may raise, count, or kill);
- in a child process, by `DOCMILL_CRASH_AT=name` or `name#n`: the process SIGKILLs itself at the
  n-th pass through that point (the first when `#n` is left out).

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


def crash_point(name: str) -> None:
    if HOOK is not None:
        HOOK(name)
    spec = os.environ.get(ENV)
    if not spec:
        return
    want, _, nth = spec.partition("#")
    if want != name:
        return
    _passes[name] += 1
    if _passes[name] >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
