"""The command lines of the real servers that tests/workloads/test_real_software.py and
bench/real_software.py run, so that the tests judge the very server the benchmark times.

MariaDB: ``mariadb_install_db`` makes a data directory and ``mariadb_server`` runs the server
on it, on loopback only. ``user`` is the ``--user`` both take (root's runs: ``root``, or the
unprivileged ``mysql`` the server drops to); an ordinary user passes none.
Limits: MariaDB 10.11's options (Debian 12's package).
"""

from __future__ import annotations

from pathlib import Path


def mariadb_install_db(data: Path, user: str | None = None) -> list[str]:
    return [
        "mariadb-install-db", "--no-defaults", f"--datadir={data}",
        *([f"--user={user}"] if user else []),
        "--auth-root-authentication-method=normal", "--skip-test-db",
    ]  # fmt: skip


def mariadb_server(data: Path, work: Path, port: int, user: str | None = None) -> list[str]:
    """The server on ``data``, listening on 127.0.0.1:``port``, its socket, pid file and error
    log in ``work``."""
    return [
        "/usr/sbin/mariadbd", "--no-defaults", *([f"--user={user}"] if user else []),
        f"--datadir={data}", f"--port={port}",
        f"--socket={work / f'sock{port}'}", "--bind-address=127.0.0.1",
        f"--pid-file={work / 'mariadb.pid'}", f"--log-error={work / 'error.log'}",
        # CRIU cannot dump Linux native AIO contexts with requests in flight; InnoDB's own
        # I/O threads do the same work.
        "--innodb-use-native-aio=0", "--innodb-buffer-pool-size=16M",
        # the clients hang up after the server's greeting, 100 times a second
        "--skip-name-resolve", "--max-connect-errors=4294967295",
    ]  # fmt: skip
