"""``Database(keep_open=True)``, as the service opens it: the write-ahead log survives between
operations (it is not checkpointed and rebuilt per call), and what another handle or
process writes is still read at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.state.db import Database


def _rows(db: Database) -> list[int]:
    with db.read() as conn:
        return [r[0] for r in conn.execute("SELECT a FROM t ORDER BY a")]


def test_the_log_stays_between_operations_only_with_keep_open(tmp_path: Path) -> None:
    kept = Database(tmp_path / "kept.db", keep_open=True)
    plain = Database(tmp_path / "plain.db")
    for db in (kept, plain):
        with db.write() as conn:
            conn.execute("CREATE TABLE t (a INTEGER)")
            conn.execute("INSERT INTO t VALUES (1)")
    # The last connection to close checkpoints the log and deletes it: only the plain one did.
    assert (tmp_path / "kept.db-wal").exists()
    assert not (tmp_path / "plain.db-wal").exists()


def test_writes_of_another_handle_and_process_are_read_at_once(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    kept = Database(path, keep_open=True)
    with kept.write() as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
    with Database(path).write() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert _rows(kept) == [1]
    script = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
        "c.execute('INSERT INTO t VALUES (2)'); c.close()"
    )
    subprocess.run([sys.executable, "-c", script, str(path)], check=True)
    assert _rows(kept) == [1, 2]
    with kept.write() as conn:
        conn.execute("INSERT INTO t VALUES (3)")
    assert _rows(Database(path)) == [1, 2, 3]
