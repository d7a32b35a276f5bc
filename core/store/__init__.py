"""Checkpoint images and their catalog: atomic, verified, retained (see ``core.store.store``)."""
