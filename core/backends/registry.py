"""The backend registry: every backend clawpoint can build, by name, in one explicit dict.

A backend is one package under ``core/backends/`` plus one ``BackendEntry`` here: the
pydantic model of its ``[NAME]`` config section and a factory that builds it. Nothing else
names a backend: ``core.config`` keeps backend sections as raw tables, ``bootstrap`` (in
``core.service.facade``) builds every enabled entry, ``clawpoint config check`` validates
every section through ``sections``. What a backend can do beyond the ``Backend`` protocol it
says by implementing the optional capability protocols of ``core.backends.base``.

Rules for an entry's config model: ``extra="forbid"`` (a misspelt key is named, not
ignored) and an ``enabled: bool`` field (the backend is built only when it is true; its
default says whether the backend runs with no configuration at all, as ``local`` does).

``register`` adds an entry at run time (an out-of-tree backend, a test's fake); it refuses a
name that is taken or is not a valid id prefix. Limits: entries are process-wide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from core import errors
from core.backends.base import Backend
from core.backends.kubernetes.config import KubernetesConfig
from core.backends.local.config import LocalBackendConfig
from core.backends.slurm.config import SlurmConfig
from core.config import Settings, config_path
from core.model import BACKEND_RE
from core.state.db import Database

C = TypeVar("C", bound=BaseModel)


@dataclass(frozen=True)
class BackendEntry(Generic[C]):
    """How to configure and build one backend."""

    config: type[C]  # the [NAME] section's model: extra="forbid", with ``enabled: bool``
    factory: Callable[[Settings, Database, C], Backend]
    summary: str = ""


def _local(settings: Settings, db: Database, config: LocalBackendConfig) -> Backend:
    from core.backends.local import LocalBackend

    return LocalBackend(settings, db, config)


def _slurm(settings: Settings, db: Database, config: SlurmConfig) -> Backend:
    from core.backends.slurm import SlurmBackend

    return SlurmBackend(config)


def _k8s(settings: Settings, db: Database, config: KubernetesConfig) -> Backend:
    from core.backends.kubernetes.backend import KubernetesBackend

    return KubernetesBackend(config)


REGISTRY: dict[str, BackendEntry[Any]] = {
    "local": BackendEntry(LocalBackendConfig, _local, "workloads on this machine's virtual nodes"),
    "slurm": BackendEntry(SlurmConfig, _slurm, "a Slurm cluster (commands and slurmrestd)"),
    "k8s": BackendEntry(KubernetesConfig, _k8s, "a Kubernetes cluster (the official client)"),
}


def register(name: str, entry: BackendEntry[Any]) -> None:
    """Add a backend at run time; TypeError for an entry that breaks the rules above."""
    if not BACKEND_RE.fullmatch(name):
        raise ValueError(f"backend name {name!r} must be a lowercase id prefix (a-z, 0-9)")
    if name in REGISTRY:
        raise ValueError(f"a backend named {name!r} is already registered")
    if "enabled" not in entry.config.model_fields:
        raise TypeError(f"the [{name}] config model {entry.config.__name__} has no 'enabled' field")
    if entry.config.model_config.get("extra") != "forbid":
        raise TypeError(f"the [{name}] config model {entry.config.__name__} must forbid extra keys")
    REGISTRY[name] = entry


def unregister(name: str) -> None:
    """Remove a backend added with ``register`` (tests clean up with it)."""
    REGISTRY.pop(name, None)


def sections(settings: Settings) -> dict[str, BaseModel]:
    """Every registered backend's section, validated; InvalidInput naming every bad key.

    A section the file does not have gets the model's defaults. A top-level table that is
    neither a setting nor a registered backend is an error too (a misspelt ``[slrum]`` must
    not silently leave Slurm off)."""
    raw: Mapping[str, Any] = settings.model_extra or {}
    problems: list[str] = []
    out: dict[str, BaseModel] = {}
    for name in sorted(set(raw) - set(REGISTRY)):
        problems.append(
            f"{name}: not a setting or a backend (backends: {', '.join(sorted(REGISTRY))})"
        )
    for name, entry in REGISTRY.items():
        try:
            out[name] = entry.config.model_validate(raw.get(name, {}))
        except ValidationError as exc:
            problems.extend(
                f"{'.'.join(str(p) for p in (name, *e['loc']))}: {e['msg']}" for e in exc.errors()
            )
    if problems:
        raise errors.InvalidInput(
            f"config file {config_path(settings.home)} has problems: {'; '.join(problems)}",
            hint="fix these keys (see docs/configuration.md), then run 'clawpoint config check'",
        )
    return out


def build(settings: Settings, db: Database) -> dict[str, Backend]:
    """Every enabled backend, by name, in registry order."""
    built: dict[str, Backend] = {}
    for name, config in sections(settings).items():
        if getattr(config, "enabled", False):
            built[name] = REGISTRY[name].factory(settings, db, config)
    return built
