"""PEARL's EPS on this host (issue 12): hetrl `scheduler=pearl`, hetrl `scheduler=sync`, SB3
and a plain-PyTorch learner loop on PEARL's workloads (Table 2) at batch 32 and 512.

    python benchmarks/pearl_eps.py            # 20 000 env steps a job
    python benchmarks/pearl_eps.py --compile true   # hetrl's updates compiled whatever the budget
    python benchmarks/pearl_eps.py --smoke    # every mode below, tiny, in one run
    python benchmarks/pearl_eps.py --ab 6     # dynamic resources on/off, 6 interleaved pairs
    python benchmarks/pearl_eps.py --time-to 475 --seeds 3   # wall time to a training return

`--time-to R` times how long DQN-CartPole takes to reach a training `return_mean_100` >= R
on CleanRL's recipe within its 500k env steps (`--recipe zoo`: the Foundation's config,
rl-zoo3's conf/tuned/dqn_cartpole.yaml, within 100k, where no contender reaches 475):
hetrl `scheduler=pearl` and `sync` (the loop's own wall time at the first log of every 1000
steps that reaches R: `stop_return=R`, where the job ends) against SB3 (wall time of `learn`
at the check every 1000 steps, where it ends too). Issue 12's goal: pearl at most half of
SB3's time.

`--ab N` measures Algorithm 1 (dynamic resource management) where the learner dominates:
DQN-CartPole at batch 512 under `scheduler=pearl`, `scheduler.dynamic_resources=true` and
`false` in turn, N pairs, and gives the median of the pairs' EPS ratios with their range. On a
shared host one job's EPS varies by +-20 % minutes apart; pairing takes that drift out of the
ratio, which a single A/B could not resolve (issue 12's goal: >= +15 %, paper +15-35 %).

EPS is PEARL's experiences per second through the learner: batch × updates / seconds. For
every loop it is given over the whole loop's wall time (`EPS loop`, comparable across the
four); hetrl also logs `eps_host` over its training phases only. The plain-PyTorch loop is the
learner alone on random batches (no envs, no replay): a ceiling, not a contender.

PEARL's workloads as override sets (not tuned files: conf/tuned holds rl-zoo3's values):
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from common import (host_line, job_config, num, parse_args, ratio, run_job, sb3_model,
                    sb3_return_mean_100, subnormals, table, unlogged, write_results)
from plain_torch import plain_ddpg, plain_dqn

from hetrl.algos.base import Batch

WORKLOADS = {
    # DQN-CartPole, PEARL's "3-layer MLP, hidden 64": 4-64-2 (B.4); replay 8192 [A]
    "dqn-cartpole": ("algo=dqn", "env=cartpole", "algo.hidden=[64]", "algo.buffer_size=8192",
                     "algo.learning_starts=1000", "algo.train_freq=4", "algo.gradient_steps=1",
                     "algo.lr=1e-3"),
    # DDPG-MountainCarContinuous, the artifact's [64, 64]
    "ddpg-mountaincar": ("algo=ddpg", "env=mountaincar_continuous", "algo.hidden=[64,64]",
                         "algo.buffer_size=50000", "algo.learning_starts=1000",
                         "algo.train_freq=4", "algo.gradient_steps=1"),
    # DQN-Pong with the 2013 DQN CNN: composer/model only here (Atari training is too heavy
    # for 2 cores): python -m hetrl algo=dqn env=pong algo.cnn=dqn2013 algo.buffer_size=8192
}
__doc__ += "\n".join(f"    {name}: {' '.join(o)}" for name, o in WORKLOADS.items()) + "\n"
SMOKE_STEPS, SMOKE_JOB = 600, ("algo.learning_starts=512", "eval.final=0", "compile=false")
"""--smoke: every mode in one run, each job 600 env steps learning from step 512 (the A/B's
batch), eager and with no final evaluation (a few updates would not pay a compile; nothing
here reads the evaluation): the EPS table at batch 32 (plain PyTorch for 0.1 s), one A/B pair,
`--time-to 20` on one seed."""


def hetrl_loop(store: Path, overrides: tuple[str, ...], scheduler: str, batch: int,
               steps: int) -> dict[str, float]:
    m = run_job(store, *overrides, f"scheduler={scheduler}", f"algo.batch_size={batch}",
                f"steps={steps}", "log_every=1000000", "seed=0")
    wall = steps / m["sps"]
    return {"eps_loop": batch * m["updates"] / wall, "env_steps_per_s": m["sps"],
            "eps_host": m["eps_host"]}


def sb3_loop(name: str, overrides: tuple[str, ...], batch: int, steps: int
             ) -> dict[str, float] | None:
    """SB3 on the workload `overrides` make (learning where the hetrl job does)."""
    try:
        from stable_baselines3 import DDPG, DQN
    except ImportError:
        return None
    torch.set_num_threads(1)
    learning_starts = job_config(*overrides)[0].algo.learning_starts
    common = dict(batch_size=batch, learning_starts=learning_starts, train_freq=4,
                  gradient_steps=1,
                  device="cpu", verbose=0, seed=0)
    if name == "dqn-cartpole":
        model = DQN("MlpPolicy", "CartPole-v1", buffer_size=8192, learning_rate=1e-3,
                    policy_kwargs={"net_arch": [64]}, **common)
    else:
        model = DDPG("MlpPolicy", "MountainCarContinuous-v0", buffer_size=50000,
                     policy_kwargs={"net_arch": [64, 64]}, **common)
    unlogged(model)
    with subnormals(flushed=False):  # as SB3 ships (hetrl's jobs flush them)
        start = time.perf_counter()
        model.learn(steps)
        wall = time.perf_counter() - start
    updates = model._n_updates
    return {"eps_loop": batch * updates / wall, "env_steps_per_s": steps / wall}


def plain_loop(name: str, batch: int, seconds: float) -> dict[str, float]:
    torch.set_num_threads(1)
    env = gym.make("CartPole-v1" if name == "dqn-cartpole" else "MountainCarContinuous-v0")
    obs = env.observation_space.shape[0]
    if name == "dqn-cartpole":
        step = plain_dqn(obs, 2, [64], fused=False)
        actions = torch.randint(2, (batch,))
    else:
        step = plain_ddpg(obs, 1, [64, 64], fused=False, scale=1.0)
        actions = torch.rand(batch, 1) * 2 - 1
    b = Batch(torch.randn(batch, obs), actions, torch.randn(batch), torch.randn(batch, obs),
              torch.zeros(batch))
    n, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        step(b)
        n += 1
    return {"eps_loop": batch * n / (time.perf_counter() - start), "env_steps_per_s": np.nan}


def dynamic_resources_ab(store: Path, pairs: int, steps: int, extra: tuple[str, ...] = ()
                         ) -> None:
    """Algorithm 1 on against off, in interleaved pairs, where the learner dominates."""
    rows, ratios = [], []
    for pair in range(pairs):
        eps = {on: hetrl_loop(store, (*WORKLOADS["dqn-cartpole"], *extra,
                                      f"scheduler.dynamic_resources={on}"),
                              "pearl", 512, steps)["eps_loop"]
               for on in ("true", "false")}
        ratios.append(eps["true"] / eps["false"])
        rows.append([pair, num(eps["true"]), num(eps["false"]), f"{ratios[-1]:.3f}"])
    rows.append(["median [min, max]", "", "",
                 f"**{np.median(ratios):.3f}** [{min(ratios):.3f}, {max(ratios):.3f}]"])
    table(["pair", "EPS loop, dynamic on", "EPS loop, off", "on / off"], rows,
          title=f"Dynamic resources, DQN-CartPole batch 512 under scheduler=pearl, {steps} "
                "env steps a job (goal >= 1.15)", align="lrrr")


TIME_TO = {  # recipe -> (DQN-CartPole overrides, env-step budget)
    # CleanRL's dqn.py: Adam 2.5e-4, batch 128, replay 10k, 10k steps before learning, an update
    # every 10 env steps, the target every 500 (50 updates), ε 1 -> 0.05 over half the budget,
    # [120, 84], no gradient clipping, the squared TD error (with Huber it diverged here)
    "cleanrl": (("algo=dqn", "env=cartpole", "algo.td_loss=mse", "algo.lr=2.5e-4",
                 "algo.batch_size=128", "algo.buffer_size=10000", "algo.learning_starts=10000",
                 "algo.gamma=0.99", "algo.target_update_interval=50", "algo.train_freq=10",
                 "algo.gradient_steps=1", "algo.exploration_fraction=0.5",
                 "algo.exploration_final_eps=0.05", "algo.hidden=[120,84]",
                 "algo.max_grad_norm=1e9"), 500_000),
    # rl-zoo3's (conf/tuned/dqn_cartpole.yaml): fast to 200, but its training return swings
    "zoo": (("algo=dqn", "env=cartpole"), 100_000),
}


Reached = tuple[float, int] | None
"""(loop wall time in seconds, env step) where return_mean_100 first reached the target."""


def hetrl_time_to(store: Path, job: tuple[str, ...], scheduler: str, target: float, seed: int,
                  steps: int) -> Reached:
    """Where return_mean_100 first reached `target` (and the job ended), or None."""
    m = run_job(store, *job, f"scheduler={scheduler}", f"steps={steps}", "log_every=1000",
                f"seed={seed}", f"stop_return={target}")
    if "stop_return/step" not in m:
        return None
    return m["stop_return/elapsed_s"], int(m["stop_return/step"])


def sb3_time_to(job: tuple[str, ...], target: float, seed: int, steps: int) -> Reached:
    """SB3's DQN on the same config: (wall time of `learn`, env step) when the mean of its
    last 100 training episodes first reached `target`, checked every 1000 env steps, or
    None."""
    from stable_baselines3.common.callbacks import BaseCallback

    class StopAt(BaseCallback):
        reached: Reached = None

        def _on_step(self) -> bool:
            if self.num_timesteps % 1000:  # the check every 1000 steps, nothing between
                return True
            mean = sb3_return_mean_100(self.model)
            if mean is not None and mean >= target:
                self.reached = time.perf_counter() - start, self.num_timesteps
                return False
            return True

    torch.set_num_threads(1)
    algo = job_config(*job)[0].algo
    model = sb3_model(algo, "CartPole-v1", algo.learning_starts, seed=seed)
    stop = StopAt()
    with subnormals(flushed=False):  # as SB3 ships (hetrl's jobs flush them)
        start = time.perf_counter()
        model.learn(steps, callback=stop)
    return stop.reached


def time_to(store: Path, recipe: str, target: float, seeds: int, steps: int | None = None,
            extra: tuple[str, ...] = ()) -> None:
    """`--time-to`, within `steps` (default: the recipe's budget), `extra` overriding the
    recipe."""
    job, budget = TIME_TO[recipe]
    job, steps = (*job, *extra), steps or budget
    rows, times = [], {"hetrl pearl": [], "hetrl sync": [], "SB3": []}
    for seed in range(seeds):
        got = {"hetrl pearl": hetrl_time_to(store, job, "pearl", target, seed, steps),
               "hetrl sync": hetrl_time_to(store, job, "sync", target, seed, steps),
               "SB3": sb3_time_to(job, target, seed, steps)}
        for who, reached in got.items():
            times[who].append(None if reached is None else reached[0])
        rows.append([seed, *("not reached" if r is None else f"{r[0]:.1f} s at {r[1]:,}"
                             for r in got.values())])
    medians = {who: np.median(reached) if (reached := [t for t in ts if t is not None])
               else None for who, ts in times.items()}
    summary = ["reached, median s", *(f"{sum(t is not None for t in ts)}/{seeds}"
                                      + ("" if medians[who] is None else f", {medians[who]:.1f}")
                                      for who, ts in times.items())]
    ratios = ["median / SB3's", *("" if None in (m, medians["SB3"]) else ratio(m, medians["SB3"])
                                  for m in medians.values())]
    table(["seed", *times], [*rows, summary, ratios], align="lrrr",
          title=f"Wall time to return_mean_100 >= {target:g}, DQN-CartPole ({recipe}'s "
                f"recipe), within {steps} env steps (goal: pearl <= 0.5 x SB3)")


def eps_table(store: Path, steps: int, batches: tuple[int, ...], plain_seconds: float,
              extra: tuple[str, ...] = ()) -> None:
    """The four loops' EPS on each workload (`extra` overriding it) at each batch size."""
    rows = []
    for name, workload in WORKLOADS.items():
        overrides = (*workload, *extra)
        for batch in batches:
            figures = {
                "hetrl pearl": hetrl_loop(store, overrides, "pearl", batch, steps),
                "hetrl sync": hetrl_loop(store, overrides, "sync", batch, steps),
                "SB3": sb3_loop(name, overrides, batch, steps),
                "plain PyTorch (learner only)": plain_loop(name, batch, plain_seconds),
            }
            sb3 = figures["SB3"]
            for who, f in figures.items():
                if f is None:
                    continue
                rows.append([name, batch, who, num(f["eps_loop"]),
                             num(f.get("eps_host", np.nan)) if "eps_host" in f else "",
                             "" if np.isnan(f["env_steps_per_s"]) else num(f["env_steps_per_s"]),
                             ratio(f["eps_loop"], sb3["eps_loop"]) if sb3 else "",
                             ratio(f["env_steps_per_s"], sb3["env_steps_per_s"])
                             if sb3 and not np.isnan(f["env_steps_per_s"]) else ""])
    table(["workload", "batch", "loop", "EPS loop", "eps_host", "env steps/s", "EPS / SB3",
           "env steps/s / SB3"], rows, title=f"PEARL EPS, {steps} env steps a job",
          align="llrrrrrr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true",
                        help="every mode, tiny, in one run (--ab and --time-to ignored)")
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--compile", choices=("auto", "true", "false"), default="auto",
                        help="hetrl's compile= for every job (auto: eager where a budget "
                             "cannot repay a compile, as 20 000 steps here; the compile, at "
                             "build, is outside the loop's EPS; --smoke stays eager)")
    parser.add_argument("--ab", type=int, metavar="PAIRS",
                        help="only the dynamic-resources A/B, in this many interleaved pairs")
    parser.add_argument("--time-to", type=float, metavar="RETURN",
                        help="only the wall time to this training return, against SB3")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of --time-to")
    parser.add_argument("--recipe", choices=sorted(TIME_TO), default="cleanrl",
                        help="the DQN-CartPole config of --time-to")
    args = parse_args(parser)
    job = (f"compile={args.compile}",)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp)
        if args.smoke:
            print(host_line("gymnasium"))
            eps_table(store, SMOKE_STEPS, (32,), 0.1, SMOKE_JOB)
            dynamic_resources_ab(store, 1, SMOKE_STEPS, SMOKE_JOB)
            time_to(store, args.recipe, 20, 1, SMOKE_STEPS, SMOKE_JOB)
        elif args.time_to is not None:
            print(host_line())
            time_to(store, args.recipe, args.time_to, args.seeds, extra=job)
        elif args.ab:
            print(host_line())
            dynamic_resources_ab(store, args.ab, args.steps, job)
        else:
            print(host_line("gymnasium"))
            eps_table(store, args.steps, (32, 512), 5.0, job)
            print(f"\n{host_line()}")


if __name__ == "__main__":
    main()
    write_results()
