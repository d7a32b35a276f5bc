"""Backends: local | slurm | kubernetes, one protocol (``core.backends.base``).

Backends never import one another; the service picks one by the prefix of an id.
"""
