"""Time budgets for work the evaluator does on agent output.

Judging an agent's reply (parsing its text, decoding and checking its result) runs in the
evaluator's own process, so its cost must be bounded by us, not by the agent. An app starts a
:class:`Deadline` when it begins judging a reply and calls :meth:`Deadline.check` inside every
loop whose length the agent controls; an overrun raises :class:`JudgeBudgetExceeded`, which the
runner records as the agent's failure ``"bad_output:judge_timeout"`` (scored incorrect).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class JudgeBudgetExceeded(Exception):  # noqa: N818 - reads as the event it reports
    """Judging one reply took longer than its budget: the agent's failure, not ours."""


class Deadline:
    """A monotonic-clock deadline ``budget_s`` seconds from construction.

    Args:
        budget_s: seconds allowed (> 0).

    Raises:
        ValueError: a non-positive budget.
    """

    def __init__(self, budget_s: float) -> None:
        if not budget_s > 0:
            raise ValueError("budget_s must be positive")
        self.budget_s = budget_s
        self.expires_at = time.monotonic() + budget_s

    @property
    def remaining_s(self) -> float:
        """Seconds left (negative once expired)."""
        return self.expires_at - time.monotonic()

    def check(self) -> None:
        """Raise :class:`JudgeBudgetExceeded` once the budget is spent."""
        if time.monotonic() > self.expires_at:
            raise JudgeBudgetExceeded(f"judging the reply took more than {self.budget_s} s")

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Do not count the time spent inside the ``with`` block (e.g. a sandbox run that has
        its own limits) against the budget."""
        started = time.monotonic()
        try:
            yield
        finally:
            self.expires_at += time.monotonic() - started
