"""What a job logs beside its metrics: its step plan (figures, JSON, the Gantt of its schedule,
PEARL's composition), its learning curve and self-play's sampled games. The job runner hands over what it built; the
pictures are drawn here (hetrl.tracking.plots, imported when one is drawn: matplotlib costs a
job ~0.5 s of CPU at its start, and a job stopped or failed before its curve draws none)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

from hetrl.planning import figures_json
from hetrl.tracking.base import Tracker

if TYPE_CHECKING:
    from hetrl.algos.go_games import GameRecord
    from hetrl.envs.go import GoGame
    from hetrl.planning import StepPlan
    from hetrl.precision.base import Precision


def log_plan(tracker: Tracker, step_plan: StepPlan, precision: Precision, platform: object,
             batch_size: int, out_dir: Path, name: str) -> None:
    """The plan: its figures as metrics, the plan (with each node's cost per device) as JSON,
    and, where there is more than one device, its schedule as a Gantt (devices named by what
    they are, each node's dtype, the transfers); PEARL's composition, where it has one."""
    tracker.log_metrics(step_plan.metrics(batch_size), step=0)
    tracker.log_text(step_plan.to_json(), "plan.json")
    if len(step_plan.plan.devices) > 1:
        from hetrl.tracking.plots import device_labels, gantt

        plan, graph = step_plan.plan, step_plan.graph
        if plan.dtypes is not None:  # measured on the host
            dtypes = plan.dtypes
        else:
            dtype_of = precision.dtype_chooser(platform)
            dtypes = [dtype_of(node, plan.devices[k])
                      for node, k in zip(graph.nodes, plan.assignment)]
        tracker.log_artifact(gantt(plan, graph, out_dir / "plan_gantt.png", name,
                                   labels=device_labels(platform), dtypes=dtypes,
                                   costs=step_plan.costs))
    if (composition := step_plan.composition) is not None:  # partitioner=composer (PEARL)
        from hetrl.tracking.plots import eps_heatmap

        tracker.log_text(composition.to_json(), "composer/mapping.json")
        tracker.log_text(composition.table(), "composer/eps_platform.csv")
        tracker.log_text(figures_json(composition.matrix.rows()), "composer/matrix.json")
        tracker.log_artifact(eps_heatmap(
            composition.grid(), composition.matrix.devices,
            (composition.assignment["RM"], composition.assignment["Learner"]),
            out_dir / "composer_eps.png", name, composition.measured))


def log_learning_curve(tracker: Tracker, history: Sequence[tuple[int, float]],
                       learning_starts: int | None, results: Mapping[str, float],
                       out_dir: Path, name: str) -> None:
    """The learning curve, with `learning_starts` and the final return of its references."""
    from hetrl.tracking.plots import learning_curve

    references = {label: results[key] for key, label in (
        ("reward_reference", "fp32 reference, final return"),
        ("reward_fp32_actors", "fp32 actors, final return")) if key in results}
    tracker.log_artifact(learning_curve(list(history), out_dir / "learning_curve.png", name,
                                        learning_starts=learning_starts,
                                        references=references))


def log_go_game(tracker: Tracker, record: GameRecord, game: GoGame, gen: int,
                player: int) -> None:
    """A self-play game of generation `gen` (played by generation `player`) as the artifacts
    `sgf/generation_NNNN.sgf` and, beside it, `sgf/generation_NNNN.png` (its final board)."""
    from hetrl.algos.go_games import result, to_sgf
    from hetrl.envs.go_groups import area_owner
    from hetrl.tracking.plots import go_board

    tracker.log_text(to_sgf(record, game, f"generation {player}"), f"sgf/generation_{gen:04d}.sgf")
    final = game.position_from(record.moves)
    last = (divmod(final.last, game.n)
            if final.last is not None and final.last != game.pass_action else None)
    title = (f"generation {gen + 1}: {result(record)} (komi {game.komi:g})\n"
             f"{len(record.moves)} moves, played by generation {player}")
    with tempfile.TemporaryDirectory() as folder:
        tracker.log_artifact(go_board(final.board, Path(folder) / f"generation_{gen:04d}.png",
                                      title, last=last, owner=area_owner(final.board)), "sgf")
