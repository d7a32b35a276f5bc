"""``standby_submit`` builds its ``sbatch`` from the source job's record, which its owner can
edit (``scontrol update comment=``): nothing of the comment reaches the standby's
environment or comment unchecked, and each reason for no standby says itself. No cluster:
a recording transport stands in for the commands (what they print is Slurm 22.05's)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from core.backends.base import no_progress
from core.backends.slurm import handoff
from core.backends.slurm.config import SlurmConfig
from core.backends.slurm.sbatch import submitting_user

SCRIPT = '#!/bin/bash\n#SBATCH --exclude=n2\n#SBATCH --nodelist=n1\nexport CLAWPOINT_HOME="x/job-${CLAWPOINT_JOB_HOME_ID:-$SLURM_JOB_ID}"\n'


class Transport:
    def __init__(self, script: str = SCRIPT) -> None:
        self.script = script
        self.calls: list[tuple[str, list[str], str | None]] = []

    def run(self, cmd: str, args: list[str], *, stdin: str | None = None) -> str:
        self.calls.append((cmd, args, stdin))
        return self.script if cmd == "scontrol" else "77\n"


def context(comment: str, *, deps: str = "", **cfg: Any) -> Any:
    raw = [{"job_id": 41, "name": "clawpoint-lin", "comment": comment,
            "standard_output": "/logs/lin.out", "current_working_directory": "/work"},
           {"job_id": 50, "dependency": deps}]  # fmt: skip
    return SimpleNamespace(
        cfg=SlurmConfig(checkpoint_dir="/shared", **cfg), transport=Transport(),
        raw_jobs=lambda: raw,
    )  # fmt: skip


def submit(b: Any, owner: str | None = None) -> dict[str, Any]:
    args = {"job": "41", "lineage": "lin", "owner": owner or submitting_user(),
            "fields": {"NodeList": "n2", "ExcNodeList": ""}, "timeout_s": 360}  # fmt: skip
    out: dict[str, Any] = handoff.standby_submit(b, args, no_progress)
    return out


def sbatch_argv(b: Any) -> list[str]:
    return next(args for cmd, args, _ in b.transport.calls if cmd == "sbatch")


def test_the_standby_is_its_scripts_job_placed_by_the_move() -> None:
    b = context("clawpoint:lin,engine=criu,home=12")
    out = submit(b)
    assert out["standby"] == "77" and len(out["token"]) == 12 and out["why"] == ""
    argv = sbatch_argv(b)
    assert f"--comment=clawpoint:lin,engine=criu,standby={out['token']},from=41,home=12" in argv
    assert "--nodelist=n2" in argv and "--output=/logs/lin.out" in argv
    assert any(a.startswith("--export=ALL,") and "CLAWPOINT_JOB_HOME_ID=12" in a for a in argv)
    script = next(stdin for cmd, _, stdin in b.transport.calls if cmd == "sbatch")
    assert script is not None and "--exclude" not in script and "--nodelist" not in script


def test_an_edited_comment_reaches_neither_environment_nor_comment() -> None:
    b = context("clawpoint:lin,engine=../../bin/sh,home=../../etc")
    out = submit(b)
    argv = " ".join(sbatch_argv(b))
    assert "../" not in argv
    assert "CLAWPOINT_JOB_HOME_ID=41" in argv and f"standby={out['token']},from=41,home=41" in argv


@pytest.mark.parametrize(
    ("b", "owner", "why"),
    [
        (context("clawpoint:lin", live_handoff=False), None, "live handoffs are off"),
        (context("clawpoint:lin"), "somebody-else", "only its owner may submit its standby"),
        # As squeue --json prints it (Slurm 22.05, checked on the loopback cluster).
        (context("clawpoint:lin", deps="afterok:41(unfulfilled)"), None, "job(s) 50 depend on it"),
    ],
)
def test_no_standby_says_why_and_submits_nothing(b: Any, owner: str | None, why: str) -> None:
    out = submit(b, owner)
    assert out["standby"] == "" and why in out["why"], out
    assert not [c for c in b.transport.calls if c[0] == "sbatch"]


def test_a_dependency_on_another_id_with_the_same_digits_is_none_on_it() -> None:
    b = context("clawpoint:lin", deps="afterok:410(unfulfilled),afterany:141")
    assert submit(b)["standby"] == "77"


def test_a_script_from_before_live_moves_gets_the_requeue() -> None:
    b = context("clawpoint:lin")
    b.transport.script = '#!/bin/bash\nexport CLAWPOINT_HOME="x/job-$SLURM_JOB_ID"\n'
    out = submit(b)
    assert out["standby"] == "" and "predates live handoffs" in out["why"]
