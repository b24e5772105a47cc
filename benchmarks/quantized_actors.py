"""Quantized policies (QuaRL): inference speed by precision and width, and PTQ reward error.

Run from the repository root:

    python benchmarks/quantized_actors.py               # full: about 25 min on 2 quiet cores
    python benchmarks/quantized_actors.py --quick       # smoke test: about 2 min
    python benchmarks/quantized_actors.py --part inference   # only part 1 (about 1 min)

Everything is measured in this process on this host; nothing is copied from elsewhere.
(The end-to-end ActorQ time to 95% reward is benchmarks/actorq_end_to_end.py.)

1. Inference (QuaRL Table 2 and the extract's D4, in kind). Batch-1 forward passes of the
   deterministic policy (hetrl's `Actor`: obs 24 -> 3 hidden layers of `width` -> 6 actions,
   tanh; the ActorQ policy network is width 2048) on one thread, under
   `torch.inference_mode`, for each precision `hetrl.quant.quantize_policy` makes: fp32, fp16
   (fbgemm fp16 GEMM on half-rounded inputs), int8 `paper` (QuaRL's quantizer as fake quant:
   fp32 arithmetic plus the quantizer's work, so it can only be slower) and int8 `kernel`
   (real int8 GEMMs). The contenders are interleaved over R repeats of N calls each, so drift on
   a shared host hits them alike; the median per-call time is reported, with each precision's
   speedup over fp32 measured in the same run. Also a Nature-CNN Q-network (Atari, 4x84x84)
   with per-channel int8 convolutions, and the size of the 3x2048 policy's parameters on the
   wire: fp32 state dict vs ActorQ's q_c payload (int8 codes + scales).

2. PTQ reward error (QuaRL Table 1 and the extract's D2/D3, in kind). For each of DQN
   CartPole-v1, DDPG Pendulum-v1, TD3 Pendulum-v1 and PPO CartPole-v1 and seeds 0, 1, 2, a job
   is trained through hetrl's real entry (`compose_job` + `experiment.run`, rl-zoo3's tuned
   hyperparameters and budget unless --quick), its final checkpoint is restored into a fresh
   learner and the final policy is evaluated greedily in fp32, fp16, int8 paper and int8 kernel
   on the same --episodes episodes (hetrl.evaluation.ptq_returns). The table gives the mean
   fp32 return and, per precision, the mean over seeds of |E| and of the signed E =
   (R_fp32 - R_q)/|R_fp32| x 100, beside the paper's Table 1 figure for the same row.

Goals (issue 5): int8 >= 2x faster inference on the 3x2048 policy; mean int8 PTQ error <= 5%.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Callable

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from torch import nn  # noqa: E402

from hetrl import checkpoint, experiment  # noqa: E402
from hetrl.algos.networks import ACTORQ_POLICY_HIDDEN, Actor, nature_cnn  # noqa: E402
from hetrl.config.store import register  # noqa: E402
from hetrl.evaluation import ptq_metrics, ptq_returns  # noqa: E402
from hetrl.options import compose_job  # noqa: E402
from hetrl.quant import QuantSpec, compress_state_dict, payload_bytes, quantize_policy  # noqa: E402

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


def time_calls(contenders: dict[str, Callable[[], object]], calls: int,
               repeats: int) -> dict[str, float]:
    """Median seconds per call of each contender, interleaved over `repeats` rounds."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    with torch.inference_mode():
        for fn in contenders.values():  # warm-up (weight packing, allocator)
            for _ in range(max(3, calls // 10)):
                fn()
        for _ in range(repeats):
            for name, fn in contenders.items():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                samples[name].append((time.perf_counter() - start) / calls)
    return {name: statistics.median(s) for name, s in samples.items()}


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
    header = f"{'network':<28}" + "".join(f"{n:>22}" for n in ["fp32", *SPECS])
    print(header)
    rows = [(f"MLP 24-3x{w}-6 (Actor)", Actor(24, [w] * 3, box), torch.randn(1, 24),
             args.calls_small if w < 1024 else args.calls_large) for w in args.widths]
    rows.append(("Nature CNN 4x84x84 -> 6", nature_cnn(6), torch.randn(1, 4, 84, 84),
                 args.calls_large))
    for label, net, x, calls in rows:
        net.eval()
        times = time_calls(policy_contenders(net, x), calls, args.repeats)
        cells = [f"{times['fp32'] * 1e3:9.4f} ms{'':11}"]
        cells += [f"{times[n] * 1e3:9.4f} ms ({times['fp32'] / times[n]:4.2f}x)" for n in SPECS]
        print(f"{label:<28}" + "".join(f"{c:>22}" for c in cells))

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


# ---- 2. PTQ reward error --------------------------------------------------------------------


TASKS = [("DQN CartPole-v1", "dqn", "cartpole"), ("DDPG Pendulum-v1", "ddpg", "pendulum"),
         ("TD3 Pendulum-v1", "td3", "pendulum"), ("PPO CartPole-v1", "ppo", "cartpole")]


def trained_learner(algo: str, env: str, seed: int, extra: list[str], out: Path):
    """Train one job through hetrl's entry; return its final learner and the env config."""
    cfg, choices = compose_job(f"algo={algo}", f"env={env}", f"seed={seed}", "tracking=none",
                               "platform.threads=1", "log_every=1000000", *extra)
    out.mkdir(parents=True)
    result = experiment.run(cfg, choices, out)
    saved = checkpoint.load(out)
    envs = instantiate(cfg.env)
    spaces = {"obs_space": envs.single_observation_space, "act_space": envs.single_action_space}
    envs.close()
    learner = instantiate(cfg.algo, **spaces, device=torch.device("cpu"))
    learner.restore(saved["learner"])
    return learner, cfg, result


def ptq_suite(args: argparse.Namespace) -> None:
    print(f"\n== 2. PTQ reward error, seeds {args.seeds}, {args.episodes} greedy episodes each "
          f"({'--quick budgets: policies far from trained' if args.quick else 'tuned budgets'}) ==")
    table = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, algo, env in TASKS:
            if args.only and algo not in args.only:
                continue
            extra = args.quick_overrides[algo] if args.quick else []
            per_seed = []
            for seed in args.seeds:
                start = time.perf_counter()
                learner, cfg, result = trained_learner(algo, env, seed, extra,
                                                       Path(tmp) / f"{algo}-{env}-{seed}")
                means = ptq_returns(learner, list(SPECS.values()),
                                    lambda: instantiate(cfg.env, n_envs=1), args.episodes, seed)
                per_seed.append(means)
                errors = {n: ptq_metrics(means["fp32"], means[s.name])["ptq_reward_error_pct"]
                          for n, s in SPECS.items()}
                print(f"  {label} seed {seed}: train return_mean_100 "
                      f"{result.get('return_mean_100', float('nan')):8.1f}, eval fp32 "
                      f"{means['fp32']:8.1f}, " + ", ".join(f"{n} {means[s.name]:8.1f} "
                      f"(|E| {errors[n]:.1f}%)" for n, s in SPECS.items())
                      + f"  [{time.perf_counter() - start:.0f} s]", flush=True)
            table.append((label, per_seed))

    print(f"\n{'task':<18}{'fp32 return':>12}" + "".join(
        f"{n + ' |E| (signed)':>26}" for n in SPECS) + "   paper (Table 1)")
    pooled = {n: [] for n in SPECS}
    for label, per_seed in table:
        fp32 = statistics.mean(m["fp32"] for m in per_seed)
        cells = []
        for n, spec in SPECS.items():
            metrics = [ptq_metrics(m["fp32"], m[spec.name]) for m in per_seed]
            absolute = statistics.mean(x["ptq_reward_error_pct"] for x in metrics)
            signed = statistics.mean(x["ptq_reward_error_signed_pct"] for x in metrics)
            pooled[n].append(absolute)
            cells.append(f"{absolute:8.2f}% ({signed:+7.2f}%)")
        print(f"{label:<18}{fp32:>12.1f}" + "".join(f"{c:>26}" for c in cells)
              + f"   {PAPER[label]}")
    if table:
        print(f"{'mean over tasks':<30}" + "".join(
            f"{statistics.mean(v):>18.2f}%{'':7}" for v in pooled.values())
              + "   paper: 2-5% outside Atari; goal <= 5% for int8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small budgets, few calls")
    parser.add_argument("--part", choices=["inference", "ptq", "both"], default="both")
    parser.add_argument("--only", nargs="*", choices=[t[1] for t in TASKS], default=None,
                        help="PTQ suite: only these algos")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 2048])
    args = parser.parse_args()
    args.repeats = 3 if args.quick else 7
    args.calls_small, args.calls_large = (300, 30) if args.quick else (3000, 300)
    args.quick_overrides = {"dqn": ["steps=3000"], "ppo": ["steps=4096"],
                            **{a: ["steps=1500", "algo.learning_starts=500"]
                               for a in ("ddpg", "td3")}}
    if args.quick:
        args.seeds, args.episodes = args.seeds[:1], min(args.episodes, 3)
    torch.set_num_threads(1)
    register()
    print(f"host: {os.cpu_count()} cpus, load average {os.getloadavg()[0]:.2f} "
          f"(figures measured under that contention), torch {torch.__version__}, "
          f"quantized engine {torch.backends.quantized.engine}")
    if args.part in ("inference", "both"):
        inference(args)
    if args.part in ("ptq", "both"):
        ptq_suite(args)
    print(f"\nload average at the end: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
