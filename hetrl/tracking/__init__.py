"""Experiment tracking: MLflow runs per job, a parent run per sweep, plots."""
