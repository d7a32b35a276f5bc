"""bench/suite_times.py: a ``--durations=0`` output summed per directory and per xdist group."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bench.suite_times import Cpu, Times, report

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = """
============================= slowest durations =============================
64.05s call     tests/slurm/test_capacity_advice.py::test_grows@slurm
2.50s setup    tests/slurm/test_e2e.py::test_down[x]@slurm
10.00s call     tests/scheduling/test_openclaw_jobs.py::test_t@module:tests/scheduling/test_openclaw_jobs.py
3.25s teardown tests/cli/test_start.py::test_help
1 failed, 3 passed, 1 skipped in 80.50s (0:01:20)
"""


def test_sums_per_directory_and_group_and_the_wall_time() -> None:
    t = Times(OUTPUT)
    assert dict(t.by_dir) == {"tests/slurm": 66.55, "tests/scheduling": 10.0, "tests/cli": 3.25}
    assert dict(t.by_group) == {
        "slurm": 66.55, "module:tests/scheduling/test_openclaw_jobs.py": 10.0, "-": 3.25,
    }  # fmt: skip
    assert t.wall == 80.5 and len(t.tests) == 4
    text = report(t, Times(OUTPUT.replace("64.05s", "4.05s")))
    assert "tests/slurm" in text and "(+60.0)" in text
    assert "largest group: slurm (66.5 s); the run's wall time: 80.5 s" in text


def test_an_output_without_durations_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "out.txt"
    empty.write_text("3 passed in 1.00s\n")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "suite_times.py"), str(empty)],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 2 and "--durations=0" in done.stderr


CPU_LINES = "\n".join(
    json.dumps(row)
    for row in (
        {"test": "tests/cli/test_a.py::test_x", "own_s": 0.5, "children_s": 2.0, "wall_s": 3.0},
        {"test": "tests/cli/test_a.py::test_y", "own_s": 0.25, "children_s": 0.0, "wall_s": 1.0},
        {"test": "tests/slurm/test_b.py::test_z@slurm", "own_s": 1.0, "children_s": 4.0,
         "wall_s": 9.0},
    )
)  # fmt: skip


def test_cpu_lines_sum_per_directory_and_name_the_costliest_tests() -> None:
    cpu = Cpu(CPU_LINES + "\n")
    assert (cpu.own, cpu.children) == (1.75, 6.0)
    assert dict(cpu.by_dir) == {"tests/cli": 2.75, "tests/slurm": 5.0}
    text = cpu.report(top=1)
    assert "CPU: 7.8 s (1.8 s in the test processes, 6.0 s in their children)" in text
    assert "tests/slurm/test_b.py::test_z@slurm" in text and "test_a.py::test_x" not in text


def test_the_script_adds_cpu_and_refuses_a_file_that_is_not_cpu_lines(tmp_path: Path) -> None:
    out, cpu, bad = tmp_path / "out.txt", tmp_path / "cpu.jsonl", tmp_path / "bad.jsonl"
    out.write_text(OUTPUT)
    cpu.write_text(CPU_LINES)
    script = [sys.executable, str(ROOT / "bench" / "suite_times.py"), str(out), "--cpu"]
    ok = subprocess.run([*script, str(cpu)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0 and "CPU per directory:" in ok.stdout, ok.stderr
    for text in ('{"test": "tests/x.py::t"}\n', "[1]\n", "not json\n"):
        bad.write_text(text)
        refused = subprocess.run([*script, str(bad)], capture_output=True, text=True, check=False)
        assert refused.returncode == 2 and "not CLAWPOINT_TEST_CPU lines" in refused.stderr, text
    missing = subprocess.run([*script, str(tmp_path / "none.jsonl")], capture_output=True,
                             text=True, check=False)  # fmt: skip
    assert missing.returncode == 2 and "cannot be read" in missing.stderr, missing.stderr
    assert "Traceback" not in missing.stderr
