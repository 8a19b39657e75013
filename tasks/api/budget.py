"""The run's cost cap for realtime calls (invariant 8), process-wide: `Budget`. Asked by
tasks.api.client through the one decision `try_reserve` (again after answers while other requests'
reservations stand in the way)."""

from __future__ import annotations

import threading

from docmill.errors import BudgetExhausted


class Budget:
    """The run's cost cap, process-wide: a request reserves its worst-case cost before it is sent
    and settles to the billed cost after, so concurrent requests never overshoot the cap together.
    `spent_usd` starts at 0: a resumed run sets it to what its cost ledger says was spent."""

    def __init__(self, cap_usd: float | None) -> None:
        self.cap_usd = cap_usd
        self.spent_usd = 0.0
        self.reserved_usd = 0.0
        self._changed = threading.Lock()

    def try_reserve(self, worst_case_usd: float) -> float | None:
        """The one decision: hold `worst_case_usd` and return it; None when only other requests'
        reservations stand in the way (wait for them to settle: most cost less than their worst
        case); raise BudgetExhausted once what is already spent leaves no room for this request."""
        with self._changed:
            if (
                self.cap_usd is not None
                and self.spent_usd + self.reserved_usd + worst_case_usd > self.cap_usd
            ):
                if self.reserved_usd <= 0 or self.spent_usd + worst_case_usd > self.cap_usd:
                    raise BudgetExhausted(
                        f"the next request (up to ${worst_case_usd:.4f}) would pass the run's cap of "
                        f"${self.cap_usd:.2f} (spent ${self.spent_usd:.4f}, in flight ${self.reserved_usd:.4f})",
                        hint="resume the run with a higher --max-cost-usd",
                        spent_usd=self.spent_usd,
                        cap_usd=self.cap_usd,
                    )
                return None
            self.reserved_usd += worst_case_usd
            return worst_case_usd

    def settle(self, reserved_usd: float, actual_usd: float) -> None:
        with self._changed:
            self.reserved_usd = max(0.0, self.reserved_usd - reserved_usd)
            self.spent_usd += actual_usd
