"""Which dry runs go into the audit log: identical ones collapse, and each principal has a budget.

A dry run changes nothing, yet each one appended two entries to the hash-chained audit log
(the plan and the guard's decision), so an agent looping over dry runs grew the log without
limit. The rule (``DryRunAudit.admit``), per principal, over a sliding window of
``WINDOW_S`` seconds:

- an identical dry run (same plan hash) is audited once per window; repeats are not;
- at most ``PER_WINDOW`` distinct dry runs are audited per window; the first one past that
  appends one ``dry-run.unaudited`` entry (saying until when), and later ones append nothing
  until the window has room again.

The answer a caller gets is never affected: an unaudited dry run still gets the guard's
side-effect-free preview. Real executions, approvals and denials are always audited.
Limits: kept in this process's memory (one MCP server, one CLI run), for at most
``MAX_PRINCIPALS`` principals (the least recently seen forgotten first); a restart starts
every budget afresh.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

WINDOW_S = 60.0
PER_WINDOW = 30  # distinct dry runs audited per principal per window
MAX_PRINCIPALS = 1_000

Admission = Literal["audit", "note", "skip"]


@dataclass
class _Budget:
    audited: deque[float] = field(default_factory=deque)  # when each audited one was
    last: dict[str, float] = field(default_factory=dict)  # plan hash -> when last audited
    noted_until: float = 0.0  # a dry-run.unaudited entry covers the time until then


class DryRunAudit:
    """Whether to audit a principal's dry run now (see the module docstring)."""

    def __init__(
        self,
        *,
        window_s: float = WINDOW_S,
        per_window: int = PER_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.window_s = window_s
        self.per_window = per_window
        self._clock = clock
        self._budgets: OrderedDict[str, _Budget] = OrderedDict()

    def admit(self, principal: str, plan_hash: str) -> Admission:
        """``audit``: append the plan and the decision as usual; ``note``: append only one
        ``dry-run.unaudited`` entry; ``skip``: append nothing."""
        now = self._clock()
        budget = self._budgets.pop(principal, None) or _Budget()
        self._budgets[principal] = budget  # most recently seen last
        while len(self._budgets) > MAX_PRINCIPALS:
            self._budgets.popitem(last=False)
        while budget.audited and now - budget.audited[0] >= self.window_s:
            budget.audited.popleft()
        budget.last = {h: t for h, t in budget.last.items() if now - t < self.window_s}
        if plan_hash in budget.last:
            return "skip"  # the same dry run was audited within the window
        if len(budget.audited) < self.per_window:
            budget.audited.append(now)
            budget.last[plan_hash] = now
            return "audit"
        if now < budget.noted_until:
            return "skip"
        budget.noted_until = budget.audited[0] + self.window_s
        return "note"

    def resumes_in(self, principal: str) -> float:
        """Seconds until ``principal``'s dry runs are audited again (0: now)."""
        budget = self._budgets.get(principal)
        if budget is None or len(budget.audited) < self.per_window:
            return 0.0
        return max(0.0, budget.audited[0] + self.window_s - self._clock())
