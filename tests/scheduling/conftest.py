"""Fixtures for the scheduling recipes: a clawpoint state directory with two local nodes, a
fake AWS metadata endpoint on loopback, a small workload on the spot node, and (for the
OpenClaw tests) a real OpenClaw gateway on loopback in a throwaway HOME.

Everything goes through the installed ``clawpoint`` console script, as a scheduler runs it.
Jobs are added and run with the ``openclaw cron`` commands of docs/scheduling.md; the tests read
the gateway's records (and remove a job) through its admin HTTP RPC
(``POST /api/v1/admin/rpc``, OpenClaw's bundled ``admin-http-rpc`` plugin, docs/plugins/
admin-http-rpc.md in its package), which dispatches to the same gateway methods as the
``openclaw cron`` commands' WebSocket RPC (``cron.get`` and ``cron.runs`` answer the same JSON
as ``openclaw cron get|runs --json``, less the ``*Iso`` fields the CLI adds). Each ``openclaw``
command starts Node (about 2.5 s of CPU); an RPC is a loopback request.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.signals.fakes import FakeAwsImds

REPO = Path(__file__).resolve().parents[2]
CLAWPOINT = Path(sys.executable).parent / "clawpoint"
NODE_BIN = Path(os.environ.get("CLAWPOINT_NODE_BIN", "/opt/clawpoint-node/bin"))
TRIGGER_JS = REPO / "scripts" / "openclaw-trigger.js"


def wait_for(
    what: str, check: Callable[[], Any], timeout: float = 120.0, every: float = 1.0
) -> Any:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


@dataclass
class Site:
    """A clawpoint state directory: nodes node-a (on demand) and node-b (spot, this host)."""

    home: Path
    imds: FakeAwsImds

    def env(self) -> dict[str, str]:
        # What cron gives a job, plus PYTHONPATH when the run has one: a second checkout that
        # shares this venv then runs its own code, not the venv's (as tests/cli does).
        kept = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
        return {
            "PATH": "/usr/bin:/bin",
            "CLAWPOINT_HOME": str(self.home),
            "LANG": "C.UTF-8",
            **kept,
        }

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(CLAWPOINT), *args], env=self.env(), capture_output=True, text=True,
            timeout=300, cwd=self.home,
        )  # fmt: skip
        if check:
            assert proc.returncode == 0, f"clawpoint {args}: {proc.returncode}\n{proc.stderr}"
        return proc

    def start_workload(self, name: str = "counter", mb: int = 1) -> None:
        self.cli(
            "run", "--name", name, "--node", "node-b", "--engine", "cooperative", "-d", "--json",
            "--", sys.executable, "-m", "core.workloads.counter", "--state-mb", str(mb),
            "--step-seconds", "0.1",
        )  # fmt: skip

    def grant_spot_moves(self) -> None:
        self.cli(
            "approvals", "grant", "--action", "migrate", "--scope", "trigger=spot-interruption",
            "--json",
        )  # fmt: skip

    def stop_workloads(self) -> None:
        """Kill the wrappers and workloads this site started (their pids from the run dir)."""
        for pids in (self.home / "run").glob("*.pids.json"):
            try:
                data = json.loads(pids.read_text())
            except (OSError, ValueError):
                continue
            for key in ("payload_pid", "wrapper_pid"):
                pid = data.get(key)
                if isinstance(pid, int) and pid > 1:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass


def write_config(home: Path, imds_url: str) -> None:
    (home / "config.toml").write_text(
        f"""
[[local.nodes]]
name = "node-a"
price_per_hour = 3.06
spot = false
[[local.nodes]]
name = "node-b"
price_per_hour = 0.92
spot = true
[checkpoint]
default_engine = "cooperative"
[signals]
node = "local:node-b"
[signals.aws]
enabled = true
base_url = "{imds_url}"
"""
    )


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    if not CLAWPOINT.exists():
        pytest.skip("the clawpoint console script is not installed in this venv (pip install -e .)")
    home = tmp_path / "clawpoint-home"
    home.mkdir()
    with FakeAwsImds() as imds:
        write_config(home, imds.url)
        s = Site(home=home, imds=imds)
        try:
            yield s
        finally:
            s.stop_workloads()


def need_node_tools() -> None:
    node = NODE_BIN / "node"
    if not (node.exists() and (NODE_BIN / "openclaw").exists()):
        pytest.skip(f"Node >= 22 tools not in {NODE_BIN}: run scripts/install-node-tools.sh")


def render_trigger(dest: Path, home: Path) -> Path:
    """The shipped trigger script with its two placeholders filled, as docs/scheduling.md says."""
    text = TRIGGER_JS.read_text()
    dest.write_text(
        text.replace("@CLAWPOINT@", str(CLAWPOINT)).replace("@CLAWPOINT_HOME@", str(home))
    )
    return dest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Gateway:
    """A real OpenClaw gateway on 127.0.0.1, token auth, in its own HOME."""

    home: Path
    port: int
    token: str
    proc: subprocess.Popen[bytes]
    log: Path  # its stdout and stderr
    file_log: Path  # its log file (logging.file): every subsystem, JSON lines

    def env(self) -> dict[str, str]:
        kept = {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}
        return {
            "PATH": f"{NODE_BIN}:/usr/bin:/bin", "HOME": str(self.home), "LANG": "C.UTF-8", **kept,
        }  # fmt: skip

    def openclaw(self, *args: str) -> Any:
        """``openclaw ARGS --port P --token T`` (the CLI a person runs): its JSON output."""
        proc = subprocess.run(
            [str(NODE_BIN / "openclaw"), *args, "--port", str(self.port), "--token", self.token],
            env=self.env(), capture_output=True, text=True, timeout=120, cwd=self.home,
        )  # fmt: skip
        assert proc.returncode == 0, f"openclaw {args}: {proc.returncode}\n{proc.stderr}"
        return json.loads(proc.stdout)

    def rpc(self, method: str, **params: Any) -> Any:
        """The gateway method's payload (its admin HTTP RPC); an error answer fails the test."""
        ok, got = gateway_rpc(self.port, self.token, method, params)
        assert ok, f"gateway {method} {params}: {got}"
        return got

    def add(self, *args: str) -> str:
        job = self.openclaw("cron", "add", *args, "--json")
        return str(job["id"])

    def run(self, job_id: str) -> None:
        # The CLI, not the RPC: a run enqueued over HTTP is refused when it is dispatched
        # ("Gateway client authority closed before dispatching cron.run": the request that
        # asked for it has ended), where the CLI's connection lasts until the run is queued.
        self.openclaw("cron", "run", job_id, "--json")

    def remove(self, job_id: str) -> None:
        """Remove the job if it is there (the tests' cleanup: never raises, so a test's own
        failure is the one reported)."""
        try:
            gateway_rpc(self.port, self.token, "cron.remove", {"id": job_id})
        except OSError:  # the gateway is gone: nothing left to remove
            pass

    def job(self, job_id: str) -> dict[str, Any]:
        return dict(self.rpc("cron.get", id=job_id))

    def runs(self, job_id: str) -> list[dict[str, Any]]:
        return list(self.rpc("cron.runs", id=job_id, limit=50).get("entries", []))


def gateway_rpc(port: int, token: str, method: str, params: dict[str, Any]) -> tuple[bool, Any]:
    """One admin HTTP RPC call: (True, payload) or (False, the error); a gateway that does not
    answer yet raises ``OSError``."""
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v1/admin/rpc",
        data=json.dumps({"method": method, "params": params}).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310 (loopback)
            body = json.loads(resp.read())
    except urllib.error.HTTPError as exc:  # 4xx/5xx carry the gateway's error JSON
        return False, f"HTTP {exc.code}: {exc.read()[:2000]!r}"
    return (True, body.get("payload")) if body.get("ok") else (False, body.get("error"))


def _write_test_config(home: Path, log_file: Path) -> None:
    """Finish the config ``openclaw config set`` wrote (documented keys, one Node start less
    than ``openclaw config set`` for each):

    - ``plugins.entries.admin-http-rpc.enabled``: the admin HTTP RPC the tests read with;
    - ``models.catalogRefresh.enabled: false`` and ``update.checkOnStart: false``: by default
      the gateway fetches https://catalog.openclaw.ai and checks telemetry.openclaw.ai for
      updates (docs/gateway/config-runtime.md in its package); tests talk only to loopback,
      and without these the gateway looked the catalog's name up on the machine's DNS
      server. One lookup has no setting in 2026.9.6: the post-ready prewarm of the plugin
      dashboard asks for clawhub.ai's hosted plugin feed (server-startup-post-attach's
      dashboardDataPrewarmItems) and falls back to the bundled list, logging nothing
      (docs/scheduling.md says so to users);
    - ``logging.file``: the gateway's log in this test's folder, not the host-wide
      /tmp/openclaw, so the teardown can read what this gateway tried.
    """
    path = home / ".openclaw" / "openclaw.json"
    config = json.loads(path.read_text())
    config.setdefault("plugins", {}).setdefault("entries", {})["admin-http-rpc"] = {"enabled": True}
    config.setdefault("models", {})["catalogRefresh"] = {"enabled": False}
    config.setdefault("update", {})["checkOnStart"] = False
    config.setdefault("logging", {})["file"] = str(log_file)
    path.write_text(json.dumps(config, indent=2))


# What OpenClaw logs when a lookup or fetch of a name fails: on a machine without outside
# DNS (CI) any outbound attempt shows up as one of these.
OUTBOUND_FAILURES = ("ENOTFOUND", "EAI_AGAIN", "ENETUNREACH", "catalog refresh failed")


def outbound_attempts(log_file: Path) -> list[str]:
    """The gateway log's lines that show it tried to reach past loopback: a guard for what
    the gateway logs when a lookup or fetch fails, not a proof (the clawhub.ai prewarm
    above fails without a line)."""
    if not log_file.exists():
        return []
    lines = log_file.read_text(errors="replace").splitlines()
    return [line[:300] for line in lines if any(m in line for m in OUTBOUND_FAILURES)]


def start_gateway(root: Path) -> Gateway:
    need_node_tools()
    home = root / "openclaw-home"
    home.mkdir(parents=True)
    port, token = _free_port(), secrets.token_urlsafe(16)
    env = {"PATH": f"{NODE_BIN}:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
    subprocess.run(
        [str(NODE_BIN / "openclaw"), "config", "set", "gateway.mode", "local"],
        env=env, capture_output=True, timeout=120, check=True,
    )  # fmt: skip
    file_log = root / "openclaw.log"
    _write_test_config(home, file_log)
    log = root / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [str(NODE_BIN / "openclaw"), "gateway", "run", "--port", str(port), "--bind",
             "loopback", "--auth", "token", "--token", token],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    gw = Gateway(home=home, port=port, token=token, proc=proc, log=log, file_log=file_log)

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"the gateway exited ({proc.returncode}):\n{log.read_text()[-3000:]}")
        try:
            return gateway_rpc(port, token, "cron.status", {})[0]
        except OSError:  # not listening yet
            return False

    wait_for("the OpenClaw gateway to answer", up, timeout=180, every=0.5)
    return gw


def stop_gateway(gw: Gateway) -> None:
    try:
        os.killpg(gw.proc.pid, signal.SIGTERM)
        gw.proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(gw.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start_gateway(tmp_path_factory.mktemp("gateway"))
    try:
        yield gw
    finally:
        stop_gateway(gw)
    tried = outbound_attempts(gw.file_log)
    assert not tried, "the test gateway tried to reach past loopback:\n" + "\n".join(tried)
