"""Spot availability traces: loading and validation.

Role: turn the shipped trace format (a directory of ``date,availability`` CSV files, one per
zone, plus an optional ``spot_prices.json`` of ``{zone: [price per row, ...]}``) into
:class:`Trace` objects the simulator replays.

Limits: the tick is the median spacing of the CSV's timestamps; rows are assumed evenly
spaced (gaps in the probe log are not re-sampled). Prices are loaded for reference only;
the simulator bills constant spot / on-demand prices (see ``core.planner.spot.sim``).
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import statistics
from datetime import datetime
from pathlib import Path

from pydantic import ConfigDict, Field

from core import errors
from core.schema_base import Model

PRICES_FILE = "spot_prices.json"


class Trace(Model):
    """One zone's availability series: ``availability[i]`` is 1 when spot could be launched."""

    model_config = ConfigDict(frozen=True)

    name: str
    tick_hours: float = Field(gt=0)
    availability: tuple[int, ...]
    prices: tuple[float, ...] | None = None

    @property
    def mean_availability(self) -> float:
        return sum(self.availability) / len(self.availability)


def _parse_time(raw: str, path: Path, line: int) -> datetime:
    try:
        return datetime.fromisoformat(raw.strip())
    except ValueError:
        raise errors.InvalidInput(
            f"{path}:{line}: cannot parse date {raw!r}.",
            hint="Use ISO dates such as '2023-02-15 22:08:16' in the 'date' column.",
        ) from None


def load_csv(path: Path, *, prices: tuple[float, ...] | None = None) -> Trace:
    """Load one ``date,availability`` CSV; the tick is the median spacing of its dates."""
    if not path.is_file():
        raise errors.InvalidInput(
            f"Trace file {path} "
            + ("is not a regular file." if path.exists() else "does not exist."),
            hint="Pass a CSV with a 'date,availability' header or a directory of them.",
        )
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = "is not UTF-8 text" if isinstance(exc, UnicodeDecodeError) else "cannot be read"
        raise errors.InvalidInput(
            f"Trace file {path} {why} ({exc}).",
            hint="Pass a readable UTF-8 CSV with a 'date,availability' header.",
        ) from None
    dates: list[datetime] = []
    avail: list[int] = []
    with io.StringIO(text, newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or {"date", "availability"} - set(reader.fieldnames):
            raise errors.InvalidInput(
                f"{path} has no 'date,availability' header.",
                hint="The first line of a trace must be 'date,availability'.",
            )
        for line, row in enumerate(reader, start=2):
            dates.append(_parse_time(row["date"] or "", path, line))
            value = (row["availability"] or "").strip()
            if value not in {"0", "1"}:
                raise errors.InvalidInput(
                    f"{path}:{line}: availability {value!r} is not 0 or 1.",
                    hint="Write 1 when a spot instance could be launched, else 0.",
                )
            avail.append(int(value))
    if len(avail) < 2:
        raise errors.InvalidInput(
            f"Trace {path} has {len(avail)} rows; at least 2 are needed.",
            hint="A trace needs enough rows to cover the job's deadline window.",
        )
    spacings = [(b - a).total_seconds() for a, b in itertools.pairwise(dates)]
    tick_s = statistics.median(spacings)
    if tick_s <= 0:
        raise errors.InvalidInput(
            f"Trace {path} has non-increasing dates.",
            hint="Sort the rows by date, one row per probe.",
        )
    if prices is not None and len(prices) != len(avail):
        prices = None  # misaligned price series are useless for per-tick billing; drop them
    return Trace(
        name=path.stem, tick_hours=tick_s / 3600.0, availability=tuple(avail), prices=prices
    )


def _load_prices(directory: Path) -> dict[str, tuple[float, ...]]:
    file = directory / PRICES_FILE
    if not file.is_file():
        return {}
    try:
        raw = json.loads(file.read_text())
    except (OSError, ValueError) as exc:
        raise errors.InvalidInput(
            f"{file} is not valid JSON: {exc}.",
            hint="Fix or remove spot_prices.json; prices are optional.",
        ) from None
    if not isinstance(raw, dict):
        return {}
    prices: dict[str, tuple[float, ...]] = {}
    for name, series in raw.items():
        if not isinstance(series, list):
            continue
        try:
            values = tuple(float(x) for x in series)
        except (TypeError, ValueError):
            values = ()
        if len(values) != len(series) or not all(0 <= v < math.inf for v in values):
            raise errors.InvalidInput(
                f"{file}: the prices of {name!r} are not all finite numbers >= 0.",
                hint="Fix or remove spot_prices.json; prices are optional.",
            )
        prices[str(name)] = values
    return prices


def load_traces(paths: list[Path]) -> list[Trace]:
    """Load CSV files and directories of CSV files (with their ``spot_prices.json``)."""
    if not paths:
        raise errors.InvalidInput(
            "No trace paths given.", hint="Pass at least one CSV file or trace directory."
        )
    traces: list[Trace] = []
    for path in paths:
        if path.is_dir():
            prices = _load_prices(path)
            files = sorted(path.glob("*.csv"))
            if not files:
                raise errors.InvalidInput(
                    f"Trace directory {path} contains no .csv files.",
                    hint="Point --traces at a directory of 'date,availability' CSV files.",
                )
            for file in files:
                traces.append(load_csv(file, prices=prices.get(file.stem)))
        elif path.exists():
            traces.append(load_csv(path))
        else:
            raise errors.InvalidInput(
                f"Trace path {path} does not exist.",
                hint="Check the path; pass CSV files or directories of them.",
            )
    return traces
