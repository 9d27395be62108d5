"""Tasks: one module each, registered by name in :mod:`sim.registry`."""
