"""The Kubernetes backend (in progress): connection, ids, inventory and queue depth.

Built on the official ``kubernetes`` client only (an optional dependency: the
``kubernetes`` extra). What exists: ``connection`` (kubeconfig or in-cluster config,
namespaces in scope, retries, and the translation of API failures into ``core.errors``),
``ids`` (``k8s:KIND/NAMESPACE/NAME`` and ``k8s:NODE``, validated before any request),
``inventory`` (nodes and workloads: Pods, Jobs, Deployments, StatefulSets and, where their
CRDs are served, Kueue Workloads, Kubeflow training jobs, RayJobs, RayClusters, KServe
InferenceServices) and ``queue`` (pending pods by reason, Kueue pending/admitted per queue).

Not built yet, and not wired in: this package implements no ``Backend`` protocol and is not
registered in ``core.config`` or the service bootstrap, because that needs the backend
registry (a separate change) to land first. No actions (checkpoint, preempt, migrate,
scale, drain, failover) exist here yet; see docs/kubernetes.md.
"""
