"""Workloads shipped for demos and tests (they run as payloads under the wrapper)."""
