"""Decode CRIU's ``stats-dump`` and ``stats-restore`` image files (without ``crit``).

The files are CRIU images: two 32-bit magics, then one entry framed as a little-endian
uint32 length followed by a protobuf ``StatsEntry`` (field 1: dump stats, field 2: restore
stats). Only varint fields occur in those messages, so a minimal protobuf reader suffices.
Times in the files are microseconds; we return seconds (``*_s``) and page counts.

Limits: unknown fields are skipped; a malformed file yields an empty dict (stats are
metrics, never a reason to fail a checkpoint).
"""

from __future__ import annotations

import struct
from pathlib import Path

from core import logs

log = logs.get_logger(__name__)

# Field numbers from CRIU's images/stats.proto.
_DUMP_FIELDS = {
    1: "freezing_time",
    2: "frozen_time",
    3: "memdump_time",
    4: "memwrite_time",
    5: "pages_scanned",
    6: "pages_skipped_parent",
    7: "pages_written",
    9: "pages_lazy",
}
_RESTORE_FIELDS = {
    1: "pages_compared",
    2: "pages_skipped_cow",
    3: "forking_time",
    4: "restore_time",
    5: "pages_restored",
}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7


def fields(buf: bytes) -> dict[int, int | bytes]:
    """Top-level fields of a protobuf message (varints and length-delimited only)."""
    out: dict[int, int | bytes] = {}
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            out[number], pos = _varint(buf, pos)
        elif wire == 2:
            length, pos = _varint(buf, pos)
            out[number] = buf[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
    return out


def _named(raw: int | bytes | None, names: dict[int, str]) -> dict[str, float]:
    if not isinstance(raw, bytes):
        return {}
    out: dict[str, float] = {}
    for number, value in fields(raw).items():
        name = names.get(number)
        if name is None or not isinstance(value, int):
            continue
        if name.endswith("_time"):
            out[name[: -len("_time")] + "_s"] = value / 1e6
        else:
            out[name] = float(value)
    return out


def decode(data: bytes) -> dict[str, float]:
    """Decode a stats image's bytes; ``{}`` when it is not one."""
    try:
        if len(data) < 12:
            return {}
        (size,) = struct.unpack_from("<I", data, 8)
        entry = fields(data[12 : 12 + size])
        return {**_named(entry.get(1), _DUMP_FIELDS), **_named(entry.get(2), _RESTORE_FIELDS)}
    except (ValueError, struct.error) as exc:
        log.warning("criu.stats_undecodable", error=str(exc))
        return {}


def read_stats(path: Path) -> dict[str, float]:
    """Decode ``stats-dump`` or ``stats-restore``; ``{}`` if absent or unreadable."""
    try:
        return decode(path.read_bytes())
    except OSError:
        return {}
