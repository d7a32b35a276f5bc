"""Rendering for the CLI: rich tables for people, JSON for scripts, errors in one shape.

Exit codes (documented in docs/cli.md): 0 ok; 1 operation failed; 2 invalid input;
3 not found; 4 not supported by the backend; 5 denied by policy; 6 approval required /
not confirmed; 7 backend unavailable (retry); 8 checkpoint failed or corrupt; 9 engine
unavailable (e.g. CRIU); 10 conflict with the current state; 130 interrupted.

Text that comes from outside (an agent's reason, labels, names, summaries built from them,
error messages quoting input) is data: ``esc`` escapes it before it is embedded in Rich
markup, ``plain`` prints it with no markup at all, and table cells are never parsed as
markup. Emoji codes are off, so ``:x:`` stays ``:x:``.

Start-up: Rich, pydantic and the action catalogue are imported when first used (``out`` and
``err`` are made on first access), so a command that prints JSON or a usage error does not
pay for them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from core import errors

if TYPE_CHECKING:
    from rich.console import Console

    out: Console
    err: Console

_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Console:
    """``out`` (stdout) and ``err`` (stderr): Rich consoles, made on first use."""
    if name not in ("out", "err"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name not in _consoles:
        from rich.console import Console

        _consoles[name] = Console(stderr=name == "err", emoji=False)
    return _consoles[name]


def esc(value: object) -> str:
    """``value`` as literal text inside Rich markup (``[/]`` cannot close or hide anything)."""
    from rich.markup import escape

    return escape(str(value))


def plain(text: str, *, stderr: bool = False) -> None:
    """Print text that is data as it is: no markup, no highlighting."""
    __getattr__("err" if stderr else "out").print(text, markup=False, highlight=False)


def check_reason(value: str | None) -> str | None:
    """Option callback for free text (--reason, --why): the MCP tools' length cap, exit 2."""
    from core.model import validate_reason

    return value if value is None else validate_reason(value)


def to_jsonable(value: Any) -> Any:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


def emit_json(value: Any) -> None:
    sys.stdout.write(json.dumps(to_jsonable(value), indent=2, default=str) + "\n")
    sys.stdout.flush()


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left")
    # Cells fold where a terminal is too narrow: an id people copy into the next command
    # stays whole over two lines, never cut to "local:trai…".
    for c in columns:
        t.add_column(c, overflow="fold")
    for r in rows:
        t.add_row(*(Text("" if v is None else str(v)) for v in r))
    __getattr__("out").print(t)


def render_error(exc: errors.ClawpointError, *, as_json: bool) -> None:
    """The error with its next steps named as commands (``core.cli.wording``)."""
    from core.cli import wording

    if as_json:
        emit_json(exc.to_dict(wording.cli))
        return
    message, hint = exc.rendered(wording.cli)
    console = __getattr__("err")
    console.print(f"[bold red]error[/] ({esc(exc.code)}): {esc(message)}", highlight=False)
    if hint:
        console.print(f"[yellow]hint[/]: {esc(hint)}", highlight=False)
