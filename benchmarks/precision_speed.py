"""How fast each precision policy updates a learner on this host, against fp32 in the same run
(issue 15 item 0: hardware-aware mixed precision on the machine you have).

Run from the repository root:

    python benchmarks/precision_speed.py            # DDPG [400,300] b256, DQN [256,256] b64
    python benchmarks/precision_speed.py --smoke    # seconds: DQN, a tiny network

Every contender is a learner `build()` made of the composed job (its precision applied), timed
by `hetrl.platform.measure.compare_updates`: whole updates on one random batch, the learners
taking turns update by update, the median. Measured here, nothing modeled:
- fp32, the reference;
- bf16 and fp16 as hetrl computes them (`hetrl.precision.native.compute_in`: autocast where the
  CPU has instructions for the dtype, rounding in fp32 where it has none), and beside each the
  same learner under plain `torch.autocast`, which emulates a dtype the CPU lacks ~10x slower;
- mixed on the host: per-layer dtypes chosen from the host's measured layer passes (fp32 where
  fp32 is faster);
- mixed on the modeled Versal: the plan's dtypes (PL fp16, AIE bf16) computed on this CPU, the
  cost of emulating the board's numerics here (`eps_host`), not the board's speed.

Goals (issue 15): on a CPU with bf16 instructions, DDPG mixed >= 1.5x fp32 per update; mixed
never more than 5 % slower than fp32 otherwise. Timings on a shared host drift by +-30 %
minutes apart: compare speedups, not milliseconds, across rows. Results:
benchmarks/results/precision_speed.jsonl, their history in benchmarks/results/README.md.
"""

from __future__ import annotations

import argparse
import copy

import gymnasium as gym
import torch
from common import build_job, host_line, parse_args, ratio, table, verdict, write_results

from hetrl.platform.measure import compare_updates
from hetrl.build import Components
from hetrl.precision.native import RoundedCompute, emulates

WORKLOADS = {  # name: (overrides, goal of mixed on the host vs fp32 where bf16 is native)
    "DDPG Pendulum [400,300] b256": (["algo=ddpg", "env=pendulum"], 1.5),
    "DQN CartPole [256,256] b64": (["algo=dqn", "env=cartpole"], 0.95),
}
SLOWER_AT_MOST = 0.95  # the goal where the CPU has no bf16 instructions
SMOKE = {"DQN CartPole [16] b16": (["algo=dqn", "env=cartpole", "algo.hidden=[16]",
                                   "algo.batch_size=16", "compile=false"], 0.95)}
"""--smoke: one workload, a tiny network built without compiling (`compile=auto` would time
and compile its update), timed over 1 update after 1 of warm-up."""
AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Contenders:
    """Learners built from one workload in each precision, the context each updates in and
    what it computes in, by name."""

    def __init__(self, overrides: list[str]) -> None:
        self.overrides = overrides
        self.learners, self.contexts, self.computes = {}, {}, {}
        fp32 = self.add("fp32", "precision=fp32")
        self.spaces: dict[str, gym.Space] = fp32.spaces
        for name, dtype in AUTOCAST.items():
            self.add(name, f"precision={name}")
            plain = f"{name} under plain autocast"  # the fp32 learner, under torch's autocast
            self.learners[plain] = copy.deepcopy(fp32.learner)
            self.contexts[plain] = torch.autocast("cpu", dtype=dtype, cache_enabled=False)
            self.computes[plain] = "autocast"
        host = self.add("mixed, host plan", "precision=mixed")
        self.computes["mixed, host plan"] = measured_choice(host)
        self.add("mixed, Versal plan", "platform=versal", "precision=mixed",
                 computes="per layer (PL fp16, AIE bf16)")

    def add(self, name: str, *job: str, computes: str | None = None) -> Components:
        """A learner built in the precision `job` names, updating in that precision's context
        (what it computes in: as given, else read off that context)."""
        c = build_job(*self.overrides, *job, "device=cpu", plan="precision=mixed" in job)
        self.learners[name] = copy.deepcopy(c.learner)
        self.contexts[name] = c.precision.autocast(torch.device("cpu"))
        self.computes[name] = computes or {RoundedCompute: "rounded", torch.autocast: "autocast"
                                           }.get(type(self.contexts[name]), "float32")
        return c


def measured_choice(c: Components) -> str:
    """What a measured mixed plan computes its layers in: the fastest of the per-layer
    choice, each 16-bit dtype throughout and float32, timed as whole updates at build."""
    step = c.step_plan
    layers = {d for node, d in zip(step.graph.nodes, step.applied.dtypes) if node.layer_pass}
    return f"{layers.pop()} throughout (measured)" if len(layers) == 1 else "per layer (measured)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--smoke", action="store_true", help="a tiny DQN, 1 repeat")
    args = parse_args(parser)
    print(host_line())
    native_bf16 = not emulates("cpu", torch.bfloat16)
    workloads, warmup, repeats = (SMOKE, 1, 1) if args.smoke else (WORKLOADS, 5, args.repeats)
    for workload, (overrides, native_goal) in workloads.items():
        c = Contenders(overrides)
        seconds = compare_updates(c.learners, c.contexts, **c.spaces, device=torch.device("cpu"),
                                  warmup=warmup, repeats=repeats)
        fp32 = seconds["fp32"]
        table(["precision", "computes", "ms / update", "speedup vs fp32"],
              [(name, c.computes[name], f"{1e3 * s:.2f}", ratio(fp32, s))
               for name, s in seconds.items()], workload, align="llrr")
        goal = native_goal if native_bf16 else SLOWER_AT_MOST
        mixed = seconds["mixed, host plan"]
        print(f"\nmixed on the host: {ratio(fp32, mixed)} fp32's speed; goal >= {goal:.2f}x "
              f"(bf16 instructions: {native_bf16}): {verdict(fp32 / mixed >= goal)}")


if __name__ == "__main__":
    main()
    write_results()
