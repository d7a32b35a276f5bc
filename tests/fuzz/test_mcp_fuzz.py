"""Every MCP tool, fuzzed through a real SDK client session (in-memory transport).

The tools and their input schemas come from the server's own ``tools/list`` with every
toolset served (the ``capacity`` tools too, which the default list leaves out), so a tool
added or reshaped elsewhere is covered as it is. Arguments come from ``strategies.arguments``
(well-typed, wrong-typed, unknown and missing keys, hostile strings). For every call:

- no crash: never the SDK's sanitised "Error executing tool NAME" (an unexpected
  exception), never a traceback in the text;
- an error names its problem: a schema error names the offending parameter, any other error
  carries clawpoint's code and a "Next step" hint;
- an error changes nothing: no commit to the state database (any table, the audit chain
  included) and the same files in the checkpoint store;
- a success returns structured content.

The service has no workloads: nothing real is mutated. ``CLAWPOINT_FUZZ_EXAMPLES`` sets the
cases per tool (default 1,000, as CI runs it). The cases are drawn from the commit's seed
(``tests.fuzz.seeding``): the same commit draws the same cases, so a failure reproduces with
the same command, and each new commit tries new ones.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import given
from mcp import Client

from core.config import load_settings
from core.service.facade import Service, bootstrap
from mcp_server.server import TOOLSETS, build_server
from tests.fuzz.seeding import fuzzed, with_seed_note
from tests.fuzz.strategies import arguments

EXAMPLES = int(os.environ.get("CLAWPOINT_FUZZ_EXAMPLES", "1000"))
FUZZ = fuzzed(EXAMPLES)
CONFIG = "[recovery]\nevery_s = 3600\n"  # no periodic pass writing during a call
CRASH = re.compile(r"^Error executing tool [\w-]+$")


def _service(home: Path) -> Service:
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(CONFIG)
    os.environ["CLAWPOINT_HOME"] = str(home)
    return bootstrap(load_settings(home))


@cache
def live_tools() -> dict[str, dict[str, Any]]:
    """Tool name -> input schema, from ``tools/list`` of a server on a scratch home."""

    async def listing() -> dict[str, dict[str, Any]]:
        with tempfile.TemporaryDirectory() as tmp:
            async with Client(build_server(_service(Path(tmp) / "h"), toolsets=TOOLSETS)) as client:
                tools = (await client.list_tools()).tools
        return {t.name: dict(t.input_schema) for t in tools}

    saved = os.environ.get("CLAWPOINT_HOME")
    try:
        return anyio.run(listing)
    finally:
        if saved is None:
            os.environ.pop("CLAWPOINT_HOME", None)
        else:
            os.environ["CLAWPOINT_HOME"] = saved


@dataclass
class Session:
    portal: BlockingPortal
    client: Client
    service: Service
    probe: StateProbe
    calls: dict[str, int] = field(default_factory=dict)

    def call(self, tool: str, args: dict[str, Any]) -> Any:
        self.calls[tool] = self.calls.get(tool, 0) + 1
        return self.portal.call(self.client.call_tool, tool, args)


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    saved = os.environ.get("CLAWPOINT_HOME")
    # The SDK logs every failed call at INFO through rich: 60,000 of them cost minutes.
    quiet = logging.getLogger("mcp")
    level = quiet.level
    quiet.setLevel(logging.WARNING)
    service = _service(tmp_path_factory.mktemp("fuzz") / "h")
    try:
        with start_blocking_portal("asyncio") as portal:
            with portal.wrap_async_context_manager(
                Client(build_server(service, toolsets=TOOLSETS))
            ) as client:
                yield Session(portal, client, service, StateProbe(service))
    finally:
        quiet.setLevel(level)
        if saved is None:
            os.environ.pop("CLAWPOINT_HOME", None)
        else:
            os.environ["CLAWPOINT_HOME"] = saved


class StateProbe:
    """Whether anything was written: SQLite's ``data_version`` on a connection of our own
    changes whenever another connection commits (any table, the audit chain included), and
    the checkpoint store's file names and sizes. Cheap enough to run around every call."""

    def __init__(self, service: Service) -> None:
        self.conn = sqlite3.connect(service.settings.state_db, check_same_thread=False)
        self.store = service.settings.home / "checkpoints"

    def __call__(self) -> tuple[int, int, tuple[tuple[str, int], ...]]:
        version = int(self.conn.execute("PRAGMA data_version").fetchone()[0])
        rows = int(self.conn.execute("SELECT count(*) FROM audit").fetchone()[0])
        files = tuple(
            (str(p.relative_to(self.store)), p.stat().st_size if p.is_file() else -1)
            for p in sorted(self.store.rglob("*"))
        ) if self.store.exists() else ()  # fmt: skip
        return version, rows, files


def text_of(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


def check_result(tool: str, schema: dict[str, Any], args: dict[str, Any], result: Any) -> None:
    text = text_of(result)
    shown = json.dumps(args)[:300]
    assert "Traceback" not in text, f"{tool}({shown}) leaked a traceback: {text[:2000]}"
    if not result.is_error:
        assert isinstance(result.structured_content, dict), f"{tool}({shown}): {text[:500]}"
        return
    assert not CRASH.match(text.strip()), f"{tool}({shown}) crashed (see the server log)"
    if re.search(r"\d+ validation errors? for ", text):
        names = set(args) | set(schema.get("properties", {}))
        # Pydantic puts each error's location (the parameter) on an unindented line.
        locs = [line for line in text.split("\n")[1:] if line and line[0] not in " \t"]
        # Known limit (docs/reliability.md): pydantic shows a key with control characters or
        # leading/trailing blanks raw, so the line that names it is unreadable.
        unreadable = any(k != k.strip() or not k or not k.isprintable() for k in args)
        assert unreadable or (locs and all(any(n in loc for n in names) for loc in locs)), (
            f"{tool}({shown}): the schema error names no parameter: {text[:500]}"
        )
        return
    assert "(error: " in text and "Next step:" in text, (
        f"{tool}({shown}): the error has no code or next step: {text[:500]}"
    )


# 1,000 calls take about 5-10 s of CPU; a busy machine stretches that far past the suite's
# default per-test timeout.
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("tool", sorted(live_tools()))
def test_tool_survives_generated_arguments(session: Session, tool: str) -> None:
    schema = live_tools()[tool]

    @FUZZ
    @given(args=arguments(schema))
    def case(args: dict[str, Any]) -> None:
        before = session.probe()
        result = session.call(tool, args)
        check_result(tool, schema, args, result)
        if result.is_error:
            assert session.probe() == before, (
                f"{tool}({json.dumps(args)[:300]}) failed but changed the state: {text_of(result)}"
            )

    with with_seed_note():
        case()
    report = Path(os.environ.get("CLAWPOINT_FUZZ_REPORT", "")) if "CLAWPOINT_FUZZ_REPORT" in (
        os.environ) else None  # fmt: skip
    if report is not None:
        with report.open("a") as out:
            out.write(json.dumps({"tool": tool, "cases": session.calls.get(tool, 0)}) + "\n")
