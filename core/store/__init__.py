"""The local checkpoint store: images plus a manifest per checkpoint, atomic and verified."""
