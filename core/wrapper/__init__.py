"""The workload wrapper: runs a command checkpointable (``supervisor``, with its rooms
``desk``, ``restoring``, ``ending``, ``handoff_source`` / ``handoff_target``, ``progress``),
its control socket client (``control``), detached launch (``launch``) and fencing of orphans
(``fence``)."""
