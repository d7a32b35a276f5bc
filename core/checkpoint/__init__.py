"""Checkpoint engines: CRIU (transparent, root) and cooperative (the app saves its own state)."""
