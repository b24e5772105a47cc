"""Pictures logged with a run."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hetrl.partition.costs import Plan  # noqa: E402
from hetrl.partition.graph import TaskGraph  # noqa: E402


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


def gantt(plan: Plan, graph: TaskGraph, path: Path, title: str) -> Path:
    """The modeled schedule of one training step: a row per device, a bar per node."""
    colors = {"matmul": "tab:blue", "elementwise": "tab:orange", "loss": "tab:red",
              "optimizer": "tab:green"}
    fig, ax = plt.subplots(figsize=(8, 1 + 0.6 * len(plan.devices)), dpi=100)
    for node, k, start, finish in zip(graph.nodes, plan.assignment, plan.start, plan.finish):
        ax.barh(k, (finish - start) * 1e6, left=start * 1e6, color=colors[node.kind.value],
                edgecolor="black", linewidth=0.3)
    ax.set_yticks(range(len(plan.devices)), plan.devices)
    ax.set_xlabel("modeled time (µs)")
    ax.set_title(f"{title}: {plan.method}, step {plan.makespan * 1e6:.1f} µs (modeled)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()]
    ax.legend(handles, colors.keys(), loc="upper right", fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def eps_heatmap(grid, devices: list[str], chosen: tuple[str, str], path: Path, title: str,
                measured: bool = False) -> Path:
    """PEARL's Fig. 8 in kind: the EPS of every device assignment, RM device across, Learner
    device up, the composer's choice starred."""
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(devices), 1.2 + 1.1 * len(devices)),
                           dpi=100)
    image = ax.imshow(grid, origin="lower", cmap="viridis")
    for (row, col), value in np.ndenumerate(grid):
        star = " *" if (devices[col], devices[row]) == chosen else ""
        ax.text(col, row, f"{value / 1e3:.1f}K{star}", ha="center", va="center", color="w",
                fontsize=8)
    ax.set_xticks(range(len(devices)), devices)
    ax.set_yticks(range(len(devices)), devices)
    ax.set_xlabel("RM device")
    ax.set_ylabel("Learner device")
    ax.set_title(f"{title}\nEPS ({'measured' if measured else 'modeled'})", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
