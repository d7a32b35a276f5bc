"""The local backend: workloads under the wrapper on this machine, on virtual nodes."""

from core.backends.local.backend import LocalBackend
from core.backends.local.common import NAME

__all__ = ["NAME", "LocalBackend"]
