"""Persistent state: SQLite in WAL mode under CLAWPOINT_HOME (see ``core.state.db``)."""
