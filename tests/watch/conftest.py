"""Fixtures for the watch tests: the service fixtures, the fake metadata servers, and a
local webhook receiver (127.0.0.1) that records what the notifier posts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.cli.conftest import cli  # noqa: F401
from tests.service.conftest import need_criu, service, settings  # noqa: F401
from tests.signals.conftest import aws_imds, signals_config  # noqa: F401
from tests.webhook import Receiver


@pytest.fixture
def webhook() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()
