"""Workloads shipped for demos, tests and benchmarks."""
