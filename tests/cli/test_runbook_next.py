"""What a waiting run says to do next, in each interface's words: a person at the command
line is told the command to type, an agent (MCP, and runbooks' own records) the tool to
call. Before, both were told ``continue_runbook RUN``, which a person cannot type."""

from __future__ import annotations

from core.config import load_settings
from core.runbooks.engine import Engine
from core.service.facade import bootstrap
from tests.cli.conftest import Cli


def test_a_run_waiting_for_an_answer_names_the_command_to_type(cli: Cli) -> None:
    args = ("runbook", "run", "node-maintenance-drain", "--param", "node=local:node-a")
    shown = cli(*args)
    assert shown.code == 0, str(shown)
    run_id = next(w for w in shown.stdout.split() if w.startswith("run-"))
    said = f"'clawpoint runbook continue {run_id}' with --answer one of: drain, cancel"
    assert said in " ".join(shown.stdout.split()), shown.stdout
    as_json = cli("runbook", "status", run_id, "--json").json()
    assert as_json["next"] == f"Ask the person, then {said}"
    [listed] = [r for r in cli("runbook", "runs", "--json").json() if r["id"] == run_id]
    assert listed["next"] == as_json["next"] and "next_neutral" not in listed

    agent_view = Engine(bootstrap(load_settings(cli.home))).status(run_id)
    assert agent_view.next == (
        f"Ask the person, then continue_runbook(run_id={run_id}) with answer one of: drain, cancel"
    )
    assert "⟦" not in agent_view.model_dump_json()
