"""Fixtures for the signals tests: started fake metadata servers and configs aimed at them.

``aws_imds`` yields a started ``FakeAwsImds`` (IMDSv2 required); flip it with
``aws_imds.mark_instance_action("terminate", in_seconds=120)``, ``mark_rebalance()``,
``expire_tokens()``, ``fail_next(n, 503)``. ``signals_config(aws=..., gcp=..., azure=...)``
builds a ``SignalsConfig`` with only the given providers enabled, each pointed at its fake.
See ``tests/signals/fakes.py`` for the full fake API.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from core.signals.config import SignalsConfig
from tests.signals.fakes import FakeAwsImds, FakeAzureEvents, FakeGcpMetadata


@pytest.fixture
def aws_imds() -> Iterator[FakeAwsImds]:
    with FakeAwsImds() as fake:
        yield fake


@pytest.fixture
def gcp_metadata() -> Iterator[FakeGcpMetadata]:
    with FakeGcpMetadata() as fake:
        yield fake


@pytest.fixture
def azure_events() -> Iterator[FakeAzureEvents]:
    with FakeAzureEvents() as fake:
        yield fake


def make_signals_config(
    *,
    aws: str | None = None,
    gcp: str | None = None,
    azure: str | None = None,
    **overrides: Any,
) -> SignalsConfig:
    """A SignalsConfig with only the named providers enabled, each at the given base URL."""
    data: dict[str, Any] = {
        "aws": {"enabled": aws is not None, "base_url": aws or "http://127.0.0.1:9"},
        "gcp": {"enabled": gcp is not None, "base_url": gcp or "http://127.0.0.1:9"},
        "azure": {"enabled": azure is not None, "base_url": azure or "http://127.0.0.1:9"},
        "connect_timeout_s": 0.5,
        "read_timeout_s": 0.5,
    }
    data.update(overrides)
    return SignalsConfig.model_validate(data)


@pytest.fixture
def signals_config() -> Callable[..., SignalsConfig]:
    return make_signals_config
