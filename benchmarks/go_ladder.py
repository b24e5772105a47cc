"""MiniGo's 9×9 learning goal: AlphaZero trained on 2 cores for at most 20 minutes of wall
clock, then measured against a random player, its own generation 0 and the pure-MCTS ladder.

The documented command of issue 13's goal (run from the repository root, on 2 idle cores):

    python benchmarks/go_ladder.py                   # 20 min of training, then ~10 min of games
    python benchmarks/go_ladder.py --minutes 480 --ladder-games 50   # the overnight stretch
    python benchmarks/go_ladder.py --smoke           # go5, one 1-game generation, tiny
    python benchmarks/go_ladder.py selfplay.workers=0 algo.width=48   # any override of the job

One job trains through hetrl's real entry (`python -m hetrl` in-process: `compose_job` +
`experiment.run`) with `algo=alphazero env=go9` and `selfplay.wall_clock_s` = the budget:
self-play workers, training, no gating (every generation is accepted), no evaluation until
the generation after which another would end past the budget. That last generation is then
evaluated inside the same job, and logged to its MLflow run (`selfplay/win_rate_vs_*`):

* against a **uniformly random** player over `--games` games (200), colours alternating;
* against its **generation 0** (the untrained network) over `--games` games at equal readouts
  (`selfplay.eval_readouts` for both sides);
* against the **pure-MCTS ladder**: OpenSpiel's random-rollout MCTS (`hetrl.algos.pure_mcts`)
  at each of `--simulations` (100 and 1,000) simulations a move, `--ladder-games` games each.

Both searches play their first moves drawn from their visits (as in self-play, so that two
deterministic players do not replay one game), then greedily. Win rates are printed with 95%
Wilson intervals beside the goals: >= 95% against random and >= 60% against generation 0 in
<= 20 minutes; stretch (overnight, not gated): >= 50% against 1,000 simulations. The training
wall clock is the loop's (`selfplay/wall_s`: self-play, training, logging, workers' start-up)
less the time of the final evaluation; the job's set-up (building, timing the step on the
host) is reported beside it. The job's folder (`<store>/jobN`, printed at the end) holds its
`policy.pt`: `hetrl.load` gets the trained agent from it, `python -m hetrl.gtp` plays it.
"""

from __future__ import annotations

import argparse
import math
import time
import warnings
from pathlib import Path

from common import host_line, job_config, num, parse_args, run_job, table, verdict, write_results

warnings.filterwarnings("ignore")

RECIPE = ["algo=alphazero", "env=go9", "selfplay.workers=2", "selfplay.generations=100000",
          "steps=1000000000", "selfplay.eval_every=100000", "selfplay.gating_games=0"]
"""The 9×9 job: the algo's defaults (width 32 × 2 blocks, 32 / 8 readouts, 64 games and 100
updates a generation, a window of 5), 2 self-play workers, no generation limit (the wall
clock ends it), evaluated only at the end, not gated (the go9 recipe gates)."""

SMOKE = ["env=go5", "selfplay.workers=0", "algo.width=4", "algo.blocks=1",
         "algo.search.readouts=2", "algo.search.fast_readouts=2",
         "selfplay.games_per_generation=1", "selfplay.concurrent_games=1",
         "selfplay.train_steps=1", "selfplay.eval_readouts=2"]
SMOKE_ARGS = {"minutes": 0.001, "games": 2, "ladder_games": 1, "simulations": [2]}
"""--smoke: go5, one generation of one game (the clock ends it), a 4-wide network, 2 readouts;
evaluated over 2 games, and 1 against one rung of 2 simulations."""


def merged(*overrides: str) -> list[str]:
    """The overrides with each key once, a later value replacing an earlier one in place."""
    by_key: dict[str, str] = {}
    for override in overrides:
        by_key[override.split("=", 1)[0]] = override
    return list(by_key.values())


def wilson(rate: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a win rate over n games."""
    if n == 0:
        return math.nan, math.nan
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="go5, a tiny network, seconds")
    parser.add_argument("--minutes", type=float, default=20.0,
                        help="wall clock of the training loop (default 20)")
    parser.add_argument("--games", type=int, default=200,
                        help="games against random and against generation 0 (default 200)")
    parser.add_argument("--ladder-games", type=int, default=20,
                        help="games against each pure-MCTS rung (default 20)")
    parser.add_argument("--simulations", type=int, nargs="+", default=[100, 1000],
                        help="the pure-MCTS rungs, simulations a move (default 100 1000)")
    parser.add_argument("--store", type=Path, default=Path("runs/go_ladder"),
                        help="the MLflow store and job folders (default runs/go_ladder)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("overrides", nargs="*", help="more overrides of the job (key=value)")
    args = parse_args(parser)
    if args.smoke:
        vars(args).update(SMOKE_ARGS)
    print(host_line("numpy"))
    overrides = merged(*RECIPE, *(SMOKE if args.smoke else []), f"seed={args.seed}",
                       f"selfplay.wall_clock_s={60 * args.minutes:g}",
                       f"selfplay.eval_games={args.games}",
                       f"selfplay.ladder_games={args.ladder_games}",
                       f"selfplay.ladder_simulations=[{','.join(map(str, args.simulations))}]",
                       *args.overrides)
    print("python -m hetrl " + " ".join(overrides))
    readouts = job_config(*overrides)[0].scheduler.eval_readouts
    args.store.mkdir(parents=True, exist_ok=True)
    job_dir = args.store / f"job{len(list(args.store.glob('job*')))}"
    start = time.perf_counter()
    results = run_job(args.store, *overrides, out=job_dir)
    job_s = time.perf_counter() - start

    eval_s = results["selfplay/eval_s"]  # the last generation's: the final evaluation
    train_s = results["selfplay/wall_s"] - eval_s
    table(["budget", "training wall clock", "set-up", "final evaluation", "generations",
           "self-play games", "moves / s", "leaf evals / s", "updates"],
          [(f"{args.minutes:g} min", f"{train_s / 60:.1f} min",
            f"{(job_s - results['selfplay/wall_s']) / 60:.1f} min", f"{eval_s / 60:.1f} min",
            int(results["selfplay/generation"]), int(results["episodes"]),
            num(results["selfplay/positions_per_s"]), num(results["selfplay/leaf_evals_per_s"]),
            int(results["updates"]))],
          "Training (the last generation's rates)", "lrrrrrrrr")

    ours = f"{readouts} readouts"
    opponents = [("uniform random", "win_rate_vs_random", args.games, "-", 0.95, ""),
                 ("generation 0", "win_rate_vs_gen0", args.games, ours, 0.60, "")]
    opponents += [(f"pure MCTS, {sims:,} simulations", f"win_rate_vs_mcts{sims}",
                   args.ladder_games, f"{sims:,} simulations, random rollouts",
                   0.5 if sims == 1000 else None, " (stretch, overnight)")
                  for sims in args.simulations]
    rows = []
    for name, key, games, theirs, goal, note in opponents:
        rate = results.get(f"selfplay/{key}", math.nan)
        low, high = wilson(rate, games)
        target = f">= {100 * goal:.0f}%{note}" if goal is not None else "reported"
        rows.append((name, games, theirs, f"{100 * rate:.1f}%",
                     f"{100 * low:.1f}-{100 * high:.1f}%", target,
                     verdict(rate >= goal) if goal is not None else ""))
    table(["opponent", "games", "opponent's search", "win rate", "95% interval", "goal", ""],
          rows, f"The last generation ({ours}, colours alternating) against", "lrlrrll")
    if "run_id" in results:
        print(f"\nMLflow run {results['run_id']} in {args.store.resolve() / 'mlflow.db'} "
              "(the sampled games: sgf/generation_NNNN.sgf and .png)")
    print(f"\nThe trained agent: hetrl.load('{job_dir}') in Python; play it with "
          f"python -m hetrl.gtp {job_dir} (GTP), or python -m hetrl.evaluate {job_dir} "
          "video=true (games against random, an SGF and the final board)")


if __name__ == "__main__":
    main()
    write_results()
