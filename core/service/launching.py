"""Starting workloads: run one under the wrapper on a ``Launcher`` backend, or submit a
checkpointable batch job to a ``BatchSubmitter`` one. Both are audited.

These are not catalogue actions (nothing runs yet to plan against), so they do not go
through the guard; the CLI offers them to people only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from core import errors
from core.backends.base import Backend, BatchSubmitter, Launcher
from core.model import Principal, WorkloadInfo
from core.service.lookup import Lookup
from core.specs import BatchSpec, RunSpec


class Launching(Lookup):
    """Mixin of ``Service``: starting workloads and submitting batch jobs."""

    def _offering(self, what: str, backend: str | None, has: Callable[[Backend], bool]) -> str:
        """The named backend (or the first configured one) for which ``has`` holds."""
        if backend is not None and backend not in self.backends:
            raise errors.NotSupported(
                f"the {backend} backend is not enabled",
                hint=f"set [{backend}] enabled = true in the config (docs/{backend}.md)",
                details={"backend": backend},
            )
        for name in [backend] if backend else list(self.backends):
            if has(self.backends[name]):
                return name
        who = f"the {backend} backend cannot" if backend else "no configured backend can"
        raise errors.NotSupported(
            f"{who} {what}",
            hint="enable a backend that can (docs/configuration.md lists each backend's section)",
            details={"backend": backend, "capability": what},
        )

    def _launcher(self, backend: str | None) -> tuple[str, Launcher]:
        name = self._offering("start workloads", backend, lambda b: isinstance(b, Launcher))
        return name, cast(Launcher, self.backends[name])

    def _submitter(self, backend: str | None) -> BatchSubmitter:
        name = self._offering("submit batch jobs", backend, lambda b: isinstance(b, BatchSubmitter))
        return cast(BatchSubmitter, self.backends[name])

    def run_workload(
        self, spec: RunSpec, *, detach: bool, principal: Principal, backend: str | None = None
    ) -> int | WorkloadInfo:
        """Start (or restore) a workload under the wrapper on a node of a ``Launcher`` backend
        (the first configured one when ``backend`` is None).

        Detached: returns the running workload. Foreground: runs it to completion in this
        process and returns the wrapper's exit code.
        """
        name, launcher = self._launcher(backend)
        spec = launcher.place(spec)
        self.audit.append(
            "run",
            principal=str(principal),
            subject=f"{name}:{spec.name}",
            data={
                "node": spec.node,
                "engine": spec.engine,
                "command": spec.command,
                "detach": detach,
                "start_mode": spec.start_mode,
            },
        )
        return launcher.launch(spec, detach=detach)

    def render_batch(self, spec: BatchSpec, *, backend: str | None = None) -> str:
        """What ``submit_batch`` would submit (the batch script); submits nothing."""
        return self._submitter(backend).render_batch(spec)

    def submit_batch(
        self, spec: BatchSpec, *, principal: Principal, backend: str | None = None
    ) -> str:
        """Submit a checkpointable batch job (the payload runs under the wrapper); its id."""
        workload = self._submitter(backend).submit_batch(spec)
        self.audit.append("submit", principal=str(principal), subject=workload,
                          data={"lineage": spec.lineage, "command": spec.command,
                                "partition": spec.partition})  # fmt: skip
        return workload
