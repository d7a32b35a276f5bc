"""The loopback Slurm cluster's session fixture, for the tenant tests that run jobs on it."""

from tests.slurm.conftest import slurm_cluster  # noqa: F401
