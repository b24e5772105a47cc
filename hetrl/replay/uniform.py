"""A preallocated ring buffer of transitions with uniform sampling."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from hetrl.algos.base import Batch
from hetrl.replay.base import as_tensors
from hetrl.replay.nstep import NStepAccumulator


class UniformReplay:
    """Fixed-capacity FIFO storage in one numpy array of records (a column is a view of
    its field); batches come out as torch tensors.

    Writes are slice copies (the per-step cost that matters); a sampled batch is one
    gather of its records (`ROW_GATHER_BYTES`) or of each column. Indices are drawn with
    numpy's global generator, so a seeded run samples the same batches and a checkpoint
    (which saves that generator) resumes them.

    With `n_step` > 1 each add goes through an n-step accumulator per `stream` (a source of
    transitions: the loop's envs, or one actor of many), and the stored reward is the
    discounted n-step return with its bootstrap discount (gamma^k) in `discounts`.
    """

    def __init__(
        self, capacity: int, obs_space: gym.Space, act_space: gym.Space, device: torch.device,
        n_step: int, gamma: float,
    ) -> None:
        self.capacity = capacity
        self.device = device
        self.n_step, self.gamma = n_step, gamma
        self.streams: dict[int, NStepAccumulator] = {}
        # one record a transition, each column a view of its field: a sampled slot's six
        # columns share its cache lines, so a batch costs a cache miss a row, not a column
        # (np.zeros, not zeros_like, which writes every byte: untouched pages stay unmapped
        # until the buffer fills)
        self.records = np.zeros(capacity, dtype=_record(obs_space, act_space))
        self.obs, self.actions, self.rewards, self.next_obs, self.terminated, self.discounts = (
            self.records[name] for name in COLUMNS)
        self.pos = 0
        self.size = 0

    @classmethod
    def nbytes(cls, capacity: int, obs_space: gym.Space, act_space: gym.Space,
               steps: int) -> int:
        """The bytes of its records: all `capacity` are allocated (and zeroed) at once,
        whatever the budget of `steps`."""
        return capacity * _record(obs_space, act_space).itemsize

    def __len__(self) -> int:
        return self.size

    def _columns(self) -> tuple[np.ndarray, ...]:
        return (self.obs, self.actions, self.rewards, self.next_obs, self.terminated,
                self.discounts)

    def add(
        self,
        obs: np.ndarray,
        actions: np.ndarray,
        rewards: np.ndarray,
        next_obs: np.ndarray,
        terminated: np.ndarray,
        truncated: np.ndarray | None = None,
        stream: int = 0,
    ) -> np.ndarray:
        """Store one step of a batch of envs (`truncated` ends an n-step window too),
        overwriting the oldest transitions when full; the slots written (none while an
        n-step window fills)."""
        if self.n_step == 1:
            return self._write(obs, actions, rewards, next_obs, terminated,
                               np.full(len(obs), self.gamma))
        if stream not in self.streams:
            self.streams[stream] = NStepAccumulator(self.n_step, self.gamma, len(obs))
        if truncated is None:
            truncated = np.zeros(len(obs), dtype=bool)
        transitions = self.streams[stream].push(obs, actions, rewards, next_obs, terminated,
                                                 truncated)
        return self._write(*transitions) if transitions else np.empty(0, dtype=np.int64)

    def add_steps(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
                  next_obs: np.ndarray, terminated: np.ndarray, truncated: np.ndarray,
                  stream: int = 0) -> np.ndarray:
        """Store successive steps of a batch of envs (each array shaped (steps, n_envs,
        ...), an actor's chunk) as that many `add`s would, in one write when there are no
        n-step windows; the slots written, in order."""
        columns = (obs, actions, rewards, next_obs, terminated, truncated)
        if self.n_step > 1:
            return np.concatenate([self.add(*(column[i] for column in columns), stream=stream)
                                   for i in range(len(obs))])
        rows = [column.reshape(-1, *column.shape[2:]) for column in columns[:-1]]
        return self._write(*rows, np.full(len(rows[0]), self.gamma))

    def _write(self, *values: np.ndarray) -> np.ndarray:
        """Store whole transitions (n-step ones already summed) at the ring's position; the
        slots written."""
        n = len(values[0])
        slots = (self.pos + np.arange(n)) % self.capacity
        end = self.pos + n
        for column, value in zip(self._columns(), values):
            if end <= self.capacity:
                column[self.pos : end] = value
            else:  # wraps around the ring
                column[slots] = value
        self.pos = end % self.capacity
        self.size = min(self.size + n, self.capacity)
        return slots

    def sample(self, n: int) -> Batch:
        return self._batch(np.random.randint(self.size, size=n))

    def _batch(self, idx: np.ndarray, **extra: object) -> Batch:
        """The transitions in slots `idx` as a batch on the device (`extra`: the rest of
        `Batch`'s fields, such as a prioritized replay's indices and weights)."""
        if self.records.itemsize <= ROW_GATHER_BYTES:
            rows = self.records.take(idx)
            columns = [np.ascontiguousarray(rows[name]) for name in COLUMNS]
        else:
            columns = [column[idx] for column in self._columns()]
        *transition, discounts = as_tensors(columns, self.device)
        return Batch(*transition, discounts=discounts, **extra)

    def update_priorities(self, indices: np.ndarray, td_errors: torch.Tensor) -> None:
        """Uniform sampling keeps no priorities (its batches carry no weights)."""

    def state_dict(self) -> dict[str, Any]:
        """The stored transitions (only the filled part), the ring position and the n-step
        windows still open."""
        return {"columns": [c[: self.size].copy() for c in self._columns()],
                "pos": self.pos, "size": self.size,
                "streams": {k: acc.state_dict() for k, acc in self.streams.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pos, self.size = state["pos"], state["size"]
        for key, windows in state["streams"].items():
            self.streams[key] = NStepAccumulator(self.n_step, self.gamma, len(windows))
            self.streams[key].load_state_dict(windows)
        for column, saved in zip(self._columns(), state["columns"]):
            column[: self.size] = saved


COLUMNS = ("obs", "actions", "rewards", "next_obs", "terminated", "discounts")

ROW_GATHER_BYTES = 256
"""Records up to this size are sampled whole (one copy of each row's cache lines), then split
into columns; larger ones (frames) column by column, so no row is copied twice. Measured on
256-row batches here (benchmarks/replay_batch.py, its recorded run): 1.32-1.93x faster at
56-216 bytes; gathered whole, 536-byte records ran 0.92x (an earlier run)."""


def _record(obs_space: gym.Space, act_space: gym.Space) -> np.dtype:
    """The stored transition, field by field (in `COLUMNS`' order, packed): frames stay
    bytes, other observations and continuous actions float32, discrete actions int64."""
    discrete = isinstance(act_space, gym.spaces.Discrete)
    act = (np.int64, ()) if discrete else (np.float32, tuple(act_space.shape))
    obs = (np.uint8 if obs_space.dtype == np.uint8 else np.float32, tuple(obs_space.shape))
    scalar = (np.float32, ())  # rewards, terminated, discounts
    fields = (obs, act, scalar, obs, scalar, scalar)
    return np.dtype([(name, *field) for name, field in zip(COLUMNS, fields)], align=False)
