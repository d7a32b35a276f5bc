"""The in-process rows that the end-to-end tests poll (tests/service_reads.py) are exactly what
the installed ``clawpoint workloads --json`` prints: if the command's output ever changes
shape, the tests that trust the shortcut learn it here."""

from __future__ import annotations

from tests.cli.conftest import Cli
from tests.service_reads import workload_row, workload_rows


def test_in_process_rows_equal_the_console_scripts(cli: Cli) -> None:
    ref = cli.start_counter("same")
    listed = cli("workloads", "--json")
    assert listed.code == 0, str(listed)
    assert workload_rows(cli.home) == listed.json()
    assert workload_row(cli.home, ref, by="id") == next(w for w in listed.json() if w["id"] == ref)
