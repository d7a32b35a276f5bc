"""Configuration: one TOML file plus environment variables, every default documented.

Where things live:
- ``CLAWPOINT_HOME`` (default: the user's state directory, e.g. ``~/.local/state/clawpoint``)
  holds ``state.db`` (SQLite, WAL), ``checkpoints/`` (the local store), ``run/`` (control
  sockets, pid files) and ``logs/``.
- The config file is ``CLAWPOINT_CONFIG`` or ``$CLAWPOINT_HOME/config.toml``; absent = all
  defaults, which run the local backend with two virtual nodes out of the box.

Every section is a pydantic model with ``extra="forbid"``, so ``clawpoint config check``
names an unknown or misspelled key instead of silently ignoring it. Backend sections
(``[local]``, ``[slurm]``, ...) are kept here as raw tables (``Settings.backend_section``)
and validated by the backend registry (``core.backends.registry``), which owns their
models: this module knows no backend.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import platformdirs
from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from core import errors
from core.engine_names import DEFAULT_ENGINE, EngineName
from core.guardrail_settings import ApprovalsConfig, NotifyConfig, PolicyConfig
from core.schema_base import Model
from core.signal_settings import SignalsConfig

# The longest any timeout or wait of the config may be: every number has a bound, since an
# infinite one overflows the timers that use it (a thread's wait of inf seconds raises) and
# an integer past 64 bits the state database.
DAY_S = 86400.0


class _Section(Model):
    model_config = ConfigDict(extra="forbid")


class StoreConfig(_Section):
    # Where checkpoint images go; default $CLAWPOINT_HOME/checkpoints. On Slurm this must be
    # a directory every node sees: the job owner's own directory of the cluster's shared
    # store (docs/slurm.md, "Many users"). A root several users write into must be sticky.
    path: str | None = None
    keep_per_workload: int = Field(default=3, ge=1, le=1_000_000)
    # Checkpoints taken on request (``clawpoint checkpoint``, an agent's checkpoint_workload)
    # kept per workload: they rotate among themselves and never push the workload's
    # scheduled or stop checkpoints out (core.store.retention).
    keep_on_request: int = Field(default=3, ge=1, le=1_000_000)
    # The key that signs this user's checkpoint manifests (HMAC-SHA256, 32 bytes, created
    # 0600 on first use); default $CLAWPOINT_HOME/keys/store.key. It must lie outside the
    # store and be readable by this user only; on a cluster, at a path every node sees
    # (a shared home). Losing it makes existing checkpoints untrusted (kept, not restored).
    key: str | None = None
    # Group mode: directories 2750 and files 0640 owned by this group, for a service that
    # reads what wrappers write (a Slurm operator, the Kubernetes server's uid). It can then
    # list and check the integrity of the checkpoints but not forge or authenticate them
    # (they show as "unverified" to it); restores are always verified by the owner's
    # wrapper. Unset: private, directories 0700 and files 0600. See docs/security.md.
    group: str | None = None


class CheckpointConfig(_Section):
    default_engine: EngineName = DEFAULT_ENGINE
    criu_path: str = "criu"
    # Deleted-but-open files up to this size are copied into each checkpoint (CRIU's
    # --ghost-limit; CRIU's own default of 1 MiB blocks common programs); larger ones refuse.
    criu_ghost_limit_mib: int = Field(default=64, ge=0, le=1_048_576)
    # Established TCP connections: "close" = restored closed (peers see a hang-up and
    # reconnect; listening sockets are kept); "refuse" = a checkpoint of a program holding
    # one fails. Carrying them live (--tcp-established) is not offered: see docs/checkpointing.md.
    criu_tcp: Literal["close", "refuse"] = "close"
    # Carry flock/POSIX locks the workload holds (CRIU's --file-locks); off = such a dump fails.
    criu_file_locks: bool = True
    # The regular files the workload has open for writing and its writable shared mappings
    # (/dev/shm segments) are copied into each checkpoint, smallest first, up to this many MiB,
    # and put back on restore; beyond it they are listed in the manifest, not copied.
    file_budget_mib: int = Field(default=256, ge=0, le=1_048_576)
    # What a restore does with each such file (shell-style patterns of absolute paths, first
    # match wins; unmatched = "rewind"): "rewind" puts back its copy (memory and file agree;
    # what was written after the checkpoint is kept beside it as PATH.after-LINEAGE@SEQ),
    # "keep" leaves a file opened for appending as it is (a server's access log keeps the
    # requests it really served). core/checkpoint/files.py.
    file_policy: dict[str, Literal["rewind", "keep"]] = Field(default_factory=dict)
    cooperative_timeout_s: float = Field(default=60.0, gt=0, le=DAY_S)
    cooperative_signal: str = "SIGUSR1"
    # How long a CRIU dump may take before it is stopped (the workload resumed, nothing
    # kept): this base plus this much per GiB the workload holds in memory (its resident
    # size when the dump starts); ``dump_timeout_s`` replaces the sum when set.
    dump_timeout_base_s: float = Field(default=300.0, gt=0, le=DAY_S)
    dump_timeout_per_gib_s: float = Field(default=60.0, ge=0, le=DAY_S)
    dump_timeout_s: float | None = Field(default=None, gt=0, le=7 * DAY_S)
    # How long a checkpoint request (a migrate's, a preempt's, an agent's) waits for one of
    # the same workload already under way before the wrapper refuses it (Conflict, nothing
    # done): a hung dump never holds the next request without limit.
    queue_wait_s: float = Field(default=120.0, gt=0, le=DAY_S)


class VerifyConfig(_Section):
    # After every restore (migrate, resume, failover, restore) the workload is watched this
    # long before the step reports done: it must stay up and its first progress must not be
    # behind the checkpoint's. 0 = check once, right away.
    settle_s: float = Field(default=2.0, ge=0, le=600)


class MigrationConfig(_Section):
    # How a live workload moves (local backend; core.backends.local.moves). handoff: start the
    # target's wrapper before the freeze and hand the workload to it directly (a wrapper's
    # start-up is then not part of the pause). mode: how the target restores memory:
    # post-copy (CRIU lazy pages: the workload runs before all its memory is back), or
    # stop-and-copy; auto picks post-copy where CRIU can and the last image is at least
    # post_copy_min_mib (below that, faulting every page in costs more than copying it).
    handoff: bool = True
    mode: Literal["auto", "post-copy", "stop-and-copy"] = "auto"
    post_copy_min_mib: int = Field(default=512, ge=0, le=1_048_576)
    standby_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    # A handoff dumps into a tmpfs here when it has room for 1.5x the workload's memory
    # (core.store.staging); "" = into the store directly.
    staging_dir: str = "/dev/shm"
    # While a handoff moves a server, queue new connections to the ports it listens on and
    # deliver them to the restored socket (core.wrapper.connection_hold), so no client is
    # refused; needs root and iptables-legacy, else the move goes on without it.
    hold_connections: bool = True


McpTransport = Literal["stdio", "http"]


def _stdio_only() -> list[McpTransport]:
    return ["stdio"]


DEFAULT_AGENT_NAME = "clawpoint-agent"  # the agent of [mcp] token / CLAWPOINT_MCP_TOKEN
_AGENT_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class McpConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=1, le=65535)
    # Bearer token for agents on the streamable HTTP transport; CLAWPOINT_MCP_TOKEN overrides.
    token: str | None = None
    # Token(s) for people on the approval page (never give these to an agent);
    # CLAWPOINT_APPROVER_TOKEN overrides.
    approver_token: str | None = None
    # More agents on HTTP, each with its own token and name: {name = "token"}. Each name is
    # the agent's principal (mcp:NAME), so one agent cannot execute another's approved
    # plans. The token above (or CLAWPOINT_MCP_TOKEN) is the agent "clawpoint-agent".
    agent_tokens: dict[str, str] = Field(default_factory=dict)
    # May the user of an agent's own client approve a plan by answering an elicitation?
    # Off by default: the server cannot tell a person from a client that answers "accept"
    # itself. When on, only clients named in elicitation_clients (clientInfo.name, as the
    # client declares it; "*" = any) over elicitation_transports may; such approvals are
    # recorded as confirmed by the client's user, never as a person, and never satisfy a
    # policy rule with approval = "out-of-band".
    elicitation_approval: bool = False
    elicitation_clients: list[str] = Field(default_factory=list)
    elicitation_transports: list[McpTransport] = Field(default_factory=_stdio_only)
    # The text copy of a tool result that also has structured content: "summary" (one line;
    # hosts show the structured content) or "json" (the whole data again, for a host that
    # shows only the text). Clients on a protocol without structured content get the JSON.
    result_text: Literal["summary", "json"] = "summary"
    # Destructive plans (kill, fresh restarts, deletes, drains without save) are never
    # approved by a client's answer unless this is on too: they need a person on a people
    # path (CLI, approval page, webhook code) like a rule with approval = "out-of-band".
    elicitation_destructive: bool = False

    @field_validator("agent_tokens")
    @classmethod
    def _check_agent_tokens(cls, value: dict[str, str]) -> dict[str, str]:
        for name, token in value.items():
            if not _AGENT_NAME.match(name) or name == DEFAULT_AGENT_NAME:
                raise ValueError(
                    f"agent name {name!r} must be letters, digits, '.', '_' or '-' (at most "
                    f"64) and not {DEFAULT_AGENT_NAME!r}"
                )
            if not token:
                raise ValueError(f"agent {name!r} has an empty token")
        if len(set(value.values())) != len(value):
            raise ValueError("two agents share a token: give each agent its own")
        return value

    def allows_elicitation(self, client: str, transport: str) -> bool:
        """Whether an elicitation answer from ``client`` over ``transport`` may approve."""
        return (
            self.elicitation_approval
            and transport in self.elicitation_transports
            and ("*" in self.elicitation_clients or client in self.elicitation_clients)
        )


class RecoveryConfig(_Section):
    # How often a long-running clawpoint process (the MCP server over stdio or HTTP) looks
    # for executions whose process died and finishes them. The watch loop does it every pass
    # and every CLI command once at start.
    every_s: float = Field(default=30.0, gt=0, le=86_400)


class WrapperConfig(_Section):
    # On SIGTERM (and SIGINT in the foreground) the wrapper saves a checkpoint first when one
    # fits in term_grace_s (judged from the last checkpoint's duration), then stops the
    # payload for real: SIGTERM to its process group, SIGKILL after term_kill_after_s.
    # Slurm sends SIGTERM, then SIGKILL after KillWait (30 s by default); Kubernetes after
    # terminationGracePeriodSeconds (30 s by default): 25 s leaves room for the stop.
    term_checkpoint: bool = True
    term_grace_s: float = Field(default=25.0, gt=0, le=3600)
    term_kill_after_s: float = Field(default=3.0, gt=0, le=600)
    # The payload's stdout/stderr go to logs/NAME.out, rotated at out_max_mib into
    # NAME.out.1 .. NAME.out.<out_keep>; the wrapper's own lines stay in logs/NAME.log.
    out_max_mib: float = Field(default=64.0, gt=0, le=1_048_576)
    out_keep: int = Field(default=3, ge=1, le=100)


class EconomicsConfig(_Section):
    # The interruption hazard the recommended checkpoint interval is computed for
    # (core.planner.checkpoint_interval, shown by get_workload): a spot node is reclaimed
    # about once per spot_mtbf_h (4 h: the median over the shipped AWS V100 spot traces), an
    # on-demand node fails about once per on_demand_mtbf_h. The interval stays within
    # min_interval_s .. max_interval_s.
    spot_mtbf_h: float = Field(default=4.0, gt=0, le=1e6)
    on_demand_mtbf_h: float = Field(default=720.0, gt=0, le=1e6)
    min_interval_s: float = Field(default=10.0, gt=0, le=86_400)
    max_interval_s: float = Field(default=86_400.0, gt=0, le=30 * 86_400)

    @model_validator(mode="after")
    def _bounds(self) -> EconomicsConfig:
        if self.min_interval_s > self.max_interval_s:
            raise ValueError("[economics] min_interval_s is above max_interval_s")
        return self


class CapacityConfig(_Section):
    # A pool grows without a person's approval only while the cost it adds stays within
    # max_added_per_hour (in the nodes' price unit per hour, summed over the nodes added);
    # a larger scale-up is disruptive and waits for a person, like any move of work.
    max_added_per_hour: float = Field(default=10.0, ge=0, le=1e6)
    # The planner (and so the watch loop) proposes releasing a pool's idle nodes only when
    # this is on: an idle node is also where work moves to on a notice or a failure, and a
    # pool's min_size bounds what a person may do, not what should happen by itself.
    release_idle: bool = False
    # The planner proposes growing a pool once the oldest job in its queue has waited this
    # long (core.planner.capacity_advice): a site whose jobs usually start within minutes
    # raises it, one that wants idle capacity back sooner lowers it. The default is the
    # planner's own (capacity_advice.MIN_WAIT_S; a test keeps the two equal).
    grow_after_wait_s: float = Field(default=60.0, ge=0, le=DAY_S)


class Settings(_Section):
    # Top-level tables this model does not name are backend sections, checked by the
    # backend registry (core.backends.registry.sections); anything else is refused below.
    model_config = ConfigDict(extra="allow")

    home: Path
    store: StoreConfig = Field(default_factory=StoreConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    mcp: McpConfig = Field(default_factory=McpConfig)
    signals: SignalsConfig = Field(default_factory=SignalsConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    approvals: ApprovalsConfig = Field(default_factory=ApprovalsConfig)
    notify: NotifyConfig = Field(default_factory=NotifyConfig)
    recovery: RecoveryConfig = Field(default_factory=RecoveryConfig)
    wrapper: WrapperConfig = Field(default_factory=WrapperConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    migration: MigrationConfig = Field(default_factory=MigrationConfig)
    economics: EconomicsConfig = Field(default_factory=EconomicsConfig)
    capacity: CapacityConfig = Field(default_factory=CapacityConfig)

    @model_validator(mode="after")
    def _extra_keys_are_tables(self) -> Settings:
        for key, value in (self.model_extra or {}).items():
            if not isinstance(value, dict):
                raise ValueError(f"unknown setting {key!r} (a backend section is a [table])")
        return self

    def backend_section(self, name: str) -> dict[str, Any]:
        """The raw ``[name]`` table of a backend section ({} when the file has none)."""
        value = (self.model_extra or {}).get(name)
        return dict(value) if isinstance(value, dict) else {}

    @property
    def state_db(self) -> Path:
        return self.home / "state.db"

    @property
    def checkpoint_dir(self) -> Path:
        return Path(self.store.path) if self.store.path else self.home / "checkpoints"

    @property
    def store_key_path(self) -> Path:
        """The manifest key: ``[store] key``, else ``$CLAWPOINT_HOME/keys/store.key``."""
        return (
            Path(self.store.key).expanduser()
            if self.store.key
            else self.home / "keys" / "store.key"
        )

    @property
    def run_dir(self) -> Path:
        return self.home / "run"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"

    @property
    def mcp_token(self) -> str | None:
        return os.environ.get("CLAWPOINT_MCP_TOKEN") or self.mcp.token

    @property
    def approver_token(self) -> str | None:
        return os.environ.get("CLAWPOINT_APPROVER_TOKEN") or self.mcp.approver_token

    @property
    def agent_tokens(self) -> dict[str, str]:
        """Every HTTP agent's token by agent name; the main token is ``clawpoint-agent``."""
        tokens = dict(self.mcp.agent_tokens)
        if self.mcp_token:
            tokens[DEFAULT_AGENT_NAME] = self.mcp_token
        return tokens


def default_home() -> Path:
    env = os.environ.get("CLAWPOINT_HOME")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_state_dir("clawpoint"))


def config_path(home: Path) -> Path:
    env = os.environ.get("CLAWPOINT_CONFIG")
    return Path(env).expanduser() if env else home / "config.toml"


def load_settings(home: Path | None = None) -> Settings:
    """Read settings; raise InvalidInput naming the bad key and the file."""
    home = home or default_home()
    path = config_path(home)
    data: dict[str, Any] = {}
    named = bool(os.environ.get("CLAWPOINT_CONFIG"))
    try:
        present = path.exists() or path.is_symlink()
    except OSError as exc:  # a directory on the way we may not enter: another user's home
        raise errors.InvalidInput(
            f"cannot look at {path}: {exc.strerror or exc}",
            hint="use a CLAWPOINT_HOME (and CLAWPOINT_CONFIG) of your own: another user's "
            "files are not yours to read",
        ) from exc
    if named and not present:
        # A file someone named and that is not there is a mistake, never "use the defaults".
        raise errors.InvalidInput(
            f"CLAWPOINT_CONFIG names {path}, which does not exist",
            hint="fix the path in CLAWPOINT_CONFIG, or unset it to use $CLAWPOINT_HOME/config.toml",
        )
    if present:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise errors.InvalidInput(
                f"config file {path} is not valid TOML: {exc}",
                hint="fix the syntax, then run 'clawpoint config check'",
            ) from exc
        except UnicodeDecodeError as exc:
            raise errors.InvalidInput(
                f"config file {path} is not UTF-8 text (byte {exc.start}): TOML files are UTF-8",
                hint="save it as UTF-8, then run 'clawpoint config check'",
            ) from exc
        except OSError as exc:  # a directory, a dangling link, no permission
            raise errors.InvalidInput(
                f"config file {path} cannot be read: {exc.strerror or exc}",
                hint="point CLAWPOINT_CONFIG (or $CLAWPOINT_HOME/config.toml) at a readable "
                "TOML file, then run 'clawpoint config check'",
            ) from exc
    data.pop("home", None)
    try:
        return Settings(home=home, **data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise errors.InvalidInput(
            f"config file {path} has problems: {problems}",
            hint="fix these keys (see docs/configuration.md), then run 'clawpoint config check'",
        ) from exc


def ensure_dirs(settings: Settings) -> None:
    for d in (settings.home, settings.checkpoint_dir, settings.run_dir, settings.log_dir):
        d.mkdir(parents=True, exist_ok=True)
    os.chmod(settings.home, 0o700)
