"""Notes and archives of long tasks.

- `Scratchpad`: `runs/<run_id>/scratch/<task>.md`, a text file a task replaces (a long task
  mirrors its pinned facts there): exact facts live here, outside any summarized history.
- `HistoryArchive`: `runs/<run_id>/history/<task>/<seq>.json.gz`, the full message history saved
  (gzip JSON, write-once, numbered by the compaction: 0 before the first) before each compaction.
"""

from __future__ import annotations

from typing import Any

from checkpoints.keys import safe_segment
from checkpoints.store import ObjectStore, gunzip_json, gzip_json
from docmill.errors import NotFound, StoreError

MAX_SLOT_PROBES = 32
SEQ_DIGITS = 6
SUFFIX = ".json.gz"


class Scratchpad:
    def __init__(self, store: ObjectStore, run_id: str, task: str) -> None:
        self.store = store
        self.key = f"runs/{safe_segment(run_id)}/scratch/{safe_segment(task)}.md"

    def read(self) -> str:
        """The notes so far ("" when none)."""
        try:
            return self.store.get(self.key).decode("utf-8")
        except NotFound:
            return ""

    def replace(self, text: str) -> None:
        self.store.put(self.key, text.encode("utf-8"))


class HistoryArchive:
    def __init__(self, store: ObjectStore, run_id: str, task: str) -> None:
        self.store = store
        self.prefix = f"runs/{safe_segment(run_id)}/history/{safe_segment(task)}/"

    def _key(self, seq: int) -> str:
        return f"{self.prefix}{seq:0{SEQ_DIGITS}d}{SUFFIX}"

    def seqs(self) -> list[int]:
        return self.store.numbers(self.prefix, SUFFIX)

    def archive(self, messages: list[dict[str, Any]], seq: int) -> int:
        """Save the history that compaction `seq + 1` summarizes under `seq`, once: a slot holding
        these bytes already (a kill after archiving, before the task's checkpoint) is this archive;
        a slot holding another history moves it on to the next one. Returns the slot used."""
        data = gzip_json(messages)  # equal histories give equal bytes
        for _ in range(MAX_SLOT_PROBES):
            key = self._key(seq)
            if self.store.put_if_absent(key, data) or self.store.get(key) == data:
                return seq
            seq += 1
        raise StoreError(f"could not find a free history slot under {self.prefix}", key=self.prefix)

    def load(self, seq: int) -> list[dict[str, Any]]:
        return list(gunzip_json(self.store.get(self._key(seq))))
