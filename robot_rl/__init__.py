"""robot_rl: learning (agents, critics, policies, data, training, export, deploy runtime)."""

__version__ = "0.1.0"
