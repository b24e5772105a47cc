"""Quantized policies (QuaRL): inference speed by precision and width, and PTQ reward error.

Run from the repository root:

    python benchmarks/quantized_actors.py               # full: about 25 min on 2 quiet cores
    python benchmarks/quantized_actors.py --quick       # smoke test: about 2 min
    python benchmarks/quantized_actors.py --part inference   # only part 1 (about 1 min)
    python benchmarks/quantized_actors.py --smoke       # seconds: width 64, DQN 300 steps

Everything is measured in this process on this host; nothing is copied from elsewhere.
(The end-to-end ActorQ time to 95% reward is benchmarks/actorq_end_to_end.py.)

1. Inference (QuaRL Table 2 and the extract's D4, in kind). Batch-1 forward passes of the
   deterministic policy (hetrl's `Actor`: obs 24 -> 3 hidden layers of `width` -> 6 actions,
   tanh; the ActorQ policy network is width 2048) on one thread, under
   `torch.inference_mode`, for each precision `hetrl.quant.quantize_policy` makes: fp32, fp16
   (fbgemm fp16 GEMM on half-rounded inputs), int8 `paper` (QuaRL's quantizer as fake quant:
   fp32 arithmetic plus the quantizer's work, so it can only be slower) and int8 `kernel`
   (real int8 GEMMs). Each is timed by `torch.utils.benchmark.Timer`, the contenders
   interleaved over R rounds, so drift on a shared host hits them alike; the median is reported, with each precision's
   speedup over fp32 measured in the same run. Also a Nature-CNN Q-network (Atari, 4x84x84)
   with per-channel int8 convolutions, and the size of the 3x2048 policy's parameters on the
   wire: fp32 state dict vs ActorQ's q_c payload (int8 codes + scales), and the cost of a
   pull's load into an actor's copy of it: `load_into` (its quantized layers repacked in
   place, what actors do) against a new `quantize_policy` copy and against fp32's
   `load_state_dict`.

2. PTQ reward error (QuaRL Table 1 and the extract's D2/D3, in kind). For each of DQN
   CartPole-v1, DDPG Pendulum-v1, TD3 Pendulum-v1 and PPO CartPole-v1 and seeds 0, 1, 2, a job
   is trained through hetrl's real entry (`compose_job` + `experiment.run`, rl-zoo3's tuned
   hyperparameters and budget unless --quick), its final checkpoint is restored into a fresh
   learner and the final policy is evaluated greedily in fp32, fp16, int8 paper and int8 kernel
   on the same --episodes episodes (hetrl.evaluation.ptq_returns). The table gives the mean
   fp32 return and, per precision, the mean over seeds of |E| and of the signed E =
   (R_fp32 - R_q)/|R_fp32| x 100, beside the paper's Table 1 figure for the same row.

3. The compiled acting path (`--part acting`, issue 38 item 5). For the seeds' nets (DQN
   CartPole 4-64-64-2 and 4-256-256-2, the DDPG Pendulum actor 3-400-300-1) at each actor
   batch (`--acting-rows`, env.n_envs) and actor precision: the policy forward eager and
   compiled by inductor, timed as `compile=true` times it while a job is built, with the
   compile time, or why it cannot compile (torch.ao's int8 and fp16 kernels); and where it
   compiles, an ActorWorker's env steps/s with the eager against the compiled forward, their
   chunks taking turns.

Goals (issue 5): int8 >= 2x faster inference on the 3x2048 policy; mean int8 PTQ error <= 5%.
"""

from __future__ import annotations

import argparse
import io
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import gymnasium as gym
import torch
from common import (build_job, host_line, load_average, median_seconds, parse_args, run_job, table,
                    write_results)
from torch import nn

from hetrl import checkpoint
from hetrl.actors.worker import ActorWorker, cpu_copy
from hetrl.algos.networks import ACTORQ_POLICY_HIDDEN, Actor, nature_cnn
from hetrl.compiled.acting import choose_acting
from hetrl.evaluation import ptq_metrics, ptq_returns
from hetrl.quant import (QuantSpec, compress_state_dict, load_into, payload_bytes,
                         quantize_policy)

warnings.filterwarnings("ignore", category=UserWarning)

SPECS = {"fp16": QuantSpec("fp16"), "int8 paper": QuantSpec("int8", "paper"),
         "int8 kernel": QuantSpec("int8", "kernel")}

# QuaRL Table 1 (fp32 / fp16 / int8 rewards) for the rows hetrl runs; Pendulum is not in the
# paper: its DDPG row is the mean |E| of DDPG over the paper's four Gym envs (extract A.4).
PAPER = {
    "DQN CartPole-v1": "500/500/500: E 0.0% / 0.0%",
    "DDPG Pendulum-v1": "(not in paper) DDPG mean |E| 2.6% / 4.9%",
    "TD3 Pendulum-v1": "(not in paper; no TD3 rows)",
    "PPO CartPole-v1": "500/500/500: E 0.0% / 0.0%",
}


# ---- 1. inference ------------------------------------------------------------------------


def time_calls(contenders: dict[str, Callable[[], object]], repeats: int,
               min_run_time: float) -> dict[str, float]:
    """Median seconds per call of each contender at 1 thread, under `torch.inference_mode`."""
    with torch.inference_mode():
        return median_seconds({name: (fn, 1) for name, fn in contenders.items()}, repeats,
                              min_run_time)


def policy_contenders(net: nn.Module, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    out: dict[str, Callable[[], object]] = {"fp32": lambda: net(x)}
    for name, spec in SPECS.items():
        copy = quantize_policy(net, spec)
        out[name] = lambda copy=copy: copy(x)
    return out


def inference(args: argparse.Namespace) -> None:
    torch.manual_seed(0)
    box = gym.spaces.Box(-1.0, 1.0, (6,))
    print("\n== 1. batch-1 policy inference, 1 thread (median ms per call; speedup vs fp32) ==")
    nets = [(f"MLP 24-3x{w}-6 (Actor)", Actor(24, [w] * 3, box), torch.randn(1, 24))
            for w in args.widths]
    nets.append(("Nature CNN 4x84x84 -> 6", nature_cnn(6), torch.randn(1, 4, 84, 84)))
    rows = []
    for label, net, x in nets:
        times = time_calls(policy_contenders(net.eval(), x), args.repeats, args.min_run_time)
        rows.append((label, f"{times['fp32'] * 1e3:.4f} ms", *(
            f"{times[n] * 1e3:.4f} ms ({times['fp32'] / times[n]:.2f}x)" for n in SPECS)))
    table(["network", "fp32", *SPECS], rows)

    actor = Actor(24, ACTORQ_POLICY_HIDDEN, box)
    state = actor.state_dict()
    buffers = {}
    for name, obj in (("fp32 state dict", state),
                      ("q_c int8 payload", compress_state_dict(state, bits=8)),
                      ("q_c fp16 payload", compress_state_dict(state, bits=16))):
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        buffers[name] = len(buffer.getvalue())
    raw = payload_bytes(compress_state_dict(state, bits=32))
    print("\nActorQ 3x2048 policy on the wire (torch.save bytes): "
          + ", ".join(f"{n} {b / 1e6:.2f} MB" for n, b in buffers.items())
          + f"; int8 is {buffers['fp32 state dict'] / buffers['q_c int8 payload']:.2f}x smaller"
          f" (tensor data: {raw / 1e6:.2f} MB fp32)")

    print("\n== a pull's load into the 3x2048 policy's copy, 1 thread (median ms) ==")
    learner_policy = Actor(24, ACTORQ_POLICY_HIDDEN, box)  # the weights a pull brings
    contenders = {"fp32": lambda: actor.load_state_dict(learner_policy.state_dict())}
    for name, spec in SPECS.items():
        copy = quantize_policy(actor, spec)
        contenders[f"{name} in place"] = lambda copy=copy: load_into(copy, learner_policy)
        contenders[f"{name} new copy"] = lambda spec=spec: quantize_policy(learner_policy, spec)
    times = time_calls(contenders, args.repeats, args.min_run_time)
    rows = []
    for name in SPECS:
        in_place, new_copy = times[f"{name} in place"], times[f"{name} new copy"]
        rows.append((name, f"{in_place * 1e3:.1f}", f"{new_copy * 1e3:.1f}",
                     f"{new_copy / in_place:.2f}x", f"{in_place / times['fp32']:.1f}x"))
    table(["actor", "load_into (in place)", "quantize_policy (a new copy)", "in place speedup",
           "vs fp32 load_state_dict"], rows)


# ---- 2. PTQ reward error --------------------------------------------------------------------


TASKS = [("DQN CartPole-v1", "dqn", "cartpole"), ("DDPG Pendulum-v1", "ddpg", "pendulum"),
         ("TD3 Pendulum-v1", "td3", "pendulum"), ("PPO CartPole-v1", "ppo", "cartpole")]


def trained_learner(algo: str, env: str, seed: int, extra: list[str], out: Path):
    """Train one job through hetrl's entry; its final learner restored into a fresh build of
    the job, that build, and the job's final metrics."""
    overrides = (f"algo={algo}", f"env={env}", f"seed={seed}", "tracking=none",
                 "platform.threads=1", "log_every=1000000", *extra)
    result = run_job(out.parent, *overrides, out=out)
    c = build_job(*overrides)
    c.envs.close()
    c.learner.restore(checkpoint.load(out)["learner"])
    return c.learner, c, result


def ptq_suite(args: argparse.Namespace) -> None:
    print(f"\n== 2. PTQ reward error, seeds {args.seeds}, {args.episodes} greedy episodes each "
          f"({'--quick budgets: policies far from trained' if args.quick else 'tuned budgets'}) ==")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, algo, env in TASKS:
            if args.only and algo not in args.only:
                continue
            extra = args.quick_overrides[algo] if args.quick else []
            per_seed = []
            for seed in args.seeds:
                start = time.perf_counter()
                learner, c, result = trained_learner(algo, env, seed, extra,
                                                       Path(tmp) / f"{algo}-{env}-{seed}")
                means = ptq_returns(learner, list(SPECS.values()),
                                    lambda c=c: c.make_envs(n_envs=1), args.episodes, seed)
                per_seed.append(means)
                errors = {n: ptq_metrics(means["fp32"], means[s.name])["ptq_reward_error_pct"]
                          for n, s in SPECS.items()}
                print(f"  {label} seed {seed}: train return_mean_100 "
                      f"{result.get('return_mean_100', float('nan')):8.1f}, eval fp32 "
                      f"{means['fp32']:8.1f}, " + ", ".join(f"{n} {means[s.name]:8.1f} "
                      f"(|E| {errors[n]:.1f}%)" for n, s in SPECS.items())
                      + f"  [{time.perf_counter() - start:.0f} s]", flush=True)
            results.append((label, per_seed))

    pooled: dict[str, list[float]] = {n: [] for n in SPECS}
    rows = []
    for label, per_seed in results:
        cells = []
        for n, spec in SPECS.items():
            metrics = [ptq_metrics(m["fp32"], m[spec.name]) for m in per_seed]
            absolute = statistics.mean(x["ptq_reward_error_pct"] for x in metrics)
            signed = statistics.mean(x["ptq_reward_error_signed_pct"] for x in metrics)
            pooled[n].append(absolute)
            cells.append(f"{absolute:.2f}% ({signed:+.2f}%)")
        rows.append((label, f"{statistics.mean(m['fp32'] for m in per_seed):.1f}", *cells,
                     PAPER[label]))
    if results:
        rows.append(("mean over tasks", "", *(f"{statistics.mean(v):.2f}%" for v in pooled.values()),
                     "2-5% outside Atari; goal <= 5% for int8"))
    table(["task", "fp32 return", *(f"{n} mean abs E (signed)" for n in SPECS),
           "paper (Table 1)"], rows, "PTQ reward error E, mean over seeds")

# ---- 3. the compiled acting path ---------------------------------------------------------

ACTING_JOBS = {"DQN CartPole 4-64-64-2": ["algo=dqn", "env=cartpole", "algo.hidden=[64,64]"],
               "DQN CartPole 4-256-256-2": ["algo=dqn", "env=cartpole", "algo.hidden=[256,256]"],
               "DDPG Pendulum actor 3-400-300-1": ["algo=ddpg", "env=pendulum"]}
ACTING_SPECS = {"fp32": QuantSpec(), **SPECS}


def acting_suite(args: argparse.Namespace) -> None:
    """Per seed network, actor batch (env.n_envs rows) and precision: the policy forward eager
    and compiled (inductor) as `compile=true` times it at build (hetrl.compiled.acting: the
    median of 15 turns each), and an ActorWorker's env steps/s eager against compiled, the
    two workers' chunks of `--acting-steps` vector-env steps taking turns (median of 5)."""
    rows = []
    for label, overrides in ACTING_JOBS.items():
        if args.smoke and rows:
            break
        for n_envs in args.acting_rows:
            c = build_job(*overrides, f"env.n_envs={n_envs}", "tracking=none")
            c.envs.close()
            probe = cpu_copy(c.learner)
            obs = probe.obs_tensor(c.make_envs().observation_space.sample())
            for name, spec in ACTING_SPECS.items():
                torch._dynamo.reset()  # each row's compiles from the kernel cache, none spent
                choice = choose_acting(probe.policy(), spec, obs, "true", 0, 1)
                rows.append((label, n_envs, name, *_acting_row(c, spec, choice, args)))
                print(f"  {label} rows={n_envs} {name}: {choice.line()}", flush=True)
    table(["network", "rows", "actors", "forward eager", "forward compiled", "speedup",
           "compile s", "env steps/s eager", "env steps/s compiled", "ratio"], rows,
          "Acting forward and actor env steps/s, eager vs compiled (1 thread)")


def _acting_row(c, spec: QuantSpec, choice, args: argparse.Namespace) -> tuple:
    """The row's figures; where the forward did not compile, its reason."""
    if not choice.compiled:
        return (f"{choice.eager_s * 1e6:.0f} us", choice.reason, "", "", "", "", "")
    workers = {}
    for compiled in (False, True):
        c.learner.compile_acting = compiled
        workers[compiled] = ActorWorker(0, 1, cpu_copy(c.learner), c.make_envs, 0, spec)
    c.learner.compile_acting = False
    samples: dict[bool, list[float]] = {False: [], True: []}
    for i in range(6):  # the first round warms up (the compiled worker compiles: cache hit)
        for compiled, worker in workers.items():
            start = time.perf_counter()
            worker.collect(None, args.acting_steps, 10**6, 0.0)
            if i:
                samples[compiled].append(time.perf_counter() - start)
    for worker in workers.values():
        worker.close()
    n_envs = c.envs.num_envs
    eager, compiled = (args.acting_steps * n_envs / statistics.median(samples[k])
                       for k in (False, True))
    return (f"{choice.eager_s * 1e6:.0f} us", f"{choice.compiled_s * 1e6:.0f} us",
            f"{choice.eager_s / choice.compiled_s:.2f}x", f"{choice.compile_s:.1f}",
            f"{eager:,.0f}", f"{compiled:,.0f}", f"{compiled / eager:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small budgets, few calls")
    parser.add_argument("--part", choices=["inference", "ptq", "acting", "both"],
                        default="both", help="both: inference and ptq; acting: the compiled "
                        "acting path alone")
    parser.add_argument("--acting-rows", type=int, nargs="+", default=[1, 8, 64],
                        help="acting: the actor batches (env.n_envs)")
    parser.add_argument("--acting-steps", type=int, default=200,
                        help="acting: vector-env steps per timed chunk")
    parser.add_argument("--only", nargs="*", choices=[t[1] for t in TASKS], default=None,
                        help="PTQ suite: only these algos")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 2048])
    parser.add_argument("--smoke", action="store_true",
                        help="seconds: width 64, DQN only, 300 steps, 1 seed and episode")
    args = parse_args(parser)
    args.repeats, args.min_run_time = (1, 0.01) if args.smoke else (3, 0.1) if args.quick \
        else (7, 0.3)
    args.quick_overrides = {"dqn": ["steps=3000"], "ppo": ["steps=4096"],
                            **{a: ["steps=1500", "algo.learning_starts=500"]
                               for a in ("ddpg", "td3")}}
    if args.smoke:
        args.quick, args.widths, args.only = True, [64], ["dqn"]
        args.acting_rows, args.acting_steps = args.acting_rows[:1], 20
        args.quick_overrides["dqn"] = ["steps=300", "algo.learning_starts=100",
                                       "platform.measure_layers=false"]
    if args.quick:
        args.seeds, args.episodes = args.seeds[:1], min(args.episodes, 1 if args.smoke else 3)
    torch.set_num_threads(1)
    print(f"{host_line()}, quantized engine {torch.backends.quantized.engine} (figures "
          "measured under that load)")
    if args.part in ("inference", "both"):
        inference(args)
    if args.part in ("ptq", "both"):
        ptq_suite(args)
    if args.part == "acting":
        acting_suite(args)
    print(f"\n{load_average()} at the end")


if __name__ == "__main__":
    main()
    write_results()
