"""Test-only stand-in for ``pynvml`` inside a ``clawpoint serve`` or ``clawpoint watch``
subprocess: put this folder first on PYTHONPATH and describe the GPUs in the environment
variable ``CLAWPOINT_FAKE_NVML_GPUS`` (JSON list of ``tests.signals.fake_nvml.FakeGpu``
keyword arguments, e.g. ``[{"uuid": "GPU-0"}, {"uuid": "GPU-1", "lost": true}]``).

On import it loads the real pynvml (for its constants, error classes and structs), builds
the fake from it and puts the fake in its own place in ``sys.modules``, so the adapter's
``importlib.import_module("pynvml")`` gets the fake. Never installed; tests only.
"""

from __future__ import annotations

import json
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
del sys.modules["pynvml"]
import pynvml  # noqa: E402  (the real package now that this folder is off the path)

from tests.signals.fake_nvml import FakeGpu, FakeNvml  # noqa: E402

_spec = json.loads(os.environ.get("CLAWPOINT_FAKE_NVML_GPUS", "[]"))
assert pynvml.__name__ == "pynvml"
sys.modules["pynvml"] = FakeNvml([FakeGpu(**g) for g in _spec])
