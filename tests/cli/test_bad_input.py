"""Bad input through the installed command: a clear message, exit 2, no traceback, no change.

Each case is what a person (or a script) could type: intervals that are zero, negative, NaN
or astronomically large; durations that overflow; a config file that is not UTF-8, is a
directory or is named but missing; ids with another script's digits; reasons and labels
longer than any interface keeps; and the documented examples, which must run as written.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import pytest

from tests.cli.conftest import ROOT, Cli

MAX_REASON_CHARS = 500  # what the MCP tools accept (core.model.MAX_REASON_CHARS)


def _refused(r: object, *needles: str) -> None:
    from tests.cli.conftest import Result

    assert isinstance(r, Result)
    assert r.code == 2, str(r)
    text = r.stderr + r.stdout
    for needle in needles:
        assert needle in text, str(r)


def _nothing_started(cli: Cli) -> None:
    assert cli("workloads", "--json").json() == []


@pytest.mark.parametrize("every", ["0", "-1", "nan", "inf", "1e300"])
def test_run_checkpoint_every_out_of_range(cli: Cli, every: str) -> None:
    r = cli("run", "--engine", "cooperative", f"--checkpoint-every={every}", "--", "true")
    _refused(r, "error (invalid-input)", "--checkpoint-every", "30 days")
    _nothing_started(cli)


def test_slurm_submit_checkpoint_every_out_of_range(cli: Cli) -> None:
    r = cli("slurm", "submit", "--name", "j", "--checkpoint-every=nan", "--print", "--", "true")
    _refused(r, "--checkpoint-every")


# Each was a traceback of the spec's validation, exit 1 (found by hand, 2026-12-03).
@pytest.mark.parametrize(
    ("option", "value", "says"),
    [("--cpus", "0", "--cpus: input should be greater than or equal to 1 (got 0)"),
     ("--gpus", "-1", "--gpus: input should be greater than or equal to 0"),
     ("--mem-mb", "0", "--mem-mb: input should be greater than or equal to 1"),
     ("--signal-before-end", "70000", "--signal-before-end: input should be less than"),
     ("--partition", "a;b", "--partition must match"),
     ("--time", "1h", "--time must match ^[0-9:-]+$ (got '1h')")],
)  # fmt: skip
def test_slurm_submit_values_out_of_range(cli: Cli, option: str, value: str, says: str) -> None:
    r = cli("slurm", "submit", "--name", "j", f"{option}={value}", "--print", "--", "true")
    _refused(r, "error (invalid-input): clawpoint slurm submit: " + says, "hint: ")
    assert "Traceback" not in r.stderr and "#!/bin/bash" not in r.stdout


# A traceback (OverflowError, or the worker pool's), or a run that never ended, before.
@pytest.mark.parametrize(
    ("option", "value"),
    [("--compute-hours", "inf"), ("--changeover-hours", "1e308"), ("--starts", "99999999999999999999"),
     ("--workers", "0"), ("--workers", "99999999999999999999"), ("--spot-price", "nan")],
)  # fmt: skip
def test_spot_evaluate_values_out_of_range(
    cli: Cli, tmp_path: Path, option: str, value: str
) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("date,availability\n2023-02-15 00:00:00,1\n2023-02-15 00:05:00,0\n")
    r = cli("spot", "evaluate", "--traces", str(trace), f"{option}={value}")
    _refused(r, "error (invalid-input)", f"{option} must ")


def test_a_new_name_is_refused_with_how_to_spell_one(cli: Cli) -> None:
    """Not "list the existing ones", which is the hint for a name that must exist."""
    r = cli("slurm", "submit", "--name", "a b", "--print", "--", "true")
    _refused(r, "invalid job name 'a b'", "choose a job name of those characters")


@pytest.mark.parametrize(
    ("option", "value"),
    [("--expires", "99999999999d"), ("--expires", "٣h"), ("--expires", "0s"),
     ("--max", "99999999999999999999999/h"), ("--max", "٣/h"), ("--max", "0/h")],
)  # fmt: skip
def test_grant_durations_and_budgets_out_of_range(cli: Cli, option: str, value: str) -> None:
    r = cli("approvals", "grant", "--action", "checkpoint", option, value)
    _refused(r, "error (invalid-input)", option.lstrip("-"))
    assert cli("approvals", "grants", "--all", "--json").json() == []


# 99999999999999999999 ended in a traceback: past SQLite's integer range (found by fuzzing);
# 0 and -1 reached SQLite as LIMIT 0 (nothing) and LIMIT -1 (everything).
@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (("audit", "--limit", "99999999999999999999"), "--limit"),
        (("audit", "--limit", "0"), "--limit"),
        (("audit", "--limit", "-1"), "--limit"),
        (("runbook", "runs", "--offset", "99999999999999999999"), "--offset"),
        (("runbook", "runs", "--offset", "-1"), "--offset"),
    ],
)
def test_counts_out_of_range(cli: Cli, argv: tuple[str, ...], option: str) -> None:
    r = cli(*argv, "--json")
    _refused(r, option)
    assert "Traceback" not in r.stderr, str(r)


def test_config_that_is_not_utf8(cli: Cli) -> None:
    path = cli.config("")
    path.write_bytes(b'[checkpoint]\ndefault_engine = "cooperative" # caf\xe9\n')
    _refused(cli("nodes"), "is not UTF-8")
    check = cli("config", "check")
    _refused(check, "is not UTF-8")
    assert "ok  config" not in check.stdout


def test_config_that_is_a_directory(cli: Cli) -> None:
    (cli.home / "config.toml").mkdir(parents=True)
    _refused(cli("nodes"), "cannot be read", "config.toml")
    _refused(cli("config", "check"), "cannot be read")


def test_config_named_by_clawpoint_config_but_missing(cli: Cli, tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    _refused(cli("nodes", CLAWPOINT_CONFIG=str(missing)), "CLAWPOINT_CONFIG names", "nope.toml")
    check = cli("config", "check", CLAWPOINT_CONFIG=str(missing))
    _refused(check, "does not exist")
    assert not missing.exists()


@pytest.mark.parametrize("ref", ["local:x@٣", "local:x@３", "local:trаin@1"])  # noqa: RUF001
def test_ids_are_ascii_only(cli: Cli, ref: str) -> None:
    _refused(cli("restore", ref, "--dry-run"), "error (invalid-input)")


def test_non_ascii_workload_id(cli: Cli) -> None:
    _refused(cli("checkpoint", "local:x٣"), "error (invalid-input)")


def test_reason_is_capped_like_the_mcp_tools(cli: Cli) -> None:
    long = "x" * (MAX_REASON_CHARS + 1)
    _refused(cli("drain", "local:node-a", "--yes", "--reason", long), f"at most {MAX_REASON_CHARS}")
    node = next(n for n in cli("nodes", "--json").json() if n["id"] == "local:node-a")
    assert node["schedulable"] is True
    _refused(cli("approvals", "grant", "--action", "checkpoint", "--reason", long))
    assert cli("approvals", "grants", "--all", "--json").json() == []
    ok = cli("drain", "local:node-a", "--yes", "--reason", "x" * MAX_REASON_CHARS)
    assert ok.code == 0, str(ok)


@pytest.mark.parametrize(
    "label", ["k=" + "v" * 201, "=v", "no-equals", "k\u0663=v", "k=line\nbreak"]
)
def test_labels_are_bounded(cli: Cli, label: str) -> None:
    r = cli("run", "--engine", "cooperative", "--label", label, "--", "true")
    _refused(r, "--label")
    _nothing_started(cli)


def test_too_many_labels(cli: Cli) -> None:
    labels = [arg for i in range(33) for arg in ("--label", f"k{i}=v")]
    _refused(cli("run", "--engine", "cooperative", *labels, "--", "true"), "at most 32")


@pytest.mark.parametrize("mb", ["-5", "0", "100000"])
def test_demo_state_size_out_of_range(cli: Cli, mb: str) -> None:
    r = cli("demo", "--state-mb", mb)
    _refused(r, "Invalid value for '--state-mb'")
    assert not any(cli.home.glob("*"))  # the demo did not even start


def _documented_commands(doc: Path, prefix: str) -> list[str]:
    """Shell lines in the doc's fenced sh blocks that start with ``prefix`` (joined at \\)."""
    found: list[str] = []
    for block in re.findall(r"```(?:sh|bash)\n(.*?)```", doc.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith(prefix):
                found.append(line.split(" #", 1)[0].strip())
    return found


@pytest.mark.parametrize("doc", ["docs/guardrails.md", "README.md"])
def test_documented_grant_examples_run_as_written(cli: Cli, doc: str) -> None:
    commands = _documented_commands(ROOT / doc, "clawpoint approvals grant")
    assert commands, f"no 'clawpoint approvals grant' example in {doc}"
    for command in commands:
        argv = shlex.split(command)
        r = cli(*argv[1:], "--json")
        assert r.code == 0, f"{doc}: {command}\n{r}"
        grant = r.json()
        i = argv.index("--action")
        assert grant["action"] == argv[i + 1]
        scopes = [argv[j + 1] for j, a in enumerate(argv) if a == "--scope"]
        assert grant["scope"] == dict(s.split("=", 1) for s in scopes)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
