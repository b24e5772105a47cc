"""Pictures logged with a run: the learning curve, the plan's schedule, a Go board; the house
style the sweep report (hetrl.report) draws in too."""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from hetrl.partition.costs import CostTable, Plan  # noqa: E402
from hetrl.partition.graph import TaskGraph  # noqa: E402

KIND_LABELS = {"cpu": "CPU", "gpu": "GPU", "cuda": "GPU", "fpga": "FPGA", "aie": "AI Engine",
               "dsp": "DSP", "npu": "NPU", "tpu": "TPU"}
"""What a device `kind` (or a host's torch device type) is called in a picture."""

NODE_COLORS = {"matmul": "tab:blue", "elementwise": "tab:orange", "loss": "tab:red",
               "optimizer": "tab:green"}
DTYPE_HATCHES = ["", "////", "xxxx", "....", "\\\\\\\\", "++"]


def device_labels(platform: object) -> dict[str, str]:
    """Each device's name in a picture: the platform YAML's `label`, else what its `kind` is
    called, with the device's own name (`FPGA fabric (PL) [pl]`, `GPU [gpu]`)."""
    specs = getattr(platform, "specs", None)
    if not specs:  # the host: its torch devices, measured
        return {"cpu": "CPU [this host]", "cuda": "GPU [this host]"}
    labels = {}
    for name, spec in specs.items():
        kind = str(getattr(spec, "kind", "") or "")
        label = getattr(spec, "label", None) or KIND_LABELS.get(kind.lower(), kind.upper())
        labels[name] = f"{label} [{name}]"
    return labels


def legend_beside(ax: plt.Axes, handles: Sequence | None = None) -> None:
    """The legend to the right of the axes, top-aligned, small and unframed (the house style
    of every picture hetrl logs)."""
    kwargs = {} if handles is None else {"handles": list(handles)}
    ax.legend(**kwargs, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)


def learning_curve(history: list[tuple[int, float]], path: Path, title: str,
                   learning_starts: int | None = None,
                   references: Mapping[str, float] | None = None) -> Path:
    """return_mean_100 over env steps, as a PNG; a vertical line where learning starts and a
    horizontal one at each reference's final return (the fp32 reference run, fp32 actors)."""
    fig, ax = plt.subplots(figsize=(7.5, 3.8), dpi=100)
    if history:
        steps, returns = zip(*history)
        ax.plot(steps, returns, color="tab:blue", label="return_mean_100")
    if learning_starts:
        ax.axvline(learning_starts, color="tab:gray", linestyle="--", linewidth=1,
                   label=f"learning_starts = {learning_starts:,}")
    for (label, value), color in zip((references or {}).items(), ("tab:red", "tab:purple")):
        ax.axhline(value, color=color, linestyle=":", linewidth=1.5,
                   label=f"{label}: {value:.4g}")
    ax.margins(y=0.08)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("return (mean of last 100 episodes)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        legend_beside(ax)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path


def gantt(plan: Plan, graph: TaskGraph, path: Path, title: str,
          labels: Mapping[str, str] | None = None, dtypes: Sequence[str] | None = None,
          costs: CostTable | None = None) -> Path:
    """The schedule of one training step: a row per device (named by what it is), a bar per
    node coloured by its kind and hatched by its dtype where the plan mixes dtypes, an arrow
    per transfer between devices (its modeled or measured time), the legend beside the rows."""
    labels = labels or {}
    fig, ax = plt.subplots(figsize=(10, 1.4 + 0.7 * len(plan.devices)), dpi=110)
    distinct = sorted(set(dtypes or ()))
    hatch = {d: DTYPE_HATCHES[i % len(DTYPE_HATCHES)] for i, d in enumerate(distinct)}
    mixed = len(distinct) > 1
    for i, (node, k, start, finish) in enumerate(zip(graph.nodes, plan.assignment, plan.start,
                                                     plan.finish)):
        ax.barh(k, (finish - start) * 1e6, left=start * 1e6, height=0.6,
                color=NODE_COLORS.get(node.kind.value, "tab:gray"), edgecolor="black",
                linewidth=0.3, hatch=hatch[dtypes[i]] if mixed else None)
    transfers, transfer_s = 0, 0.0
    for e, edge in enumerate(graph.edges):
        src, dst = plan.assignment[edge.src], plan.assignment[edge.dst]
        if src == dst:
            continue
        seconds = float(costs.comm[e, src, dst]) if costs is not None else 0.0
        transfers, transfer_s = transfers + 1, transfer_s + seconds
        t0 = plan.finish[edge.src] * 1e6
        ax.annotate("", xy=(t0 + seconds * 1e6, dst), xytext=(t0, src),
                    arrowprops={"arrowstyle": "->", "color": "dimgray", "linewidth": 0.8,
                                "shrinkA": 0, "shrinkB": 0})
    ax.set_yticks(range(len(plan.devices)),
                  [labels.get(d, d) for d in plan.devices])
    ax.set_ylim(-0.6, len(plan.devices) - 0.4)
    ax.invert_yaxis()
    ax.set_xlabel("time within one training step (µs)")
    ax.set_title(f"{title}: {plan.method}, step {plan.makespan * 1e6:.1f} µs")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(facecolor=c, edgecolor="black", label=f"{kind} node")
               for kind, c in NODE_COLORS.items()]
    if mixed:
        handles += [Patch(facecolor="white", edgecolor="black", hatch=hatch[d],
                          label=f"dtype {d}") for d in distinct]
    elif distinct:
        handles.append(Patch(facecolor="white", edgecolor="white",
                             label=f"every node {distinct[0]}"))
    handles.append(plt.Line2D([], [], color="dimgray", marker=">", markersize=4,
                              label=f"transfer ({transfers}, {transfer_s * 1e6:.1f} µs)"))
    legend_beside(ax, handles)
    fig.savefig(path, bbox_inches="tight")
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


GO_COLUMNS = "abcdefghjklmnopqrst"  # GTP's letters: no "i"


def go_board(board: np.ndarray, path: Path, title: str, last: tuple[int, int] | None = None,
             owner: np.ndarray | None = None) -> Path:
    """A Go position as a PNG: `board` (N x N; +1 black, -1 white, 0 empty; row 0 is the
    first line, drawn at the bottom, as "a1"), the last move ringed, and with `owner` (the
    same shape: whose each point is under area scoring) a small square of the owner's colour
    on each empty point that counts for one side."""
    n = board.shape[0]
    fig, ax = plt.subplots(figsize=(1.2 + 0.42 * n, 1.5 + 0.42 * n), dpi=100)
    ax.set_facecolor("#dcb35c")  # the usual wooden board
    for k in range(n):
        ax.plot([0, n - 1], [k, k], color="black", linewidth=0.8, zorder=1)
        ax.plot([k, k], [0, n - 1], color="black", linewidth=0.8, zorder=1)
    rows, cols = np.nonzero(board)
    for colour, face, edge in ((1, "black", "black"), (-1, "white", "black")):
        mask = board[rows, cols] == colour
        ax.scatter(cols[mask], rows[mask], s=(260 * 9 / max(n, 9)) * 1.6, c=face,
                   edgecolors=edge, linewidths=0.8, zorder=3)
    if owner is not None:
        for colour, face in ((1, "black"), (-1, "white")):
            r, c = np.nonzero((board == 0) & (owner == colour))
            ax.scatter(c, r, s=40, marker="s", c=face, edgecolors="black", linewidths=0.4,
                       zorder=2)
    if last is not None:
        r, c = last
        ring = "white" if board[r, c] == 1 else "black"
        ax.scatter([c], [r], s=90, facecolors="none", edgecolors=ring, linewidths=1.5,
                   zorder=4)
    ax.set_xticks(range(n), [GO_COLUMNS[k] for k in range(n)])
    ax.set_yticks(range(n), [str(k + 1) for k in range(n)])
    ax.tick_params(length=0)
    ax.set_xlim(-0.7, n - 0.3)
    ax.set_ylim(-0.7, n - 0.3)
    ax.set_aspect("equal")
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=9)
    fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return path
