"""The workload wrapper: runs a command checkpointable (``supervisor``), its control socket
client (``control``), detached launch (``launch``) and fencing of orphans (``fence``)."""
