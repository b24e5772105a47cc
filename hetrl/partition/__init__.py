"""Partitioning a training step over a platform's devices (AP-DRL, PEARL)."""
