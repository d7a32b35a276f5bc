"""What a hint or a rollback names must exist: ``clawpoint ...`` commands and MCP tools.

- ``source_texts()``: every ``hint=`` and ``rollback=`` text written in core/ and mcp_server/
  (read with ``ast``; an f-string's placeholders become ``X``, each arm of a conditional is
  its own text).
- ``command_refs(text)``: the ``clawpoint ...`` command lines a text names. "clawpoint" after
  an article or "let" is the program in prose, not a command ("let clawpoint pick one").
- ``InstalledCli``: the installed console script's own ``--help``, parsed: command groups,
  arguments (from the usage line) and options; ``problem(ref)`` says what is wrong with a
  command line, or None when it would parse.
- ``tool_like(text)``: snake_case names in a text, minus configuration keys (from the
  settings models) and the few other identifiers hints legitimately name; what is left must
  be an MCP tool.

Limits: a text assembled outside a literal (a variable passed as ``hint=``) is not seen by
the scan; the plans and errors the contract suite makes at run time cover those paths.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

ROOT = Path(__file__).resolve().parents[2]
CLAWPOINT = ROOT / ".venv" / "bin" / "clawpoint"

_PROGRAM = re.compile(r"(?<![\w/.-])clawpoint(?![\w/.:-])")  # clawpoint:// is a URI
_PROSE_BEFORE = {"the", "this", "that", "let", "a", "an", "newer", "older", "your", "of"}
_END = re.compile(r"['\"`();,]|\s[-\u2014]\s|$")
_SNAKE = re.compile(r"(?<![\w.$/-])([a-z][a-z0-9]*(?:_[a-z0-9]+)+)(?![\w/]|\.[a-z])")

# Identifiers hints name that are neither configuration keys nor tools.
NOT_TOOLS = {
    "restore_from",  # a RunSpec field: "start the workload without restore_from"
    "spot_price",  # an argument of the spot evaluation
    "integrity_check",  # SQLite's PRAGMA
    "next_cursor",  # the field of a list result that names the next page
    "gpu_class",  # an argument of resize_workload (its hint lists the arguments)
}


# --------------------------------------------------------------------------- texts in code
def _texts(node: ast.AST) -> list[str]:
    """Every text an expression can evaluate to, placeholders as ``X``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.JoinedStr):
        return ["".join(str(v.value) if isinstance(v, ast.Constant) else "X" for v in node.values)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return [a + b for a in _texts(node.left) or ["X"] for b in _texts(node.right) or ["X"]]
    if isinstance(node, ast.IfExp):
        return _texts(node.body) + _texts(node.orelse)
    return []


@dataclass(frozen=True)
class SourceText:
    where: str  # path:line
    kind: str  # hint | rollback
    text: str


def source_texts(roots: tuple[str, ...] = ("core", "mcp_server")) -> list[SourceText]:
    found: list[SourceText] = []
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.keyword) and node.arg in ("hint", "rollback"):
                    where = f"{path.relative_to(ROOT)}:{node.value.lineno}"
                    found += [SourceText(where, node.arg, t) for t in _texts(node.value)]
    return found


# --------------------------------------------------------------------------- references
def command_refs(text: str) -> list[list[str]]:
    """The argv (after ``clawpoint``) of every command line ``text`` names."""
    refs: list[list[str]] = []
    for match in _PROGRAM.finditer(text):
        before = text[: match.start()].split()
        if before and before[-1].lower().strip("'\"(") in _PROSE_BEFORE:
            continue
        rest = text[match.end() :]
        end = _END.search(rest)
        words = rest[: end.start() if end else len(rest)].split()
        if words and words[-1].endswith("."):
            words[-1] = words[-1].rstrip(".")
        if words:  # "upgrade clawpoint, or ...": the program, not a command line
            refs.append(words)
    return refs


def config_keys() -> set[str]:
    """Every key name of the settings models (the ``[section] key`` of config.toml)."""
    from core.config import Settings

    keys: set[str] = set()
    seen: set[type[BaseModel]] = set()

    def walk(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.add(model)
        for name, info in model.model_fields.items():
            keys.add(name)
            for arg in _types_in(info.annotation):
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    walk(arg)

    walk(Settings)
    # Backend sections ([local], [slurm], [k8s], ...) are validated by the models their
    # registry entries name, not by fields of Settings.
    from core.backends.registry import REGISTRY

    for entry in REGISTRY.values():
        walk(entry.config)
    return keys


def _types_in(annotation: Any) -> list[Any]:
    args = getattr(annotation, "__args__", None)
    if not args:
        return [annotation]
    return [t for a in args for t in _types_in(a)]


def tool_like(text: str, *, not_tools: set[str]) -> set[str]:
    """snake_case names in ``text`` that are not configuration keys or listed identifiers."""
    return {n for n in _SNAKE.findall(text) if n not in not_tools}


# --------------------------------------------------------------------------- the CLI
@dataclass
class Help:
    commands: set[str] = field(default_factory=set)
    arguments: list[str] = field(default_factory=list)  # from the usage line
    options: dict[str, bool] = field(default_factory=dict)  # name -> takes a value
    group: bool = False


def _rows(text: str, title: str) -> list[str]:
    """The rows of every box (rich) or section (plain click) whose title starts with ``title``."""
    rows: list[str] = []
    inside = False
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(rf"^(\u256d\u2500 )?{title}\b", stripped):
            inside = True
            continue
        if inside and (stripped.startswith("\u2570") or not stripped):
            inside = False
            continue
        if inside:
            rows.append(stripped.strip("\u2502|").strip())
    return rows


def parse_help(text: str) -> Help:
    usage = next(line for line in text.splitlines() if "Usage:" in line)
    words = usage.split("Usage:", 1)[1].split()
    after = words[words.index("[OPTIONS]") + 1 :] if "[OPTIONS]" in words else []
    help_ = Help()
    help_.group = "COMMAND" in after
    help_.arguments = [w for w in after if w not in ("COMMAND", "[ARGS]...")]
    for row in _rows(text, "Commands"):
        m = re.match(r"^([a-z][a-z0-9-]*)(\s{2,}|$)", row)
        if m:
            help_.commands.add(m.group(1))
    for row in _rows(text, "Options"):
        names = re.findall(r"(?<![\w-])(--?[a-zA-Z][a-z0-9-]*)", row.split("  ")[0] + " ")
        names += re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", row)
        meta = re.search(r"<([a-z\[\]]+)>|\b(TEXT|INTEGER|FLOAT|PATH|[A-Z]{2,})\b", row)
        valued = meta is not None and meta.group(1) != "bool"
        for name in names:
            help_.options.setdefault(name, valued)
    return help_


class InstalledCli:
    """The installed ``clawpoint`` as people run it, read through its ``--help``."""

    def __init__(self, program: Path = CLAWPOINT) -> None:
        self.program = program
        self._helps: dict[tuple[str, ...], Help | None] = {}

    def help(self, path: tuple[str, ...]) -> Help | None:
        if path not in self._helps:
            self._helps[path] = self._read_help(path)
        return self._helps[path]

    def _read_help(self, path: tuple[str, ...]) -> Help | None:
        env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
        proc = subprocess.run(
            [str(self.program), *path, "--help"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        if proc.returncode != 0:
            return None
        return parse_help(proc.stdout)

    def problem(self, argv: list[str]) -> str | None:
        """What would stop ``clawpoint ARGV`` from parsing (None: it names a real command)."""
        path: tuple[str, ...] = ()
        top = self.help(path)
        assert top is not None and top.commands, "clawpoint --help lists no commands"
        current = top
        i = 0
        while i < len(argv) and current.group and argv[i] in current.commands:
            path += (argv[i],)
            found = self.help(path)
            if found is None:
                return f"'clawpoint {' '.join(path)} --help' fails"
            current, i = found, i + 1
        if not path:
            return f"{argv[0] if argv else '(nothing)'!r} is not a clawpoint command"
        positional: list[str] = []
        rest = argv[i:]
        j = 0
        while j < len(rest):
            word = rest[j]
            if word == "--":
                positional += rest[j + 1 :]
                break
            if word.startswith("-"):
                if word not in current.options:
                    return f"'clawpoint {' '.join(path)}' has no option {word}"
                j += 2 if current.options[word] else 1
                continue
            positional.append(word)
            j += 1
        if current.group and positional:
            return f"'clawpoint {' '.join(path)}' has no command {positional[0]!r}"
        variadic = any(a.endswith("...") for a in current.arguments)
        if not variadic and len(positional) > len(current.arguments):
            return (
                f"'clawpoint {' '.join(path)}' takes {len(current.arguments)} argument(s), "
                f"not {len(positional)}: {' '.join(positional)}"
            )
        return None
