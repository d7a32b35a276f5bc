"""Runbooks: YAML procedures that chain MCP tool calls, checks, approval gates and questions.

``schema`` holds the typed model and the loader/validator, ``tools`` the catalogue of tool
names a step may call, ``templates`` the ``{{...}}`` reference and condition helpers. The
engine that runs a runbook with persisted progress builds on these; nothing here performs
I/O beyond reading runbook files.
"""
