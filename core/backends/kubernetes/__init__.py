"""The Kubernetes backend (ids ``k8s:KIND/NAMESPACE/NAME``, ``k8s:NODE``; section ``[k8s]``).

Built on the official ``kubernetes`` client only (an optional dependency: the ``kubernetes``
extra; imported lazily). Modules: ``connection`` (kubeconfig or in-cluster config,
namespaces in scope, retries, API failures translated into ``core.errors``), ``ids``
(validated before any request), ``inventory`` (nodes and workloads, operators where their
CRDs are served; mapped by ``node_info`` and ``workload_info``, parsed by ``objects``),
``placement`` (the scheduler's filter rules), ``queue`` (pending pods by reason, Kueue
queues), ``backend`` (the ``Backend`` protocol, registered in ``core.backends.registry``);
its plans and steps take ``context`` (``KubeContext``, what they need of it): ``plans``
(workload actions and ``PLANS``, the dispatch table), ``node_plans`` (drain, cordon,
undrain, failover), ``moves`` (a pod or a Job moved through a checkpoint), ``jobs`` (Job
moves the API server accepts, and Kueue-admitted Jobs through their Workloads), ``nodes``
(node rules and fencing), ``builders`` (step builders), ``pods`` (reading pods, placement
affinity), ``mutations`` (the mutating requests, previewed with ``dryRun=All``), ``steps``
(``STEPS``, the step table, and crash recovery), ``pools`` (node pools and ``scale_pool``
through Cluster API or Karpenter; their rules in ``autoscalers``), ``kubelet_api`` (the kubelet checkpoint API
probe) and ``incontainer`` (what ``pods/exec`` runs inside a wrapped container). See
docs/kubernetes.md.
"""
