"""``core.schema_base.Model``: the base of every model, its schema built on first use.

Pinned here: the deferral is real (a model is not built when its class is defined, and is
when first used), first uses from many threads at once all validate (pydantic >= 2.14
rebuilds under a lock; the wrapper, the MCP server and the watch loop are threaded), and
every pydantic model clawpoint defines derives from ``Model`` (a model that does not is
built at import, which is what ``tests/cli/test_start.py``'s budget is about).
"""

from __future__ import annotations

import importlib
import pkgutil
import threading

from pydantic import BaseModel, Field

import core
import mcp_server
from core.schema_base import Model


def test_a_model_is_built_when_first_used_not_when_defined() -> None:
    class Inner(Model):
        n: int = Field(ge=0)

    class Outer(Model):
        inner: Inner
        tags: list[str] = Field(default_factory=list)

    assert not Outer.__pydantic_complete__
    made = Outer.model_validate({"inner": {"n": 3}, "tags": ["a"]})
    assert Outer.__pydantic_complete__ and made.inner.n == 3
    assert Outer.model_json_schema()["required"] == ["inner"]


def test_first_uses_from_many_threads_all_validate() -> None:
    class Part(Model):
        size: int = Field(ge=1)

    class Whole(Model):
        parts: list[Part]
        name: str

    start = threading.Barrier(16)
    results: list[object] = []
    failures: list[BaseException] = []

    def first_use(i: int) -> None:
        start.wait()
        try:
            results.append(Whole.model_validate({"parts": [{"size": i + 1}], "name": f"w{i}"}))
        except BaseException as exc:  # noqa: BLE001 - every failure is the finding
            failures.append(exc)

    threads = [threading.Thread(target=first_use, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    assert sorted(w.parts[0].size for w in results) == list(range(1, 17))  # type: ignore[attr-defined]


def _models_defined_in(package: object) -> list[type[BaseModel]]:
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):  # type: ignore[attr-defined]
        if ".__main__" in info.name:
            continue
        importlib.import_module(info.name)
    seen: list[type[BaseModel]] = []
    todo: list[type[BaseModel]] = [BaseModel]
    while todo:
        cls = todo.pop()
        for sub in cls.__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith(package.__name__ + "."):  # type: ignore[attr-defined]
                seen.append(sub)
    return seen


def test_every_model_of_clawpoint_derives_from_model() -> None:
    models = _models_defined_in(core) + _models_defined_in(mcp_server)
    assert len(models) > 100  # the walk found them
    outside = sorted(
        f"{m.__module__}.{m.__qualname__}"
        for m in models
        if not issubclass(m, Model) and not m.__name__.startswith(("RootModel", "_"))
    )
    assert not outside, f"derive these from core.schema_base.Model: {outside}"
