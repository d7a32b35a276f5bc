"""Guardrails: risk classes, policy, approvals (incl. standing ones) and the audit chain."""
