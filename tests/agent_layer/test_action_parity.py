"""The action catalogue (core/actions.py) against every interface, as users reach them.

- Parity: every catalogue action is an MCP tool of a live ``clawpoint serve`` (stdio, real
  client) whose arguments are exactly the target, the model's fields, ``dry_run`` and
  ``reason``; a command of the installed CLI (``--help`` read as a subprocess) with the
  target argument and one option per field; and a runbook call taking the same arguments.
- Validation errors list the valid arguments and name the right action in the caller's
  words: ``checkpoint_workload(stop=true)`` names ``preempt_workload`` over MCP, and
  ``clawpoint checkpoint --stop`` names ``clawpoint preempt`` in the CLI.
- Ids: node targets and ``to`` take ``node-a`` and ``local:node-a`` alike; a bare name two
  backends share is refused listing both; outputs give full ids (``last_checkpoint``).
- The new CLI commands (``scale``, ``delete-checkpoint``, ``nodes cordon``) exit with the
  codes docs/cli.md lists.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from core import actions, errors
from core.actions import CATALOGUE, Interface
from core.model import Action, NodeInfo
from core.runbooks.calls import CALLS, CallContext
from core.state.workloads import WorkloadRecord
from tests.backends.named import CLAWPOINT, InstalledCli
from tests.service.conftest import service, settings  # noqa: F401

ROOT = Path(__file__).resolve().parents[2]
COMMON = {"dry_run", "reason"}


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env["CLAWPOINT_HOME"] = str(home)
    return env


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("parity") / "home"


def _mcp(home: Path, calls: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[Any]]:
    """The live tool list of ``clawpoint serve`` with every toolset (name -> input schema),
    and the results of ``calls`` made through the same real client."""
    params = StdioServerParameters(
        command=str(CLAWPOINT), args=["serve", "--toolsets", "default,capacity"], env=_env(home)
    )

    async def run() -> tuple[dict[str, Any], list[Any]]:
        async with Client(params) as client:
            tools = {t.name: t.input_schema for t in (await client.list_tools()).tools}
            results = [await client.call_tool(name, args) for name, args in calls]
            return tools, results

    return anyio.run(run)


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**_env(home), "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([str(CLAWPOINT), *args], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL, check=False)  # fmt: skip


def test_every_action_is_an_mcp_tool_with_the_catalogue_arguments(home: Path) -> None:
    tools, _ = _mcp(home, [])
    for spec in CATALOGUE.values():
        assert spec.mcp_tool in tools, f"{spec.action.value}: no MCP tool {spec.mcp_tool}"
        schema = tools[spec.mcp_tool]
        expected = {spec.target.value, *spec.fields(), *COMMON}
        assert set(schema["properties"]) == expected, spec.mcp_tool
        required = {n for n in spec.fields() if spec.params.model_fields[n].is_required()}
        assert set(schema.get("required", [])) == {spec.target.value, *required}, spec.mcp_tool


def test_every_action_is_an_installed_cli_command_with_the_catalogue_options() -> None:
    cli = InstalledCli()
    for spec in CATALOGUE.values():
        found = cli.help(spec.cli)
        assert found is not None, f"{spec.cli_command} is not a command of the installed CLI"
        shown = [a.strip("{}[]") for a in found.arguments]
        assert shown == [spec.target.value.upper()], (spec.cli, found.arguments)
        for name in spec.fields():
            assert "--" + name.replace("_", "-") in found.options, (spec.cli, name)
        assert {"--json", "--yes", "--reason", "--dry-run"} <= set(found.options), spec.cli
        # Nothing beyond the catalogue's fields and the common options (no drift).
        extra = set(found.options) - {"--" + n.replace("_", "-") for n in spec.fields()}
        extra -= {"--json", "--yes", "-y", "--reason", "--dry-run", "--help"}
        extra -= {f"--no-{n.replace('_', '-')}" for n in spec.fields()}
        assert not extra, (spec.cli, extra)


def test_every_action_is_a_runbook_call_taking_the_catalogue_arguments(
    service: Any,  # noqa: F811
) -> None:
    ctx = CallContext(principal=actions_principal())
    for spec in CATALOGUE.values():
        assert spec.runbook_call in CALLS, spec.runbook_call
        with pytest.raises(errors.InvalidInput) as info:
            CALLS[spec.runbook_call](service, {"bogus_arg": 1}, ctx)
        for name in (spec.target.value, *spec.fields(), *COMMON):
            assert name in info.value.hint, (spec.runbook_call, name, info.value.hint)


def actions_principal() -> Any:
    from core.model import Principal, PrincipalKind

    return Principal(id="parity", kind=PrincipalKind.AGENT)


def test_checkpoint_with_stop_names_preempt_in_each_interface(home: Path) -> None:
    _, (result,) = _mcp(home, [("checkpoint_workload", {"workload": "local:w", "stop": True})])
    text = result.content[0].text
    assert result.is_error and "preempt_workload" in text, text
    assert "workload, reason, dry_run" in text, "the error lists the valid arguments"
    proc = _cli(home, "checkpoint", "local:w", "--stop")
    assert proc.returncode == errors.InvalidInput.exit_code, proc.stderr
    assert "clawpoint preempt" in proc.stderr and "preempt_workload" not in proc.stderr
    with pytest.raises(errors.InvalidInput) as info:
        actions.parse(Action.MIGRATE, {"node": "node-b"}, interface=Interface.CLI)
    assert "--to" in info.value.hint and "--node" in info.value.message


def test_node_ids_bare_and_qualified_alike(home: Path) -> None:
    calls = [
        ("cordon_node", {"node": "node-a", "dry_run": True}),
        ("cordon_node", {"node": "local:node-a", "dry_run": True}),
        ("drain_node", {"node": "node-a", "to": "local:node-b", "dry_run": True}),
        ("drain_node", {"node": "local:node-a", "to": "node-b", "dry_run": True}),
        ("drain_node", {"node": "node-a", "to": "slurm:n2", "dry_run": True}),
    ]
    _, results = _mcp(home, calls)
    plans = [r.structured_content for r in results[:4]]
    assert all(not r.is_error for r in results[:4]), [r.content for r in results]
    assert plans[0]["plan"]["hash"] == plans[1]["plan"]["hash"]
    assert plans[2]["plan"]["hash"] == plans[3]["plan"]["hash"]
    assert results[4].is_error and "slurm" in results[4].content[0].text
    for target in ("node-a", "local:node-a"):
        proc = _cli(home, "nodes", "cordon", target, "--dry-run", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["plan"]["target"] == "local:node-a"


def test_a_bare_node_name_two_backends_share_is_refused_listing_both(
    service: Any,  # noqa: F811
) -> None:
    class Twin:
        name = "twin"

        def nodes(self) -> list[NodeInfo]:
            return [NodeInfo(id="twin:node-a", backend="twin", name="node-a")]

    service.backends["twin"] = Twin()
    try:
        with pytest.raises(errors.InvalidInput) as info:
            service.resolve_node("node-a")
        assert "local:node-a" in info.value.hint and "twin:node-a" in info.value.hint
        backend, name = service.resolve_node("twin:node-a")
        assert (backend.name, name) == ("twin", "node-a")
    finally:
        del service.backends["twin"]


def test_new_cli_commands_exit_codes(home: Path) -> None:
    # docs/cli.md: 2 bad input, 3 not found, 4 not supported, 6 not confirmed.
    assert _cli(home, "scale", "local:w").returncode == 2  # --replicas missing
    # The local backend cannot scale: not supported, with the backend's hint.
    assert _cli(home, "scale", "local:nope", "--replicas", "2", "--yes").returncode == 4
    proc = _cli(home, "delete-checkpoint", "local:nope@1", "--yes", "--json")
    assert proc.returncode == 3 and json.loads(proc.stdout)["error"] == "not-found"
    assert _cli(home, "delete-checkpoint", "nope", "--json").returncode == 2
    assert _cli(home, "nodes", "cordon", "nowhere", "--yes").returncode == 3
    proc = _cli(home, "nodes", "cordon", "node-a", "--json")  # disruptive, not confirmed
    assert proc.returncode == 6, proc.stderr
    proc = _cli(home, "nodes", "cordon", "node-a", "--yes", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "executed"
    listed = json.loads(_cli(home, "nodes", "--json").stdout)
    assert next(n for n in listed if n["name"] == "node-a")["schedulable"] is False
    proc = _cli(home, "nodes", "undrain", "local:node-a", "--yes", "--json")
    assert proc.returncode == 0, proc.stderr


def test_outputs_give_full_checkpoint_ids() -> None:
    record = WorkloadRecord(name="w1", state="running", last_checkpoint="w1@2")
    assert record.to_info().last_checkpoint == "local:w1@2"
    assert WorkloadRecord(name="w2").to_info().last_checkpoint is None
