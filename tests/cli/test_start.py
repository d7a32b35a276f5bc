"""Start-up: what ``clawpoint`` imports before it answers.

The root group lists its commands from a static table (``core.cli.app.COMMANDS``) and a
command imports only its own module. These tests pin that shape:

- the table is the command tree: every command the app runs is in it, under the module that
  defines it, with the help line the command's own help begins with (one source: the
  command's docstring or the catalogue);
- ``clawpoint --help``, run as the installed console script, loads none of core beyond the
  root (``PYTHONPROFILEIMPORTTIME`` lists every module the process imported), so a stray
  import at module level fails here rather than in a benchmark;
- ``clawpoint workloads --json`` with the default configuration (the local backend only)
  loads no other backend, no cloud probe or HTTP client, no MCP, runbooks or action code.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import typer.main

from core import actions
from core.cli import lazy
from core.cli.app import COMMANDS, app
from tests.cli.conftest import CLAWPOINT, Cli

# What `clawpoint --help` may not load: all of core but the root, and every heavy package.
HELP_FORBIDDEN = (
    "core.actions", "core.backends", "core.checkpoint", "core.config", "core.logs",
    "core.model", "core.runbooks", "core.service", "core.signals", "core.specs", "core.state",
    "core.store", "core.watch", "core.guardrails", "core.planner", "core.wrapper",
    "mcp", "mcp_server", "httpx2", "pydantic", "structlog", "tenacity", "uvicorn", "starlette",
    "numpy", "yaml", "rich.progress",
)  # fmt: skip
HELP_ALLOWED_CLI = {"core.cli", "core.cli.app", "core.cli.lazy"}

# What `clawpoint workloads --json` (local backend only) may not load.
WORKLOADS_FORBIDDEN = (
    "core.backends.slurm.backend", "core.backends.slurm.transport",
    "core.backends.kubernetes.backend", "kubernetes", "core.signals.cloud",
    "core.signals.aws", "core.signals.prices", "httpx2", "mcp", "mcp_server", "core.runbooks",
    "core.watch", "core.cli.acting", "core.cli.approvals", "core.cli.runbook", "rich.progress",
    "uvicorn", "starlette", "numpy",
    # Logged lines only (core.logs), the client side of Kubernetes, and the local backend's
    # plan and step tables: a read command neither logs, reaches a cluster nor plans.
    "structlog", "tenacity", "core.backends.kubernetes.connection",
    "core.backends.local.plans", "core.backends.local.steps", "core.backends.local.step_args",
    "core.backends.local.planning",
)  # fmt: skip


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").split("\n\n")[0].split())


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    return {
        m.group(1)
        for m in re.finditer(r"^import time:\s*\d+ \|\s*\d+ \|\s*([\w.]+)$", stderr, re.M)
    }


def _hits(modules: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == f or m.startswith(f + ".") for f in forbidden))


def _run(cli: Cli, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run(
        [str(CLAWPOINT), *args],
        env=cli.env(PYTHONPROFILEIMPORTTIME="1"),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc, _imported(proc.stderr)


def test_the_table_is_the_command_tree() -> None:
    root = typer.main.get_command(app)
    assert list(root.list_commands(None)) == list(COMMANDS)  # type: ignore[arg-type]
    # Every catalogue action is reachable from a table entry.
    for spec in actions.CATALOGUE.values():
        assert spec.cli[0] in COMMANDS, f"{spec.cli_command} has no entry in COMMANDS"
    for name, entry in COMMANDS.items():
        command = lazy.load(name, entry)
        assert command.name == name
        assert command.callback is None or command.callback.__module__ in (
            entry.module,
            "core.cli.acting",  # the action commands, also mounted by core.cli.nodes
        ), f"{name} is defined in {command.callback.__module__}, not {entry.module}"
        assert entry.help == _first_paragraph(command.help), (
            f"COMMANDS[{name!r}].help differs from the command's own help: "
            f"{_first_paragraph(command.help)!r}"
        )
        # Mounted as under one root: shell completion is the root's option (off), not theirs.
        options = {o for p in command.params for o in getattr(p, "opts", ())}
        assert not options & {"--install-completion", "--show-completion"}, name
        assert entry.group == hasattr(command, "list_commands"), (
            f"{name}: group={entry.group} but the command "
            f"{'is' if hasattr(command, 'list_commands') else 'is not'} a group"
        )


@pytest.mark.parametrize("name", list(COMMANDS))
def test_a_loaded_command_is_the_command_run(name: str) -> None:
    """Through the root group (as a run resolves it), each name gives its real command."""
    root = typer.main.get_command(app)
    command = root.get_command(None, name)  # type: ignore[arg-type, attr-defined]
    assert command is not None and command.name == name
    assert _first_paragraph(command.help) == COMMANDS[name].help


def test_help_lists_every_command_and_loads_none(cli: Cli) -> None:
    proc, modules = _run(cli, "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in COMMANDS:
        assert re.search(rf"^\W*{re.escape(name)}\s", proc.stdout, re.M), f"{name} not listed"
    assert modules, "no import list: PYTHONPROFILEIMPORTTIME was not honoured"
    assert not _hits(modules, HELP_FORBIDDEN), _hits(modules, HELP_FORBIDDEN)
    stray = sorted(m for m in modules if m.startswith("core.cli") and m not in HELP_ALLOWED_CLI)
    assert not stray, f"--help imported command modules: {stray}"


def test_workloads_json_loads_only_what_it_reads(cli: Cli) -> None:
    proc, modules = _run(cli, "workloads", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
    assert "core.backends.local.backend" in modules  # the one backend it reads
    assert not _hits(modules, WORKLOADS_FORBIDDEN), _hits(modules, WORKLOADS_FORBIDDEN)


def test_help_is_plain_text_off_a_terminal(cli: Cli) -> None:
    """An agent's shell tool or a script reads help through a pipe: plain text, no Rich boxes
    (a third of the bytes) and no Rich import; the variable that chose it is not left for the
    programs ``clawpoint run`` starts (it is set only around Typer's import)."""
    proc, modules = _run(cli, "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: clawpoint"), proc.stdout
    assert "\u256d" not in proc.stdout and "\u2502" not in proc.stdout  # ╭ │
    assert not _hits(modules, ("rich",)), _hits(modules, ("rich",))
    boxed = subprocess.run([str(CLAWPOINT), "--help"], env=cli.env(TYPER_USE_RICH="1"),
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert "\u256d" in boxed.stdout  # what a terminal gets, and what the variable still asks for
    probe = "import core.cli, os, typer.core; print(typer.core.HAS_RICH, 'TYPER_USE_RICH' in os.environ)"
    env = {k: v for k, v in cli.env().items() if k != "TYPER_USE_RICH"}
    seen = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True,
                          text=True, timeout=120, check=False)  # fmt: skip
    assert seen.stdout.split() == ["False", "False"], seen.stdout + seen.stderr


def test_a_stdio_server_loads_no_http_side(cli: Cli) -> None:
    """``clawpoint serve`` over stdio (what an agent's client starts, once a session) loads
    none of our HTTP side: the Starlette app, the approval page, the bearer-token check. Its
    stdin is closed at once, so it starts, reads the end of input and stops."""
    proc, modules = _run(cli, "serve")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "mcp_server.server" in modules  # it did build the server
    http_side = ("mcp_server.http_app", "mcp_server.approval_page", "mcp_server.auth")
    assert not _hits(modules, http_side), _hits(modules, http_side)
