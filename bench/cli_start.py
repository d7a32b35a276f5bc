"""CLI start-up: CPU and wall of ``clawpoint`` commands against a bare Python start.

``python bench/cli_start.py [--reps 15] [--clawpoint PATH]``

Each repetition runs, in turn, ``python -c pass`` (the same interpreter the ``clawpoint``
console script runs under) and each command below, as a user would: the installed console
script, a fresh process, stdout and stderr to /dev/null. The child's CPU (user + system) comes
from ``os.wait4``, so neither this process nor other children are counted; wall is from spawn
to reap. The table gives medians and each command's ratio to the bare start's median in the
same run (target: CPU <= 4x). Every command runs against its own empty ``CLAWPOINT_HOME``
(the local backend only), after one warm-up pass that creates the state database and byte
code (written even where ``PYTHONDONTWRITEBYTECODE`` is set), so the figures are a command's
start, not a first install.

Commands: ``--help``, ``workloads --json``, ``approvals list --json`` and ``checkpoints``
(the table), output to /dev/null as an agent's shell tool or a script would take it (help is
plain text off a terminal: ``core.cli``), and ``--help`` again on a pseudo-terminal, as a
person sees it (Rich's boxes). Results go to ``bench/results/cli_start.json``.

Limits: one machine, whatever else runs on it; wall varies with load far more than CPU does,
which is why CPU is the target. The console script's own Python start is in both sides.
The bare start is an installed interpreter's only where nothing in site-packages runs at start:
`make venv` installs the checkout in setuptools' compat editable mode (a path line); the
default editable finder ran in every start and doubled the bare one (11 -> 23 ms), so the
ratios measured before 2026-12-04 are about half of what an installed copy shows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

COMMANDS: list[tuple[str, ...]] = [
    ("--help",),
    ("workloads", "--json"),
    ("approvals", "list", "--json"),
    ("checkpoints",),
]
TARGET_RATIO = 4.0


def _clawpoint() -> str:
    beside = Path(sys.executable).with_name("clawpoint")
    if beside.exists():
        return str(beside)
    found = shutil.which("clawpoint")
    if found is None:
        raise SystemExit("no clawpoint console script next to this Python or on PATH")
    return found


TERMINAL = "terminal"  # a case's marker: stdout is a pseudo-terminal


def measure(
    argv: list[str], env: dict[str, str], *, terminal: bool = False
) -> tuple[float, float, int]:
    """(CPU s, wall s, exit code) of one run of ``argv``, output discarded (or read from a
    pseudo-terminal, drained by a thread so the command never waits on it)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    master, out = os.openpty() if terminal else (-1, devnull)
    drain = threading.Thread(target=_drain, args=(master,), daemon=True) if terminal else None
    try:
        actions = [
            (os.POSIX_SPAWN_DUP2, devnull, 0),
            (os.POSIX_SPAWN_DUP2, out, 1),
            (os.POSIX_SPAWN_DUP2, devnull, 2),
        ]
        if drain is not None:
            drain.start()
        start = time.perf_counter()
        pid = os.posix_spawn(argv[0], argv, env, file_actions=actions)
        _, status, usage = os.wait4(pid, 0)
        wall = time.perf_counter() - start
    finally:
        os.close(devnull)
        if terminal:
            os.close(out)  # the drain then reads EOF (EIO) and ends
            if drain is not None:
                drain.join(5)
            os.close(master)
    return usage.ru_utime + usage.ru_stime, wall, os.waitstatus_to_exitcode(status)


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 65536):
            pass
    except OSError:
        pass


def run(reps: int, clawpoint: str) -> dict[str, object]:
    python = sys.executable
    cases: list[tuple[str, list[str], dict[str, str]]] = [
        ("python -c pass", [python, "-c", "pass"], {})
    ]
    cases += [("clawpoint " + " ".join(c), [clawpoint, *c], {}) for c in COMMANDS]
    cases.append(("clawpoint --help (on a terminal)", [clawpoint, "--help"], {TERMINAL: "1"}))
    with tempfile.TemporaryDirectory(prefix="clawpoint-bench-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("CLAWPOINT_")}
        # A user's Python caches byte code; an environment that forbids writing it (some
        # CI images and sandboxes set PYTHONDONTWRITEBYTECODE) would measure compiling
        # clawpoint's sources on every start instead (about 150 ms here).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["CLAWPOINT_HOME"] = str(Path(tmp) / "home")
        cpu: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        wall: dict[str, list[float]] = {name: [] for name, _, _ in cases}
        codes: dict[str, set[int]] = {name: set() for name, _, _ in cases}
        for _name, argv, extra in cases:  # warm-up: state database, byte code
            measure(argv, env, terminal=TERMINAL in extra)
        for _ in range(reps):
            for name, argv, extra in cases:
                c, w, code = measure(argv, env, terminal=TERMINAL in extra)
                cpu[name].append(c)
                wall[name].append(w)
                codes[name].add(code)
    base_cpu = statistics.median(cpu["python -c pass"])
    base_wall = statistics.median(wall["python -c pass"])
    rows = []
    for name, _, _ in cases:
        c, w = statistics.median(cpu[name]), statistics.median(wall[name])
        rows.append(
            {
                "command": name,
                "cpu_ms": round(c * 1000, 1),
                "wall_ms": round(w * 1000, 1),
                "cpu_ratio": round(c / base_cpu, 2) if base_cpu else None,
                "wall_ratio": round(w / base_wall, 2) if base_wall else None,
                "exit_codes": sorted(codes[name]),
            }
        )
    return {
        "reps": reps,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "loadavg": os.getloadavg(),
        "target_cpu_ratio": TARGET_RATIO,
        "rows": rows,
    }


def table(result: dict[str, object]) -> str:
    lines = [
        "| command | CPU ms (median) | x bare | wall ms (median) | x bare | exit |",
        "|---|---:|---:|---:|---:|---|",
    ]
    rows = result["rows"]
    assert isinstance(rows, list)
    for r in rows:
        lines.append(
            f"| `{r['command']}` | {r['cpu_ms']:.0f} | {r['cpu_ratio']:.1f} | "
            f"{r['wall_ms']:.0f} | {r['wall_ratio']:.1f} | {','.join(map(str, r['exit_codes']))} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--clawpoint", default=None, help="console script (default: beside python)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/cli_start.json"))
    args = parser.parse_args()
    result = run(args.reps, args.clawpoint or _clawpoint())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['machine']}; Python {result['python']}; {args.reps} reps; "
          f"load {result['loadavg']}")  # fmt: skip
    print(table(result))
    over = [r for r in result["rows"] if r["cpu_ratio"] and r["cpu_ratio"] > TARGET_RATIO]  # type: ignore[union-attr]
    if over:
        print(f"over the {TARGET_RATIO}x CPU target: {', '.join(r['command'] for r in over)}")


if __name__ == "__main__":
    main()
