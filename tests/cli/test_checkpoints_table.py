"""``clawpoint checkpoints`` as a person reads it: the table's figures come from the stored
manifest, which is all a later command has (a checkpoint's ``total_s`` is told only to the
command that made it: a manifest cannot hold its own total)."""

from __future__ import annotations

import re

from tests.cli.conftest import Cli


def test_the_dump_time_of_a_stored_checkpoint_is_shown(cli: Cli) -> None:
    ref = cli.start_counter("t1")
    assert cli("checkpoint", ref, "--yes").code == 0
    [stored] = cli("checkpoints", ref, "--json").json()
    saved = stored["timings"]["cooperative_save_s"]
    assert "total_s" not in stored["timings"]
    table = cli("checkpoints", ref)
    assert table.code == 0, str(table)
    row = next(line for line in table.stdout.splitlines() if f"{ref}@" in line)
    cells = [c.strip() for c in re.split(r"[│|]", row) if c.strip()]
    assert f"{saved:.2f}" in cells, (cells, saved)  # the column was blank for every one


def test_ids_stay_whole_in_a_narrow_terminal(cli: Cli) -> None:
    """At 60 columns the id column was cut to "local:a-rat…": two workloads with a common
    prefix looked the same, and no id could be copied. Now a cell folds onto more lines."""
    ref = cli.start_counter("a-rather-long-workload-name")
    shown = cli("workloads", COLUMNS="60")
    assert shown.code == 0 and "…" not in shown.stdout, shown.stdout
    first = [line.split("│")[1].strip() for line in shown.stdout.splitlines() if "│" in line]
    assert ref in "".join(first), first  # the id's pieces, top to bottom
