"""Runbooks: the shipped YAML loads, calls only real MCP tools, and the validator bites."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from core import errors
from core.config import load_settings
from core.runbooks import loading, schema, templates, tools
from core.service.facade import bootstrap
from mcp_server.server import TOOLSETS, build_server

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / "runbooks"
SHIPPED = {
    "spot-interruption",
    "gpu-node-failure",
    "node-maintenance-drain",
    "sla-rescue",
    "queue-backlog",
    "capacity-planner",
}


def _raw(name: str) -> dict[str, Any]:
    data = yaml.safe_load((RUNBOOKS / f"{name}.yaml").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def test_all_shipped_runbooks_load() -> None:
    loaded = loading.load_all(RUNBOOKS)
    assert set(loaded) >= SHIPPED
    for rb in loaded.values():
        assert rb.digest().startswith("sha256:")


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_steps_call_only_known_tools(name: str) -> None:
    rb = loading.load_runbook(RUNBOOKS / f"{name}.yaml")
    called = {s.tool for s in rb.steps if isinstance(s, schema.ToolStep)}
    assert called, "a runbook without tool calls does nothing"
    assert called <= tools.ALL_TOOLS
    # Every action has a gate: the engine must be able to stop and wait for a person.
    gated = {s.for_ for s in rb.steps if isinstance(s, schema.ApprovalStep)}
    for step in rb.steps:
        if isinstance(step, schema.ToolStep) and tools.is_mutating(step.tool):
            assert step.id in gated


def test_tool_catalogue_is_consistent(tmp_path: Path) -> None:
    assert not tools.READ_TOOLS & tools.ACTION_TOOLS
    assert tools.ENGINE_ONLY_TOOLS <= tools.ACTION_TOOLS
    # The runbook catalogue mirrors the server: every tool it names is served, except the
    # runbook-only plan calls (over MCP an action's dry_run returns the same plan).
    server = build_server(bootstrap(load_settings(tmp_path)), toolsets=TOOLSETS)  # every one
    served = {t.name for t in anyio.run(server.list_tools)}
    assert tools.ALL_TOOLS - tools.PLAN_TOOLS <= served, tools.ALL_TOOLS - served
    assert not tools.PLAN_TOOLS & served


def _problems(data: dict[str, Any]) -> list[str]:
    _, problems = loading.check_data(data)
    return [str(p) for p in problems]


def test_unknown_tool_is_named_with_file_and_key(tmp_path: Path) -> None:
    data = _raw("sla-rescue")
    data["steps"][0]["tool"] = "sla_risks"
    path = tmp_path / "sla-rescue.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(errors.InvalidInput) as info:
        loading.load_runbook(path)
    assert str(path) in info.value.message
    assert "steps[0](risk).tool" in info.value.message
    assert "unknown tool 'sla_risks'" in info.value.message
    assert "sla_risk" in info.value.hint


def test_pydantic_errors_name_the_key() -> None:
    data = _raw("spot-interruption")
    data["steps"][1]["kind"] = "chek"
    data["steps"][2]["tool_args"] = {}
    problems = _problems(data)
    assert any(p.startswith("steps[1](is-running)") and "kind" in p for p in problems), problems


def test_extra_key_in_tool_step() -> None:
    data = _raw("spot-interruption")
    data["steps"][0]["argz"] = {}
    assert any("steps[0](inspect).argz" in p for p in _problems(data))


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (lambda d: d["steps"][0]["args"].update(x="{{params.nope}}"), "no parameter 'nope'"),
        (lambda d: d["steps"][0]["args"].update(x="{{steps.save.status}}"), "no earlier step"),
        (lambda d: d["steps"][0]["args"].update(x="{{ params.workload"), "malformed reference"),
        (lambda d: d["steps"][4]["args"].pop("reason"), "needs a reason"),
        (lambda d: d["steps"].pop(5), "no approval gate"),
        (lambda d: d["steps"][1].update({"else": "inspect"}), "jumps back"),
        (lambda d: d["steps"][1].update({"else": "nowhere"}), "neither a step id"),
        (lambda d: d["steps"][5].update({"for": "inspect"}), "not an action tool step"),
        (lambda d: d["steps"][0].update(tool="execute_approved"), "cannot be a step"),
        (lambda d: d["steps"][1].update(id="inspect"), "used twice"),
        (lambda d: d.update(version=2), "version"),
        (
            lambda d: d["steps"][1]["condition"].update(left="{{steps.inspect}}"),
            "names a step, not a field",
        ),
    ],
)
def test_validator_rejects(mutate: Any, expected: str) -> None:
    data = copy.deepcopy(_raw("spot-interruption"))
    assert _problems(data) == []
    mutate(data)
    problems = _problems(data)
    assert any(expected in p for p in problems), problems


def test_name_must_match_file(tmp_path: Path) -> None:
    path = tmp_path / "other.yaml"
    path.write_text((RUNBOOKS / "sla-rescue.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(errors.InvalidInput, match="differs from the file name"):
        loading.load_runbook(path)


def test_duplicate_yaml_keys_are_rejected(tmp_path: Path) -> None:
    path = tmp_path / "dup.yaml"
    path.write_text("version: 1\nname: dup\nname: dup\n", encoding="utf-8")
    with pytest.raises(errors.InvalidInput, match="duplicate key"):
        loading.load_runbook(path)


def test_bind_params() -> None:
    rb = loading.load_runbook(RUNBOOKS / "sla-rescue.yaml")
    bound = rb.bind_params({"workload": "slurm:1234"})
    assert bound == {"workload": "slurm:1234", "min_late_minutes": 15.0}
    with pytest.raises(errors.InvalidInput, match="needs parameter 'workload'"):
        rb.bind_params({})
    with pytest.raises(errors.InvalidInput, match="BACKEND:NAME"):
        rb.bind_params({"workload": "1234"})
    with pytest.raises(errors.InvalidInput, match="no parameter"):
        rb.bind_params({"workload": "slurm:1", "extra": 1})


def test_digest_changes_with_content() -> None:
    data = _raw("sla-rescue")
    a = loading.validate_runbook(data).digest()
    data["steps"][0]["title"] = "changed"
    assert loading.validate_runbook(data).digest() != a


def test_conditions_evaluate_against_run_context() -> None:
    rb = loading.load_runbook(RUNBOOKS / "queue-backlog.yaml")
    check = rb.step("backlogged")
    assert isinstance(check, schema.CheckStep)
    ctx: dict[str, Any] = {
        "params": rb.bind_params({"partition": "gpu"}),
        "steps": {"depth": {"pending": 4, "oldest_wait_minutes": 45}},
    }
    assert check.condition.evaluate(ctx) is True
    ctx["steps"]["depth"]["oldest_wait_minutes"] = 10
    assert check.condition.evaluate(ctx) is False
    ctx["steps"] = {}  # the tool gave nothing: ordering against a missing value is false
    assert check.condition.evaluate(ctx) is False


def test_render_keeps_types_and_interpolates() -> None:
    ctx = {"params": {"n": 3, "w": "local:a"}, "steps": {"s": {"xs": [1, 2]}}, "run": {}}
    assert templates.render("{{params.n}}", ctx) == 3
    assert templates.render("w={{params.w}} n={{params.n}}", ctx) == "w=local:a n=3"
    assert templates.render({"a": ["{{steps.s.xs.1}}"]}, ctx) == {"a": [2]}
    with pytest.raises(errors.InvalidInput, match="has no value"):
        templates.render("{{steps.gone.status}}", ctx)
    assert templates.render("{{steps.gone.status}}", ctx, strict=False) is None


@pytest.mark.parametrize(
    ("text", "seconds"), [(90, 90.0), ("90s", 90.0), ("5m", 300.0), ("2h", 7200.0)]
)
def test_durations(text: object, seconds: float) -> None:
    assert schema.parse_duration(text) == seconds


def test_bad_duration() -> None:
    with pytest.raises(ValueError, match="not a duration"):
        schema.parse_duration("soon")
