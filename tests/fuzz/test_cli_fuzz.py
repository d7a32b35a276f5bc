"""Every CLI command, fuzzed through the console script's own ``main()`` (in-process: a
subprocess per case would take hours), plus a cross-check through the installed script.

The commands, their arguments and options come from the typer app itself, so a command
added elsewhere is fuzzed as it is. For every case: ``main()`` ends with one of the exit
codes of docs/cli.md (never an exception), prints no traceback, says something, and a
refusal (exit 2 or 3: invalid input, not found) changes nothing in the state database or
the checkpoint store.

Not fuzzed, on purpose: commands that execute the program they are given (``run``: a
fuzzer must never run arbitrary argv; ``slurm submit`` is fuzzed with ``--print`` always
first, so it only prints its script), serve or loop forever (``serve``,
``watch``), start workloads (``demo``) or run a CPU-bound simulation (``spot evaluate``).
``CLAWPOINT_FUZZ_CLI_EXAMPLES`` sets the cases per command (default 50); they are drawn from
the commit's seed, as the MCP fuzz's are (``tests.fuzz.seeding``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer.main
from hypothesis import given
from hypothesis import strategies as st

from core.cli.app import app, main
from core.service.facade import Service
from tests.fuzz.seeding import fuzzed, with_seed_note
from tests.fuzz.strategies import HOSTILE_STRINGS
from tests.fuzz.test_mcp_fuzz import StateProbe, _service

ROOT = Path(__file__).resolve().parents[2]
INSTALLED = ROOT / ".venv" / "bin" / "clawpoint"
EXAMPLES = int(os.environ.get("CLAWPOINT_FUZZ_CLI_EXAMPLES", "50"))
DOCUMENTED_EXITS = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 20, 21}
NOT_FUZZED = {"run", "serve", "watch", "demo", "spot evaluate"}
# Options every case of a command starts with, before anything drawn (so that no drawn "--"
# or argument can come first and turn them into the payload's argv).
ALWAYS = {"slurm submit": ["--print"]}
NUMBERS = ["-1", "0", "1", "1e309", "nan", "inf", "-inf", "99999999999999999999", "0x10", "1.5"]


@dataclass(frozen=True)
class Param:
    opts: tuple[str, ...]
    positional: bool
    flag: bool
    nargs: int


@cache
def live_commands() -> dict[str, tuple[Param, ...]]:
    """Command path ("approvals grant") -> its parameters, from the app."""
    found: dict[str, tuple[Param, ...]] = {}

    def walk(cmd: Any, path: list[str]) -> None:
        subs = getattr(cmd, "commands", None) or {}
        for name, sub in subs.items():
            walk(sub, [*path, name])
        if path:
            found[" ".join(path)] = tuple(
                Param(
                    tuple(p.opts),
                    p.param_type_name == "argument",
                    bool(getattr(p, "is_flag", False)),
                    int(p.nargs),
                )
                for p in cmd.params
            )

    walk(typer.main.get_command(app), [])
    return {k: v for k, v in found.items() if k not in NOT_FUZZED}


# Plain, valid-looking values too: a case whose every value is hostile stops at the first
# required one (a name, an id), and what lies behind it (the other values' checks) was
# never reached. (``slurm submit --cpus 0`` was a traceback no case had drawn.)
PLAIN = ["a", "train-1", "1", "local:a", "slurm:1", "n1", "local:a@1"]
VALUES = st.one_of(
    st.sampled_from(PLAIN),
    st.sampled_from(HOSTILE_STRINGS), st.sampled_from(NUMBERS), st.text(max_size=40),
    st.integers(min_value=600, max_value=5000).map(lambda n: "y" * n),
)  # fmt: skip


def argv_for(command: str) -> st.SearchStrategy[list[str]]:
    params = live_commands()[command]

    @st.composite
    def build(draw: st.DrawFn) -> list[str]:
        argv = [*command.split(), *ALWAYS.get(command, [])]
        head = len(argv)
        # Options first, then the arguments, as people type them: a command that stops
        # parsing options at its first argument (``slurm submit -- CMD``) saw none otherwise.
        for p in sorted(params, key=lambda p: p.positional):
            if p.positional:
                count = 1 if p.nargs == 1 else draw(st.integers(min_value=0, max_value=3))
                if draw(st.integers(min_value=0, max_value=9)) > 0:  # sometimes missing
                    argv += [draw(VALUES) for _ in range(count)]
            elif draw(st.booleans()):
                argv.append(draw(st.sampled_from(p.opts)))
                if not p.flag and draw(st.integers(min_value=0, max_value=19)) > 0:
                    argv.append(draw(VALUES))
        if draw(st.integers(min_value=0, max_value=14)) == 0:
            argv.insert(draw(st.integers(min_value=head, max_value=len(argv))), draw(
                st.sampled_from(["--bogus", "--help", "-", "--", "extra"])))  # fmt: skip
        return argv

    return build()


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, StateProbe]]:
    saved = os.environ.get("CLAWPOINT_HOME")
    service = _service(tmp_path_factory.mktemp("cli-fuzz") / "h")
    try:
        yield service, StateProbe(service)
    finally:
        if saved is None:
            os.environ.pop("CLAWPOINT_HOME", None)
        else:
            os.environ["CLAWPOINT_HOME"] = saved


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    saved = sys.argv
    sys.argv = ["clawpoint", *argv]
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    out = capsys.readouterr()
    return code, out.out + out.err


def check(argv: list[str], code: int, text: str) -> None:
    shown = " ".join(argv)[:300]
    assert code in DOCUMENTED_EXITS, f"clawpoint {shown}: exit {code} is not documented: {text}"
    assert "Traceback" not in text, f"clawpoint {shown}: traceback: {text[:2000]}"
    if code != 0:
        assert text.strip(), f"clawpoint {shown}: exit {code} without a word"


@pytest.mark.timeout(3600)
@pytest.mark.parametrize("command", sorted(live_commands()))
def test_command_survives_generated_argv(
    home: tuple[Service, StateProbe], capsys: pytest.CaptureFixture[str], command: str
) -> None:
    _, probe = home

    @fuzzed(EXAMPLES)
    @given(argv=argv_for(command))
    def case(argv: list[str]) -> None:
        before = probe()
        code, text = run_main(argv, capsys)
        check(argv, code, text)
        if code in (2, 3):
            assert probe() == before, f"clawpoint {' '.join(argv)[:300]} refused but wrote"

    with with_seed_note():
        case()


@pytest.mark.timeout(3600)
def test_installed_script_agrees(home: tuple[Service, StateProbe]) -> None:
    """50 generated cases through the real console script (argv cannot hold NUL there)."""
    service, probe = home
    if not INSTALLED.exists():
        pytest.skip("no installed console script (.venv/bin/clawpoint)")
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG")}
    env.update(CLAWPOINT_HOME=str(service.settings.home), PYTHONPATH=str(ROOT))
    commands = sorted(live_commands())
    argvs = st.sampled_from(commands).flatmap(argv_for).filter(
        lambda a: not any("\0" in x for x in a))  # fmt: skip

    @fuzzed(50)
    @given(argv=argvs)
    def case(argv: list[str]) -> None:
        before = probe()
        done = subprocess.run([str(INSTALLED), *argv], env=env, capture_output=True,
                              text=True, errors="replace", timeout=120)  # fmt: skip
        check(argv, done.returncode, done.stdout + done.stderr)
        if done.returncode in (2, 3):
            assert probe() == before, f"clawpoint {' '.join(argv)[:300]} refused but wrote"

    with with_seed_note():
        case()
