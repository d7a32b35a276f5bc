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
