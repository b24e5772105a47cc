"""What hetrl's DQN learns against what SB3's learns, seed for seed: DQN-CartPole on rl-zoo3's
config (conf/tuned/dqn_cartpole.yaml) and the zoo's budget of 50k env steps.

Run from the repository root (needs `pip install -e '.[bench]'`):

    python benchmarks/learning_vs_sb3.py --seeds 20   # about 16 min on 2 cores
    python benchmarks/learning_vs_sb3.py --smoke      # 1 seed, 300 steps, a tiny network

vs_sb3.py measures how fast the two train, and tests/test_sb3_parity.py shows that hetrl's
update is SB3's to 1e-6 on the same batches. This measures everything around the update:
collection, the exploration schedule, the target sync, replay sampling. Each seed is a
`python -m hetrl algo=dqn env=cartpole` job and an SB3 DQN built from the same composed config
(`common.sb3_model`); both run at one torch thread, two jobs at a time.

Every `--every` env steps (and at the end) each is evaluated deterministically on the same
`--episodes` episodes (hetrl's `eval.every`; SB3's greedy `predict` on the same env seeds), and
its training return over the last 100 episodes is read. The summary scores three returns per
run: the final evaluation, the best evaluation, and the mean of the evaluations over training
(the area under the curve: how early and how steadily it learns). Each gets its mean over seeds
with rliable's 95 % stratified-bootstrap interval, and the probability that a hetrl run scores
higher than an SB3 run (rliable's probability of improvement; 0.5: no difference) with its
interval. rl-zoo3 publishes 500.0 +- 0.0 for this config (one trained agent, benchmark.md);
DQN-CartPole does not stay converged (rl-baselines3-zoo#472), so final evaluations spread.

Results: benchmarks/results/learning_vs_sb3.jsonl (history: benchmarks/results/README.md).
"""

from __future__ import annotations

import argparse
import tempfile
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import gymnasium as gym
import numpy as np
from common import (host_line, job_config, metric_history, parse_args, run_job, sb3_model,
                    sb3_return_mean_100, subnormals, table, write_results)

from hetrl.evaluation import EVAL_SEED_OFFSET
from hetrl.tracking.seeds import REPS, bootstrap

JOB = ("algo=dqn", "env=cartpole", "platform.measure_layers=false")
SMOKE = {"seeds": 1, "steps": 300, "every": 150, "episodes": 1, "workers": 1, "reps": 100}
SMOKE_JOB = ("algo.hidden=[16]", "algo.learning_starts=100", "eval.final=0", "compile=false")
"""--smoke: one seed of each in one worker, a tiny network that learns from step 100 (one
training round of the recipe's, at step 256), evaluated twice (hetrl's job eager, with no
final evaluation: the curves are its evaluations); 100 bootstrap resamples."""
ZOO = 500.0  # rl-zoo3 benchmark.md, dqn CartPole-v1, 50k steps
Curves = dict[str, list[tuple[int, float]]]  # "eval" / "train" -> (step, return)


def hetrl_curves(store: Path, job: tuple[str, ...], seed: int, steps: int, every: int,
                 episodes: int) -> Curves:
    m = run_job(store, *job, f"seed={seed}", f"steps={steps}", f"eval.every={every}",
                f"eval.episodes={episodes}", f"log_every={every}")
    return {"eval": metric_history(store, m["run_id"], "eval/return_mean"),
            "train": metric_history(store, m["run_id"], "return_mean_100")}


def sb3_evaluation(model: object, seed: int, episodes: int) -> float:
    """The greedy policy's mean return on the episodes hetrl's evaluation plays (env seeds
    seed + EVAL_SEED_OFFSET + i)."""
    env = gym.make("CartPole-v1")
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + EVAL_SEED_OFFSET + i)
        total, done = 0.0, False
        while not done:
            action, _ = model.predict(obs, deterministic=True)
            obs, reward, terminated, truncated, _ = env.step(action)
            total, done = total + float(reward), terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))


def sb3_curves(job: tuple[str, ...], seed: int, steps: int, every: int, episodes: int) -> Curves:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback

    torch.set_num_threads(1)
    algo = job_config(*job, f"steps={steps}")[0].algo
    model = sb3_model(algo, "CartPole-v1", algo.learning_starts, seed=seed)
    curves: Curves = {"eval": [], "train": []}

    class Record(BaseCallback):
        def _on_step(self) -> bool:
            step = self.num_timesteps
            if step % every == 0 or step == steps:
                curves["eval"].append((step, sb3_evaluation(self.model, seed, episodes)))
                if (train := sb3_return_mean_100(self.model)) is not None:
                    curves["train"].append((step, train))
            return True

    with subnormals(flushed=False):  # as SB3 ships (hetrl's jobs flush them)
        model.learn(steps, callback=Record())
    return curves


def one_run(who: str, job: tuple[str, ...], seed: int, steps: int, every: int, episodes: int,
            tmp: str) -> Curves:
    if who == "SB3":
        return sb3_curves(job, seed, steps, every, episodes)
    return hetrl_curves(Path(tmp) / f"seed{seed}", job, seed, steps, every, episodes)


def scores(curves: list[Curves]) -> dict[str, np.ndarray]:
    """Per run: its final evaluation, its best and the mean of its evaluations."""
    evals = [np.array([r for _, r in c["eval"]]) for c in curves]
    return {"final": np.array([e[-1] for e in evals]), "best": np.array([e.max() for e in evals]),
            "auc": np.array([e.mean() for e in evals])}


def mean_of(x: np.ndarray) -> np.ndarray:
    from rliable import metrics  # here: the job workers, which import this module, need none

    return np.array([metrics.aggregate_mean(x)])


def improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(a run of x scores higher than a run of y), ties counted half."""
    from rliable import metrics

    return np.array([metrics.probability_of_improvement(x, y)])


def report(runs: dict[str, list[Curves]], steps: int, every: int, episodes: int,
           reps: int) -> None:
    n = len(runs["hetrl"])
    checkpoints = sorted({s for c in runs["hetrl"] for s, _ in c["eval"]})
    rows = []
    for step in checkpoints:
        row: list[object] = [step]
        for key in ("eval", "train"):
            for who in ("hetrl", "SB3"):
                values = [dict(c[key]).get(step) for c in runs[who]]
                values = [v for v in values if v is not None]
                row.append(f"{np.mean(values):.1f}" if values else "-")
        rows.append(row)
    table(["env step", "eval hetrl", "eval SB3", "train hetrl", "train SB3"], rows,
          align="lrrrr", title=f"Mean return over {n} seeds (eval: {episodes} greedy episodes; "
                               "train: the last 100 training episodes)")
    ours, theirs = scores(runs["hetrl"]), scores(runs["SB3"])
    cis = bootstrap({f"{who}/{k}": s[k][:, None] for who, s in (("hetrl", ours), ("SB3", theirs))
                     for k in s}, mean_of, reps)
    p_cis = bootstrap({k: [ours[k][:, None], theirs[k][:, None]] for k in ours}, improvement,
                      reps)
    rows = []
    for k, label in (("final", f"final evaluation ({steps} steps)"),
                     ("best", "best evaluation"), ("auc", "mean of the evaluations (AUC)")):
        cells = [label]
        for who, s in (("hetrl", ours), ("SB3", theirs)):
            low, high = cis[f"{who}/{k}"][:, 0]
            cells.append(f"{s[k].mean():.1f} [{low:.1f}, {high:.1f}]")
        p = float(improvement(ours[k][:, None], theirs[k][:, None])[0])
        low, high = p_cis[k][:, 0]
        cells.append(f"{p:.2f} [{low:.2f}, {high:.2f}]")
        rows.append(cells)
    table(["return", "hetrl [95 % CI]", "SB3 [95 % CI]", "P(hetrl > SB3) [95 % CI]"], rows,
          align="lrrr", title=f"DQN-CartPole, rl-zoo3's config, {n} seeds each (rl-zoo3 "
                              f"publishes {ZOO:.0f}, one agent); evaluations every {every}")
    for who, s in (("hetrl", ours), ("SB3", theirs)):
        print(f"{who} per seed, final/best: "
              + ", ".join(f"{f:.0f}/{b:.0f}" for f, b in zip(s["final"], s["best"])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=50_000, help="rl-zoo3's budget")
    parser.add_argument("--every", type=int, default=5000, help="env steps between evaluations")
    parser.add_argument("--episodes", type=int, default=10, help="episodes per evaluation")
    parser.add_argument("--workers", type=int, default=2, help="jobs at a time")
    parser.add_argument("--reps", type=int, default=REPS, help="bootstrap resamples")
    parser.add_argument("--smoke", action="store_true", help="1 seed, 300 steps, a tiny network")
    args = parse_args(parser)
    if args.smoke:
        vars(args).update(SMOKE)
    job = (*JOB, *SMOKE_JOB) if args.smoke else JOB
    print(host_line())
    tasks = [(who, seed) for seed in range(args.seeds) for who in ("hetrl", "SB3")]
    with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(
            args.workers, mp_context=get_context("spawn")) as pool:
        futures = {(who, seed): pool.submit(one_run, who, job, seed, args.steps, args.every,
                                            args.episodes, tmp) for who, seed in tasks}
        runs = {who: [futures[(who, seed)].result() for seed in range(args.seeds)]
                for who in ("hetrl", "SB3")}
    report(runs, args.steps, args.every, args.episodes, args.reps)


if __name__ == "__main__":
    main()
    write_results()
