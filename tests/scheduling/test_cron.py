"""The cron line of docs/scheduling.md, run exactly as written through ``sh -c`` with cron's
environment (``env -i``, ``PATH=/usr/bin:/bin``): quiet when nothing happens, the finding's
line when something does, and one more line only when watch really failed."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.scheduling.conftest import CLAWPOINT, REPO, Site

DOC = REPO / "docs" / "scheduling.md"


def cron_command(home: Path) -> str:
    """The command part of the documented crontab line, paths replaced by this machine's."""
    lines = [ln for ln in DOC.read_text().splitlines() if ln.startswith("* * * * * ")]
    assert len(lines) == 1, "docs/scheduling.md should hold exactly one crontab line"
    command = lines[0].split(" ", 5)[5]
    assert "/opt/clawpoint/.venv/bin/clawpoint" in command and "/var/lib/clawpoint" in command
    return command.replace("/opt/clawpoint/.venv/bin/clawpoint", str(CLAWPOINT)).replace(
        "/var/lib/clawpoint", str(home)
    )


def run_like_cron(command: str) -> subprocess.CompletedProcess[str]:
    env = ["env", "-i", "PATH=/usr/bin:/bin", "SHELL=/bin/sh", "HOME=/root", "LOGNAME=root"]
    return subprocess.run(
        [*env, "/bin/sh", "-c", command], capture_output=True, text=True, timeout=300,
        check=False, cwd="/",
    )  # fmt: skip


def test_quiet_pass_prints_nothing(site: Site) -> None:
    site.start_workload()
    out = run_like_cron(cron_command(site.home))
    assert (out.returncode, out.stdout) == (0, ""), out


def test_a_pass_that_needs_a_person_prints_its_line_only(site: Site) -> None:
    site.start_workload()
    site.imds.mark_instance_action("terminate", in_seconds=120)
    out = run_like_cron(cron_command(site.home))
    assert out.returncode == 0, out
    lines = out.stdout.splitlines()
    assert lines and all(ln.startswith("attention: ") for ln in lines), out.stdout
    assert "failed" not in out.stdout  # exit 20 is not a failure


def test_a_pass_that_acted_prints_its_line_only(site: Site) -> None:
    site.start_workload()
    site.grant_spot_moves()
    site.imds.mark_instance_action("terminate", in_seconds=120)
    out = run_like_cron(cron_command(site.home))
    assert out.returncode == 0, out
    assert out.stdout.startswith("acted: migrate local:counter"), out.stdout
    assert "clawpoint watch failed" not in out.stdout  # exit 21 is not a failure


def test_a_failing_pass_adds_a_failure_line(site: Site) -> None:
    (site.home / "config.toml").write_text("[signals]\nno_such_key = 1\n")
    out = run_like_cron(cron_command(site.home))
    assert "clawpoint watch failed (exit " in out.stdout, out
    code = int(out.stdout.rsplit("(exit ", 1)[1].split(")")[0])
    assert code not in (0, 20, 21)
