"""The ``clawpoint`` command line: a thin translator over ``core.service`` (the one
entrypoint inside core; nothing else in core imports it)."""
