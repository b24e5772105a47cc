"""What happens across a sweep's jobs: a stop reaching every job whatever the launcher
(`stops`), and the sweep's MLflow parent run with its summary and report (`mlflow`); both are
Hydra callbacks (conf/config.yaml)."""
