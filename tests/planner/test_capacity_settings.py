"""``[capacity] grow_after_wait_s``: the site's threshold for proposing a pool's growth.

The planner's rule takes it as ``PlannerConfig.pool_min_wait_s``; the service hands it the
site's value (``core.service.insights.propose``). Its default is the rule's own
(``capacity_advice.MIN_WAIT_S``), so a site that sets nothing plans as before; a bad value is
refused when the file is read. A runbook's pool reading (``list_pools`` with ``pool`` and
no ``min_wait_minutes``) takes the same value. tests/slurm/test_capacity_advice.py sees it
end to end (a low threshold from config.toml, through the installed ``clawpoint watch``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core import errors
from core.config import CapacityConfig, load_settings
from core.planner.capacity_advice import MIN_WAIT_S
from core.planner.planner import PlannerConfig
from core.runbooks import pool_reading
from core.service.facade import bootstrap


def test_the_default_is_the_rules_own() -> None:
    assert CapacityConfig().grow_after_wait_s == MIN_WAIT_S == PlannerConfig().pool_min_wait_s


def test_config_toml_sets_it_and_a_negative_wait_is_refused(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[capacity]\ngrow_after_wait_s = 5\n")
    assert load_settings(tmp_path).capacity.grow_after_wait_s == 5.0
    (tmp_path / "config.toml").write_text("[capacity]\ngrow_after_wait_s = -1\n")
    with pytest.raises(errors.InvalidInput, match="grow_after_wait_s"):
        load_settings(tmp_path)


def test_a_runbook_reads_a_pool_against_the_same_threshold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "config.toml").write_text(
        '[capacity]\ngrow_after_wait_s = 7\n[local]\nnodes = [{ name = "node-a", '
        'labels = { pool = "spot" } }]\n'
    )
    service = bootstrap(load_settings(tmp_path))
    seen: list[float] = []

    def rule(*args: object, min_wait_s: float, **kw: object) -> None:
        seen.append(min_wait_s)

    monkeypatch.setattr(pool_reading, "pool_change", rule)
    pool_reading.read_pool(service, "local:spot")
    pool_reading.read_pool(service, "local:spot", min_wait_s=120.0)  # the runbook's own
    assert seen == [7.0, 120.0]
