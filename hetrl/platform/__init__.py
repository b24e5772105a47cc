"""Platforms: the devices a job runs on (measured host) or is modeled on (one YAML each)."""
