"""The convention for writing tool calls in a SKILL.md, and its strict parser.

A tool call is an inline code span (one pair of backticks) of the form

    `tool_name(arg=VALUE, other=VALUE)`                  a call
    `tool_name(arg=VALUE) -> field.sub[].leaf`           ... and an output field it relies on
    `tool_name(arg=VALUE) -> items[].status == "good"`   ... with the value it expects
    `tool_name() -> items[].health in ["degraded", "down"]`

VALUE is a JSON literal (``"text"``, ``3``, ``true``, ``null``, ``[...]``, ``{"k": ...}``) or a
placeholder in capitals from ``PLACEHOLDERS`` (``WORKLOAD``, ``NODE``, ...), also inside
JSON arrays and objects. A field path is names joined by ``.``; ``[]`` after a name means
"each item of this list". Operators: ``==``, ``!=`` and ``in`` (a JSON array).

Every code span that starts like a call (``name(``) or holds ``->`` must parse completely:
``parse_call`` raises ``SkillSyntaxError`` on anything else, so a typo can never be skipped.
Spans starting with ``clawpoint `` are CLI commands (``cli_words`` gives the subcommand).
Fenced code blocks are not allowed in skills (``find_spans`` refuses them).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# Placeholder -> (what it stands for, a sample value of the right JSON type for schema checks).
PLACEHOLDERS: dict[str, tuple[str, Any]] = {
    "WORKLOAD": ("a workload id, e.g. local:train-1 or slurm:1234", "local:train-1"),
    "NODE": ("a node id, e.g. local:node-b or slurm:n2", "local:node-b"),
    "CHECKPOINT": ("a checkpoint id, e.g. local:train-1@3", "local:train-1@3"),
    "APPROVAL": ("an approval id (apr-...)", "apr-0123456789"),
    "CODE": ("the one-time code the person typed in chat", "123456"),
    "RUN": ("a runbook run id", "run-0123456789"),
    "ANSWER": ("the person's answer to a runbook question", "yes"),
    "REASON": ("one line saying why", "asked by the person"),
    "BACKEND": ("local | slurm | kubernetes", "local"),
    "REPLICAS": ("a replica count", 2),
    "CURSOR": ("next_cursor of the previous page", "x"),
    "POOL": ("a node pool, BACKEND:POOL, e.g. local:spot or slurm:elastic", "local:spot"),
    "SIZE": ("a pool size in nodes", 1),
    "EVERY": ("a checkpoint interval, e.g. 90s, 20m or 2h", "20m"),
}

_IDENT = re.compile(r"[a-z][a-z0-9_]*")
_PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SPAN = re.compile(r"`([^`\n]*)`")
_CALL_START = re.compile(r"^\s*[a-z][a-z0-9_]*\s*\(")


class SkillSyntaxError(ValueError):
    pass


@dataclass(frozen=True)
class Placeholder:
    name: str

    @property
    def sample(self) -> Any:
        return PLACEHOLDERS[self.name][1]


@dataclass(frozen=True)
class OutputRef:
    path: tuple[str, ...]  # e.g. ("checkpoints[]", "status")
    op: str | None = None  # "==", "!=", "in"
    value: Any = None

    @property
    def text(self) -> str:
        return ".".join(self.path)


@dataclass
class Call:
    tool: str
    args: dict[str, Any]
    ref: OutputRef | None
    text: str
    where: str = ""
    placeholders: set[str] = field(default_factory=set)


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.placeholders: set[str] = set()

    def fail(self, what: str) -> SkillSyntaxError:
        return SkillSyntaxError(
            f"{what} at column {self.pos + 1} of `{self.text}`"
            f" (near {self.text[self.pos : self.pos + 12]!r})"
        )

    def ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] == " ":
            self.pos += 1

    def peek(self, token: str) -> bool:
        self.ws()
        return self.text.startswith(token, self.pos)

    def expect(self, token: str) -> None:
        if not self.peek(token):
            raise self.fail(f"expected {token!r}")
        self.pos += len(token)

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.ws()
        m = pattern.match(self.text, self.pos)
        if m is None:
            raise self.fail(f"expected {what}")
        self.pos = m.end()
        return m.group(0)

    def value(self) -> Any:
        self.ws()
        if self.peek('"'):
            return json.loads(self.match(_STRING, "a JSON string"))
        if self.peek("["):
            self.expect("[")
            items: list[Any] = []
            if not self.peek("]"):
                items.append(self.value())
                while self.peek(","):
                    self.expect(",")
                    items.append(self.value())
            self.expect("]")
            return items
        if self.peek("{"):
            self.expect("{")
            obj: dict[str, Any] = {}
            if not self.peek("}"):
                while True:
                    key = json.loads(self.match(_STRING, "a JSON string key"))
                    self.expect(":")
                    obj[key] = self.value()
                    if not self.peek(","):
                        break
                    self.expect(",")
            self.expect("}")
            return obj
        for literal, result in (("true", True), ("false", False), ("null", None)):
            if re.match(rf"{literal}\b", self.text[self.pos :]):
                self.pos += len(literal)
                return result
        if self.text[self.pos : self.pos + 1].isupper():
            name = self.match(_PLACEHOLDER, "a placeholder")
            if name not in PLACEHOLDERS:
                raise self.fail(f"unknown placeholder {name} (known: {', '.join(PLACEHOLDERS)})")
            self.placeholders.add(name)
            return Placeholder(name)
        number = self.match(_NUMBER, "a value (JSON literal or PLACEHOLDER)")
        return json.loads(number)

    def path(self) -> tuple[str, ...]:
        parts = []
        while True:
            name = self.match(_IDENT, "a field name")
            if self.text.startswith("[]", self.pos):
                self.pos += 2
                name += "[]"
            parts.append(name)
            if not self.text.startswith(".", self.pos):
                return tuple(parts)
            self.pos += 1

    def call(self) -> Call:
        tool = self.match(_IDENT, "a tool name")
        self.expect("(")
        args: dict[str, Any] = {}
        if not self.peek(")"):
            while True:
                name = self.match(_IDENT, "an argument name")
                if name in args:
                    raise self.fail(f"argument {name} given twice")
                self.expect("=")
                args[name] = self.value()
                if not self.peek(","):
                    break
                self.expect(",")
        self.expect(")")
        ref = None
        if self.peek("->"):
            self.expect("->")
            path = self.path()
            op, value = None, None
            for candidate in ("==", "!=", " in "):
                if self.peek(candidate.strip()) and (candidate != " in " or self._word("in")):
                    self.expect(candidate.strip())
                    op, value = candidate.strip(), self.value()
                    if op == "in" and not isinstance(value, list):
                        raise self.fail("'in' needs a JSON array")
                    break
            ref = OutputRef(path, op, value)
        self.ws()
        if self.pos != len(self.text):
            raise self.fail("unexpected text after the call")
        return Call(tool, args, ref, self.text, placeholders=self.placeholders)

    def _word(self, word: str) -> bool:
        end = self.pos + len(word)
        return self.text.startswith(word, self.pos) and (
            end == len(self.text) or not self.text[end].isalnum()
        )


def parse_call(text: str) -> Call:
    """One code span written as a call; raises ``SkillSyntaxError`` unless all of it parses."""
    return _Parser(text.strip()).call()


def find_spans(body: str) -> list[tuple[int, str]]:
    """Every inline code span of a skill body, with its line number."""
    if "```" in body or "~~~" in body:
        raise SkillSyntaxError("fenced code blocks are not allowed in skills: use inline spans")
    return [
        (n, m.group(1)) for n, line in enumerate(body.splitlines(), 1) for m in _SPAN.finditer(line)
    ]


def is_call(span: str) -> bool:
    """A span that must parse as a call: it starts like one or references an output."""
    return bool(_CALL_START.match(span)) or (
        "->" in span and not span.lstrip().startswith("clawpoint ")
    )


def calls(body: str, where: str = "") -> list[Call]:
    """Every call of a skill body; raises on the first span that looks like a call and
    does not parse (with the line number)."""
    out = []
    for line, span in find_spans(body):
        if not is_call(span):
            continue
        try:
            call = parse_call(span)
        except SkillSyntaxError as exc:
            raise SkillSyntaxError(f"{where}:{line}: {exc}") from None
        call.where = f"{where}:{line}"
        out.append(call)
    return out


def cli_words(span: str) -> list[str] | None:
    """The subcommand words of a ``clawpoint ...`` span (up to the first argument or
    option), or None when the span is not a CLI command."""
    parts = span.split()
    if not parts or parts[0] != "clawpoint":
        return None
    words = []
    for part in parts[1:]:
        if not re.fullmatch(r"[a-z][a-z0-9-]*", part):
            break
        words.append(part)
    return words


def substitute(value: Any, real: dict[str, Any] | None = None) -> Any:
    """Placeholders replaced by ``real[name]`` (else by their sample value), recursively."""
    if isinstance(value, Placeholder):
        return (real or {}).get(value.name, value.sample)
    if isinstance(value, list):
        return [substitute(v, real) for v in value]
    if isinstance(value, dict):
        return {k: substitute(v, real) for k, v in value.items()}
    return value
