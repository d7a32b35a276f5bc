"""A Kubernetes API emulator for tests: real HTTP on loopback, the official client unchanged.

No kube-apiserver can run on the machines that run these tests, so this package answers the
API paths the clawpoint Kubernetes backend relies on the way kube-apiserver documents them
(status codes, ``Status`` reasons and messages, resourceVersion semantics, selectors, watch,
eviction with PodDisruptionBudgets, scale, the kubelet checkpoint endpoint behind the node
proxy, RBAC denials). Each module's docstring says where it differs from a real server.

Modules: ``server`` (the ``Emulator`` tests start), ``app`` (HTTP paths), ``store`` (state,
resourceVersions, watch events), ``kinds`` (served resource types), ``selectors``,
``patching``, ``validation``, ``schema`` (OpenAPI schema checks of what clients send),
``workloads`` (eviction, scale), ``resize`` (``pods/resize``), ``rbac``, ``status`` (error
bodies), ``crds`` (CRDs of Kueue, Kubeflow, Ray and KServe for tests to register).
"""

from tests.k8s.emulator.rbac import Rule
from tests.k8s.emulator.server import Emulator, Fault, Recorded

__all__ = ["Emulator", "Fault", "Recorded", "Rule"]
