"""Approval floods: how the approver's tools behave with many pending requests.

``python bench/approval_flood.py [--pending 20000] [--code DIR]``

A fresh ``CLAWPOINT_HOME`` gets ``--pending`` pending approval requests (written straight
into the state database, spread over 200 agent sessions, as a flood of agents would leave
them), then the tools a person uses are timed as they run them:

- ``clawpoint approvals list`` with and without ``--json`` (a page, when the CLI pages; the
  whole list before);
- ``clawpoint watch --once --json`` (one pass over an empty local backend);
- the approval page's index over real HTTP after logging in (``clawpoint serve --http``).

Then one agent principal asks ``--asks`` times, through the service as the MCP tools do, for
the same drain with a different reason each time, and the bench reports how many requests
became pending and how many distinct approval ids it was given.

``--code DIR`` imports clawpoint from DIR (to measure another checkout with the same bench).
Results are printed as JSON. Limits: one run, wall-clock seconds on a shared machine; the
subprocess figures include the interpreter's start (about 0.5-1 s here).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seed(home: Path, pending: int) -> None:
    from core.config import load_settings
    from core.model import Action, Plan, PlanStep, RiskClass
    from core.service.facade import bootstrap

    service = bootstrap(load_settings(home))
    db = service.db
    with db.read() as conn:
        columns = {r["name"] for r in conn.execute("PRAGMA table_info(approvals)")}
    now = time.time()
    rows: list[dict[str, Any]] = []
    for i in range(pending):
        target = f"local:job-{i}"
        plan = Plan(
            action=Action.MIGRATE, target=target, backend="local", params={},
            steps=[PlanStep(name="save", op="checkpoint", description=f"Checkpoint job-{i}")],
            summary=f"migrate {target}", reason="flood", risk=RiskClass.DISRUPTIVE,
        ).sealed()  # fmt: skip
        created = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now - pending + i))
        session = f"mcp:stdio/{i % 200:08x}"
        row = {
            "id": f"apr-{secrets.token_hex(5)}", "plan_hash": plan.hash,
            "plan": plan.model_dump_json(), "requester": session, "requester_kind": "agent",
            "reason": "flood", "status": "pending", "code_hash": "0" * 64,
            "created_at": created + f".{i % 1000000:06d}+00:00",
            "expires_at": "2999-01-01T00:00:00+00:00",
            "action": "migrate", "target": target, "identity": "mcp:stdio",
        }  # fmt: skip
        rows.append({k: v for k, v in row.items() if k in columns})
    keys = list(rows[0])
    with db.write() as conn:
        conn.executemany(
            f"INSERT INTO approvals({', '.join(keys)}) VALUES({', '.join('?' * len(keys))})",
            [tuple(r[k] for k in keys) for r in rows],
        )


def _timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, int]:
    began = time.perf_counter()
    proc = subprocess.run(argv, env=env, cwd=env["PYTHONPATH"], capture_output=True, text=True,
                          check=False)  # fmt: skip
    took = time.perf_counter() - began
    return took, proc.returncode, len(proc.stdout)


def _page(env: dict[str, str], approver: str) -> dict[str, Any]:
    import httpx2

    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "serve", "--http", "--port", str(port)],
        env=env, cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}/approvals"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx2.get(url, timeout=1)
                break
            except httpx2.TransportError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with httpx2.Client(timeout=120, follow_redirects=False) as client:
            client.post(f"{url}/login", data={"token": approver, "name": "bench"})
            began = time.perf_counter()
            got = client.get(url)
            took = time.perf_counter() - began
        return {"page_index_s": round(took, 3), "page_status": got.status_code,
                "page_bytes": len(got.content)}  # fmt: skip
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _agent_loop(home: Path, asks: int) -> dict[str, Any]:
    from core import errors
    from core.config import load_settings
    from core.model import Action, Principal, PrincipalKind
    from core.service.facade import bootstrap

    service = bootstrap(load_settings(home))
    agent = Principal(id="mcp:bench-agent", kind=PrincipalKind.AGENT)
    statuses: dict[str, int] = {}
    ids: set[str] = set()
    began = time.perf_counter()
    for i in range(asks):
        status: str
        try:
            result = service.act(Action.DRAIN_NODE, "local:node-a", {}, principal=agent,
                                 reason=f"reason {i}")  # fmt: skip
            status = result.status
            if result.approval:
                ids.add(str(result.approval["id"]))
        except errors.ClawpointError as exc:
            status = exc.code
        statuses[status] = statuses.get(status, 0) + 1
    took = time.perf_counter() - began
    pending = [v for v in service.list_approvals(status="pending") if v.requester == agent.id]
    return {"agent_asks": asks, "agent_statuses": statuses, "agent_pending_after": len(pending),
            "agent_distinct_ids": len(ids), "agent_asks_s": round(took, 3)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pending", type=int, default=20_000)
    parser.add_argument("--asks", type=int, default=300)
    parser.add_argument("--code", type=Path, default=ROOT, help="checkout to import")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code))
    home = Path(tempfile.mkdtemp(prefix="clawpoint-flood-"))
    (home / "config.toml").write_text("")
    approver = "approver-" + secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(
        CLAWPOINT_HOME=str(home), PYTHONPATH=str(args.code), COLUMNS="200",
        CLAWPOINT_MCP_TOKEN="agent-" + secrets.token_hex(16), CLAWPOINT_APPROVER_TOKEN=approver,
    )  # fmt: skip
    os.environ["CLAWPOINT_HOME"] = str(home)
    out: dict[str, Any] = {"pending": args.pending, "code": str(args.code)}
    began = time.perf_counter()
    _seed(home, args.pending)
    out["seed_s"] = round(time.perf_counter() - began, 3)
    cli = [sys.executable, "-m", "core.cli"]
    took, code, size = _timed([*cli, "--help"], env)
    out["cli_start_s"] = round(took, 3)
    took, code, size = _timed([*cli, "approvals", "list", "--json"], env)
    out.update(list_json_s=round(took, 3), list_exit=code, list_bytes=size)
    took, code, size = _timed([*cli, "approvals", "list"], env)
    out.update(list_table_s=round(took, 3), list_table_bytes=size)
    took, code, size = _timed([*cli, "watch", "--once", "--json"], env)
    out.update(watch_once_s=round(took, 3), watch_exit=code, watch_bytes=size)
    took, code, size = _timed([*cli, "watch", "--once", "--json"], env)
    out.update(watch_again_s=round(took, 3), watch_again_bytes=size)
    out.update(_page(env, approver))
    out.update(_agent_loop(home, args.asks))
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
