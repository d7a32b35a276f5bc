"""A small file (256 KiB) created, written, deleted and kept open: each step re-reads it
through the open descriptor and checks its digest, and appends a record it checks too."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
import time

from _selfcheck import fail, report

data = os.urandom(256 * 1024)
fd, path = tempfile.mkstemp(dir=sys.argv[1])
os.write(fd, data)
os.unlink(path)  # deleted but open
want = hashlib.sha256(data).hexdigest()
del data
step = 0
while True:
    os.lseek(fd, 0, os.SEEK_SET)
    body = b""
    while chunk := os.read(fd, 1 << 16):
        body += chunk
    if hashlib.sha256(body[: 256 * 1024]).hexdigest() != want:
        fail(f"deleted file: content changed at step {step}")
    tail = body[256 * 1024 :]
    if tail != b"".join(b"%08d" % i for i in range(step)):
        fail(f"deleted file: appended records lost at step {step}")
    os.write(fd, b"%08d" % step)
    step += 1
    report(step, every=10)
    time.sleep(0.05)
