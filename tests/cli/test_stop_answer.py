"""After answering a stop checkpoint the wrapper waits (bounded) for its requester to hang
up before it may end: in a container it is PID 1, whose end kills a ``pods/exec`` requester
still printing the answer (seen as an exec that failed after a checkpoint that succeeded)."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from core.wrapper import desk


def test_the_wrapper_waits_for_its_requester_to_hang_up(monkeypatch: pytest.MonkeyPatch) -> None:
    wrapper, requester = socket.socketpair()
    threading.Timer(0.3, requester.close).start()
    started = time.monotonic()
    desk.await_hang_up(wrapper)
    assert 0.25 <= time.monotonic() - started < 5  # until the hang-up, not the bound

    monkeypatch.setattr(desk, "HANG_UP_WAIT_S", 0.2)
    wrapper, requester = socket.socketpair()  # a requester that never hangs up
    started = time.monotonic()
    desk.await_hang_up(wrapper)
    assert time.monotonic() - started < 2  # bounded
    requester.close()
    wrapper.close()
