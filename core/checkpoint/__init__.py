"""Checkpoint engines: ``criu`` (transparent, root) and ``cooperative`` (the app saves itself)."""
