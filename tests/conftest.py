import os

os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
