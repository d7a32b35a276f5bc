"""One retry policy for the calls a backend makes to its cluster: retry, then translate.

A backend's transport raises ``Transient`` for a fault worth trying again (a controller
restarting, a refused connection, a timeout, an API server's 429/503) and a
``core.errors`` error for anything else. ``with_retries`` runs the call again on
``Transient`` with exponential backoff (0.2 s doubling, at most ``max_wait_s``) or the
server's own ``retry_after`` (at most 5 s), for at most ``total_s``; when time runs out the
last fault is handed to ``unavailable``, which names the cluster and says what to check
(a ``BackendUnavailable`` of that backend). Any other error leaves at once, untouched.

Shared by the Kubernetes and Slurm backends (which must not import each other). Limits:
the bound is on starting attempts, so a call can last ``total_s`` plus one call's own
timeout; ``Transient`` never leaves this function.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_delay
from tenacity.wait import wait_base

from core import errors

T = TypeVar("T")

_RETRY_AFTER_MAX_S = 5.0  # a server asking for longer is still asked again within the bound


class Transient(Exception):
    """A fault worth retrying; ``retry_after``: the wait the server asked for, if it did."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _Backoff(wait_base):
    """Exponential backoff (0.2 s doubling, at most ``max_s``), or the fault's retry_after."""

    def __init__(self, max_s: float) -> None:
        self.max_s = max_s

    def __call__(self, retry_state: Any) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, Transient) and exc.retry_after is not None:
            return float(min(exc.retry_after, _RETRY_AFTER_MAX_S))
        return float(min(0.2 * 2 ** (retry_state.attempt_number - 1), self.max_s))


def with_retries(
    call: Callable[[], T],
    *,
    total_s: float,
    max_wait_s: float,
    unavailable: Callable[[BaseException | None], errors.ClawpointError],
) -> T:
    """``call()``, tried again on ``Transient`` for at most ``total_s``; then
    ``unavailable(last fault)`` is raised (chained to the retry error)."""
    try:
        for attempt in Retrying(
            stop=stop_after_delay(total_s),
            wait=_Backoff(max_wait_s),
            retry=retry_if_exception_type(Transient),
            reraise=False,
        ):
            with attempt:
                return call()
    except RetryError as exc:
        raise unavailable(exc.last_attempt.exception()) from exc
    raise AssertionError("unreachable")  # pragma: no cover
