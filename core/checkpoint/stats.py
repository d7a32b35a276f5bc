"""Decode CRIU's ``stats-dump`` / ``stats-restore`` files (CRIU's own timings, not guesses).

The ``crit`` tool is not always installed, so the few fields we report are decoded here. The
file is a CRIU image: two little-endian u32 magics, then one entry framed as a u32 length and
a protobuf ``StatsEntry`` (field 1 = dump stats, field 2 = restore stats). Field numbers
follow CRIU's ``images/stats.proto``; times there are microseconds. Limits: only varint fields
are read; an unreadable file gives an empty dict (stats are informative, never required).
"""

from __future__ import annotations

import struct
from pathlib import Path

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
_TIME_FIELDS = {
    "freezing_time",
    "frozen_time",
    "memdump_time",
    "memwrite_time",
    "forking_time",
    "restore_time",
}


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _fields(buf: bytes) -> dict[int, int | bytes]:
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
            raise ValueError(f"unsupported protobuf wire type {wire}")
    return out


def decode(path: Path) -> dict[str, float]:
    """Fields of a stats file; times converted to seconds (``*_s``), counters as numbers."""
    try:
        raw = path.read_bytes()
        if len(raw) < 12:
            return {}
        (length,) = struct.unpack_from("<I", raw, 8)
        entry = _fields(raw[12 : 12 + length])
        out: dict[str, float] = {}
        for number, names in ((1, _DUMP_FIELDS), (2, _RESTORE_FIELDS)):
            sub = entry.get(number)
            if not isinstance(sub, bytes):
                continue
            for field, value in _fields(sub).items():
                name = names.get(field)
                if name is None or not isinstance(value, int):
                    continue
                if name in _TIME_FIELDS:
                    out[f"criu_{name}_s"] = value / 1e6
                else:
                    out[f"criu_{name}"] = float(value)
        return out
    except (OSError, ValueError, IndexError, struct.error):
        return {}
