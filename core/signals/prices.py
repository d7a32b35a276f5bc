"""Spot prices from pluggable sources: a config table, a JSON/CSV feed, or a shipped trace.

A source answers ``price(key, at)`` with a ``SpotPrice`` or None when it does not know the
key (or has nothing for that time). ``key`` is matched against a record's node, zone and
instance type, in that order. Prices are step functions: the price at ``at`` is the latest
record at or before ``at``; before the first record there is no price.

Formats (also in docs/signals.md):

- Table (config): ``{key: price}`` or ``{key: {price_per_hour, on_demand_per_hour, zone,
  instance_type}}``; valid at any time.
- Feed, JSON: ``{"prices": [{"time": ISO 8601, "price_per_hour": float, "node"?, "zone"?,
  "instance_type"?, "on_demand_per_hour"?, "currency"?}, ...]}`` (a bare list also works).
- Feed, CSV: header ``time,price_per_hour[,node][,zone][,instance_type][,on_demand_per_hour]``.
- Trace: a directory with ``spot_prices.json`` (``{zone: [price per tick]}``) and one
  ``<zone>.csv`` per zone (``date,availability``, naive times read as UTC) whose rows are
  the ticks. Optionally replayed from ``replay_start`` instead of the trace's own dates.

Feeds are read once at construction (``refresh()`` reads again); an http(s) feed is fetched
with a short timeout. Limits: the whole feed is held in memory.
"""

from __future__ import annotations

import bisect
import csv
import io
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import httpx2
from pydantic import ConfigDict, Field, ValidationError

from core import errors
from core.schema_base import Model
from core.signals.config import (
    PriceEntryConfig,
    PriceFeedConfig,
    PricesConfig,
    PriceTraceConfig,
)
from core.signals.model import SpotPrice, UtcDatetime, utcnow


class PriceSource(Protocol):
    name: str

    def keys(self) -> list[str]: ...

    def price(self, key: str, at: datetime | None = None) -> SpotPrice | None: ...


class PriceRecord(Model):
    """One row of a feed."""

    model_config = ConfigDict(extra="forbid")

    time: UtcDatetime
    price_per_hour: float = Field(ge=0)
    node: str | None = None
    zone: str | None = None
    instance_type: str | None = None
    on_demand_per_hour: float | None = Field(default=None, ge=0)
    currency: str = "USD"


def _at(at: datetime | None) -> datetime:
    if at is None:
        return utcnow()
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


class TablePriceSource:
    """Fixed prices from the configuration; valid at any time."""

    name = "price-table"

    def __init__(self, table: Mapping[str, float | PriceEntryConfig]) -> None:
        self._table = {
            k: v if isinstance(v, PriceEntryConfig) else PriceEntryConfig(price_per_hour=v)
            for k, v in table.items()
        }

    def keys(self) -> list[str]:
        return sorted(self._table)

    def price(self, key: str, at: datetime | None = None) -> SpotPrice | None:
        entry = self._table.get(key)
        if entry is None:
            return None
        when = _at(at)
        return SpotPrice(
            source=self.name,
            observed_at=utcnow(),
            subject=key,
            node=key,
            zone=entry.zone,
            instance_type=entry.instance_type,
            price_per_hour=entry.price_per_hour,
            on_demand_per_hour=entry.on_demand_per_hour,
            at=when,
        )


@dataclass
class _Series:
    times: list[datetime]
    records: list[PriceRecord]


class FeedPriceSource:
    """Time series from a JSON or CSV feed (a path or an http(s) URL)."""

    def __init__(self, feed: PriceFeedConfig, *, timeout_s: float = 5.0) -> None:
        self.feed = feed
        self.name = f"price-feed:{feed.location}"
        self._timeout_s = timeout_s
        self._series: dict[str, _Series] = {}
        self.refresh()

    def _read(self) -> tuple[str, str]:
        loc = self.feed.location
        if loc.startswith(("http://", "https://")):
            try:
                with httpx2.Client(timeout=self._timeout_s) as client:
                    resp = client.get(loc)
                    resp.raise_for_status()
            except httpx2.HTTPError as exc:
                raise errors.BackendUnavailable(
                    f"price feed {loc} could not be fetched: {exc}",
                    hint="check the URL; prices from other sources are still used",
                ) from exc
            return resp.text, resp.headers.get("content-type", "")
        try:
            return Path(loc).read_text(), ""
        except OSError as exc:
            raise errors.NotFound(
                f"price feed file {loc} cannot be read: {exc.strerror}",
                hint="fix signals.prices.feeds[].location",
            ) from exc

    def _format(self, content_type: str) -> str:
        if self.feed.format != "auto":
            return self.feed.format
        loc = self.feed.location.lower().split("?")[0]
        if loc.endswith(".csv") or "csv" in content_type:
            return "csv"
        return "json"

    def refresh(self) -> None:
        text, content_type = self._read()
        fmt = self._format(content_type)
        try:
            rows = _parse_csv(text) if fmt == "csv" else _parse_json(text)
            records = [PriceRecord.model_validate(r) for r in rows]
        except (ValidationError, ValueError) as exc:
            raise errors.InvalidInput(
                f"price feed {self.feed.location} is not valid {fmt}: {exc}",
                hint="see docs/signals.md for the feed formats",
            ) from exc
        series: dict[str, list[PriceRecord]] = {}
        for rec in records:
            # A record is findable under each of its names (node, zone, instance type).
            for key in {k for k in (rec.node, rec.zone, rec.instance_type) if k}:
                series.setdefault(key, []).append(rec)
        self._series = {}
        for key, recs in series.items():
            recs.sort(key=lambda r: r.time)
            self._series[key] = _Series([r.time for r in recs], recs)

    def keys(self) -> list[str]:
        return sorted(self._series)

    def price(self, key: str, at: datetime | None = None) -> SpotPrice | None:
        s = self._series.get(key)
        if s is None:
            return None
        i = bisect.bisect_right(s.times, _at(at)) - 1
        if i < 0:
            return None
        rec = s.records[i]
        return SpotPrice(
            source=self.name,
            subject=rec.node or key,
            node=rec.node,
            zone=rec.zone,
            instance_type=rec.instance_type,
            price_per_hour=rec.price_per_hour,
            on_demand_per_hour=rec.on_demand_per_hour,
            currency=rec.currency,
            at=rec.time,
        )


def _parse_json(text: str) -> list[dict[str, Any]]:
    body = json.loads(text)
    rows = body.get("prices") if isinstance(body, dict) else body
    if not isinstance(rows, list):
        raise ValueError('expected {"prices": [...]} or a list of records')
    return rows


def _parse_csv(text: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames or not {"time", "price_per_hour"} <= set(reader.fieldnames):
        raise ValueError("the CSV header must name at least time and price_per_hour")
    # Empty cells mean "not given", not an empty string.
    return [{k: v for k, v in row.items() if v not in ("", None)} for row in reader]


class TracePriceSource:
    """The shipped spot trace format, keyed by zone (the CSV file stem, e.g. us-east-1a_v100_1).

    ``availability(zone, at)`` also says whether spot capacity could be launched at that tick.
    """

    def __init__(self, trace: PriceTraceConfig) -> None:
        self.trace = trace
        self.name = f"price-trace:{trace.directory.name}"
        directory = trace.directory
        try:
            prices: dict[str, list[float]] = json.loads(
                (directory / "spot_prices.json").read_text()
            )
        except (OSError, json.JSONDecodeError) as exc:
            raise errors.InvalidInput(
                f"{directory}/spot_prices.json cannot be read as JSON: {exc}",
                hint="point signals.prices.traces[].directory at a trace directory",
            ) from exc
        self._zones: dict[str, tuple[list[datetime], list[float], list[bool]]] = {}
        for zone, ticks in prices.items():
            times, avail = _read_trace_csv(directory / f"{zone}.csv")
            if len(times) != len(ticks):
                raise errors.InvalidInput(
                    f"trace zone {zone}: {len(ticks)} prices but {len(times)} CSV rows",
                    hint="the price list must be aligned with the CSV rows",
                )
            if trace.replay_start is not None and times:
                shift = _at(trace.replay_start) - times[0]
                times = [t + shift for t in times]
            self._zones[zone] = (times, [float(p) for p in ticks], avail)

    def keys(self) -> list[str]:
        return sorted(self._zones)

    def _tick(self, key: str, at: datetime | None) -> tuple[str, int] | None:
        zone = key if key in self._zones else None
        if zone is None:
            return None
        times = self._zones[zone][0]
        i = bisect.bisect_right(times, _at(at)) - 1
        # Past the last tick the trace says nothing: one tick beyond, or nothing at all.
        if i < 0 or (i == len(times) - 1 and _at(at) - times[i] > _tick_length(times)):
            return None
        return zone, i

    def availability(self, key: str, at: datetime | None = None) -> bool | None:
        found = self._tick(key, at)
        return None if found is None else self._zones[found[0]][2][found[1]]

    def price(self, key: str, at: datetime | None = None) -> SpotPrice | None:
        found = self._tick(key, at)
        if found is None:
            return None
        zone, i = found
        times, prices, avail = self._zones[zone]
        return SpotPrice(
            source=self.name,
            subject=zone,
            zone=zone,
            instance_type=self.trace.instance_type,
            price_per_hour=prices[i],
            on_demand_per_hour=self.trace.on_demand_per_hour,
            at=times[i],
            available=avail[i],
        )


def _tick_length(times: Sequence[datetime]) -> timedelta:
    if len(times) < 2:
        return timedelta(0)
    return (times[-1] - times[0]) / (len(times) - 1)


def _read_trace_csv(path: Path) -> tuple[list[datetime], list[bool]]:
    times: list[datetime] = []
    avail: list[bool] = []
    try:
        with path.open(newline="") as fh:
            for row in csv.DictReader(fh):
                # The traces record naive times; they were collected in UTC.
                times.append(datetime.fromisoformat(row["date"]).replace(tzinfo=UTC))
                avail.append(row["availability"].strip() == "1")
    except (OSError, KeyError, ValueError) as exc:
        raise errors.InvalidInput(
            f"trace file {path} is not a 'date,availability' CSV: {exc}",
            hint="each zone in spot_prices.json needs a matching <zone>.csv",
        ) from exc
    return times, avail


def build_price_sources(config: PricesConfig) -> list[PriceSource]:
    """Sources in priority order: the config table first, then feeds, then traces."""
    sources: list[PriceSource] = []
    if config.table:
        sources.append(TablePriceSource(config.table))
    sources.extend(FeedPriceSource(f) for f in config.feeds)
    sources.extend(TracePriceSource(t) for t in config.traces)
    return sources


def price_at(
    sources: Iterable[PriceSource], key: str, at: datetime | None = None
) -> SpotPrice | None:
    """The first source's price for ``key`` at ``at`` (now when None)."""
    for source in sources:
        found = source.price(key, at)
        if found is not None:
            return found
    return None
