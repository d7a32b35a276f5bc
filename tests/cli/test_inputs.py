"""Inputs a person gets wrong, through the installed command: refused with a message that
names the valid choices (exit 2) and changes nothing; and a request stays reviewable after
it was decided.

- ``approvals grant --scope`` with a key no plan carries (``../x``, ``partiton``);
- ``approvals grant --reason ''`` (or blank): refused, not replaced by a default;
- a checkpoint id with leading zeros (``@0001``): refused, never read as ``@1``;
- hints name commands (``'clawpoint workloads'``), never MCP tools;
- ``approvals show`` of an approved (or denied) request: exit 0 with its state, no code.
"""

from __future__ import annotations

import pytest

from core.config import load_settings
from core.model import Action, Principal, PrincipalKind
from core.service.facade import bootstrap
from tests.cli.conftest import ROOT, Cli

AGENT = Principal(id="mcp:stdio/cafe0001", kind=PrincipalKind.AGENT)


@pytest.fixture
def mine(cli: Cli) -> Cli:
    """The installed command running this checkout's code (the script imports ``core``)."""
    cli.extra_env["PYTHONPATH"] = str(ROOT)
    return cli


def _refused(r: object, *needles: str) -> None:
    from tests.cli.conftest import Result

    assert isinstance(r, Result)
    assert r.code == 2, str(r)
    for needle in needles:
        assert needle in r.stderr + r.stdout, str(r)


@pytest.mark.parametrize(
    ("scope", "needle"),
    [("../x=y", "unknown scope key '../x'"),
     ("partiton=gpu", "did you mean 'partition'?"),
     ("Trigger=spot-interruption", "unknown scope key 'Trigger'"),
     ("labels.=x", "unknown scope key 'labels.'"),
     ("labels.../x=y", "unknown scope key 'labels.../x'"),
     ("partition= ", "1 to 256 printable characters")],
)  # fmt: skip
def test_grant_scope_keys_are_checked(mine: Cli, scope: str, needle: str) -> None:
    r = mine("approvals", "grant", "--action", "migrate", "--scope", scope, "--reason", "x")
    _refused(r, "error (invalid-input)", needle)
    if "unknown scope key" in needle:
        assert "trigger, backend, target, namespace, partition, node, pool" in r.stderr
        assert "labels.KEY, node_labels.KEY" in r.stderr
    assert mine("approvals", "grants", "--all", "--json").json() == []


def test_grant_scope_keys_that_plans_carry_are_accepted(mine: Cli) -> None:
    r = mine("approvals", "grant", "--action", "migrate", "--scope", "partition=gpu",
             "--scope", "labels.app.kubernetes.io/name=trainer", "--scope", "trigger=spot",
             "--reason", "spot notices", "--json")  # fmt: skip
    assert r.code == 0, str(r)
    assert r.json()["scope"] == {
        "partition": "gpu", "labels.app.kubernetes.io/name": "trainer", "trigger": "spot",
    }  # fmt: skip
    twice = mine("approvals", "grant", "--action", "migrate", "--scope", "node=a",
                 "--scope", "node=b")  # fmt: skip
    _refused(twice, "scope key 'node' is given twice")


@pytest.mark.parametrize("reason", ["", "   ", "\t"])
def test_grant_with_an_empty_reason_is_refused(mine: Cli, reason: str) -> None:
    r = mine("approvals", "grant", "--action", "checkpoint", "--reason", reason)
    _refused(r, "--reason is empty")
    assert mine("approvals", "grants", "--all", "--json").json() == []


def test_checkpoint_ids_with_leading_zeros_are_refused(mine: Cli) -> None:
    for ref in ("local:x@0001", "local:x@01"):
        r = mine("restore", ref, "--dry-run")
        _refused(r, f"malformed checkpoint id {ref!r}", "without leading zeros")
        assert "'clawpoint checkpoints'" in r.stderr and "list_checkpoints" not in r.stderr


def test_hints_name_commands_not_tools(mine: Cli) -> None:
    r = mine("migrate", "local:nope", "--dry-run")
    assert r.code == 3 and "hint: see the existing ids with 'clawpoint workloads'" in r.stderr, r
    assert "list_workloads" not in r.stderr
    r = mine("approvals", "show", "apr-nope", "--json")
    assert r.code == 3 and r.json()["hint"] == "list them with 'clawpoint approvals list --all'", r


def test_approvals_show_reviews_a_request_in_any_state(mine: Cli) -> None:
    ref = mine.start_counter("review")
    service = bootstrap(load_settings(mine.home))
    asked = service.act(Action.MIGRATE, ref, {}, principal=AGENT, reason="cheaper node")
    assert asked.status == "approval_required" and asked.approval is not None, asked
    approval_id = str(asked.approval["id"])
    pending = mine("approvals", "show", approval_id)
    assert pending.code == 0 and "Code: " in pending.stdout, str(pending)
    assert f"clawpoint approvals approve {approval_id}" in pending.stdout
    assert mine("approvals", "approve", approval_id).code == 0
    approved = mine("approvals", "show", approval_id)
    assert approved.code == 0, str(approved)
    assert "State: approved by " in approved.stdout and "via cli" in approved.stdout, approved
    assert "Code: " not in approved.stdout and "clawpoint approvals approve" not in approved.stdout
    as_json = mine("approvals", "show", approval_id, "--json")
    assert as_json.code == 0 and as_json.json()["approval"]["status"] == "approved", as_json
    denied_ask = service.act(Action.PREEMPT, ref, {}, principal=AGENT, reason="make room")
    assert denied_ask.approval is not None
    denied_id = str(denied_ask.approval["id"])
    assert mine("approvals", "deny", denied_id, "--why", "not now").code == 0
    denied = mine("approvals", "show", denied_id)
    assert (
        denied.code == 0 and "State: denied by " in denied.stdout and "(not now)" in denied.stdout
    )
