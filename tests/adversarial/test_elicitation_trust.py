"""Elicitation is not a person: a client answering "accept" approves nothing unless the operator
said so, and then only as the client's user, never as a named person, and never where a rule
demands out-of-band approval.

The client here is the kind an agent could run itself: its elicitation callback accepts at
once, without anybody reading the question.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp.types import ElicitResult

from core import errors
from core.guardrails.approvals import ApprovalStatus
from core.model import Principal, PrincipalKind
from tests.adversarial.conftest import (
    PERSON,
    ROOT,
    TRANSPORTS,
    Lab,
    agent_session,
    approval_id_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.criu]

TRUSTED = "trusted-client"
ALLOW_TRUSTED = f"""[mcp]
elicitation_approval = true
elicitation_clients = ["{TRUSTED}"]
elicitation_transports = ["stdio", "http"]
"""


def auto_accept(asked: list[str]) -> Any:
    async def callback(ctx: Any, params: Any) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult(action="accept", content={"approve": True, "note": "sure"})

    return callback


def _elicitation_offered(out: dict[str, Any]) -> bool:
    return any(p["kind"] == "elicitation" for p in out["approval"]["how_to_approve"])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_auto_accept_approves_nothing_by_default(
    lab: Lab, transport: str, need_criu: None
) -> None:
    workload = lab.start("auto-accept")
    asked: list[str] = []
    async with agent_session(
        lab, transport, elicitation_callback=auto_accept(asked), client_name=TRUSTED
    ) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload, "reason": "cheaper"})
    assert asked == []  # nobody was even asked
    approval_id = approval_id_of(out)
    assert not _elicitation_offered(out)
    view = lab.service.get_approval(approval_id)
    assert view.status is ApprovalStatus.PENDING and view.decided_by is None
    assert lab.executions() == [] and lab.node_of(workload) == "node-a"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_allowed_client_confirms_as_its_user_not_as_a_person(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    lab = lab_factory(ALLOW_TRUSTED)
    workload = lab.start("client-user")
    asked: list[str] = []
    server = lab.http_server() if transport == "http" else None
    # A client the operator did not name is not asked, whatever it declares.
    async with agent_session(
        lab, transport, server=server, elicitation_callback=auto_accept(asked),
        client_name="some-other-client",
    ) as other:  # fmt: skip
        out = await other.ok("migrate_workload", {"workload": workload})
        assert approval_id_of(out) and not _elicitation_offered(out)
    assert asked == [] and lab.executions() == []
    async with agent_session(
        lab, transport, server=server, elicitation_callback=auto_accept(asked),
        client_name=TRUSTED,
    ) as agent:  # fmt: skip
        out = await agent.ok("migrate_workload", {"workload": workload})
        assert out["status"] == "executed", out
    assert len(asked) == 1
    view = next(v for v in lab.service.list_approvals(status=None) if v.status.value == "used")
    assert view.decided_via == "elicitation"
    assert view.decided_by == f"elicitation:{TRUSTED}@{view.requester}"
    entry = next(e for e in lab.service.audit.entries(subject=view.id, limit=50)
                 if e.kind == "approval.approved")  # fmt: skip
    assert entry.principal.startswith("client-user:elicitation:"), entry
    assert lab.node_of(workload) == "node-b"


async def test_transports_not_named_are_not_asked(
    lab_factory: Callable[[str], Lab], need_criu: None
) -> None:
    lab = lab_factory(f'[mcp]\nelicitation_approval = true\nelicitation_clients = ["{TRUSTED}"]\n')
    workload = lab.start("stdio-only")  # the default transports: stdio only
    asked: list[str] = []
    async with agent_session(
        lab, "http", elicitation_callback=auto_accept(asked), client_name=TRUSTED
    ) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
    assert asked == [] and approval_id_of(out) and lab.executions() == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_out_of_band_rule_is_never_met_by_the_client(
    lab_factory: Callable[[str], Lab], transport: str, need_criu: None
) -> None:
    lab = lab_factory(
        ALLOW_TRUSTED
        + """
[[policy.rules]]
id = "moves-need-a-person"
outcome = "approve"
actions = ["migrate"]
approval = "out-of-band"
"""
    )
    workload = lab.start("oob")
    asked: list[str] = []
    async with agent_session(
        lab, transport, elicitation_callback=auto_accept(asked), client_name=TRUSTED
    ) as agent:
        out = await agent.ok("migrate_workload", {"workload": workload})
        approval_id = approval_id_of(out)
        assert asked == [] and not _elicitation_offered(out)
        view = lab.service.get_approval(approval_id)
        assert view.needs == "out-of-band" and view.status is ApprovalStatus.PENDING
        # The store refuses a client's confirmation for it, whoever calls.
        user = Principal(id=f"elicitation:{TRUSTED}@x", kind=PrincipalKind.CLIENT_USER)
        with pytest.raises(errors.PolicyDenied, match="out-of-band"):
            lab.service.guard.approvals.confirm_by_client(approval_id, user, approved=True)
        assert lab.executions() == [] and lab.node_of(workload) == "node-a"
        # A person on a people path approves it; then the agent runs it.
        lab.service.approve(approval_id, principal=PERSON, via="cli")
        done = await agent.ok("execute_approved", {"approval_id": approval_id})
        assert done["status"] == "executed", done
    assert lab.node_of(workload) == "node-b"


@pytest.mark.parametrize(
    ("config", "level", "says"),
    [
        ("", "ok", "off: an answer in an agent's own client approves nothing"),
        ('[mcp]\nelicitation_approval = true\nelicitation_clients = ["*"]\n', "warn",
         "on for any client over stdio"),
        ("[mcp]\nelicitation_approval = true\n", "warn", "no client is asked"),
    ],
)  # fmt: skip
def test_config_check_says_who_may_approve_by_elicitation(
    tmp_path: Path, config: str, level: str, says: str
) -> None:
    (tmp_path / "config.toml").write_text(config)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "clawpoint"), "config", "check", "--json"],
        env={**env, "CLAWPOINT_HOME": str(tmp_path)}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    items = {i["name"]: i for i in json.loads(proc.stdout)["items"]}
    assert items["elicitation"]["level"] == level and says in items["elicitation"]["message"]
