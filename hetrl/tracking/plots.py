"""Pictures logged with a run."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def learning_curve(history: list[tuple[int, float]], path: Path, title: str) -> Path:
    """return_mean_100 over env steps, as a PNG."""
    fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
    if history:
        steps, returns = zip(*history)
        ax.plot(steps, returns)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return (mean of last 100 episodes)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
