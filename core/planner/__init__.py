"""Planning: deciding where and on what capacity workloads should run."""
