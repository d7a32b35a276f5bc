"""A CRIU dump may take a base plus an allowance per GiB of the tree's memory, not an hour.

The hung dump itself (CRIU stopped, the workload resumed, requests behind it refused, a
person's kill going through) is driven through the installed command in
tests/adversarial/test_hung_dump.py; here, the arithmetic and the override.
"""

from __future__ import annotations

import pytest

from core.checkpoint import criu, engine
from core.config import CheckpointConfig


def test_the_dump_timeout_grows_with_the_memory_and_can_be_fixed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sizes = {1: 0, 2: 10 * 2**30}
    monkeypatch.setattr(engine, "resident_bytes", lambda pid: sizes[pid] or None)
    cfg = CheckpointConfig()
    assert criu.dump_timeout_s(cfg, 1) == 300.0  # unreadable or tiny: the base
    assert criu.dump_timeout_s(cfg, 2) == 300.0 + 10 * 60.0
    slow = CheckpointConfig(dump_timeout_base_s=60, dump_timeout_per_gib_s=120)
    assert criu.dump_timeout_s(slow, 2) == 60.0 + 10 * 120.0
    assert criu.dump_timeout_s(CheckpointConfig(dump_timeout_s=42), 2) == 42.0
