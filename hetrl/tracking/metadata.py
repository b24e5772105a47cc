"""What a run was started from: who, the command line, and the git commits of the code and
of the config (MLflow's system tags `mlflow.user`, `mlflow.source.*`, `mlflow.note.content`)."""

from __future__ import annotations

import getpass
import shlex
import subprocess
import sys
from pathlib import Path

from hetrl.paths import CONF_DIR

PROJECT_DIR = Path(__file__).resolve().parents[2]


def command_line() -> str:
    """The command that reproduces this job: `python -m hetrl` with the job's own overrides
    (a sweep's job gets its values, not the sweep's lists), or this process's argv."""
    try:
        from hydra.core.hydra_config import HydraConfig

        if HydraConfig.initialized():
            overrides = [o for o in HydraConfig.get().overrides.task
                         if not o.startswith("tracking.parent_run_id=")]  # a sweep's, not its
            return " ".join(["python -m hetrl", *map(shlex.quote, overrides)])
    except Exception:  # noqa: BLE001 - outside Hydra: fall back to argv
        pass
    return " ".join(map(shlex.quote, [Path(sys.executable).name, *sys.argv]))


def _git(cwd: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(path: Path, ignore: Path | None = None) -> dict[str, str]:
    """commit, branch, repo URL and dirty flag of the git work tree holding `path` (empty when
    it is not in one, e.g. an installed wheel). Changes to `ignore` leave it clean: a results
    file that grows as the code runs."""
    if not path.exists() or (commit := _git(path, "rev-parse", "HEAD")) is None:
        return {}
    state = {"commit": commit}
    if (branch := _git(path, "rev-parse", "--abbrev-ref", "HEAD")) and branch != "HEAD":
        state["branch"] = branch
    if url := _git(path, "config", "--get", "remote.origin.url"):
        state["repo_url"] = url
    changes = (_git(path, "status", "--porcelain", "--untracked-files=no", "--", ".") or "")
    root = _git(path, "rev-parse", "--show-toplevel") or "."
    changed = {Path(root, line.split(maxsplit=1)[1]).resolve() for line in changes.splitlines()}
    ignored = {ignore.resolve()} if ignore else set()
    state["dirty"] = "true" if changed - ignored else "false"
    return state


def system_tags(run_name: str) -> dict[str, str]:
    """MLflow's system tags of a job (the UI's User, Source, Version and Description) and
    hetrl's `config.git.*`: the commit of the repository holding the config groups."""
    command = command_line()
    tags = {
        "mlflow.user": getpass.getuser(),
        "mlflow.source.type": "LOCAL",
        "mlflow.source.name": "python -m hetrl",
        "mlflow.note.content": f"**{run_name}**\n\n```\n{command}\n```",
        "command": command,
    }
    code = git_state(PROJECT_DIR)
    for key in ("commit", "branch", "repo_url", "dirty"):
        if key in code:
            tags[f"mlflow.source.git.{'repoURL' if key == 'repo_url' else key}"] = code[key]
    for key, value in git_state(Path(CONF_DIR)).items():
        tags[f"config.git.{key}"] = value
    return tags
