"""Run from a venv's interpreter: it checks it is in a venv and keeps a set of C extension
modules (so many shared libraries) busy, checking each one's answer every step."""

from __future__ import annotations

import bz2
import ctypes
import decimal
import hashlib
import json
import lzma
import sqlite3
import ssl
import sys
import time
import zlib

from _selfcheck import fail, report

if sys.prefix == sys.base_prefix:
    fail("venv: not running from a venv")
db = sqlite3.connect(":memory:")
db.execute("CREATE TABLE t (n INTEGER)")
ctx = ssl.create_default_context()
step = 0
while True:
    db.execute("INSERT INTO t VALUES (?)", (step,))
    (count,) = db.execute("SELECT COUNT(*) FROM t").fetchone()
    blob = json.dumps({"step": step}).encode()
    ok = (
        count == step + 1
        and zlib.decompress(zlib.compress(blob)) == blob
        and bz2.decompress(bz2.compress(blob)) == blob
        and lzma.decompress(lzma.compress(blob)) == blob
        and hashlib.sha256(blob).hexdigest() == hashlib.new("sha256", blob).hexdigest()
        and decimal.Decimal(step) + 1 == step + 1
        and ctypes.c_int(step).value == step
        and ctx.verify_mode == ssl.CERT_REQUIRED
    )
    if not ok:
        fail(f"venv: a module gave a wrong answer at step {step}")
    step += 1
    report(step, every=10)
    time.sleep(0.05)
