"""The service facade's layout: one ``Service`` class built of small modules, each of one idea.

Pins what the split of ``core/service/facade.py`` promised: every name the interfaces import
from the facade still comes from there, no service module grows past the size at which it
holds more than one idea, ``Service.perform`` reads as its named steps, and the read tools'
composition and the move projection live in the service, not in an interface.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import core.service
from core.service import acting, facade, inventory, launching, lookup, planning
from core.service.people import PeopleDesk

SERVICE_DIR = Path(core.service.__file__).parent
ROOT = SERVICE_DIR.parent.parent
MAX_LINES = 600  # past this a module holds more than one idea (split it by idea)
MAX_PERFORM_LINES = 50  # docstring included: the decision path, one call per step


def test_the_facade_still_exports_what_the_interfaces_import() -> None:
    for name in (
        "ActionResult",
        "ClientAnswer",
        "ClientAsker",
        "ClusterStatus",
        "RawParams",
        "Service",
        "bootstrap",
    ):
        assert hasattr(facade, name), name


def test_service_is_one_class_built_of_the_floors() -> None:
    floors = (
        PeopleDesk,
        acting.Acting,
        planning.Planning,
        inventory.Inventory,
        launching.Launching,
        lookup.Lookup,
    )
    for floor in floors:
        assert issubclass(facade.Service, floor), floor.__name__
    # Every public operation is reachable on Service itself.
    for name in ("plan", "perform", "act", "execute_approved", "recover", "nodes", "resolve_node",
                 "run_workload", "submit_batch", "check_preconditions", "cluster_status"):  # fmt: skip
        assert callable(getattr(facade.Service, name)), name


def test_no_service_module_is_oversized() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in SERVICE_DIR.glob("*.py")}
    assert {n: s for n, s in sizes.items() if s > MAX_LINES} == {}
    assert sizes["facade.py"] < 200  # the class, its wiring and recovery; the rest is below


def test_perform_is_its_named_steps() -> None:
    lines = inspect.getsource(facade.Service.perform).splitlines()
    assert len(lines) <= MAX_PERFORM_LINES, len(lines)
    for step in ("_check_sealed", "_decide", "_execute", "_confirm_in_person", "_request_approval"):
        assert f"self.{step}(" in "\n".join(lines), step


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def test_interfaces_hold_no_composition_of_their_own() -> None:
    # The insight tools only register calls into core.service.briefs; the move projection
    # is the service's (runbooks and the MCP action results both show it).
    assert _defined(ROOT / "mcp_server" / "tools_insights.py") == {"register"}
    assert "projection" not in _defined(ROOT / "core" / "runbooks" / "calls.py")
    assert "projection" in _defined(SERVICE_DIR / "projection.py")


def test_the_read_tool_annotation_is_defined_once() -> None:
    found = [p.name for p in (ROOT / "mcp_server").glob("*.py") if "READ" in _defined(p)]
    assert found == ["common.py"]
