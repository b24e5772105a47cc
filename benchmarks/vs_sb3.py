"""hetrl vs Stable-Baselines3: env steps/s and learner updates/s, measured side by side.

Run from the repository root (needs `pip install -e '.[bench]'`):

    python benchmarks/vs_sb3.py            # full run, about 5 minutes on 2 quiet cores
    python benchmarks/vs_sb3.py --quick    # about 1.5 minutes: smaller budgets, fewer repeats
    python benchmarks/vs_sb3.py --smoke    # seconds: tiny budgets, every code path, its tables

Everything is measured in this run on this host. Two workloads, with the same algorithm, env,
network, batch, train_freq, gradient_steps, learning_starts, buffer and budget in both:

- DQN  CartPole-v1: batch 64,  hidden [256, 256], train_freq 4, gradient_steps 1
- DDPG Pendulum-v1: batch 256, hidden [400, 300], train_freq 1, gradient_steps 1

1. Learner only: updates/s, each the median of `torch.utils.benchmark.Timer.blocked_autorange`
   over R rounds that interleave the contenders (drift on a noisy host hits them alike); one
   timed call is N updates, from a replay filled with random-action transitions.
   - hetrl: `learner.update(replay.sample(batch))` on the learner and replay `build()` makes
     of the composed config (its precision applied), and the update alone on fixed batches.
   - SB3: `model.train(gradient_steps=N, batch_size=B)` after `model.learn` filled the buffer.
   - "limit": a plain-PyTorch update of the same networks on fixed batches (DQN: target net,
     Huber loss, grad-norm clip 10, Adam; DDPG: critic MSE, actor loss, Polyak averaging),
     with the default and the fused Adam; the faster is the limit.
   All at 1 thread (SB3's own setting), plus hetrl's best learner setting (2 threads; bf16
   autocast for DDPG) against the plain-PyTorch update at the same setting.
2. End to end: SB3's timed `model.learn(total_timesteps=steps)` against hetrl's loop `sps`
   (its own metric, training loop only) of one job run as `python -m hetrl` runs it, 1 thread;
   then the "best" candidates (2 threads, bf16 for DDPG, `env.n_envs` > 1; train_freq counts
   env steps across envs, so updates per env step stay equal) run as one Hydra multirun,
   `python -m hetrl -m`, tracked to a throwaway MLflow store that their `sps` is read back
   from. The fastest is "best".

Host checks (a matmul at 1 and 2 threads, at the start and after each workload) flag a busy
second core, which makes 2-thread runs many times slower. Goals (issue 3) checked at the end:
hetrl best >= 2x SB3 env steps/s; learner >= 1.3x SB3 (DQN), >= 1.0x (DDPG); hetrl's learner
within 10% of the plain-PyTorch limit. The host is shared and noisy (±15% run to run).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

if "--omp-passive" in sys.argv:  # must be set before torch (and its OpenMP runtime) loads
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from common import (build_job, core_check, host_line, job_config, median_seconds, num,  # noqa: E402
                    ratio, run_job, sweep, table, verdict)
from hetrl.algos.base import Batch  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)


@dataclass
class Workload:
    name: str
    algo: str
    env: str
    env_id: str
    batch: int
    hidden: list[int]
    train_freq: int
    learning_starts: int
    buffer_size: int
    steps: int  # end-to-end env-step budget
    updates: int  # learner only: updates per timed call
    candidates: list[str]  # the "best" sweep's overrides (`key=a,b` sweeps)
    extra: list[str]  # the mode's overrides (smoke: no per-layer host measurement)

    def overrides(self, *extra: str) -> list[str]:
        """The job's overrides; those in `extra` replace the same key's."""
        base = [f"algo={self.algo}", f"env={self.env}", f"algo.batch_size={self.batch}",
                f"algo.hidden=[{','.join(map(str, self.hidden))}]",
                f"algo.train_freq={self.train_freq}", "algo.gradient_steps=1",
                f"algo.learning_starts={self.learning_starts}",
                f"algo.buffer_size={self.buffer_size}", f"steps={self.steps}",
                "platform.threads=1", "seed=0", f"log_every={self.steps}", *self.extra, *extra]
        return list({o.split("=")[0]: o for o in base}.values())


def workloads(args: argparse.Namespace) -> list[Workload]:
    """The two workloads; their "best" sweeps shrink with --quick, and with --smoke run
    one job at 1 thread (a busy second core can stall 2-thread runs for minutes)."""
    mode, extra = args.mode, ["platform.measure_layers=false"] * (args.mode == "smoke")
    threads = {"full": "platform.threads=1,2", "quick": "platform.threads=1,2",
               "smoke": "platform.threads=1"}[mode]
    dqn = Workload("DQN CartPole-v1", "dqn", "cartpole", "CartPole-v1", 64, [256, 256], 4,
                   args.dqn_learning_starts, 100_000, args.dqn_steps, args.dqn_updates,
                   [threads, "env.n_envs=4,8" if mode == "full" else "env.n_envs=4"], extra)
    ddpg = Workload("DDPG Pendulum-v1", "ddpg", "pendulum", "Pendulum-v1", 256, [400, 300], 1,
                    args.ddpg_learning_starts, 200_000, args.ddpg_steps, args.ddpg_updates,
                    [threads, "precision=bf16", "env.n_envs=1,4" if mode == "full"
                     else "env.n_envs=1"], extra)
    return {"dqn": [dqn], "ddpg": [ddpg], "both": [dqn, ddpg]}[args.only]


# ---- the learners -----------------------------------------------------------------------


def random_transitions(env_id: str, n: int) -> tuple[np.ndarray, ...]:
    """n transitions of a random policy (the true last obs stored at episode ends)."""
    env = gym.make(env_id)
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    cols: list[list] = [[], [], [], [], []]
    for _ in range(n):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for col, value in zip(cols, (obs, action, reward, next_obs, float(terminated))):
            col.append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    return tuple(np.asarray(c) for c in cols)


def repeat(step: Callable[[Batch], object], batches: Callable[[int], Batch], n: int,
           autocast: Callable[[], contextlib.AbstractContextManager]) -> Callable[[], None]:
    """A timed call: `n` steps on `batches(i)`, under a fresh autocast context."""
    def call() -> None:
        with autocast():
            for i in range(n):
                step(batches(i))
    return call


def hetrl_learner(w: Workload, fill: int, *extra: str) -> tuple[Callable, Callable, list]:
    """hetrl's `update(sample())` and `update()` on fixed batches, as `build()` makes them."""
    c = build_job(*w.overrides(*extra))
    c.envs.close()
    c.replay.add(*random_transitions(w.env_id, fill))
    fixed = [c.replay.sample(w.batch) for _ in range(16)]
    autocast = lambda: c.precision.autocast(c.platform.device)  # noqa: E731
    return (repeat(c.learner.update, lambda i: c.replay.sample(w.batch), w.updates, autocast),
            repeat(c.learner.update, lambda i: fixed[i % 16], w.updates, autocast), fixed)


def sb3_model(w: Workload, learning_starts: int):
    """The SB3 model with the hyperparameters of hetrl's composed config."""
    from stable_baselines3 import DDPG, DQN
    from stable_baselines3.common.noise import NormalActionNoise

    a = job_config(*w.overrides())[0].algo
    common = dict(learning_rate=float(a.lr), buffer_size=w.buffer_size,
                  learning_starts=learning_starts, batch_size=w.batch, gamma=float(a.gamma),
                  train_freq=w.train_freq, gradient_steps=1,
                  policy_kwargs=dict(net_arch=w.hidden), device="cpu", seed=0, verbose=0)
    env = gym.make(w.env_id)
    if w.algo == "dqn":  # hetrl counts target_update_interval in updates, SB3 in env steps
        return DQN("MlpPolicy", env, target_update_interval=a.target_update_interval * w.train_freq,
                   exploration_fraction=a.exploration_fraction,
                   exploration_initial_eps=a.exploration_initial_eps,
                   exploration_final_eps=a.exploration_final_eps,
                   max_grad_norm=a.max_grad_norm, **common)
    act_dim = env.action_space.shape[0]
    noise = NormalActionNoise(np.zeros(act_dim), float(a.noise_std) * np.ones(act_dim))
    return DDPG("MlpPolicy", env, tau=float(a.tau), action_noise=noise, **common)


def sb3_learner(w: Workload, fill: int) -> Callable[[], None]:
    model = sb3_model(w, learning_starts=fill)
    model.learn(total_timesteps=fill)  # fills the buffer; no update yet
    assert model._n_updates == 0 and model.replay_buffer.size() == fill
    return lambda: model.train(gradient_steps=w.updates, batch_size=w.batch)


def mlp(sizes: list[int], out: nn.Module | None = None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU()]
    return nn.Sequential(*layers[:-1], *([out] if out else []))


def plain_dqn(obs: int, actions: int, hidden: list[int], fused: bool) -> Callable[[Batch], None]:
    q = mlp([obs, *hidden, actions])
    q_target = copy.deepcopy(q).requires_grad_(False)
    opt = torch.optim.Adam(q.parameters(), lr=1e-3, fused=fused)

    def step(b: Batch) -> None:
        with torch.no_grad():
            target = b.rewards + 0.99 * (1.0 - b.dones) * q_target(b.next_obs).max(1).values
        loss = F.smooth_l1_loss(q(b.obs).gather(1, b.actions.view(-1, 1)).squeeze(1), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(q.parameters(), 10.0)
        opt.step()
    return step


def plain_ddpg(obs: int, act: int, hidden: list[int], fused: bool,
               scale: float) -> Callable[[Batch], None]:
    actor, critic = mlp([obs, *hidden, act], nn.Tanh()), mlp([obs + act, *hidden, 1])
    actor_t, critic_t = (copy.deepcopy(m).requires_grad_(False) for m in (actor, critic))
    actor_opt, critic_opt = (torch.optim.Adam(m.parameters(), lr=1e-3, fused=fused)
                             for m in (actor, critic))
    online = [list(m.parameters()) for m in (actor, critic)]
    targets = [list(m.parameters()) for m in (actor_t, critic_t)]

    def step(b: Batch) -> None:
        with torch.no_grad():
            next_q = critic_t(torch.cat([b.next_obs, actor_t(b.next_obs) * scale], 1))
            target = b.rewards + 0.99 * (1.0 - b.dones) * next_q.squeeze(1)
        critic_loss = F.mse_loss(critic(torch.cat([b.obs, b.actions], 1)).squeeze(1), target)
        critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_opt.step()
        actor_loss = -critic(torch.cat([b.obs, actor(b.obs) * scale], 1)).mean()
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_opt.step()
        with torch.no_grad():
            for t, o in zip(targets, online):
                torch._foreach_lerp_(t, o, 0.005)
    return step


def plain(w: Workload, fixed: list[Batch], fused: bool, bf16: bool) -> Callable[[], None]:
    env = gym.make(w.env_id)
    obs = int(gym.spaces.flatdim(env.observation_space))
    if w.algo == "dqn":
        step = plain_dqn(obs, int(env.action_space.n), w.hidden, fused)
    else:
        scale = float(env.action_space.high[0] - env.action_space.low[0]) / 2
        step = plain_ddpg(obs, env.action_space.shape[0], w.hidden, fused, scale)
    autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if bf16
                else contextlib.nullcontext)
    return repeat(step, lambda i: fixed[i % 16], w.updates, autocast)


def learner_rates(w: Workload, args: argparse.Namespace) -> dict[str, float]:
    torch.manual_seed(0)
    np.random.seed(0)
    hetrl, hetrl_update, fixed = hetrl_learner(w, args.fill)
    best, best_update, _ = hetrl_learner(w, args.fill, *(["precision=bf16"] * (w.algo == "ddpg")))
    contenders = {
        "hetrl": (hetrl, 1), "hetrl_update_only": (hetrl_update, 1),
        "sb3": (sb3_learner(w, args.fill), 1),
        "plain_default": (plain(w, fixed, fused=False, bf16=False), 1),
        "plain_fused": (plain(w, fixed, fused=True, bf16=False), 1),
        "hetrl_best": (best, args.threads), "hetrl_best_update_only": (best_update, args.threads),
        "plain_best": (plain(w, fixed, fused=True, bf16=w.algo == "ddpg"), args.threads),
    }
    seconds = median_seconds(contenders, args.repeats, args.min_run_time)
    rates = {name: w.updates / s for name, s in seconds.items()}
    return {**rates, "limit": max(rates["plain_default"], rates["plain_fused"])}


# ---- end to end ----------------------------------------------------------------------------


def loop_figures(metrics: dict[str, float], steps: int) -> dict:
    """env steps/s, updates/s, loop seconds and phase seconds of a job's final metrics."""
    loop_s = steps / metrics["sps"]
    return {"sps": metrics["sps"], "updates": metrics["updates"], "loop_s": loop_s,
            "ups": metrics["updates"] / loop_s,
            "phases": {k[6:-2]: v for k, v in metrics.items()
                       if k.startswith("phase/") and k.endswith("_s")}}


def end_to_end(w: Workload, store: Path) -> tuple[dict, dict, list[dict]]:
    """SB3's `learn()`, hetrl's job at 1 thread, and the "best" candidates as one sweep."""
    model = sb3_model(w, w.learning_starts)
    start = time.perf_counter()
    model.learn(total_timesteps=w.steps)
    wall = time.perf_counter() - start
    sb3 = {"sps": model.num_timesteps / wall, "updates": model._n_updates,
           "ups": model._n_updates / wall, "loop_s": wall}
    start = time.perf_counter()
    hetrl = loop_figures(run_job(store, *w.overrides()), w.steps)
    hetrl["run_s"] = time.perf_counter() - start
    torch.set_num_threads(1)
    runs = sweep(store, *w.overrides(*w.candidates))
    candidates = [{**loop_figures(r.data.metrics, w.steps), "threads": r.data.params["platform.threads"],
                   "setting": f"{r.data.tags['precision']}, {r.data.params['env.n_envs']} env"}
                  for r in runs]
    return sb3, hetrl, candidates


# ---- report ---------------------------------------------------------------------------------


def report(results: list, args: argparse.Namespace, checks: list[str], total: float) -> None:
    print(f"\n## hetrl vs Stable-Baselines3 (measured on this host, in this run; learner: median "
          f"of {args.repeats} interleaved Timer rounds; end to end: one run each)")
    rows = []
    for w, _, sb3, hetrl, candidates in results:
        rows += [(w.name, "SB3 `learn()`", 1, "fp32, 1 env", num(sb3["sps"]), num(sb3["ups"]),
                  f"{sb3['updates']:.0f}", "1.00x"),
                 (w.name, "hetrl", 1, "fp32, 1 env", num(hetrl["sps"]), num(hetrl["ups"]),
                  f"{hetrl['updates']:.0f}", ratio(hetrl["sps"], sb3["sps"]))]
        rows += [(w.name, "hetrl candidate" + (" **(best)**" if c is best(candidates) else ""),
                  c["threads"], c["setting"], num(c["sps"]), num(c["ups"]), f"{c['updates']:.0f}",
                  ratio(c["sps"], sb3["sps"])) for c in candidates]
    table(["workload", "contender", "threads", "setting", "env steps/s", "updates/s", "updates",
           "vs SB3 (env steps/s)"], rows, "### End to end (env steps/s of the training loop)")

    contenders = (("sb3", "SB3 `train()`", 1, "limit"),
                  ("hetrl", "hetrl `update(sample())`", 1, "limit"),
                  ("hetrl_update_only", "hetrl `update()` only", 1, "limit"),
                  ("plain_default", "plain PyTorch, Adam default", 1, "limit"),
                  ("plain_fused", "plain PyTorch, Adam fused", 1, "limit"),
                  ("hetrl_best", "hetrl best `update(sample())`", args.threads, "plain_best"),
                  ("hetrl_best_update_only", "hetrl best `update()` only", args.threads, "plain_best"),
                  ("plain_best", "plain PyTorch best, Adam fused", args.threads, "plain_best"))
    table(["workload", "contender", "threads", "updates/s", "ms/update", "vs SB3", "of limit"],
          [(w.name, label + (" (bf16)" if "best" in key and w.algo == "ddpg" else ""), threads,
            num(lr[key]), f"{1000 / lr[key]:.2f}", ratio(lr[key], lr["sb3"]),
            f"{100 * lr[key] / lr[limit]:.0f}%")
           for w, lr, *_ in results for key, label, threads, limit in contenders],
          "### Learner only (updates/s; 'limit' = the faster plain-PyTorch update at 1 thread; "
          "best rows against plain PyTorch at the same setting)")

    names = sorted({n for *_, hetrl, cands in results for r in (hetrl, best(cands))
                    for n in r["phases"]})
    table(["workload", "run", "loop s", *names, "other"],
          [(w.name, label, f"{r['loop_s']:.1f}",
            *(f"{r['phases'].get(n, 0):.2f} ({100 * r['phases'].get(n, 0) / r['loop_s']:.0f}%)"
              for n in names), f"{r['loop_s'] - sum(r['phases'].values()):.2f}")
           for w, *_, hetrl, cands in results for label, r in (("1 thread", hetrl),
                                                               ("best", best(cands)))],
          "### hetrl phases, end to end (seconds of the training loop; `phase/<name>_s`)")

    rows = []
    for w, lr, sb3, _, candidates in results:
        top, need = best(candidates), 1.3 if w.algo == "dqn" else 1.0
        update, sampled = lr["hetrl_update_only"] / lr["limit"], lr["hetrl"] / lr["limit"]
        rows += [(f"{w.name}: hetrl best >= 2x SB3 env steps/s",
                  f"{ratio(top['sps'], sb3['sps'])} ({top['threads']} threads, {top['setting']})",
                  verdict(top["sps"] >= 2 * sb3["sps"])),
                 (f"{w.name}: hetrl learner >= {need}x SB3 (1 thread)",
                  ratio(lr["hetrl"], lr["sb3"]), verdict(lr["hetrl"] >= need * lr["sb3"])),
                 (f"{w.name}: hetrl best learner vs SB3 (1 thread), for reference",
                  ratio(lr["hetrl_best"], lr["sb3"]), "-"),
                 (f"{w.name}: hetrl learner within 10% of plain PyTorch (1 thread)",
                  f"update only {100 * update:.0f}%, with sampling {100 * sampled:.0f}%",
                  f"{verdict(update >= 0.9)} (update) / {verdict(sampled >= 0.9)} (sampling)")]
    table(["goal", "measured", "status"], rows, "### Goals")
    print("\nHost checks (start, after each workload): " + "; ".join(checks))
    print(f"Total benchmark time: {total:.0f} s.")


def best(candidates: list[dict]) -> dict:
    return max(candidates, key=lambda c: c["sps"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller budgets, fewer repeats")
    parser.add_argument("--smoke", action="store_true", help="seconds: tiny budgets, 1 round")
    parser.add_argument("--only", choices=("dqn", "ddpg", "both"), default="both")
    parser.add_argument("--dqn-steps", type=int, help="default 20000 (quick 6000)")
    parser.add_argument("--ddpg-steps", type=int, help="default 3000 (quick 800)")
    parser.add_argument("--dqn-learning-starts", type=int, default=1000)
    parser.add_argument("--ddpg-learning-starts", type=int, default=300)
    parser.add_argument("--dqn-updates", type=int, default=50, help="updates per timed call")
    parser.add_argument("--ddpg-updates", type=int, default=10, help="updates per timed call")
    parser.add_argument("--repeats", type=int, help="interleaved Timer rounds (5; quick 3)")
    parser.add_argument("--min-run-time", type=float, help="seconds per contender and round")
    parser.add_argument("--fill", type=int, default=5000, help="transitions in the replays")
    parser.add_argument("--omp-passive", action="store_true",
                        help="set OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep)")
    args = parser.parse_args()
    mode = args.mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    pick = {"full": 0, "quick": 1, "smoke": 2}[mode]
    args.threads = 1 if args.smoke else 2  # of the "best" learner contenders
    args.dqn_steps = args.dqn_steps or (20000, 6000, 300)[pick]
    args.ddpg_steps = args.ddpg_steps or (3000, 800, 120)[pick]
    args.repeats = args.repeats or (5, 3, 1)[pick]
    args.min_run_time = args.min_run_time or (0.5, 0.2, 0.01)[pick]
    if args.smoke:
        args.dqn_learning_starts, args.ddpg_learning_starts, args.fill = 100, 60, 300
        args.dqn_updates, args.ddpg_updates = 2, 2

    torch.set_num_threads(1)
    start = time.perf_counter()
    print(host_line("numpy", "gymnasium", "stable_baselines3"))
    print(f"mode: {mode}; {args.repeats} Timer rounds of >= {args.min_run_time} s; fill "
          f"{args.fill}; OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    checks, results = [core_check()], []
    with tempfile.TemporaryDirectory() as tmp:
        for w in workloads(args):
            print(f"\n== {w.name}: {' '.join(w.overrides())}", flush=True)
            lr = learner_rates(w, args)
            print("   learner: " + ", ".join(f"{k} {num(v)}/s" for k, v in lr.items()), flush=True)
            sb3, hetrl, candidates = end_to_end(w, Path(tmp))
            print(f"   end to end: SB3 {num(sb3['sps'])}, hetrl {num(hetrl['sps'])} env steps/s "
                  f"(run() {hetrl['run_s']:.1f} s), candidates "
                  + ", ".join(num(c["sps"]) for c in candidates), flush=True)
            checks.append(core_check())
            results.append((w, lr, sb3, hetrl, candidates))
    report(results, args, checks, time.perf_counter() - start)


if __name__ == "__main__":
    main()
