"""Multi-agent replay layouts: where each agent's part of a transition lives in memory.

`PerAgentListsReplay` is the MARL paper's baseline as its reference code (openai/maddpg) has
it: one Python list of tuples per agent, a batch built by a Python loop per agent.
`PerAgentReplay` is that layout in numpy: one ring per agent and per field, so a batch
gathers the same slots from every agent's arrays, N gathers per field. `JointReplay` is its key-value layout: the slot is the key and
the value one contiguous row holding every agent's fields, so a batch is one gather of rows.

Storage grows by doubling up to `capacity` (the paper's 1M transitions of 24 agents would be
tens of GB preallocated), so the ring only wraps once it has its full size.

Both take and return arrays shaped (n, n_agents, ...) with observations zero-padded to the
widest agent (hetrl.envs.mpe); the sampler (hetrl.replay.samplers) picks the slots, so any
sampler works with either layout and, for the same slots, both return the same batch.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Batch
from hetrl.config.enums import Agents
from hetrl.replay.base import as_tensors
from hetrl.replay.samplers import UniformSampler

INITIAL_ROWS = 4096

Columns = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]
"""obs (n, N, D), actions (n, N) int64, rewards (n, N), next_obs (n, N, D), terminated
(n, N)."""


class MultiAgentReplay:
    """The ring bookkeeping and sampling both layouts share; a layout stores and gathers."""

    agents = Agents.multi

    def __init__(
        self,
        capacity: int,
        obs_space: gym.spaces.Box,
        act_space: gym.spaces.MultiDiscrete,
        device: torch.device,
        sampler: UniformSampler,
    ) -> None:
        self.capacity, self.device = capacity, device
        self.n_agents, self.width = obs_space.shape
        # real features per agent: the padding has bounds [0, 0] (hetrl.envs.mpe)
        self.obs_dims = [int(d) for d in (obs_space.high > obs_space.low).sum(axis=1)]
        self.sampler = sampler  # any of hetrl.replay.samplers (UniformSampler is their base)
        self.allocated = min(capacity, INITIAL_ROWS)  # rows of storage so far
        self.pos = 0
        self.size = 0

    @classmethod
    def nbytes(cls, capacity: int, obs_space: gym.spaces.Box,
               act_space: gym.spaces.MultiDiscrete, steps: int) -> int:
        """The bytes of its storage at its largest in a run of `steps` env steps: it grows
        by doubling, so up to twice the rows stored (and `capacity` at most), and while it
        grows the old storage is kept beside the new (half of it)."""
        rows = min(capacity, max(INITIAL_ROWS, 2 * steps))
        return int(1.5 * rows * cls.row_bytes(obs_space))

    @classmethod
    def row_bytes(cls, obs_space: gym.spaces.Box) -> int:
        """The bytes of one slot (every agent's transition)."""
        raise NotImplementedError

    def __len__(self) -> int:
        return self.size

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
            next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray | None = None,
            stream: int = 0) -> np.ndarray:
        """Store one transition per env, overwriting the oldest when full; the slots written.
        `terminated` (one per env) applies to every agent; `truncated` and `stream` are
        unused (no n-step returns here)."""
        n = len(obs)
        if self.pos + n > self.allocated and self.allocated < self.capacity:
            self.allocated = min(self.capacity, max(2 * self.allocated, self.pos + n))
            self.grow(self.allocated)
        slots = (self.pos + np.arange(n)) % self.capacity
        terminated = np.broadcast_to(np.asarray(terminated, np.float32)[:, None],
                                     (n, self.n_agents))
        self.write(slots, (obs, actions, rewards, next_obs, terminated))
        self.sampler.added(slots)
        self.pos = (self.pos + n) % self.capacity
        self.size = min(self.size + n, self.capacity)
        return slots

    def sample(self, n: int) -> Batch:
        idx, weights = self.sampler.sample(n, self.size)
        columns = as_tensors(self.gather(idx), self.device)
        if weights is None:
            return Batch(*columns)
        (weights,) = as_tensors([weights], self.device)
        return Batch(*columns, indices=idx, weights=weights)

    def update_priorities(self, idx: np.ndarray, td_errors: torch.Tensor) -> None:
        self.sampler.update(idx, td_errors.float().cpu().numpy())

    def grow(self, rows: int) -> None:
        """Enlarge the storage to `rows` slots, keeping what is stored."""
        raise NotImplementedError

    def write(self, slots: np.ndarray, columns: Columns) -> None:
        raise NotImplementedError

    def gather(self, idx: np.ndarray) -> Columns:
        raise NotImplementedError

    def arrays(self) -> list[np.ndarray]:
        """The storage arrays, slot-major (what a checkpoint saves)."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        return {"arrays": [a[: self.size].copy() for a in self.arrays()], "pos": self.pos,
                "size": self.size, "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.size = state["pos"], state["size"]
        if self.size > self.allocated:
            self.allocated = self.size
            self.grow(self.size)
        for array, saved in zip(self.arrays(), state["arrays"]):
            array[: self.size] = saved
        self.sampler.load_state_dict(state["sampler"])


class PerAgentReplay(MultiAgentReplay):
    """One ring per agent and field, each agent's observations at their own width."""

    def __init__(self, capacity: int, obs_space: gym.spaces.Box,
                 act_space: gym.spaces.MultiDiscrete, device: torch.device,
                 sampler: UniformSampler) -> None:
        super().__init__(capacity, obs_space, act_space, device, sampler)
        rows = self.allocated
        self.obs = [np.zeros((rows, d), np.float32) for d in self.obs_dims]
        self.next_obs = [np.zeros((rows, d), np.float32) for d in self.obs_dims]
        self.actions = [np.zeros(rows, np.int64) for _ in self.obs_dims]
        self.rewards = [np.zeros(rows, np.float32) for _ in self.obs_dims]
        self.terminated = [np.zeros(rows, np.float32) for _ in self.obs_dims]

    @classmethod
    def row_bytes(cls, obs_space: gym.spaces.Box) -> int:
        # per agent: obs and next_obs at its own width (float32), an int64 action, a float32
        # reward and terminated flag
        dims = (obs_space.high > obs_space.low).sum(axis=1)
        return int(sum(2 * 4 * int(d) + 8 + 4 + 4 for d in dims))

    def _fields(self) -> tuple[list[np.ndarray], ...]:
        return self.obs, self.actions, self.rewards, self.next_obs, self.terminated

    def grow(self, rows: int) -> None:
        for field in self._fields():
            field[:] = [_grown(array, rows) for array in field]

    def write(self, slots: np.ndarray, columns: Columns) -> None:
        for field, values in zip(self._fields(), columns):
            for i, array in enumerate(field):
                array[slots] = values[:, i, : array.shape[1]] if array.ndim == 2 else values[:, i]

    def gather(self, idx: np.ndarray) -> Columns:
        n = len(idx)
        obs = np.zeros((n, self.n_agents, self.width), np.float32)
        next_obs = np.zeros_like(obs)
        for i, d in enumerate(self.obs_dims):  # every agent's ring at the common indices
            obs[:, i, :d] = self.obs[i][idx]
            next_obs[:, i, :d] = self.next_obs[i][idx]
        actions, rewards, terminated = (
            np.stack([a[idx] for a in field], axis=1)
            for field in (self.actions, self.rewards, self.terminated))
        return obs, actions, rewards, next_obs, terminated

    def arrays(self) -> list[np.ndarray]:
        return [array for field in self._fields() for array in field]


class PerAgentListsReplay(MultiAgentReplay):
    """The MARL paper's own baseline, as openai/maddpg stores it: one Python list per agent
    of `(obs, action, reward, next_obs, done)` tuples (its `ReplayBuffer._storage`), written
    by append or overwrite at the ring's slot, and a batch built the way its
    `_encode_sample` builds one: for every agent, a Python loop over the sampled slots that
    collects each field, then `np.array` of each list. Same sampler interface and same
    batches as the numpy layouts."""

    def __init__(self, capacity: int, obs_space: gym.spaces.Box,
                 act_space: gym.spaces.MultiDiscrete, device: torch.device,
                 sampler: UniformSampler) -> None:
        super().__init__(capacity, obs_space, act_space, device, sampler)
        self.storage: list[list[tuple]] = [[] for _ in self.obs_dims]

    @classmethod
    def row_bytes(cls, obs_space: gym.spaces.Box) -> int:
        # per agent: a 5-tuple (~96 B), two float32 arrays (~112 B of header each), three
        # Python scalars (~32 B each)
        dims = (obs_space.high > obs_space.low).sum(axis=1)
        return int(sum(96 + 2 * (112 + 4 * int(d)) + 3 * 32 for d in dims))

    def grow(self, rows: int) -> None:
        """Lists grow as they are appended to."""

    def write(self, slots: np.ndarray, columns: Columns) -> None:
        obs, actions, rewards, next_obs, terminated = columns
        for i, (storage, d) in enumerate(zip(self.storage, self.obs_dims)):
            for j, slot in enumerate(slots.tolist()):
                data = (np.array(obs[j, i, :d], np.float32), int(actions[j, i]),
                        float(rewards[j, i]), np.array(next_obs[j, i, :d], np.float32),
                        float(terminated[j, i]))
                if slot >= len(storage):
                    storage.append(data)
                else:
                    storage[slot] = data

    def gather(self, idx: np.ndarray) -> Columns:
        n = len(idx)
        obs = np.zeros((n, self.n_agents, self.width), np.float32)
        next_obs = np.zeros_like(obs)
        actions = np.zeros((n, self.n_agents), np.int64)
        rewards = np.zeros((n, self.n_agents), np.float32)
        terminated = np.zeros((n, self.n_agents), np.float32)
        for i, (storage, d) in enumerate(zip(self.storage, self.obs_dims)):
            # openai/maddpg (numpy 1: np.array(x, copy=False), numpy 2: np.asarray(x))
            obses_t, acts, rews, obses_tp1, dones = [], [], [], [], []
            for k in idx.tolist():
                o, a, r, o2, done = storage[k]
                obses_t.append(np.asarray(o))
                acts.append(np.asarray(a))
                rews.append(r)
                obses_tp1.append(np.asarray(o2))
                dones.append(done)
            obs[:, i, :d], actions[:, i], rewards[:, i] = (
                np.array(obses_t), np.array(acts), np.array(rews))
            next_obs[:, i, :d], terminated[:, i] = np.array(obses_tp1), np.array(dones)
        return obs, actions, rewards, next_obs, terminated

    def arrays(self) -> list[np.ndarray]:
        return []  # nothing in arrays: a checkpoint keeps the lists

    def state_dict(self) -> dict[str, Any]:
        return {"storage": [list(s) for s in self.storage], "pos": self.pos,
                "size": self.size, "sampler": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.size = state["pos"], state["size"]
        self.storage = [list(s) for s in state["storage"]]
        self.sampler.load_state_dict(state["sampler"])


class JointReplay(MultiAgentReplay):
    """One row per slot: [obs of all agents | actions | rewards | next_obs | terminated], float32
    (actions are small integers, exact in float32). A batch is one gather of rows; its
    fields are views of the gathered block."""

    def __init__(self, capacity: int, obs_space: gym.spaces.Box,
                 act_space: gym.spaces.MultiDiscrete, device: torch.device,
                 sampler: UniformSampler) -> None:
        super().__init__(capacity, obs_space, act_space, device, sampler)
        n, w = self.n_agents, self.width
        widths = [n * w, n, n, n * w, n]
        self.bounds = np.cumsum([0, *widths])
        self.rows = np.zeros((self.allocated, int(self.bounds[-1])), np.float32)

    @classmethod
    def row_bytes(cls, obs_space: gym.spaces.Box) -> int:
        n, w = obs_space.shape  # float32 [obs | actions | rewards | next_obs | terminated]
        return 4 * (2 * n * w + 3 * n)

    def grow(self, rows: int) -> None:
        self.rows = _grown(self.rows, rows)

    def write(self, slots: np.ndarray, columns: Columns) -> None:
        n = len(slots)
        self.rows[slots] = np.concatenate([np.reshape(c, (n, -1)) for c in columns], axis=1)

    def gather(self, idx: np.ndarray) -> Columns:
        block = self.rows[idx]  # the one gather: contiguous rows
        n, agents = len(idx), self.n_agents
        obs, actions, rewards, next_obs, terminated = (
            block[:, lo:hi] for lo, hi in zip(self.bounds[:-1], self.bounds[1:]))
        return (obs.reshape(n, agents, self.width), actions.astype(np.int64), rewards,
                next_obs.reshape(n, agents, self.width), terminated)

    def arrays(self) -> list[np.ndarray]:
        return [self.rows]


def _grown(array: np.ndarray, rows: int) -> np.ndarray:
    bigger = np.zeros((rows, *array.shape[1:]), array.dtype)
    bigger[: len(array)] = array
    return bigger
