"""Adding a backend is one package plus one registry entry.

The in-memory backend of tests/fakes/backend.py is registered at run time (no file of
clawpoint changes) and a ``[fake]`` section enables it: the service built by ``bootstrap``
lists its nodes and workloads beside the local ones, plans and performs actions on
``fake:`` ids through the guardrails and the journal, synthesises its queue, and reports
what it cannot do (launch a ``clawpoint run``) as not supported. A section nobody registered,
a misspelt key in a registered one, and an entry that breaks the registry's rules are
refused with errors naming them.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core import errors
from core.backends import registry
from core.backends.registry import BackendEntry
from core.config import load_settings
from core.model import Action, Principal, PrincipalKind, WorkloadState
from core.service.facade import Service, bootstrap
from core.specs import RunSpec
from tests.fakes.backend import ENTRY, FakeBackend, FakeConfig

PERSON = Principal(id="tester", kind=PrincipalKind.PERSON)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def registered() -> Iterator[None]:
    registry.register("fake", ENTRY)
    try:
        yield
    finally:
        registry.unregister("fake")


def _service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toml: str) -> Service:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.toml").write_text(toml)
    monkeypatch.setenv("CLAWPOINT_HOME", str(home))
    monkeypatch.delenv("CLAWPOINT_CONFIG", raising=False)
    return bootstrap(load_settings(home))


def test_a_registered_backend_is_built_and_listed(
    registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = _service(tmp_path, monkeypatch, '[fake]\nenabled = true\nnodes = ["f1", "f2"]\n')
    assert set(service.backends) == {"local", "fake"}
    ids = {n.id for n in service.nodes()}
    assert {"fake:f1", "fake:f2", "local:node-a"} <= ids
    assert service.get_workload("fake:w1").node == "f1"
    assert [w.id for w in service.workloads("fake")] == ["fake:w1"]
    # No queue of its own: one synthesised from its workloads' states.
    (queue,) = service.queue_depth("fake")
    assert (queue.backend, queue.running, queue.pending) == ("fake", 1, 0)
    # It cannot start a `clawpoint run`: said, not faked.
    with pytest.raises(errors.NotSupported):
        service.run_workload(
            RunSpec(name="x", command=["true"], home=str(service.settings.home)),
            detach=True,
            principal=PERSON,
            backend="fake",
        )


def test_actions_on_a_registered_backend_go_through_the_service(
    registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = _service(tmp_path, monkeypatch, "[fake]\nenabled = true\n")
    result = service.act(Action.MIGRATE, "fake:w1", {"to": "f2"}, principal=PERSON, confirmed=True)
    assert result.status == "executed", result.message
    moved = service.get_workload("fake:w1")
    assert (moved.state, moved.node) == (WorkloadState.RUNNING, "f2")
    assert moved.last_checkpoint == "fake:w1@1"
    assert [c.id for c in service.checkpoints("fake:w1")] == ["fake:w1@1"]
    fake = service.backend("fake")
    assert isinstance(fake, FakeBackend)
    assert [op for op, _ in fake.steps_run] == ["checkpoint", "start"]
    audit = service.audit.verify()
    assert audit.ok


def test_a_section_of_no_registered_backend_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        _service(tmp_path, monkeypatch, "[fake]\nenabled = true\n")
    assert "fake: not a setting or a backend" in info.value.message
    assert "config check" in info.value.hint


def test_a_misspelt_key_of_a_registered_backend_is_named(
    registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(errors.InvalidInput) as info:
        _service(tmp_path, monkeypatch, "[fake]\nenabled = true\nnode = []\n")
    assert "fake.node" in info.value.message


def test_entries_that_break_the_rules_are_refused() -> None:
    class NoEnabled(FakeConfig):
        pass

    with pytest.raises(ValueError, match="already registered"):
        registry.register("local", ENTRY)
    with pytest.raises(ValueError, match="lowercase"):
        registry.register("Fake-1", ENTRY)

    from pydantic import BaseModel

    class Loose(BaseModel):
        enabled: bool = False

    class Bare(BaseModel):
        model_config = {"extra": "forbid"}

    with pytest.raises(TypeError, match="forbid"):
        registry.register("loose", BackendEntry(Loose, ENTRY.factory))
    with pytest.raises(TypeError, match="enabled"):
        registry.register("bare", BackendEntry(Bare, ENTRY.factory))
    assert "loose" not in registry.REGISTRY and "bare" not in registry.REGISTRY


# --------------------------------------------------------------------------- nobody forgets one
def _package(entry: BackendEntry[Any]) -> str:
    """The package under core/backends an entry's config model lives in."""
    return ".".join(entry.config.__module__.split(".")[:3])


def _in_tree() -> dict[str, str]:
    """Registry name -> package, for the backends that ship in core/backends."""
    return {
        name: _package(entry)
        for name, entry in registry.REGISTRY.items()
        if entry.config.__module__.startswith("core.backends.")
    }


def test_every_backend_package_is_registered() -> None:
    # A package under core/backends is a backend only through its registry entry.
    packages = {
        f"core.backends.{p.name}"
        for p in (ROOT / "core" / "backends").iterdir()
        if (p / "__init__.py").exists()
    }
    assert packages == set(_in_tree().values())


def test_the_independence_contract_lists_every_registered_backend() -> None:
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (independence,) = [c for c in contracts["contracts"] if c["type"] == "independence"]
    assert sorted(independence["modules"]) == sorted(_in_tree().values())


def test_the_contract_suite_covers_every_registered_backend() -> None:
    from tests.backends.conftest import SUBJECTS

    assert set(SUBJECTS) == {*_in_tree(), "fake"}
