"""hetrl vs Stable-Baselines3: env steps/s and learner updates/s, measured side by side.

Run from the repository root:

    python benchmarks/vs_sb3.py            # full run, about 5 minutes on 2 cores
    python benchmarks/vs_sb3.py --quick    # about 1 minute, smaller budgets, fewer repeats

What it measures, all in this one process on this host (nothing is copied from elsewhere):

Two workloads, with the same algorithm, env, network, batch size, train_freq, gradient_steps,
learning_starts, buffer size and step budget in both libraries:

- DQN  CartPole-v1: batch 64,  hidden [256, 256], train_freq 4, gradient_steps 1
- DDPG Pendulum-v1: batch 256, hidden [400, 300], train_freq 1, gradient_steps 1

1. Learner only. Each library's replay buffer is filled with a few thousand random-action
   transitions, then N gradient updates are timed after a warm-up, R times, interleaving the
   contenders so that drift on a noisy host hits them alike; the median is reported.
   - hetrl: `learner.update(replay.sample(batch))` on the learner and replay the hetrl config
     builds (`hydra.utils.instantiate` of the composed `algo` / `replay`); also the update
     alone on pre-sampled batches ("update only").
   - SB3: `model.train(gradient_steps=N, batch_size=B)` after `model.learn` has just filled the
     buffer (learning_starts = fill, so no update happened yet).
   - "limit": a hand-written plain-PyTorch update on the same networks and batch size, on
     pre-sampled batches (DQN: target net, Huber loss, grad-norm clip 10, Adam; DDPG: critic MSE,
     actor loss, Polyak averaging), with torch's default Adam and with the fused one; the faster
     is the limit. hetrl's learner is reported as a fraction of it.
   All at `torch.set_num_threads(1)` (SB3's reference numbers are 1 thread), plus hetrl's best
   learner setting (2 threads; bf16 autocast for DDPG) against the same-setting limit.

2. End to end. The same step budget and learning_starts in both.
   - hetrl through its real entry: the config composed with Hydra's compose API exactly as
     `python -m hetrl <overrides>` would, then `hetrl.experiment.run(cfg, choices, tmp_dir)`.
     Its env steps/s is the loop's own `sps` metric (training loop only); the wall time of the
     whole `run()` (build, loop, final checkpoint, plot) is printed beside it.
   - SB3: the model is built, then `model.learn(total_timesteps=steps)` is timed.
   - "hetrl best": the same algorithm and budget on both cores (`platform.threads=2`), with bf16
     for DDPG, and candidates with `env.n_envs=4` (train_freq counts env steps across all envs,
     so updates per env step stay equal). Each candidate is run; the fastest is "best".

Shared-host guards: a "host check" times a matmul at 1 and 2 threads (a busy second core
makes 2-thread OpenMP runs 10x+ slower; such figures are flagged); a "best" candidate is
stopped (as Ctrl-C stops a job) after --timeout-factor x the 1-thread hetrl loop time and
reported as ABORTED, never as a rate; candidates past --budget seconds are skipped.
`--omp-passive` sets OMP_WAIT_POLICY=PASSIVE before torch loads, to compare.

Goals (from the issue) the last table checks: hetrl best >= 2x SB3 env steps/s; learner
>= 1.3x SB3 (DQN) and >= 1.0x (DDPG); hetrl learner within 10% of the plain-PyTorch limit.
The host is shared and noisy (±15% run to run): read small differences as noise.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
if "--omp-passive" in sys.argv:  # must be set before torch (and its OpenMP runtime) loads
    os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from hydra.utils import instantiate  # noqa: E402
from omegaconf import DictConfig  # noqa: E402
from torch import nn  # noqa: E402

from hetrl import experiment  # noqa: E402
from hetrl.algos.base import Batch  # noqa: E402
from hetrl.config.store import register  # noqa: E402
from hetrl.options import compose_job  # noqa: E402
from hetrl.scheduler.context import Stopped  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)


# ---- the workloads ---------------------------------------------------------------------


@dataclass
class Workload:
    name: str
    algo: str
    env: str
    env_id: str
    batch: int
    hidden: list[int]
    train_freq: int
    gradient_steps: int
    steps: int  # end-to-end env-step budget
    learning_starts: int
    buffer_size: int
    updates: int  # learner-only: updates per timed repeat
    best: list[list[str]] = field(default_factory=list)  # candidate "best" override sets

    def overrides(self, steps: int | None = None, extra: list[str] = ()) -> list[str]:
        hidden = "[" + ",".join(map(str, self.hidden)) + "]"
        return [
            f"algo={self.algo}", f"env={self.env}", f"algo.batch_size={self.batch}",
            f"algo.hidden={hidden}", f"algo.train_freq={self.train_freq}",
            f"algo.gradient_steps={self.gradient_steps}",
            f"algo.learning_starts={self.learning_starts}",
            f"algo.buffer_size={self.buffer_size}", f"steps={steps or self.steps}",
            "tracking=none", "platform.threads=1", "seed=0", *extra,
        ]


def workloads(args: argparse.Namespace) -> list[Workload]:
    dqn = Workload(
        name="DQN CartPole-v1", algo="dqn", env="cartpole", env_id="CartPole-v1", batch=64,
        hidden=[256, 256], train_freq=4, gradient_steps=1, steps=args.dqn_steps,
        learning_starts=args.dqn_learning_starts, buffer_size=100_000, updates=args.dqn_updates,
        best=[
            ["platform.threads=2", "env.n_envs=4", "algo.train_freq=4"],
            ["platform.threads=2", "env.n_envs=8", "algo.train_freq=4"],
            ["platform.threads=1", "env.n_envs=4", "algo.train_freq=4"],
        ],
    )
    ddpg = Workload(
        name="DDPG Pendulum-v1", algo="ddpg", env="pendulum", env_id="Pendulum-v1", batch=256,
        hidden=[400, 300], train_freq=1, gradient_steps=1, steps=args.ddpg_steps,
        learning_starts=args.ddpg_learning_starts, buffer_size=200_000,
        updates=args.ddpg_updates,
        best=[
            ["platform.threads=2", "precision=bf16"],
            ["platform.threads=1", "precision=bf16"],  # immune to a busy second core
            ["platform.threads=2", "precision=bf16", "env.n_envs=4", "algo.train_freq=1"],
        ],
    )
    chosen = {"dqn": [dqn], "ddpg": [ddpg], "both": [dqn, ddpg]}[args.only]
    return chosen


# ---- hetrl through its config ----------------------------------------------------------


def random_transitions(env_id: str, n: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    """n transitions of a random policy, the true last obs stored at episode ends."""
    env = gym.make(env_id)
    env.action_space.seed(seed)
    obs, _ = env.reset(seed=seed)
    cols: list[list] = [[], [], [], [], []]
    for _ in range(n):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for col, value in zip(cols, (obs, action, reward, next_obs, float(terminated))):
            col.append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    return tuple(np.asarray(c) for c in cols)


class HetrlLearner:
    """hetrl's learner and replay as its config builds them, filled with `fill` transitions."""

    def __init__(self, w: Workload, fill: int, extra: list[str] = ()) -> None:
        cfg, _ = compose_job(*w.overrides(extra=list(extra)))
        envs = instantiate(cfg.env)
        spaces = {"obs_space": envs.single_observation_space,
                  "act_space": envs.single_action_space}
        envs.close()
        self.device = torch.device("cpu")
        self.learner = instantiate(cfg.algo, **spaces, device=self.device)
        self.replay = instantiate(cfg.replay, **spaces, device=self.device)
        self.replay.add(*random_transitions(w.env_id, fill))
        self.batch = w.batch
        precision = instantiate(cfg.precision)
        if hasattr(precision, "apply"):  # as experiment.run does (a no-op for fp32 / bf16)
            precision.apply(self.learner, None, None, None)
        self.autocast = precision.autocast(self.device)
        self.fixed = [self.replay.sample(w.batch) for _ in range(16)]

    def sample_update(self, n: int) -> None:
        with self.autocast:
            for _ in range(n):
                self.learner.update(self.replay.sample(self.batch))

    def update_only(self, n: int) -> None:
        with self.autocast:
            for i in range(n):
                self.learner.update(self.fixed[i % 16])


# ---- Stable-Baselines3 ------------------------------------------------------------------


def sb3_model(w: Workload, cfg: DictConfig, learning_starts: int, total_steps: int):
    """The SB3 model with the hyperparameters hetrl's composed config has."""
    from stable_baselines3 import DDPG, DQN
    from stable_baselines3.common.noise import NormalActionNoise

    a = cfg.algo
    common = dict(
        learning_rate=float(a.lr), buffer_size=int(a.buffer_size),
        learning_starts=learning_starts, batch_size=int(a.batch_size), gamma=float(a.gamma),
        train_freq=int(a.train_freq), gradient_steps=int(a.gradient_steps),
        policy_kwargs=dict(net_arch=list(a.hidden)), device="cpu", seed=0, verbose=0,
    )
    env = gym.make(w.env_id)
    if w.algo == "dqn":
        # hetrl counts target_update_interval in gradient updates, SB3 in env steps
        interval = int(a.target_update_interval) * int(a.train_freq) // max(1, a.gradient_steps)
        model = DQN(
            "MlpPolicy", env, target_update_interval=interval,
            exploration_fraction=float(a.exploration_fraction),
            exploration_initial_eps=float(a.exploration_initial_eps),
            exploration_final_eps=float(a.exploration_final_eps),
            max_grad_norm=float(a.max_grad_norm), **common,
        )
    else:
        act_dim = env.action_space.shape[0]
        noise = NormalActionNoise(np.zeros(act_dim), float(a.noise_std) * np.ones(act_dim))
        model = DDPG("MlpPolicy", env, tau=float(a.tau), action_noise=noise, **common)
    return model


class SB3Learner:
    def __init__(self, w: Workload, fill: int) -> None:
        cfg, _ = compose_job(*w.overrides())
        self.model = sb3_model(w, cfg, learning_starts=fill, total_steps=fill)
        self.model.learn(total_timesteps=fill)  # fills the buffer; learning_starts = fill
        assert self.model._n_updates == 0 and self.model.replay_buffer.size() == fill
        self.batch = w.batch

    def train(self, n: int) -> None:
        self.model.train(gradient_steps=n, batch_size=self.batch)


# ---- the plain-PyTorch limit -------------------------------------------------------------


def _mlp(sizes: list[int], out: type[nn.Module] | None = None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    if out is not None:
        layers.append(out())
    return nn.Sequential(*layers)


class PlainDQN:
    def __init__(self, obs_dim: int, n_actions: int, hidden: list[int], fused: bool,
                 batches: list[Batch], autocast: contextlib.AbstractContextManager) -> None:
        self.q = _mlp([obs_dim, *hidden, n_actions])
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.opt = torch.optim.Adam(self.q.parameters(), lr=1e-3, fused=fused)
        self.batches, self.autocast, self.gamma = batches, autocast, 0.99

    def step(self, b: Batch) -> None:
        with torch.no_grad():
            next_v = self.q_target(b.next_obs).max(dim=1).values
            target = b.rewards + self.gamma * (1.0 - b.terminated) * next_v
        q = self.q(b.obs).gather(1, b.actions.view(-1, 1)).squeeze(1)
        loss = F.smooth_l1_loss(q, target)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
        self.opt.step()

    def run(self, n: int) -> None:
        with self.autocast:
            for i in range(n):
                self.step(self.batches[i % len(self.batches)])


class PlainDDPG:
    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], fused: bool,
                 batches: list[Batch], autocast: contextlib.AbstractContextManager,
                 scale: float) -> None:
        self.actor = _mlp([obs_dim, *hidden, act_dim], nn.Tanh)
        self.critic = _mlp([obs_dim + act_dim, *hidden, 1])
        self.actor_t = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic_t = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=1e-3, fused=fused)
        self.critic_opt = torch.optim.Adam(self.critic.parameters(), lr=1e-3, fused=fused)
        self.params = [list(m.parameters()) for m in (self.actor, self.critic)]
        self.targets = [list(m.parameters()) for m in (self.actor_t, self.critic_t)]
        self.batches, self.autocast, self.scale = batches, autocast, scale
        self.gamma, self.tau = 0.99, 0.005

    def step(self, b: Batch) -> None:
        with torch.no_grad():
            next_a = self.actor_t(b.next_obs) * self.scale
            next_q = self.critic_t(torch.cat([b.next_obs, next_a], 1)).squeeze(1)
            target = b.rewards + self.gamma * (1.0 - b.terminated) * next_q
        q = self.critic(torch.cat([b.obs, b.actions], 1)).squeeze(1)
        critic_loss = F.mse_loss(q, target)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        actor_loss = -self.critic(torch.cat([b.obs, self.actor(b.obs) * self.scale], 1)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        with torch.no_grad():
            for target, online in zip(self.targets, self.params):
                torch._foreach_lerp_(target, online, self.tau)

    def run(self, n: int) -> None:
        with self.autocast:
            for i in range(n):
                self.step(self.batches[i % len(self.batches)])


def plain(w: Workload, batches: list[Batch], fused: bool, bf16: bool) -> Callable[[int], None]:
    env = gym.make(w.env_id)
    obs_dim = int(gym.spaces.flatdim(env.observation_space))
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16) if bf16
                else contextlib.nullcontext())
    if w.algo == "dqn":
        model = PlainDQN(obs_dim, int(env.action_space.n), w.hidden, fused, batches, autocast)
    else:
        scale = float((env.action_space.high[0] - env.action_space.low[0]) / 2)
        model = PlainDDPG(obs_dim, env.action_space.shape[0], w.hidden, fused, batches,
                          autocast, scale)
    env.close()
    return model.run


# ---- timing ----------------------------------------------------------------------------


def timed_rates(contenders: dict[str, tuple[int, Callable[[int], None]]], n: int,
                repeats: int, warmup: int) -> dict[str, float]:
    """Median updates/s of each contender; repeats interleaved. contender: (threads, fn)."""
    for threads, fn in contenders.values():
        torch.set_num_threads(threads)
        fn(warmup)
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, (threads, fn) in contenders.items():
            torch.set_num_threads(threads)
            start = time.perf_counter()
            fn(n)
            rates[name].append(n / (time.perf_counter() - start))
    torch.set_num_threads(1)
    return {name: statistics.median(r) for name, r in rates.items()}


def learner_bench(w: Workload, args: argparse.Namespace) -> dict[str, float]:
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    hetrl = HetrlLearner(w, args.fill)
    hetrl_best = HetrlLearner(w, args.fill, ["precision=bf16"] if w.algo == "ddpg" else [])
    sb3 = SB3Learner(w, args.fill)
    bf16 = w.algo == "ddpg"
    contenders = {
        "hetrl": (1, hetrl.sample_update),
        "hetrl_update_only": (1, hetrl.update_only),
        "sb3": (1, sb3.train),
        "plain_default": (1, plain(w, hetrl.fixed, fused=False, bf16=False)),
        "plain_fused": (1, plain(w, hetrl.fixed, fused=True, bf16=False)),
        "hetrl_best": (2, hetrl_best.sample_update),
        "hetrl_best_update_only": (2, hetrl_best.update_only),
        "plain_best": (2, plain(w, hetrl.fixed, fused=True, bf16=bf16)),
    }
    n = w.updates
    rates = timed_rates(contenders, n, args.repeats, warmup=max(10, n // 5))
    rates["limit"] = max(rates["plain_default"], rates["plain_fused"])
    return rates


def hetrl_e2e(w: Workload, extra: list[str], timeout_s: float | None = None) -> dict:
    """One job through `experiment.run`. Past `timeout_s` it is stopped the way Ctrl-C stops
    it (SIGTERM -> the loop stops at the next step) and its rate so far is returned."""
    cfg, choices = compose_job(*w.overrides(extra=extra))
    torch.manual_seed(0)
    previous = signal.signal(signal.SIGTERM, lambda *_: None)  # a late timer does no harm
    timer = None
    if timeout_s is not None:
        timer = threading.Timer(timeout_s, os.kill, (os.getpid(), signal.SIGTERM))
        timer.daemon = True
    try:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            if timer is not None:
                timer.start()
            try:
                metrics = experiment.run(cfg, choices, Path(out))
            except Stopped as stopped:  # "stopped at step N"
                wall = time.perf_counter() - start
                step = int(str(stopped).rsplit(" ", 1)[-1])
                return {"sps": step / wall, "updates": float("nan"), "ups": float("nan"),
                        "loop_s": wall, "run_wall_s": wall, "phases": {}, "steps": step,
                        "aborted": f"stopped after {wall:.0f} s at step {step}"}
            wall = time.perf_counter() - start
    finally:
        if timer is not None:
            timer.cancel()
        signal.signal(signal.SIGTERM, previous)
        torch.set_num_threads(1)
    loop_s = cfg.steps / metrics["sps"]
    phases = {k[len("phase/"):-2]: v for k, v in metrics.items()
              if k.startswith("phase/") and k.endswith("_s")}
    return {"sps": metrics["sps"], "updates": metrics["updates"],
            "ups": metrics["updates"] / loop_s, "loop_s": loop_s, "run_wall_s": wall,
            "phases": phases, "steps": cfg.steps, "aborted": ""}


def sb3_e2e(w: Workload) -> dict[str, float]:
    torch.set_num_threads(1)
    cfg, _ = compose_job(*w.overrides())
    model = sb3_model(w, cfg, learning_starts=w.learning_starts, total_steps=w.steps)
    start = time.perf_counter()
    model.learn(total_timesteps=w.steps)
    wall = time.perf_counter() - start
    return {"sps": model.num_timesteps / wall, "updates": model._n_updates,
            "ups": model._n_updates / wall, "loop_s": wall}


def probe_cores(seconds: float = 0.3) -> dict[str, float]:
    """How much a second intra-op thread helps right now: matmuls/s at 1 and 2 threads.

    On a shared host another process on the second core turns 2-thread (OpenMP) runs
    into waits of a scheduler slice per parallel region; this says when that happens.
    """
    a, b = torch.randn(384, 384), torch.randn(384, 384)
    rates = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        a @ b
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            a @ b
            n += 1
        rates[threads] = n / (time.perf_counter() - start)
    torch.set_num_threads(1)
    return {"speedup_2t": rates[2] / rates[1], "load1": os.getloadavg()[0]}


LEARNER_PROBES: dict[str, tuple[dict[str, float], ...]] = {}


def probe_text(p: dict[str, float]) -> str:
    note = "" if p["speedup_2t"] >= 1.3 else "  <-- second core busy: 2-thread figures suffer"
    return f"2-thread matmul speedup {p['speedup_2t']:.2f}x, load average {p['load1']:.2f}{note}"


# ---- report ----------------------------------------------------------------------------


def say(*parts: object) -> None:
    print(*parts, flush=True)


def fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="about 1 minute: smaller budgets, fewer repeats, first 'best' only")
    parser.add_argument("--only", choices=("dqn", "ddpg", "both"), default="both")
    parser.add_argument("--dqn-steps", type=int, default=None, help="default 20000 (quick 6000)")
    parser.add_argument("--ddpg-steps", type=int, default=None, help="default 3000 (quick 800)")
    parser.add_argument("--dqn-learning-starts", type=int, default=1000)
    parser.add_argument("--ddpg-learning-starts", type=int, default=300)
    parser.add_argument("--dqn-updates", type=int, default=None,
                        help="updates per timed repeat (default 400, quick 200)")
    parser.add_argument("--ddpg-updates", type=int, default=None,
                        help="updates per timed repeat (default 80, quick 40)")
    parser.add_argument("--repeats", type=int, default=None, help="default 5 (quick 3)")
    parser.add_argument("--fill", type=int, default=5000,
                        help="random transitions in the replay for the learner-only timing")
    parser.add_argument("--budget", type=float, default=None,
                        help="seconds after which remaining 'best' candidates are skipped "
                             "(default 330, quick 100)")
    parser.add_argument("--timeout-factor", type=float, default=1.5,
                        help="stop a 'best' candidate after this many times the 1-thread "
                             "hetrl loop time (a busy second core can slow 2 threads 10x+)")
    parser.add_argument("--min-timeout", type=float, default=20.0)
    parser.add_argument("--wait-quiet", type=float, default=10.0,
                        help="before a 2-thread candidate, wait up to this many seconds for "
                             "the second core to be free (it runs anyway after)"),
    parser.add_argument("--omp-passive", action="store_true",
                        help="set OMP_WAIT_POLICY=PASSIVE (idle OpenMP threads sleep, not spin)")
    parser.add_argument("--all-best", action="store_true",
                        help="run every 'best' candidate even with --quick")
    args = parser.parse_args()
    q = args.quick
    args.dqn_steps = args.dqn_steps or (6000 if q else 20000)
    args.ddpg_steps = args.ddpg_steps or (800 if q else 3000)
    args.dqn_updates = args.dqn_updates or (200 if q else 400)
    args.ddpg_updates = args.ddpg_updates or (40 if q else 80)
    args.repeats = args.repeats or (3 if q else 5)
    args.budget = args.budget or (100.0 if q else 330.0)

    register()
    torch.set_num_threads(1)
    import stable_baselines3

    t_start = time.perf_counter()
    say(f"host: {platform.processor() or platform.machine()}, {os.cpu_count()} cpus; "
        f"torch {torch.__version__}, SB3 {stable_baselines3.__version__}, "
        f"numpy {np.__version__}, gymnasium {gym.__version__}; python {platform.python_version()}")
    say(f"mode: {'quick' if q else 'full'}; repeats {args.repeats}; fill {args.fill}; "
        f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    probes = [probe_cores()]
    say(f"host check at start: {probe_text(probes[0])}")

    results = []
    for w in workloads(args):
        say(f"\n== {w.name}: batch {w.batch}, hidden {w.hidden}, train_freq {w.train_freq}, "
            f"gradient_steps {w.gradient_steps}, {w.steps} steps, learning_starts "
            f"{w.learning_starts}")
        say(f"   learner only: {args.repeats} x {w.updates} updates per contender ...")
        LEARNER_PROBES[w.name] = (probe_cores(0.15),)
        lr = learner_bench(w, args)
        LEARNER_PROBES[w.name] += (probe_cores(0.15),)
        say("     host check before / after: "
            + " / ".join(probe_text(p) for p in LEARNER_PROBES[w.name]))
        for name, rate in lr.items():
            say(f"     {name:24s} {rate:9.1f} updates/s  ({1000 / rate:6.2f} ms/update)")

        say(f"   end to end, hetrl (threads 1): {' '.join(w.overrides())}")
        he = hetrl_e2e(w, [])
        say(f"     sps {he['sps']:.0f}, updates/s {he['ups']:.0f}, loop {he['loop_s']:.1f} s, "
            f"run() {he['run_wall_s']:.1f} s; phases (s): "
            + ", ".join(f"{k} {v:.2f}" for k, v in he["phases"].items()))
        say("   end to end, SB3 (threads 1) ...")
        se = sb3_e2e(w)
        say(f"     sps {se['sps']:.0f}, updates/s {se['ups']:.0f}, learn() {se['loop_s']:.1f} s, "
            f"updates {se['updates']:.0f} (hetrl {he['updates']:.0f})")

        candidates = w.best if (args.all_best or not q) else w.best[:1]
        best_runs = []
        for i, extra in enumerate(candidates):
            two_threads = "platform.threads=1" not in extra
            none_finished = not any(not r["aborted"] for r in best_runs)
            if (i > 0 and time.perf_counter() - t_start > args.budget
                    and not (none_finished and not two_threads)):
                say(f"   skipped (past the {args.budget:.0f} s budget): {' '.join(extra)}")
                continue
            if two_threads and any(r["aborted"] and r["busy"] for r in best_runs):
                say(f"   skipped (a 2-thread candidate already aborted on a busy second core): "
                    f"{' '.join(extra)}")
                continue
            say(f"   end to end, hetrl best candidate: {' '.join(extra)} ...")
            limit_s = max(args.min_timeout, args.timeout_factor * he["loop_s"])
            probe = probe_cores(0.15)
            if two_threads:
                waited = time.perf_counter()
                while probe["speedup_2t"] < 1.3 and time.perf_counter() - waited < args.wait_quiet:
                    time.sleep(2.0)
                    probe = probe_cores(0.15)
            say(f"     host check before: {probe_text(probe)}")
            r = hetrl_e2e(w, extra, timeout_s=limit_s)
            r["extra"] = extra
            r["busy"] = two_threads and (probe["speedup_2t"] < 1.3
                                         or probe_cores(0.15)["speedup_2t"] < 1.3)
            if r["aborted"]:
                say(f"     ABORTED ({r['aborted']}; limit {limit_s:.0f} s): sps so far "
                    f"{r['sps']:.1f} (counts the update-free learning_starts steps; not used)")
            else:
                say(f"     sps {r['sps']:.0f}, updates/s {r['ups']:.0f}, updates "
                    f"{r['updates']:.0f}, loop {r['loop_s']:.1f} s; phases (s): "
                    + ", ".join(f"{k} {v:.2f}" for k, v in r["phases"].items()))
            best_runs.append(r)
        finished = [r for r in best_runs if not r["aborted"]]
        best = max(finished, key=lambda r: r["sps"]) if finished else None
        probes.append(probe_cores())
        say(f"   host check: {probe_text(probes[-1])}")
        results.append((w, lr, he, se, best, best_runs))

    total = time.perf_counter() - t_start
    probes.append(probe_cores())
    report(results, args, total, probes)


def report(results, args, total: float, probes: list[dict[str, float]]) -> None:
    say("\n## hetrl vs Stable-Baselines3 (all figures measured on this host, in this run)\n")
    say(f"Host: {os.cpu_count()} CPUs ({platform.processor() or platform.machine()}), "
        f"torch {torch.__version__}; shared and noisy, ±15% run to run. "
        f"Learner: median of {args.repeats} interleaved repeats. End to end: one run each.\n")

    say("### End to end (env steps/s = transitions collected per second of training loop)\n")
    say("| workload | contender | threads | setting | env steps/s | updates/s | updates "
        "| vs SB3 (env steps/s) |")
    say("|---|---|---|---|---|---|---|---|")
    for w, lr, he, se, best, runs in results:
        say(f"| {w.name} | SB3 `learn()` | 1 | fp32, 1 env | {fmt(se['sps'])} | {fmt(se['ups'])} "
            f"| {se['updates']:.0f} | 1.00x |")
        say(f"| {w.name} | hetrl | 1 | fp32, 1 env | {fmt(he['sps'])} | {fmt(he['ups'])} "
            f"| {he['updates']:.0f} | {he['sps'] / se['sps']:.2f}x |")
        for r in runs:
            tag = " **(best)**" if r is best else ""
            if r["busy"]:
                tag += " [2nd core busy before or after]"
            setting = " ".join(x for x in r["extra"] if not x.startswith("platform.threads"))
            threads = next((x.split("=")[1] for x in r["extra"]
                            if x.startswith("platform.threads")), "1")
            if r["aborted"]:
                say(f"| {w.name} | hetrl candidate, ABORTED ({r['aborted']}) | {threads} "
                    f"| {setting or 'fp32, 1 env'} | - | - | - | - |")
                continue
            say(f"| {w.name} | hetrl candidate{tag} | {threads} | {setting or 'fp32, 1 env'} "
                f"| {fmt(r['sps'])} | {fmt(r['ups'])} | {r['updates']:.0f} "
                f"| {r['sps'] / se['sps']:.2f}x |")

    say("\n### Learner only (updates/s; sample + update unless noted)\n")
    say("| workload | contender | threads | updates/s | ms/update | vs SB3 | of limit |")
    say("|---|---|---|---|---|---|---|")
    rows = (
        ("sb3", "SB3 `train()`", 1, "limit"),
        ("hetrl", "hetrl `update(sample())`", 1, "limit"),
        ("hetrl_update_only", "hetrl `update()` only", 1, "limit"),
        ("plain_default", "plain PyTorch, Adam default", 1, "limit"),
        ("plain_fused", "plain PyTorch, Adam fused", 1, "limit"),
        ("hetrl_best", "hetrl best `update(sample())`", 2, "plain_best"),
        ("hetrl_best_update_only", "hetrl best `update()` only", 2, "plain_best"),
        ("plain_best", "plain PyTorch best, Adam fused", 2, "plain_best"),
    )
    for w, lr, *_ in results:
        for key, label, threads, limit_key in rows:
            if w.algo == "ddpg" and "best" in key:
                label += " (bf16)"
            say(f"| {w.name} | {label} | {threads} | {fmt(lr[key])} | {1000 / lr[key]:.2f} "
                f"| {lr[key] / lr['sb3']:.2f}x | {100 * lr[key] / lr[limit_key]:.0f}% |")
    say("\n'limit' (1 thread) = the faster plain-PyTorch variant; the best rows are compared "
        "with the plain-PyTorch update at the same setting (2 threads"
        + (", bf16 autocast for DDPG" if any(w.algo == "ddpg" for w, *_ in results) else "")
        + ").")
    for w, *_ in results:
        say(f"Host check around the {w.name} learner timing (before / after): "
            + " / ".join(probe_text(p) for p in LEARNER_PROBES.get(w.name, ())))

    say("\n### hetrl phases, end to end (seconds of the training loop; `phase/<name>_s`)\n")
    names = sorted({k for _, _, he, _, best, _ in results
                    for k in {**he["phases"], **(best or he)["phases"]}})
    say("| workload | run | loop s | " + " | ".join(names) + " | other |")
    say("|---|---|---|" + "---|" * (len(names) + 1))
    for w, _, he, _, best, _ in results:
        for label, r in (("threads 1", he), ("best", best)):
            if r is None:
                continue
            other = r["loop_s"] - sum(r["phases"].values())
            say(f"| {w.name} | {label} | {r['loop_s']:.1f} | "
                + " | ".join(f"{r['phases'].get(n, 0):.2f} ({100 * r['phases'].get(n, 0) / r['loop_s']:.0f}%)"
                             for n in names)
                + f" | {other:.2f} |")

    say("\n### Goals\n")
    say("| goal | measured | status |")
    say("|---|---|---|")
    for w, lr, he, se, best, _ in results:
        if best is None:
            say(f"| {w.name}: hetrl best >= 2x SB3 env steps/s | every candidate aborted "
                f"(see host checks) | not measured |")
        else:
            ratio = best["sps"] / se["sps"]
            say(f"| {w.name}: hetrl best >= 2x SB3 env steps/s | {ratio:.2f}x "
                f"({' '.join(best['extra'])}) | {verdict(ratio >= 2.0)} |")
        need = 1.3 if w.algo == "dqn" else 1.0
        ratio = lr["hetrl"] / lr["sb3"]
        say(f"| {w.name}: hetrl learner >= {need}x SB3 (1 thread) | {ratio:.2f}x "
            f"| {verdict(ratio >= need)} |")
        best_ratio = lr["hetrl_best"] / lr["sb3"]
        say(f"| {w.name}: hetrl best learner vs SB3 (1 thread), for reference | "
            f"{best_ratio:.2f}x | - |")
        frac = lr["hetrl_update_only"] / lr["limit"]
        frac_s = lr["hetrl"] / lr["limit"]
        say(f"| {w.name}: hetrl learner within 10% of plain PyTorch (1 thread) | "
            f"update only {100 * frac:.0f}%, with sampling {100 * frac_s:.0f}% "
            f"| {verdict(frac >= 0.9)} (update) / {verdict(frac_s >= 0.9)} (with sampling) |")
    say("\nHost checks (start, after each workload, end): "
        + "; ".join(probe_text(p) for p in probes))
    say(f"\nTotal benchmark time: {total:.0f} s.")


if __name__ == "__main__":
    main()
