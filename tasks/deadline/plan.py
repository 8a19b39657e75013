"""When a run with a deadline (`--finish-by TIME`) must stop waiting for its batches (a leaf).

Batch is half the price but gives no partial progress (the API counts a batch's requests as
processing until the whole batch ends); realtime is fast but full price. So the whole pass goes as
batches, cut into several so their ends show progress, and the driver keeps one number up to date:
the *switch time*, the last moment at which the requests not answered yet can still be cancelled
and sent realtime in time:

    switch = deadline - margin - (time a cancel takes to settle) - (realtime time of what is left)
    realtime time of n requests = n / throughput + 2 x latency (the last ones' answers)
                                  + what the pacer's ramp holds back (when it starts then)
    throughput = min(0.9 x the organisation's request limit, requests in flight at once / latency)

As batches end, fewer requests are left and the switch moves later. A cancel measured once replaces
the assumed cancel time, and the pace is measured as soon as it can be (the request limit the API's
headers state, else the one processes share, else the configured one; the answer time observed);
the reason recorded with the switch names those figures and their sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from docmill.errors import ConfigError

RELATIVE = re.compile(r"^\+(\d+(?:\.\d+)?)\s*([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
CLOCK = re.compile(r"^(\d{1,2}):(\d{2})$")


def parse_finish_by(text: str, now: datetime) -> datetime:
    """`+90s`, `+10m`, `+2h` (from now); `06:00` (the next such time of day, in `now`'s zone);
    or an ISO 8601 date-time (a naive one is in `now`'s zone). Raises ConfigError otherwise, or
    for a time that has passed."""
    raw = text.strip()
    rel = RELATIVE.match(raw)
    clock = CLOCK.match(raw)
    if rel:
        when = now + timedelta(seconds=float(rel.group(1)) * UNITS[rel.group(2)])
    elif clock and int(clock.group(1)) < 24 and int(clock.group(2)) < 60:
        when = now.replace(hour=int(clock.group(1)), minute=int(clock.group(2)), second=0, microsecond=0)
        if when <= now:
            when += timedelta(days=1)
    else:
        try:
            when = datetime.fromisoformat(raw)
        except ValueError:
            raise ConfigError(
                f"--finish-by {text!r} is not a time",
                hint="give +90m, 06:00 (next occurrence) or 2026-12-02T06:00:00+01:00",
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=now.tzinfo or UTC)
    if when <= now:
        raise ConfigError(f"--finish-by {text!r} has passed", hint="give a time in the future")
    return when


@dataclass
class Pace:
    """What realtime can do: the organisation's request limit, requests in flight, answer time, and
    the pacer's ramp (it starts below the limit: tasks.api.pacing)."""

    requests_per_minute: float
    in_flight: int
    latency_seconds: float
    ramp_seconds: float = 0.0
    ramp_start: float = 1.0
    limit_source: str = "configured"  # where the request limit comes from (the API's headers, ...)
    latency_source: str = "configured"  # "measured" once answers came

    def throughput(self) -> float:
        """Requests per second realtime can sustain."""
        by_limit = 0.9 * self.requests_per_minute / 60.0
        by_window = self.in_flight / max(self.latency_seconds, 1e-3)
        return max(min(by_limit, by_window), 1e-6)

    def seconds_for(self, requests: int) -> float:
        """Sending `requests` and the last answers; a ramp from `ramp_start` of the rate costs half
        of what it holds back (the worst case: the ramp begins when realtime does)."""
        if requests <= 0:
            return 0.0
        ramp = self.ramp_seconds * (1.0 - min(self.ramp_start, 1.0)) / 2.0
        return requests / self.throughput() + 2 * self.latency_seconds + ramp


@dataclass
class DeadlinePlan:
    deadline: float  # epoch seconds
    margin_seconds: float
    cancel_seconds: float  # assumed until one cancel was measured

    @classmethod
    def make(
        cls, deadline: float, now: float, *, margin: float, fraction: float, cancel: float
    ) -> DeadlinePlan:
        return cls(deadline, margin + fraction * max(deadline - now, 0.0), cancel)

    def switch_at(self, left: int, pace: Pace) -> float:
        """The last moment to cancel the batches and send `left` requests realtime."""
        return self.deadline - self.margin_seconds - self.cancel_seconds - pace.seconds_for(left)

    def why(self, left: int, pace: Pace) -> str:
        """Why the switch time is when it is: the figures `switch_at` used, and where they came from."""
        return (
            f"{left} request(s) left need ~{pace.seconds_for(left):.0f} s realtime at "
            f"{pace.requests_per_minute:,.0f} requests/min ({pace.limit_source}) and "
            f"{pace.latency_seconds:.1f} s an answer ({pace.latency_source}), plus {self.cancel_seconds:.0f} s "
            f"to cancel and {self.margin_seconds:.0f} s of margin before {iso(self.deadline)}"
        )


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def epoch(text: str) -> float:
    """An ISO 8601 instant (as `iso` writes it, or with an offset) as epoch seconds."""
    when = datetime.fromisoformat(text)
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
