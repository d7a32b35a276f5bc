"""How the Slurm backend talks to a cluster: slurmrestd first, the commands' JSON as fallback.

Reads go to slurmrestd when one is configured (a unix socket with local auth, or TCP with a
JWT), at the newest data API version the server offers: the version is discovered from
``/openapi/v3`` (22.05 offers v0.0.36-38, 24.11 v0.0.40-42), never assumed. If slurmrestd is
absent, down or answers with errors, the same data comes from ``squeue --json`` /
``sinfo --json`` / ``scontrol show ... --json`` (23.02+). Actions always use the commands
(``scontrol``, ``scancel``, ``sbatch``) with argv lists: nothing reaches a shell.

Transient faults (controller restarting, connection refused, timeouts) are retried
(``core.backends.retrying``) for at most ``retry_total_s``; a controller that stays down
becomes ``BackendUnavailable`` within that bound plus one command timeout. Limits: JWT tokens made
with ``scontrol token`` need the caller to be root or SlurmUser; other users pass one in.
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx2

from core import errors, logs
from core.backends.retrying import Transient, with_retries
from core.backends.slurm.config import SlurmConfig

log = logs.get_logger(__name__)
T = TypeVar("T")

_TRANSIENT = re.compile(
    r"Unable to contact slurm controller|Socket timed out|connect failure|Connection refused"
    r"|Zero Bytes were transmitted|Resource temporarily unavailable|Transport endpoint"
    r"|Slurm backup controller in standby|Communication connection failure",
    re.IGNORECASE,
)
_NOT_FOUND = re.compile(r"Invalid job id|Invalid node name|not found|does not exist", re.I)
_VERSION_PATH = re.compile(r"^/slurm/(v\d+\.\d+\.\d+)/")


def _describe(err: Any) -> str:
    if isinstance(err, dict):
        parts = [str(err.get(k)) for k in ("source", "description", "error") if err.get(k)]
        return ": ".join(parts) or str(err)
    return str(err)


def _vkey(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.lstrip("v").split("."))


class SlurmTransport:
    """Runs Slurm commands and slurmrestd requests with bounded retries."""

    def __init__(self, config: SlurmConfig) -> None:
        self.cfg = config.resolved()
        self._api_version: str | None = None
        self._slurm_version: tuple[int, int] | None = None
        self._token: str | None = self.cfg.jwt_token

    # ----- commands -------------------------------------------------------------------
    def _bin(self, name: str) -> str:
        if self.cfg.bin_dir:
            path = Path(self.cfg.bin_dir) / name
            if path.exists():
                return str(path)
        found = shutil.which(name)
        if not found:
            raise errors.BackendUnavailable(
                f"the Slurm command {name!r} is not installed here",
                hint="install the Slurm client (Debian: slurm-client) or set slurm.bin_dir",
            )
        return found

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.cfg.slurm_conf:
            env["SLURM_CONF"] = self.cfg.slurm_conf
        return env

    def _run_once(self, argv: list[str], stdin: str | None) -> str:
        try:
            # argv list, never a shell string.
            proc = subprocess.run(
                argv,
                input=stdin,
                capture_output=True,
                text=True,
                timeout=self.cfg.command_timeout_s,
                env=self._env(),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise Transient(f"{argv[0]} timed out after {self.cfg.command_timeout_s}s") from exc
        if proc.returncode != 0:
            msg = (proc.stderr or proc.stdout).strip()
            if _TRANSIENT.search(msg):
                raise Transient(msg)
            name = Path(argv[0]).name
            if _NOT_FOUND.search(msg):
                raise errors.NotFound(
                    f"{name}: {msg}", hint="list the jobs/nodes and pass an id that exists"
                )
            raise errors.OperationFailed(
                f"{name} failed (exit {proc.returncode}): {msg}",
                hint="check the arguments and the controller log",
                details={"argv": argv},
            )
        return proc.stdout

    def run(self, cmd: str, args: list[str], *, stdin: str | None = None) -> str:
        """Run a Slurm command (``cmd`` is its name); return stdout. Retries transient faults."""
        argv = [self._bin(cmd), *args]
        return self._with_retries(cmd, lambda: self._run_once(argv, stdin))

    def _with_retries(self, cmd: str, call: Callable[[], T]) -> T:
        def down(last: BaseException | None) -> errors.ClawpointError:
            return errors.BackendUnavailable(
                f"the Slurm controller did not answer {cmd}: {last}",
                hint="check that slurmctld runs (scontrol ping; systemctl status slurmctld) "
                "and that SLURM_CONF points at this cluster, then retry",
                retry_after=10.0,
            )

        return with_retries(call, total_s=self.cfg.retry_total_s, max_wait_s=1.0, unavailable=down)

    def run_json(self, cmd: str, args: list[str]) -> dict[str, Any]:
        """A command's ``--json`` output; its ``errors`` (rc 0 in 22.05!) become exceptions."""
        return self._with_retries(cmd, lambda: self._json_once(cmd, args))

    def _json_once(self, cmd: str, args: list[str]) -> dict[str, Any]:
        out = self._run_once([self._bin(cmd), *args], None)
        try:
            data = json.loads(out)
        except json.JSONDecodeError as exc:
            raise errors.OperationFailed(
                f"{cmd} printed something that is not JSON",
                hint="this Slurm may be too old for --json (22.05 or newer is needed)",
            ) from exc
        if not isinstance(data, dict):
            raise errors.OperationFailed(f"{cmd} --json printed a {type(data).__name__}")
        errs = [e for e in data.get("errors") or [] if e]
        if errs:
            # 22.05 exits 0 with an errors list when slurmctld is unreachable.
            raise Transient("; ".join(_describe(e) for e in errs))
        return data

    def slurm_version(self) -> tuple[int, int]:
        if self._slurm_version is None:
            out = self.run("sinfo", ["--version"])
            m = re.search(r"(\d+)\.(\d+)", out)
            self._slurm_version = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        return self._slurm_version

    # ----- slurmrestd -----------------------------------------------------------------
    @property
    def rest_configured(self) -> bool:
        return bool(self.cfg.rest_socket or self.cfg.rest_url)

    def _client(self) -> httpx2.Client:
        timeout = httpx2.Timeout(self.cfg.command_timeout_s, connect=2.0)
        if self.cfg.rest_socket:
            transport = httpx2.HTTPTransport(uds=self.cfg.rest_socket)
            return httpx2.Client(transport=transport, base_url="http://slurmrestd", timeout=timeout)
        headers = {
            "X-SLURM-USER-NAME": self.cfg.jwt_user or getpass.getuser(),
            "X-SLURM-USER-TOKEN": self._jwt(),
        }
        return httpx2.Client(base_url=str(self.cfg.rest_url), headers=headers, timeout=timeout)

    def _jwt(self) -> str:
        if not self._token:
            user = self.cfg.jwt_user or getpass.getuser()
            out = self.run("scontrol", ["token", f"username={user}", "lifespan=3600"])
            self._token = out.strip().removeprefix("SLURM_JWT=")
        return self._token

    def _get(self, path: str) -> dict[str, Any]:
        with self._client() as client:
            resp = client.get(path)
        if resp.status_code in (401, 403):
            raise errors.BackendUnavailable(
                f"slurmrestd refused the request ({resp.status_code})",
                hint="check the JWT (slurm.jwt_token / SLURM_JWT) and the user name",
            )
        data = resp.json()
        if not isinstance(data, dict):
            raise errors.OperationFailed("slurmrestd answered with something that is not JSON")
        return data

    def api_version(self) -> str:
        """The newest data API version the server offers (discovered once, then cached)."""
        if self._api_version is None:
            spec = self._get("/openapi/v3")
            versions = {
                m.group(1)
                for p in spec.get("paths", {})
                if (m := _VERSION_PATH.match(p)) and p.rstrip("/").endswith(("/jobs", "/nodes"))
            }
            if not versions:
                raise errors.OperationFailed("slurmrestd offers no /slurm/vX/jobs endpoint")
            self._api_version = max(versions, key=_vkey)
            log.info("slurmrestd api", version=self._api_version)
        return self._api_version

    def rest(self, resource: str) -> dict[str, Any] | None:
        """GET /slurm/<version>/<resource>; None when slurmrestd is absent or unusable."""
        if not self.rest_configured:
            return None
        try:
            data = self._get(f"/slurm/{self.api_version()}/{resource}")
        except (httpx2.HTTPError, ValueError, errors.ClawpointError) as exc:
            log.warning("slurmrestd unusable, using the commands", error=str(exc))
            return None
        errs = [e for e in data.get("errors", []) if e]
        if errs:
            # slurmrestd answered but could not get the data from slurmctld: the commands
            # would ask the same controller, so say so now instead of waiting again.
            raise errors.BackendUnavailable(
                f"the Slurm controller did not answer slurmrestd's {resource} query: "
                + "; ".join(_describe(e) for e in errs),
                hint="check that slurmctld runs (scontrol ping) and can be reached, then retry",
                retry_after=10.0,
            )
        return data
