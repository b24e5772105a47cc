"""Learners: one module per algorithm, each update rule readable top to bottom."""
