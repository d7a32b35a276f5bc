"""``clawpoint config check``: load the configuration and probe what clawpoint needs.

Each check reports ok / warn / error with a message that says what to do. Read-only: it
creates the state directory and migrates the database (what any command would do) but
changes no workload.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from core import errors
from core.config import Settings, config_path, default_home, ensure_dirs, load_settings
from core.guardrails.tokens import token_problem, weak_token_hint
from core.schema_base import Model

if TYPE_CHECKING:
    from core.checkpoint.engine import EngineStatus


class CheckItem(Model):
    name: str
    level: Literal["ok", "warn", "error"]
    message: str


class CheckReport(Model):
    ok: bool
    items: list[CheckItem]


def _weak_tokens(settings: Settings) -> list[CheckItem]:
    """An error per HTTP token too weak to serve with (``serve --http`` refuses them too)."""
    named = {
        "CLAWPOINT_MCP_TOKEN / [mcp] token": settings.mcp_token,
        "CLAWPOINT_APPROVER_TOKEN / [mcp] approver_token": settings.approver_token,
        **{f"[mcp] agent_tokens.{n}": t for n, t in settings.mcp.agent_tokens.items()},
    }
    found: list[CheckItem] = []
    for what, token in named.items():
        problem = token_problem(token) if token else None
        if problem is not None:
            message = f"{what} is too weak: {problem}; {weak_token_hint()}"
            found.append(CheckItem(name="mcp", level="error", message=message))
    return found


def _elicitation(settings: Settings) -> CheckItem:
    """Whether answers in an agent's own client may approve, and for whom (``[mcp]``)."""
    mcp = settings.mcp
    if not mcp.elicitation_approval:
        return CheckItem(name="elicitation", level="ok",
                         message="off: an answer in an agent's own client approves nothing")  # fmt: skip
    if not mcp.elicitation_clients:
        return CheckItem(name="elicitation", level="warn",
                         message="elicitation_approval is on but elicitation_clients is empty: "
                         "no client is asked")  # fmt: skip
    anyone = "*" in mcp.elicitation_clients
    who = "any client" if anyone else ", ".join(mcp.elicitation_clients)
    return CheckItem(
        name="elicitation",
        level="warn" if anyone else "ok",
        message=f"on for {who} over {', '.join(mcp.elicitation_transports)}: their 'accept' "
        "approves plans as the client's user (names are what clients claim; rules with "
        'approval = "out-of-band" still need a person)',
    )


def _store_key(settings: Settings) -> CheckItem:
    """The manifest key and the store's modes: outside the store, ours alone, group known."""
    from core.store import perms, seal

    path = settings.store_key_path
    try:
        modes = perms.modes(settings.store.group)
        if path.resolve().is_relative_to(settings.checkpoint_dir.resolve()):
            raise errors.InvalidInput(
                f"the store key {path} lies inside the checkpoint store, where it protects nothing",
                hint="set [store] key to a path outside the store",
            )
        found = seal.StoreKey(path).load(create=False)
    except errors.ClawpointError as exc:
        return CheckItem(name="store-key", level="error", message=str(exc))
    how = (
        f"group {settings.store.group} (2750/0640)"
        if modes.gid is not None
        else "private (0700/0600)"
    )
    if found is None:
        return CheckItem(name="store-key", level="ok",
                         message=f"no key yet at {path}: created with the first checkpoint; "
                         f"checkpoints are {how}")  # fmt: skip
    return CheckItem(name="store-key", level="ok",
                     message=f"{path} signs this user's manifests; checkpoints are {how}")  # fmt: skip


def _backends(settings: Settings) -> list[CheckItem]:
    """Every backend section validated through the registry; which backends are enabled."""
    from core.backends import registry

    try:
        sections = registry.sections(settings)
    except errors.ClawpointError as exc:
        return [CheckItem(name="backends", level="error", message=str(exc))]
    enabled = [name for name, cfg in sections.items() if getattr(cfg, "enabled", False)]
    return [CheckItem(name="backends", level="ok" if enabled else "warn",
                      message=f"enabled: {', '.join(enabled)}" if enabled
                      else "no backend is enabled: set [local] enabled = true")]  # fmt: skip


def check_configuration() -> CheckReport:
    from core.checkpoint.engine import statuses

    items: list[CheckItem] = []
    home = default_home()
    path = config_path(home)
    try:
        settings = load_settings(home)
    except errors.ClawpointError as exc:
        items.append(CheckItem(name="config", level="error", message=str(exc)))
        return CheckReport(ok=False, items=items)
    items.append(
        CheckItem(
            name="config",
            level="ok",
            message=f"{path} loaded" if path.exists() else f"no {path}: using documented defaults",
        )
    )
    try:
        ensure_dirs(settings)
        from core.state.db import Database

        versions = Database(settings.state_db).schema_versions()
        items.append(
            CheckItem(name="state", level="ok", message=f"{settings.state_db} schema {versions}")
        )
    except (errors.ClawpointError, OSError) as exc:
        items.append(CheckItem(name="state", level="error", message=str(exc)))
    try:
        with tempfile.NamedTemporaryFile(dir=settings.checkpoint_dir):
            pass
        items.append(
            CheckItem(name="store", level="ok", message=f"{settings.checkpoint_dir} is writable")
        )
    except OSError as exc:
        items.append(
            CheckItem(
                name="store",
                level="error",
                message=f"{settings.checkpoint_dir} is not writable: {exc}",
            )
        )
    items.append(_store_key(settings))
    # Every engine of the registry: whether it works here, and if not, why.
    engines = statuses(settings.checkpoint)
    working = [n for n, st in engines.items() if st.available]
    for name, status in engines.items():
        fallback = [n for n in working if n != name]
        items.append(
            CheckItem(
                name=name,
                level="ok" if status.available else "warn",
                message=(
                    f"{name} engine {status.version or ''} works".replace("  ", " ")
                    if status.available
                    else f"{name} engine unavailable: {status.reason}"
                    + (f"; these engines work: {', '.join(fallback)}" if fallback else "")
                ),
            )
        )
    items.extend(_backends(settings))
    token = settings.mcp_token
    weak = _weak_tokens(settings)
    if weak:
        items.extend(weak)
    else:
        items.append(
            CheckItem(
                name="mcp",
                level="ok" if token else "warn",
                message="HTTP bearer token configured"
                if token
                else "no HTTP token: 'clawpoint serve --http' will refuse to start (set CLAWPOINT_MCP_TOKEN)",
            )
        )
    items.append(_elicitation(settings))
    items.append(_privileges(engines.get("criu")))
    items.append(_connection_hold(settings))
    return CheckReport(ok=all(i.level != "error" for i in items), items=items)


def _sysctl(name: str) -> str | None:
    try:
        return Path("/proc/sys", *name.split(".")).read_text().strip()
    except OSError:
        return None


# Capabilities root may lack in a container (a runtime's default bounding set) and what CRIU
# then cannot do. Without CAP_SYS_RESOURCE it cannot raise its own open-file limit (criu/util.c
# rlimit_unlimit_nofile logs an Error line for it, harmless) nor a restored process's limits
# above the current hard limits (criu/pie/restorer.c restore_rlims ignores the failure), nor
# read the limits of a task whose uids or gids are not its own (criu/cr-dump.c, prlimit(2));
# without CAP_NET_ADMIN no TCP_REPAIR.
_CRIU_CAPABILITIES = {
    24: "CAP_SYS_RESOURCE: restored processes get resource limits only up to the current "
    "hard limits, a workload with a process whose uid or gid is not root's is checkpointed "
    "only in a user namespace of its own ('clawpoint run --user-namespace', on by itself "
    "for setpriv and the like; refused at plan time otherwise), and CRIU logs 'rlimit: Can't "
    "setup RLIMIT_NOFILE for self' (harmless)",
    12: "CAP_NET_ADMIN: established TCP connections cannot be carried (criu_tcp 'close' "
    "restores them closed either way), nor new ones held while a server moves",
}


def _connection_hold(settings: Settings) -> CheckItem:
    """Whether a moving server's new connections can wait for it (``[migration]
    hold_connections``, ``core.wrapper.connection_hold``)."""
    from core.wrapper import connection_hold

    if not settings.migration.hold_connections:
        return CheckItem(name="connection-hold", level="ok",
                         message="off ([migration] hold_connections = false)")  # fmt: skip
    why = connection_hold.unavailable()
    if why is None:
        return CheckItem(name="connection-hold", level="ok",
                         message="a moving server's new connections wait for it, not refused")  # fmt: skip
    return CheckItem(
        name="connection-hold",
        level="warn",
        message=f"{why}: clients that connect while a server moves are refused until it "
        "is restored (they must retry)",
    )


def _missing_root_capabilities() -> list[str]:
    try:
        status = Path("/proc/self/status").read_text()
        eff = next(
            int(line.split()[1], 16) for line in status.splitlines() if line.startswith("CapEff:")
        )
    except (OSError, StopIteration, ValueError):
        return []
    return [why for bit, why in _CRIU_CAPABILITIES.items() if not eff >> bit & 1]


def _privileges(criu: EngineStatus | None) -> CheckItem:
    """How CRIU runs for this user, and what the host lacks for it (docs/checkpointing.md,
    "Ordinary users")."""
    from core.checkpoint import nsinit

    if nsinit.privileged():
        missing = _missing_root_capabilities()
        if missing:
            return CheckItem(
                name="privileges",
                level="warn",
                message="root without "
                + "; without ".join(missing)
                + " (a container's bounding set?): add them to restore everything",
            )
        return CheckItem(name="privileges", level="ok", message="root: CRIU runs as root")
    lacks = []
    if _sysctl("user.max_user_namespaces") == "0":
        lacks.append("user namespaces are off (sysctl user.max_user_namespaces=0: set it > 0)")
    if _sysctl("kernel.apparmor_restrict_unprivileged_userns") == "1":
        lacks.append(
            "AppArmor restricts unprivileged user namespaces "
            "(kernel.apparmor_restrict_unprivileged_userns=1: allow them, or give clawpoint's "
            "python an AppArmor profile with 'userns,')"
        )
    if _sysctl("vm.unprivileged_userfaultfd") != "1":
        lacks.append(
            "post-copy migration needs root (vm.unprivileged_userfaultfd=0): moves copy first"
        )
    works = criu is not None and criu.available
    message = (
        "ordinary user: CRIU runs in user namespaces this user owns (no root, no file "
        "capabilities, nothing for an administrator to set up)"
        if works
        else "ordinary user: CRIU cannot run in user namespaces here"
    )
    return CheckItem(
        name="privileges",
        level="ok" if works else "warn",
        message=message + ("; " + "; ".join(lacks) if lacks else ""),
    )
