"""The workload wrapper: runs a command checkpointable, serves checkpoint requests, restores."""
