"""Runbooks: YAML procedures that chain MCP tool calls, checks, approval gates and questions.

``schema`` holds the typed model and the loader/validator, ``tools`` the catalogue of tool
names a step may call, ``templates`` the ``{{...}}`` reference and condition helpers.
``engine`` runs a runbook with its progress persisted by ``store`` (SQLite), calling the
service through ``calls``; only those three touch the database or the service.
"""
