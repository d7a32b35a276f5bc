"""``clawpoint``: the root command group, its table of commands, and ``main``.

Every command takes ``--json``. Disruptive and destructive actions ask for confirmation (or
``--yes``) after showing the plan. Errors are caught once, in ``main``, and mapped to the
exit codes listed in ``core.cli.output``.

Start-up: ``COMMANDS`` names each top-level command's module and help line; ``clawpoint
--help`` lists it without importing any command, and a command imports only its own module
(``core.cli.lazy``). Logging is configured when a command is loaded to run. Keep this module
free of imports beyond typer and ``core.errors``: ``tests/cli/test_start.py`` pins what
``clawpoint --help`` may load.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib
import signal
import sys
from typing import Any, NoReturn

import typer

from core import errors, process_exit
from core.cli.lazy import Entry, LazyGroup

_A = "core.cli.acting"
# name -> where it lives and the line ``clawpoint --help`` shows (its help's first paragraph,
# pinned by tests/cli/test_start.py), in the order the help lists them.
COMMANDS: dict[str, Entry] = {
    "watch": Entry("core.cli.watch", "app", "Watch signals (spot notices, GPU and node health, SLA, queues), act where a standing approval covers it, and report what needs a person."),
    "workloads": Entry("core.cli.inventory", "COMMANDS", "List workloads and their state."),
    "checkpoints": Entry("core.cli.inventory", "COMMANDS", "List checkpoints (of one workload, or all), newest first. Untrusted ones (manifest not authentic) and corrupt ones are never restored; the reason says why."),
    "checkpoint": Entry(_A, "COMMANDS", "Save a workload's full state and leave it running (safe: loses nothing)."),
    "preempt": Entry(_A, "COMMANDS", "Checkpoint and stop a workload, freeing its node; resume it later (disruptive)."),
    "migrate": Entry(_A, "COMMANDS", "Checkpoint a running workload, stop it, restore it on another node (disruptive)."),
    "resume": Entry(_A, "COMMANDS", "Resume a preempted workload from its newest good checkpoint (disruptive)."),
    "failover": Entry(_A, "COMMANDS", "A workload died: restore its newest good checkpoint on another node (disruptive)."),
    "requeue": Entry(_A, "COMMANDS", "Checkpoint a batch job and requeue it, optionally onto another node (disruptive)."),
    "scale": Entry(_A, "COMMANDS", "Change a workload's replica count (backends that support it; others: denied)."),
    "kill": Entry(_A, "COMMANDS", "Stop a workload without saving: work since its last checkpoint is lost (destructive)."),
    "restore": Entry(_A, "COMMANDS", "Restore a stopped or failed workload from a given checkpoint (disruptive)."),
    "delete-checkpoint": Entry(_A, "COMMANDS", "Delete a checkpoint image for good (destructive; the newest good one of a live workload is protected)."),
    "drain": Entry(_A, "COMMANDS", "Save and move every workload off a node, then mark it unschedulable (disruptive)."),
    "suspend-gpu": Entry(_A, "COMMANDS", "Move a workload's GPU memory to host memory and free its GPU; it stays alive, its GPU calls wait until 'clawpoint resume-gpu' (disruptive)."),
    "resume-gpu": Entry(_A, "COMMANDS", "Put a GPU-suspended workload's memory back on its GPU and let it go on (disruptive: takes the GPU back)."),
    "checkpoint-interval": Entry(_A, "COMMANDS", "Change how often a workload is checkpointed (longer or off: disruptive)."),
    "resize": Entry(_A, "COMMANDS", "New CPUs, memory or GPUs for a workload: in place if its node has room, else moved to a node that fits (disruptive)."),
    "run": Entry("core.cli.running", "COMMANDS", "Run CMD checkpointably; restores the newest good checkpoint of NAME if there is one (if NAME has checkpoints but none verifies, it fails with exit 8 unless --fresh)."),
    "serve": Entry("core.cli.system", "COMMANDS", "Run the MCP server (stdio by default)."),
    "demo": Entry("core.cli.system", "COMMANDS", "Checkpoint, migrate, kill and fail over a real stateful workload, then summarise."),
    "config": Entry("core.cli.system", "COMMANDS", "Inspect and validate configuration.", group=True),
    "approvals": Entry("core.cli.approvals", "approvals_app", "Review, approve and deny requests; grant standing approvals.", group=True),
    "audit": Entry("core.cli.approvals", "audit_app", "Show and verify the hash-chained audit log.", group=True),
    "spot": Entry("core.cli.spot", "spot_app", "Deadline-aware spot vs on-demand decisions.", group=True),
    "runbook": Entry("core.cli.runbook", "runbook_app", "Run YAML runbooks with approval gates.", group=True),
    "slurm": Entry("core.cli.slurm", "slurm_app", "Submit checkpointable jobs to Slurm; inspect its queues.", group=True),
    "nodes": Entry("core.cli.nodes", "COMMANDS", "List nodes; cordon a node, or return one to service.", group=True),
    "pools": Entry("core.cli.pools", "COMMANDS", "List node pools; grow or shrink one.", group=True),
}  # fmt: skip


class ClawpointGroup(LazyGroup):
    """The root group over ``COMMANDS``; structlog is set up before a command is loaded."""

    table = COMMANDS

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if not self._listing:
            from core import logs

            # JSON logs to stderr, so stdout stays clean for --json and stdio MCP
            logs.configure()
        return super().get_command(ctx, cmd_name)


app = typer.Typer(
    name="clawpoint",
    help="Checkpoint, migrate, resume and fail over stateful workloads, with guardrails.",
    cls=ClawpointGroup,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """The root group itself does nothing: its commands do."""


@functools.cache
def _click_exception_types(name: str) -> tuple[type[BaseException], ...]:
    """``name`` (ClickException, Exit, Abort) from every click the installed typer may raise.

    typer up to 0.2x re-exports click's classes; newer ones vendor click as ``typer._click``
    and raise their own. Catching by class from both keeps ``main`` right for every typer
    that pyproject allows (and for code that raises click's classes directly). Looked up when
    an exception is being matched (an ``except`` clause evaluates its classes only then), so
    a command that ends normally never imports click.
    """
    found: list[type[BaseException]] = []
    for module_name in ("typer._click.exceptions", "typer.exceptions", "click.exceptions"):
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        cls = getattr(module, name, None)
        if isinstance(cls, type) and issubclass(cls, BaseException) and cls not in found:
            found.append(cls)
    return tuple(found)


def _exits() -> tuple[type[BaseException], ...]:
    return (typer.Exit, *_click_exception_types("Exit"))


def _aborts() -> tuple[type[BaseException], ...]:
    return (typer.Abort, *_click_exception_types("Abort"))


def main() -> None:
    """The console script: run the app and turn every outcome into the documented exit code.

    ``standalone_mode=False`` makes click hand everything back: the command's return value,
    or the code of a ``typer.Exit`` (returned, not raised, by every click/typer version), and
    usage errors raised as exceptions, which are shown as a usage message (exit 2).
    """
    as_json = "--json" in sys.argv
    # ``kill -QUIT PID`` on a command that seems stuck prints every thread's stack to stderr
    # and the command goes on (docs/cli.md): the next hang is diagnosed without a debugger.
    # The process's own stderr (fd 2): a caller running ``main`` in-process may have swapped
    # ``sys.stderr`` for a buffer without a file descriptor.
    if sys.__stderr__ is not None:
        faulthandler.register(signal.SIGQUIT, file=sys.__stderr__, all_threads=True, chain=False)
    try:
        code = app(standalone_mode=False)
    except errors.ClawpointError as exc:
        from core.cli import output

        output.render_error(exc, as_json=as_json)
        sys.exit(exc.exit_code)
    except _exits() as exc:
        sys.exit(getattr(exc, "exit_code", 1))
    except _aborts():
        _interrupted()
    except _click_exception_types("ClickException") as exc:
        show = getattr(exc, "show", None)  # the class differs between click and typer._click
        if callable(show):
            show()
        sys.exit(getattr(exc, "exit_code", 2))
    except KeyboardInterrupt:
        _interrupted()
    sys.exit(code if type(code) is int else 0)


def console() -> NoReturn:
    """The installed ``clawpoint`` command: ``main``, then the process ends as soon as its
    output is flushed and its exit handlers have run (``core.process_exit``: Python's own
    teardown was 50-70 ms of every command's wall time)."""
    interrupted = _note_interrupts()
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = process_exit.exit_code(exc.code)
    except Exception:
        if not interrupted:
            raise
        # Ctrl-C landed where a library turned the KeyboardInterrupt into its own error
        # (pydantic-core, inside a schema it was building): the person interrupted it.
        from core.cli import output

        output.err.print("interrupted")
        code = 130
    process_exit.exit_now(code)


def _note_interrupts() -> list[bool]:
    """Note each Ctrl-C (SIGINT) before raising KeyboardInterrupt as Python does; the list
    is non-empty once one came. Only where SIGINT still has Python's default handler."""
    seen: list[bool] = []

    def on_sigint(signum: int, frame: Any) -> None:
        seen.append(True)
        raise KeyboardInterrupt

    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, on_sigint)
    return seen


def _interrupted() -> None:
    from core.cli import output

    output.err.print("interrupted")
    sys.exit(130)
