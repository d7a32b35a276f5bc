"""Scheduled evaluation: collect signals, plan, act under guardrails, stay quiet otherwise."""
