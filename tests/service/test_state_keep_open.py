"""``Database(keep_open=True)``, as the service opens it: the write-ahead log survives between
operations (it is not checkpointed and rebuilt per call), and what another handle or
process writes is still read at once; finished operations' connections are reused, never
one left inside a transaction."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_a_kept_handle_reuses_the_connection_of_a_finished_operation(tmp_path: Path) -> None:
    # Opening a connection is a connect and four pragmas: most of a read's database time.
    kept = Database(tmp_path / "state.db", keep_open=True)
    with kept.write() as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
        first = conn
    with kept.read() as conn:
        assert conn is first
    with kept.write() as conn:
        assert conn is first
    plain = Database(tmp_path / "plain.db")
    with plain.read() as a:
        pass
    with plain.read() as b:
        assert b is not a


def test_operations_at_once_get_their_own_connections(tmp_path: Path) -> None:
    kept = Database(tmp_path / "state.db", keep_open=True)
    with kept.read() as outer, kept.read() as inner:
        assert inner is not outer
    with kept.read() as again:  # both went back; either may come out
        assert again in (outer, inner)


def test_a_connection_left_in_a_transaction_is_closed_not_reused(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    kept = Database(path, keep_open=True)
    with kept.write() as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
    with kept.read() as conn:
        conn.execute("BEGIN")  # a snapshot a pooled connection must never carry
        conn.execute("SELECT count(*) FROM t").fetchone()
        left = conn
    with Database(path).write() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    with kept.read() as conn:
        assert conn is not left
        assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    with pytest.raises(sqlite3.ProgrammingError):
        left.execute("SELECT 1")  # closed


def test_a_failed_write_leaves_a_reusable_connection_that_reads_others_writes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.db"
    kept = Database(path, keep_open=True)
    with kept.write() as conn:
        conn.execute("CREATE TABLE t (a INTEGER)")
    with pytest.raises(RuntimeError), kept.write() as conn:
        conn.execute("INSERT INTO t VALUES (9)")
        raise RuntimeError("the caller failed mid-write")
    assert _rows(kept) == []  # rolled back
    with Database(path).write() as conn:
        conn.execute("INSERT INTO t VALUES (1)")
    assert _rows(kept) == [1]
