"""A Unix-domain echo server and a client process inside the workload. ``path DIR``: a
socket file in DIR; ``abstract``: an abstract name. The client sends numbered messages on
one connection and checks every echo, and reconnects each 20 messages (a new accept)."""

from __future__ import annotations

import os
import socket
import sys
import time

from _selfcheck import fail, report

mode = sys.argv[1]
addr: str | bytes
addr = os.path.join(sys.argv[2], "echo.sock") if mode == "path" else f"\0cp-echo-{os.getpid()}"
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(addr)
srv.listen()
if os.fork() == 0:  # the server
    while True:
        conn, _ = srv.accept()
        with conn:
            while data := conn.recv(4096):
                conn.sendall(data)
srv.close()
step = 0
while True:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as c:
        c.connect(addr)
        for _ in range(20):
            msg = b"msg %d" % step
            c.sendall(msg)
            got = b""
            while len(got) < len(msg):
                chunk = c.recv(4096)
                if not chunk:
                    fail(f"unix: connection closed at step {step}")
                got += chunk
            if got != msg:
                fail(f"unix: echo {got!r} for {msg!r}")
            step += 1
            report(step, every=10)
            time.sleep(0.02)
