"""One ActorQ actor: its own envs, a quantized copy of the policy, and the runtime breakdown.

The same `ActorWorker` runs in an OS process (hetrl.actors.process) or a Ray actor
(hetrl.actors.ray): the learner hands it a message and a number of steps; it pulls the
message in (deserialize, load_state_dict into its fp32 shadow, quantize), steps its envs with
the quantized policy and hands back the transitions and its timings.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from time import perf_counter
from typing import Callable

import gymnasium as gym
import numpy as np
import torch

from hetrl.actors.acting import env_step
from hetrl.actors.shared import unflatten_into
from hetrl.actors.worker_logs import log
from hetrl.actors.weights import deserialize
from hetrl.algos.base import Learner
from hetrl.compiled.acting import compiled_policy
from hetrl.quant import QuantSpec, load_into, quantize_policy
from hetrl.runtime import configure_torch
from hetrl.seeding import seed_everything
from hetrl.timing import PhaseTimer

STATS = ("step_s", "env_s", "pull_s", "deserialize_s", "load_state_dict_s", "comm_bytes", "pulls",
         "steps")
"""Per-actor totals: inference, env stepping, the three parts of a pull (QuaRL A.1.7), the
bytes pulled, the pulls and the env steps taken."""


@dataclass
class Chunk:
    """What an actor hands back: `steps` vector-env steps of transitions, shaped
    (steps, n_envs, ...), the returns of the episodes that ended, and its timings."""

    rank: int
    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray  # the true last observation where an episode ended
    terminated: np.ndarray
    truncated: np.ndarray
    returns: np.ndarray
    stats: dict[str, float] = field(default_factory=dict)


def cpu_copy(learner: Learner) -> Learner:
    """A copy of the learner with every tensor on the CPU (quantized kernels are CPU-only)."""
    buffer = io.BytesIO()
    torch.save(learner, buffer)
    buffer.seek(0)
    copy: Learner = torch.load(buffer, map_location="cpu", weights_only=False)
    for module in copy.modules():
        if hasattr(module, "device"):
            module.device = torch.device("cpu")
    return copy


class ActorWorker:
    """Actor `rank` of `n_actors`, seeded from seed + rank, on one torch thread."""

    def __init__(self, rank: int, n_actors: int, learner: Learner,
                 make_envs: Callable[[], gym.vector.VectorEnv], seed: int,
                 spec: QuantSpec) -> None:
        configure_torch(1)
        seed_everything(seed + rank)
        self.rank, self.n_actors, self.spec = rank, n_actors, spec
        self.learner = learner
        if hasattr(learner, "for_actor"):  # exploration of this actor's own (D4PG's σ_k)
            learner.for_actor(rank, n_actors)
        self.shadow = learner.policy()  # fp32: what the received state dict loads into
        self.policy = quantize_policy(self.shadow, spec) if spec.quantized else self.shadow
        # what the envs are stepped with: the policy's forward compiled where `compile` chose
        # it at build (the kernels cached there); pulls load into `policy` in place
        self.acting = compiled_policy(self.policy) if learner.compile_acting else self.policy
        self.weights = None  # scheduler=pearl's shared double buffer, once handed over
        self.version = -1  # the version loaded from it
        self.envs = make_envs()
        self.obs, _ = self.envs.reset(seed=seed + rank)
        self.envs.action_space.seed(seed + rank)

    def load(self, payload: bytes) -> dict[str, float]:
        """Deserialize a message and make it the acting policy; returns the timings."""
        start = perf_counter()
        state_dict = deserialize(payload)
        loaded = perf_counter()
        self.shadow.load_state_dict(state_dict)
        if self.spec.quantized:  # repacking into quantized layers: part of the load
            load_into(self.policy, self.shadow)
        done = perf_counter()
        return {"deserialize_s": loaded - start, "load_state_dict_s": done - loaded,
                "comm_bytes": float(len(payload))}

    def load_shared(self) -> dict[str, float]:
        """Load the newest whole version of the shared double buffer if it is newer than the
        acting one (a version-tag read, no message); returns the timings."""
        if self.weights.newest() <= self.version:
            return {}
        start = perf_counter()
        got = self.weights.read()
        if got is None or got[0] <= self.version:
            return {}
        self.version, flat = got
        loaded = perf_counter()
        unflatten_into(self.shadow, flat)
        if self.spec.quantized:
            load_into(self.policy, self.shadow)
        return {"deserialize_s": loaded - start, "load_state_dict_s": perf_counter() - loaded,
                "comm_bytes": float(flat.numel() * 4), "pulls": 1.0}

    def collect(self, payload: bytes | None, steps: int, step: int, pull_s: float) -> Chunk:
        """Pull `payload` (it took `pull_s` to arrive; None: the weights have not changed),
        then take `steps` vector-env steps; `step` is the learner's env-step count, from
        which exploration schedules go on. With the shared double buffer, a version published
        while the chunk runs is loaded before the next vector step: a chunk's length does not
        delay the weights an actor acts with."""
        log.info("chunk of %d steps at step %d%s", steps, step,
                 " with new weights" if payload is not None else "")
        stats = dict.fromkeys(STATS, 0.0)
        stats["steps"] = float(steps * self.envs.num_envs)
        if isinstance(payload, (bytes, bytearray)):
            stats.update(self.load(payload), pull_s=pull_s, pulls=1.0)
        elif payload is not None:  # a shared double buffer: read from it from now on
            self.weights = payload
        if self.weights is not None:
            stats["pull_s"] = pull_s
        envs, learner = self.envs, self.learner
        columns: list[list[np.ndarray]] = [[] for _ in range(6)]
        returns: list[np.ndarray] = []
        phases: dict[str, float] = {}
        timer = PhaseTimer(phases)
        with learner.acting_with(self.acting):
            for i in range(steps):
                if self.weights is not None:
                    for key, value in self.load_shared().items():
                        stats[key] += value
                taken = env_step(envs, learner, self.obs,
                                 step + i * envs.num_envs * self.n_actors, timer)
                returns.append(taken.returns)
                for column, value in zip(columns, taken.transitions):
                    column.append(value)
                self.obs = taken.next_obs
        stats["step_s"], stats["env_s"] = phases.get("act", 0.0), phases.get("env", 0.0)
        return Chunk(self.rank, *(np.stack(c) for c in columns),
                     returns=np.concatenate(returns) if returns else np.zeros(0), stats=stats)

    def close(self) -> None:
        self.envs.close()
