"""Spot price sources: config table, JSON/CSV feeds (file and http), the shipped trace."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core import errors
from core.signals.config import PriceFeedConfig, PricesConfig, PriceTraceConfig
from core.signals.prices import (
    FeedPriceSource,
    TablePriceSource,
    TracePriceSource,
    build_price_sources,
    price_at,
)
from tests.signals.fakes import FakeFeed

TRACE_DIR = Path(__file__).resolve().parents[3] / "shared/data/spot-traces/aws-v100-2023-02"
T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

FEED = {
    "prices": [
        {"time": "2026-01-01T12:00:00Z", "node": "local:node-b", "price_per_hour": 0.9},
        {
            "time": "2026-01-01T13:00:00Z",
            "node": "local:node-b",
            "zone": "us-east-1a",
            "price_per_hour": 1.1,
            "on_demand_per_hour": 3.06,
        },
    ]
}


def test_table_source() -> None:
    src = TablePriceSource({"local:node-b": 0.92})
    quote = src.price("local:node-b", T0)
    assert quote is not None and quote.price_per_hour == 0.92 and quote.at == T0
    assert src.price("local:node-a", T0) is None


def test_json_feed_file_is_a_step_function(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(FEED))
    src = FeedPriceSource(PriceFeedConfig(location=str(path)))
    assert src.price("local:node-b", T0 - timedelta(seconds=1)) is None
    early = src.price("local:node-b", T0 + timedelta(minutes=30))
    assert early is not None and early.price_per_hour == 0.9 and early.at == T0
    late = src.price("local:node-b", T0 + timedelta(days=3))
    assert late is not None and late.price_per_hour == 1.1
    assert late.discount == pytest.approx(1 - 1.1 / 3.06)
    # findable by zone as well as by node
    by_zone = src.price("us-east-1a", T0 + timedelta(hours=2))
    assert by_zone is not None and by_zone.node == "local:node-b"


def test_csv_feed_over_http() -> None:
    body = (
        "time,node,price_per_hour,on_demand_per_hour\n"
        "2026-01-01T12:00:00Z,slurm:gpu-1,1.50,\n"
        "2026-01-01T12:05:00Z,slurm:gpu-1,1.75,3.06\n"
    )
    with FakeFeed(body, media_type="text/csv") as feed:
        src = FeedPriceSource(PriceFeedConfig(location=feed.url + "/feed"))
    first = src.price("slurm:gpu-1", T0 + timedelta(minutes=1))
    assert first is not None and first.price_per_hour == 1.5 and first.on_demand_per_hour is None
    second = src.price("slurm:gpu-1", T0 + timedelta(minutes=6))
    assert second is not None and second.price_per_hour == 1.75


def test_bad_feed_is_invalid_input(tmp_path: Path) -> None:
    path = tmp_path / "prices.csv"
    path.write_text("when,cost\n1,2\n")
    with pytest.raises(errors.InvalidInput):
        FeedPriceSource(PriceFeedConfig(location=str(path)))
    with pytest.raises(errors.NotFound):
        FeedPriceSource(PriceFeedConfig(location=str(tmp_path / "missing.json")))


def _mini_trace(tmp_path: Path) -> Path:
    (tmp_path / "spot_prices.json").write_text(json.dumps({"zone-a": [1.0, 1.2, 1.4]}))
    (tmp_path / "zone-a.csv").write_text(
        "date,availability\n2023-02-15 22:00:00,1\n2023-02-15 22:03:15,0\n2023-02-15 22:06:30,1\n"
    )
    return tmp_path


def test_trace_source_times_and_availability(tmp_path: Path) -> None:
    src = TracePriceSource(
        PriceTraceConfig(directory=_mini_trace(tmp_path), on_demand_per_hour=3.06)
    )
    t = datetime(2023, 2, 15, 22, 4, tzinfo=UTC)
    quote = src.price("zone-a", t)
    assert quote is not None and quote.price_per_hour == 1.2 and quote.available is False
    assert src.availability("zone-a", datetime(2023, 2, 15, 22, 7, tzinfo=UTC)) is True
    assert src.price("zone-a", datetime(2023, 2, 15, 21, 0, tzinfo=UTC)) is None
    assert src.price("zone-a", datetime(2023, 3, 1, tzinfo=UTC)) is None  # past the trace
    assert src.price("zone-b", t) is None


def test_trace_replay_start(tmp_path: Path) -> None:
    cfg = PriceTraceConfig(directory=_mini_trace(tmp_path), replay_start=T0)
    src = TracePriceSource(cfg)
    quote = src.price("zone-a", T0 + timedelta(minutes=7))
    assert quote is not None and quote.price_per_hour == 1.4
    assert quote.at == T0 + timedelta(minutes=6, seconds=30)


@pytest.mark.skipif(not TRACE_DIR.is_dir(), reason="shared spot traces not present")
def test_shipped_trace_loads() -> None:
    src = TracePriceSource(PriceTraceConfig(directory=TRACE_DIR, on_demand_per_hour=3.06))
    assert len(src.keys()) == 9
    quote = src.price("us-east-2a_v100_1", datetime(2023, 3, 1, tzinfo=UTC))
    assert quote is not None and 0.9 <= quote.price_per_hour <= 1.1
    assert quote.discount is not None and quote.discount > 0.6


def test_build_sources_priority(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(FEED))
    cfg = PricesConfig(
        table={"local:node-b": 0.5},
        feeds=[PriceFeedConfig(location=str(path))],
        traces=[PriceTraceConfig(directory=_mini_trace(tmp_path))],
    )
    sources = build_price_sources(cfg)
    assert [s.name.split(":")[0] for s in sources] == ["price-table", "price-feed", "price-trace"]
    quote = price_at(sources, "local:node-b", T0 + timedelta(hours=5))
    assert quote is not None and quote.price_per_hour == 0.5  # the table wins
    from_feed = price_at(sources, "us-east-1a", T0 + timedelta(hours=5))
    assert from_feed is not None and from_feed.price_per_hour == 1.1
    assert price_at(sources, "nowhere", T0) is None
