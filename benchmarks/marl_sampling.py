"""MARL mini-batch sampling: each replay layout × sampler at 3, 6, 12 and 24 agents, next to
the MARL paper's figures (extract B.4).

Run from the repository root:

    python benchmarks/marl_sampling.py            # 3/6/12/24 agents, both envs
    python benchmarks/marl_sampling.py --quick    # 3 and 6 agents, small budgets
    python benchmarks/marl_sampling.py --smoke    # seconds: PP, 3 agents, uniform and locality

Everything is measured here, in this one process, at torch's 1 thread:

1. Sampling per update round. A replay of the option's layout (`per_agent_lists`: the paper's
   own baseline, openai/maddpg's Python lists of tuples per agent; `per_agent`: that layout in
   numpy rings; `joint`: the key-value rows) is
   filled with `--fill` transitions of the env's real shapes (random values: what is timed is
   the gather, not the data), then `--rounds` update rounds are timed, a round being what
   MADDPG's "update all trainers" samples: one batch of 1024 per trainer (every agent, prey
   included), each gathered from every agent's data, converted to torch tensors. Prioritized
   samplers get fresh priorities after each batch (random TD errors; not timed). Each row is
   the median over rounds of ms per round; "vs uniform" compares with the uniform sampler on
   the same layout; "joint ×" is per_agent's (numpy) time over joint's and "joint × (vs
   lists)" the list layout's time over joint's, for the same sampler: the latter is the
   paper's comparison (its 1.36/2.26/4.41/9.55× on PP). The list layout runs the uniform and
   locality samplers only.
2. End to end per 1000 env steps: MADDPG (the paper's settings: batch 1024, [64, 64], update
   every 100 env steps) runs the real sync loop (hetrl.scheduler.sync) for `--steps` env steps
   on the real mpe2 env, from a replay pre-filled as above, so that every 100 steps is an
   update round; the loop's own phase timers give the sampling share of the wall time.
   Only `uniform` and `locality` (16×64) are run end to end, on every layout. The env step,
   the same for every row, dominates the time and swings with the host's load, so "Δ e2e
   from sampling" (the change in sampling seconds against uniform's, as a share of
   uniform's end-to-end time, from the loop's own timers) is printed beside the measured
   end-to-end difference.

The host is shared (other jobs run on its 2 cores): the load average is printed, compare
ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from common import build_job, host_line, load_average, parse_args, pct, table, write_results

from hetrl.build import Components
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState

ENVS = {"simple_tag": "PP", "simple_spread": "CN"}
SAMPLERS = {  # name -> replay overrides
    "uniform": ("replay/sampler=uniform",),
    "locality 16x64": ("replay/sampler=locality", "replay.sampler.refs=16",
                       "replay.sampler.neighbors=64"),
    "locality 64x16": ("replay/sampler=locality", "replay.sampler.refs=64",
                       "replay.sampler.neighbors=16"),
    "prioritized": ("replay/sampler=prioritized",),
    "prio_locality": ("replay/sampler=prioritized_locality",),
}
END_TO_END = ("uniform", "locality 16x64")
LAYOUTS = ("per_agent_lists", "per_agent", "joint")
LIST_SAMPLERS = END_TO_END  # the list layout (the paper's baseline) with these samplers only

# the paper's figures (extract B.4), MADDPG
PAPER_JOINT = {"PP": {3: 1.36, 6: 2.26, 12: 4.41, 24: 9.55},
               "CN": {3: 1.18, 6: 1.71, 12: 3.44, 24: 7.03}}
PAPER_NOTES = [
    "locality 16x64 sampling time, PP 24 agents: -37.2% (MATD3 PP 3/6 agents, 64x16: -36%)",
    "locality end-to-end time, PP: -8.2% at 3 agents to -20.5% at 24",
    ("joint layout, inter-agent sampling speedup: PP 1.36/2.26/4.41/9.55x, "
    "CN 1.18/1.71/3.44/7.03x at 3/6/12/24 (incl. reorganization: -37% at 3, +25.8% at 24)"),
    "prioritized locality vs PER-MADDPG sampling: about 2x faster (3, 6, 12 agents)",
    ("phase shares: update-all-trainers up to ~80% (34% -> 87% for 3 -> 48 agents); sampling "
    "its largest part, growing ~3x per doubling of agents"),
]


def filled(env: str, n_agents: int, layout: str, sampler: str, fill: int) -> Components:
    """The MADDPG job's components, its replay filled with `fill` transitions of its shapes."""
    c = build_job("algo=maddpg", f"env={env}", f"env.n_agents={n_agents}", f"replay={layout}",
                  *SAMPLERS[sampler], "tracking=none",  # algo=maddpg: the paper's settings
                  f"algo.buffer_size={max(fill, 1024)}")
    rng = np.random.default_rng(0)
    space = c.envs.single_observation_space
    n, width = space.shape
    real = space.high > space.low
    for start in range(0, fill, 1000):
        rows = min(1000, fill - start)
        obs = rng.standard_normal((rows, n, width), dtype=np.float32) * real
        c.replay.add(obs, rng.integers(0, 5, (rows, n)), rng.standard_normal((rows, n)),
                     obs, np.zeros(rows))
    return c


def sampling_round_ms(replay, n_trainers: int, batch: int, rounds: int) -> float:
    times = []
    for _ in range(rounds + 1):  # the first round warms up
        elapsed = 0.0
        for _ in range(n_trainers):
            start = time.perf_counter()
            sampled = replay.sample(batch)
            elapsed += time.perf_counter() - start
            if sampled.weights is not None:
                replay.update_priorities(sampled.indices, torch.randn(batch))
        times.append(elapsed * 1000)
    return statistics.median(times[1:])


def end_to_end(c: Components, steps: int) -> dict[str, float]:
    """The job's own loop for `steps` env steps with updates from the first one; its phases."""
    c.learner.learning_starts = 0
    state = LoopState()
    state.obs, _ = c.envs.reset(seed=0)
    c.envs.action_space.seed(0)
    training = Training(envs=c.envs, learner=c.learner, replay=c.replay, precision=c.precision,
                        steps=steps, log_every=steps, checkpoint_every=0,
                        report=lambda step, metrics, kind: None, checkpoint=lambda loop: None)
    start = time.perf_counter()
    c.scheduler.run(training, state)
    wall = time.perf_counter() - start
    return {"s_per_1000": wall * 1000 / steps, "sample_share": state.phase_s["sample"] / wall,
            **{f"{k}_share": v / wall for k, v in state.phase_s.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="3 and 6 agents, small budgets")
    parser.add_argument("--agents", type=int, nargs="+", default=None)
    parser.add_argument("--envs", nargs="+", default=list(ENVS), choices=list(ENVS))
    parser.add_argument("--fill", type=int, default=None, help="transitions in the replay")
    parser.add_argument("--rounds", type=int, default=None, help="timed update rounds")
    parser.add_argument("--steps", type=int, default=None, help="env steps end to end")
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: PP, 3 agents, uniform and locality 16x64, tiny budgets")
    args = parse_args(parser)
    samplers = list(END_TO_END) if args.smoke else list(SAMPLERS)
    if args.smoke:
        args.envs, args.agents, args.fill, args.rounds, args.steps = (
            ["simple_tag"], [3], 2000, 1, 100)
    agents = args.agents or ([3, 6] if args.quick else [3, 6, 12, 24])
    fill = args.fill or (5000 if args.quick else 50_000)
    rounds = args.rounds or (3 if args.quick else 7)
    steps = args.steps or (200 if args.quick else 1000)
    torch.set_num_threads(1)
    print(f"{host_line('numpy', 'pettingzoo')}\nfill {fill}, {rounds} rounds, "
          f"{steps} env steps end to end, batch 1024, torch threads 1")

    rows = []
    for env in args.envs:
        for n in agents:
            for layout in LAYOUTS:
                for sampler in samplers:
                    if layout == "per_agent_lists" and sampler not in LIST_SAMPLERS:
                        continue
                    c = filled(env, n, layout, sampler, fill)
                    n_trainers = c.envs.n_agents
                    row = {"env": ENVS[env], "n": n, "trainers": n_trainers, "layout": layout,
                           "sampler": sampler,
                           "round_ms": sampling_round_ms(c.replay, n_trainers, 1024, rounds)}
                    if sampler in END_TO_END:
                        row.update(end_to_end(c, steps))
                    c.envs.close()
                    del c
                    rows.append(row)
                    print(_line(row), flush=True)
    print(f"{load_average()} after")
    print_tables(rows)


def _line(row: dict) -> str:
    e2e = (f"  e2e {row['s_per_1000']:.2f} s/1000 steps, sampling {100 * row['sample_share']:.1f}%"
           if "s_per_1000" in row else "")
    return (f"{row['env']} {row['n']:>2} agents ({row['trainers']} trainers) {row['layout']:>9} "
            f"{row['sampler']:<15} {row['round_ms']:9.1f} ms/round{e2e}")


def print_tables(rows: list[dict]) -> None:
    def find(env, n, layout, sampler):
        return next(r for r in rows if (r["env"], r["n"], r["layout"], r["sampler"])
                    == (env, n, layout, sampler))

    def lists_ms(env, n, sampler):
        found = [r for r in rows if (r["env"], r["n"], r["layout"], r["sampler"])
                 == (env, n, "per_agent_lists", sampler)]
        return found[0]["round_ms"] if found else None

    sampling = []
    for r in rows:
        uniform = find(r["env"], r["n"], r["layout"], "uniform")["round_ms"]
        per_agent = find(r["env"], r["n"], "per_agent", r["sampler"])["round_ms"]
        lists = lists_ms(r["env"], r["n"], r["sampler"])
        paper = ""
        if r["layout"] == "joint" and r["sampler"] == "uniform":
            paper = f"joint {PAPER_JOINT[r['env']].get(r['n'], '-')}×"
        if r["env"] == "PP" and r["n"] == 24 and r["sampler"] == "locality 16x64":
            paper = "−37.2%"
        if r["sampler"] == "prio_locality":
            prioritized = find(r["env"], r["n"], r["layout"], "prioritized")["round_ms"]
            paper = f"vs PER {prioritized / r['round_ms']:.2f}× (paper ≈2×)"
        sampling.append((r["env"], r["n"], r["layout"], r["sampler"], f"{r['round_ms']:.1f}",
                         pct(r["round_ms"], uniform),
                         f"{per_agent / r['round_ms']:.2f}×" if r["layout"] == "joint" else "",
                         f"**{lists / r['round_ms']:.2f}×**"
                         if r["layout"] == "joint" and lists is not None else "",
                         paper))
    table(["env", "agents", "layout", "sampler", "ms/round", "vs uniform",
           "joint × (vs numpy per_agent)", "joint × (vs lists: the paper's baseline)", "paper"],
          sampling, "## Sampling time per update round (all trainers × batch 1024), ms")

    e2e = []
    for r in (r for r in rows if "s_per_1000" in r):
        uniform = find(r["env"], r["n"], r["layout"], "uniform")
        # the env step varies with the host's load and dominates: the sampling seconds saved,
        # as a share of uniform's time, are the steadier measure of what the sampler changes
        saved = (uniform["sample_share"] * uniform["s_per_1000"]
                 - r["sample_share"] * r["s_per_1000"]) / uniform["s_per_1000"]
        paper = {3: "−8.2%", 24: "−20.5%"}.get(r["n"], "") \
            if r["env"] == "PP" and r["sampler"] != "uniform" else ""
        loss = r.get("q_loss_share", 0) + r.get("p_loss_share", 0)
        e2e.append((r["env"], r["n"], r["layout"], r["sampler"], f"{r['s_per_1000']:.2f}",
                    pct(r["s_per_1000"], uniform["s_per_1000"]),
                    "" if r is uniform else f"{-100 * saved:+.1f}%",
                    f"{100 * r['sample_share']:.1f}", f"{100 * r.get('target_q_share', 0):.1f}",
                    f"{100 * loss:.1f}", f"{100 * r['env_share']:.1f}",
                    f"{100 * r['act_share']:.1f}", paper))
    table(["env", "agents", "layout", "sampler", "s/1000 steps", "vs uniform",
           "Δ e2e from sampling", "sampling %", "target_q %", "q+p loss %", "env %", "act %",
           "paper"], e2e, "## End to end per 1000 env steps (MADDPG, update every 100 steps)")
    print("\nThe paper (MADDPG/MATD3, RTX 3090 + Threadripper, Python lists of tuples):")
    for note in PAPER_NOTES:
        print(f"- {note}")

if __name__ == "__main__":
    main()
    write_results()
