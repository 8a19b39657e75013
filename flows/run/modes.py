"""Which per-file pass a run takes: the one place a run's mode is decided (a leaf: the CLI
imports it at start).

A run asks for `realtime`, `batch` or `auto` (`--mode`), or gives a deadline (`--finish-by`).
`choose` turns that into one `PassKind` once the inventory is written (`auto` needs the document
count): a deadline is the batch pass with a realtime tail, `auto` is batch from
`settings.batch.auto_threshold` documents, otherwise the mode asked. A continued run keeps what it
asked first (its manifest's `mode_asked`), so the same count chooses the same pass again.
flows.run.driver.choose_pass builds the pass of that kind (flows.run.passes.FilePass) and records
`recorded(kind)` as the manifest's `mode`. Nothing else in `flows/` compares modes
(tests/layout/test_run_modes.py).
"""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """What a run asks for (`--mode`)."""

    REALTIME = "realtime"
    BATCH = "batch"
    AUTO = "auto"


class PassKind(StrEnum):
    """The per-file pass a run takes."""

    REALTIME = "realtime"  # Messages API, chunk by chunk
    BATCH = "batch"  # Message Batches API
    DEADLINE = "deadline"  # batches while they can finish by the deadline, the rest realtime


def choose(asked: str, *, finish_by: str | None, documents: int, auto_threshold: int) -> PassKind:
    """The pass for a run that asked `asked` (with a deadline or not) over `documents` documents."""
    if finish_by:
        return PassKind.DEADLINE
    mode = Mode(asked)
    if mode is Mode.AUTO:
        return PassKind.BATCH if documents >= auto_threshold else PassKind.REALTIME
    return PassKind.BATCH if mode is Mode.BATCH else PassKind.REALTIME


def auto_line(asked: str, kind: PassKind, documents: int) -> str | None:
    """The log line saying what `--mode auto` chose (any other pass is the one asked)."""
    return f"mode auto: {documents} documents -> {recorded(kind)}" if Mode(asked) is Mode.AUTO else None


def recorded(kind: PassKind) -> str:
    """The manifest's `mode` of a run taking `kind` (a deadline run is a batch run to `status`)."""
    return "realtime" if kind is PassKind.REALTIME else "batch"


def may_batch(asked: str) -> bool:
    """Whether a run asking `asked` may create batches (flows.run.early submits them first)."""
    return Mode(asked) in (Mode.BATCH, Mode.AUTO)
