"""A command group whose commands are imported only when one is run.

Role: ``clawpoint`` has thirty-odd commands over the whole of core (service, backends,
signals, runbooks, the MCP server). Importing them all costs more CPU than most commands
need, and agents, scripts and the test suite start the CLI thousands of times. The root group
therefore holds a static table, name -> (module, attribute, one-line help): ``clawpoint
--help`` lists the table without importing any command module, and running a command imports
its module alone.

Limits: the one-line help in the table is a copy of each command's own help (its first
paragraph); ``tests/cli/test_start.py`` pins the two, so a command's docstring stays the one
source. Loading converts the module's ``typer.Typer`` with ``typer.main.get_command``, as
typer does for a mounted sub-app, so a loaded command behaves exactly as a mounted one.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping, MutableMapping
from typing import Any, NamedTuple

import typer
import typer.core
import typer.main


class Entry(NamedTuple):
    """Where a top-level command lives: ``getattr(import_module(module), attr)`` is a
    ``typer.Typer`` (or a mapping of command name -> ``typer.Typer``); ``help`` is the one
    line ``clawpoint --help`` shows for it; ``group``: the Typer is a command group (as
    ``add_typer`` would mount it) even if it holds a single command."""

    module: str
    attr: str
    help: str
    group: bool = False


def load(name: str, entry: Entry) -> Any:
    """The click command ``name`` of ``entry``, its module imported now."""
    found: Any = getattr(importlib.import_module(entry.module), entry.attr)
    if isinstance(found, Mapping):
        found = found[name]
    command = typer.main.get_group(found) if entry.group else typer.main.get_command(found)
    command.name = name
    return command


class LazyCommands(MutableMapping[str, Any]):
    """name -> click command, each imported the first time it is looked up.

    Iterating lists the table's names in its order and imports nothing; a lookup imports
    that one command's module. Commands added later (``add_command``) are kept as given.
    """

    def __init__(self, table: Mapping[str, Entry]) -> None:
        self.table = table
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            if name not in self.table:
                raise KeyError(name)
            self._loaded[name] = load(name, self.table[name])
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        raise TypeError("the command table is fixed")

    def __iter__(self) -> Iterator[str]:
        yield from self.table
        yield from (n for n in self._loaded if n not in self.table)

    def __len__(self) -> int:
        return len(self.table) + sum(1 for n in self._loaded if n not in self.table)

    def __contains__(self, name: object) -> bool:
        return name in self.table or name in self._loaded

    def stub(self, name: str) -> typer.core.TyperCommand:
        """A stand-in that carries only the name and the help line, for listing."""
        return typer.core.TyperCommand(name=name, help=self.table[name].help)


class LazyGroup(typer.core.TyperGroup):
    """The root group: ``table`` (a class attribute, set by a subclass) is its commands.

    While its own help is being written, commands are looked up as stubs (the table's help
    line), so ``--help`` imports no command module; otherwise a lookup loads the command.
    """

    table: Mapping[str, Entry] = {}

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.commands = LazyCommands(self.table)
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return list(self.commands)  # names only: imports nothing

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        commands = self.commands
        if self._listing and isinstance(commands, LazyCommands) and cmd_name in commands.table:
            return commands.stub(cmd_name)
        return commands.get(cmd_name)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False
