"""Ordinary users for the multi-user tests: run clawpoint as they would on a shared node.

``tenants()`` (session-wide, once per machine and run: a file lock serialises xdist workers)
runs ``scripts/test-tenants.sh up``, which creates two users with no sudo and no special group
(``clawpoint-alice``, ``clawpoint-bob``) and installs this checkout into a venv they can run.
``Tenant.run(argv)`` runs a command as that user with a clean environment (their own ``HOME``
and ``CLAWPOINT_HOME``, nothing of root's), as ``Popen(user=..., group=..., extra_groups=[])``
would on a login: real uid, gid and no supplementary groups, no shell in between.

Tests that need these skip, naming why, when the suite is not run as root (it cannot create
users) or the script fails.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "test-tenants.sh"
NAMES = ("clawpoint-alice", "clawpoint-bob")
_LOCK = Path("/tmp/clawpoint-test-tenants.lock")


@dataclass(frozen=True)
class Tenant:
    name: str
    uid: int
    gid: int
    home: Path
    venv: Path

    @property
    def clawpoint(self) -> Path:
        return self.venv / "bin" / "clawpoint"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": f"{self.venv / 'bin'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "USER": self.name,
            "LOGNAME": self.name,
            "LANG": "C.UTF-8",
            "COLUMNS": "250",
        }
        env.update(extra)
        return env

    def popen(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        **kwargs: object,
    ) -> subprocess.Popen[str]:
        return subprocess.Popen(  # noqa: S603 (argv list)
            [str(a) for a in argv],
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            env=dict(env) if env is not None else self.env(),
            cwd=str(cwd) if cwd is not None else str(self.home),
            text=True,
            **kwargs,  # type: ignore[call-overload]
        )

    def run(
        self,
        argv: Sequence[str | os.PathLike[str]],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 120,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        proc = self.popen(
            argv,
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = proc.communicate(input, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(
                f"{argv} as {self.name} timed out after {timeout} s:\n{out}\n{err}"
            ) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)

    def mkdtemp(self, parent: Path, name: str) -> Path:
        """A directory under ``parent`` owned by this user, mode 0700."""
        d = parent / name
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chown(d, self.uid, self.gid)
        return d


@cache
def _setup() -> tuple[str, str | None]:
    if os.geteuid() != 0:
        return "", "the multi-user tests create users: run the suite as root (make test does)"
    _LOCK.touch(exist_ok=True)
    with open(_LOCK) as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = subprocess.run(  # noqa: S603 (our own script)
            [str(SCRIPT), "up"], capture_output=True, text=True, timeout=900, check=False
        )
    if done.returncode != 0:
        return "", f"scripts/test-tenants.sh up failed: {done.stderr.strip()[-400:]}"
    env = dict(
        line.split("=", 1)
        for line in subprocess.run(  # noqa: S603
            [str(SCRIPT), "env"], capture_output=True, text=True, check=True
        ).stdout.splitlines()
    )
    return env["CLAWPOINT_TENANT_VENV"], None


def tenants() -> tuple[Tenant, Tenant]:
    """Alice and Bob, ready (or the test is skipped, saying why)."""
    venv, why = _setup()
    if why is not None:
        pytest.skip(why)
    out = []
    for name in NAMES:
        pw = pwd.getpwnam(name)
        out.append(Tenant(name, pw.pw_uid, pw.pw_gid, Path(pw.pw_dir), Path(venv)))
    return out[0], out[1]
