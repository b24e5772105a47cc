"""The compiled update against the eager one (issue 38): per workload, one update of the job's
learner on a batch of its shapes, eager PyTorch (autograd and torch.optim, `compile=false`)
and compiled as one graph (`hetrl.compiled`, what `compile=true` trains with), timed in turns
in one process (the median of `--repeats` updates each); then what compiling it took here
(first compile: cold where this machine had never compiled the update, else from the
persistent cache) and a cached start (the same update compiled again in a new process, as
the next job of a sweep starts, from inductor's cache on disk).

    python benchmarks/compiled_update.py            # the issue's workloads; appends its table
                                                    # to benchmarks/results/compiled_update.jsonl
    python benchmarks/compiled_update.py --smoke    # one tiny workload, nothing written

An update that cannot compile (per-layer precision hooks, float16 loss scaling) shows eager
only, with the reason. Single-threaded, as hetrl's small-batch learners run. No JAX reference
is measured here (JAX is not installed in this project's environment)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial

import torch
from common import build_job, host_line, parse_args, table, write_results

from hetrl.algos.base import Learner
from hetrl.build import Components
from hetrl.compiled.choose import compiler, job_batch, last_compile, time_updates
from hetrl.compiled.step import GraphStep, unsupported
from hetrl.compiled.toolchain import cache_dir

WORKLOADS = {
    "PEARL DQN-CartPole 4-64-2, batch 32": ("algo=dqn", "algo.hidden=[64]",
                                            "algo.batch_size=32"),
    "PEARL DQN-CartPole 4-64-2, batch 512": ("algo=dqn", "algo.hidden=[64]",
                                             "algo.batch_size=512"),
    "rl-zoo3 DQN-CartPole 256-256, batch 64": ("algo=dqn",),
    "DDPG-Pendulum [400,300], batch 256": ("algo=ddpg", "env=pendulum"),
    "DDPG-Pendulum [400,300], batch 256, mixed": ("algo=ddpg", "env=pendulum",
                                                  "precision=mixed"),
    "DDPG-Pendulum [64,64], batch 256": ("algo=ddpg", "env=pendulum", "algo.hidden=[64,64]"),
    "TD3-Pendulum [400,300], batch 256": ("algo=td3", "env=pendulum"),
    "TD3-Pendulum [64,64], batch 256": ("algo=td3", "env=pendulum", "algo.hidden=[64,64]"),
    "D4PG-Pendulum, batch 256": ("algo=d4pg", "env=pendulum"),
    "PPO-CartPole [64,64], batch 64": ("algo=ppo",),
    "MADDPG simple_spread, 3 agents, batch 1024": ("algo=maddpg", "env=simple_spread",
                                                   "env.n_agents=3"),
    "Nature-CNN DQN Breakout, batch 32": ("algo=dqn", "env=breakout", "algo.batch_size=32",
                                          "algo.buffer_size=1000"),
    "AlphaZero 32x3, 9x9, batch 64": ("algo=alphazero", "env=go9", "algo.width=32",
                                      "algo.blocks=3"),
}
SMOKE = {"DQN-CartPole 4-16-2, batch 16": ("algo=dqn", "algo.hidden=[16]",
                                           "algo.batch_size=16")}


def measure(overrides: tuple[str, ...], repeats: int) -> dict:
    """One workload's figures (seconds), or its eager time and why it does not compile."""
    c = _built(overrides)
    learner, device = c.learner, c.platform.device
    batch = job_batch(learner, c.spaces, c.replay)
    context = partial(c.precision.autocast, device)
    if why := unsupported(learner):
        eager = time_updates({"eager": lambda: learner.eager_update(batch)}, learner, context,
                             repeats=repeats)
        return {"eager_s": eager["eager"], "why_eager": why}
    cache = "warm" if last_compile(learner, batch) else "cold"
    first_s = _compile(learner, batch, context)
    times = time_updates({"eager": lambda: learner.eager_update(batch),
                          "compiled": lambda: learner.compiled_step(batch)}, learner, context,
                         warmup=5, repeats=repeats)
    return {"eager_s": times["eager"], "compiled_s": times["compiled"],
            "compile_s": first_s, "cache": cache, "cached_start_s": _cached_start(overrides)}


def _built(overrides: tuple[str, ...] | list[str]) -> Components:
    """The workload's job, built (planned where its precision needs a plan: mixed)."""
    c = build_job(*overrides, "tracking=none", "compile=false",
                  plan="precision=mixed" in overrides)
    c.envs.close()
    return c


def _compile(learner: Learner, batch: object, context: Callable) -> float:
    """Seconds to the first compiled update of `learner` (installed on it)."""
    learner.compiled_step = GraphStep(learner, compiler(learner.device))
    start = time.perf_counter()
    with context():
        learner.compiled_step(batch)
    return time.perf_counter() - start


def _cached_start(overrides: tuple[str, ...]) -> float:
    """The compile of the same update in a new process, as the next job of a sweep starts:
    from inductor's cache on disk (this process's own caches left out)."""
    out = subprocess.run([sys.executable, __file__, "--compile-only", *overrides],
                         capture_output=True, text=True, check=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1])


def compile_only(overrides: list[str]) -> None:
    """Print the seconds the first compiled update of the workload takes here."""
    c = _built(overrides)
    context = partial(c.precision.autocast, c.platform.device)
    print(_compile(c.learner, job_batch(c.learner, c.spaces, c.replay), context))


def row(name: str, m: dict) -> list[str]:
    eager = f"{1e6 * m['eager_s']:,.0f}"
    if "compiled_s" not in m:
        return [name, eager, "—", "—", "—", "—", f"eager only: {m['why_eager']}"]
    return [name, eager, f"{1e6 * m['compiled_s']:,.0f}", f"{m['eager_s'] / m['compiled_s']:.2f}x",
            f"{m['compile_s']:.1f} ({m['cache']})", f"{m['cached_start_s']:.1f}", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one tiny workload, no results")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--only", nargs="*", default=None, help="workloads whose name has these")
    parser.add_argument("--compile-only", nargs="*", default=None, help=argparse.SUPPRESS)
    args = parse_args(parser)
    torch.set_num_threads(1)
    if args.compile_only is not None:
        return compile_only(args.compile_only)
    workloads = SMOKE if args.smoke else WORKLOADS
    if args.only:
        workloads = {k: v for k, v in workloads.items() if any(o in k for o in args.only)}
    repeats = 5 if args.smoke else args.repeats
    print(host_line(), f"\ninductor cache: {cache_dir()}")
    results = {name: measure(overrides, repeats) for name, overrides in workloads.items()}
    table(["workload", "eager µs", "compiled µs", "speedup", "first compile s", "cached start s",
           "note"], [row(name, m) for name, m in results.items()],
          title="One update, eager vs compiled (median, 1 thread)", align="lrrrrrl")


if __name__ == "__main__":
    main()
    write_results()
