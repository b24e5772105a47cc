"""Training loops. Each one measures the phases it runs."""
