"""How process actors and the host share memory (PEARL §B.2.5, §B.2.3): a version-tagged
double buffer of weights that actors read without a message, and each actor's data collection
queue, a ring of shared memory its chunks' arrays travel through."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch


class DoubleBuffer:
    """Two flat weight buffers (shared memory across processes) with version tags.

    The learner publishes version v into buffer v % 2, so while the actors read the newest
    (v − 1, in buffer 1 − v % 2) the other one takes the write; a buffer's tag is −1 while it
    is being written. A reader takes the newest buffer, copies it, and keeps the copy only if the
    tag was the same, and not −1, before and after the copy (a seqlock): it never loads a torn
    mix of two versions."""

    def __init__(self, n: int) -> None:
        self.buffers = torch.zeros(2, n).share_memory_()
        self.tags = torch.full((2,), -1, dtype=torch.int64).share_memory_()
        self.latest = torch.full((1,), -1, dtype=torch.int64).share_memory_()
        self._views: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None

    def __getstate__(self) -> dict:
        """The shared tensors go to another process (torch's reductions share them); numpy's
        views of them would go as copies, so each process makes its own."""
        return {**self.__dict__, "_views": None}

    def views(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(buffers, tags, latest) as numpy views of the shared memory: a store or load
        through one costs a tenth of a torch indexing call (a PEARL publication took 14 µs
        in torch's, 1 µs in numpy's)."""
        if self._views is None:
            self._views = (self.buffers.numpy(), self.tags.numpy(), self.latest.numpy())
        return self._views

    def write(self, version: int, flat: torch.Tensor, during=None) -> None:
        """Publish `flat` as `version` (`during(slot)`: a test's hook mid-write)."""
        buffers, tags, latest = self.views()
        values = flat.numpy()
        slot = version % 2
        tags[slot] = -1
        half = len(values) // 2
        buffers[slot, :half] = values[:half]
        if during is not None:
            during(slot)
        buffers[slot, half:] = values[half:]
        tags[slot] = version
        latest[0] = slot

    def newest(self) -> int:
        """The newest version published (−1: none yet, or its buffer is being written): a
        tag read, for a reader to check before it copies."""
        _, tags, latest = self.views()
        slot = int(latest[0])
        return -1 if slot < 0 else int(tags[slot])

    def read(self, tries: int = 1000) -> tuple[int, torch.Tensor] | None:
        """(version, weights) of a complete version, or None if none is published yet."""
        buffers, tags, latest = self.views()
        for _ in range(tries):
            slot = int(latest[0])
            if slot < 0:
                return None
            before = int(tags[slot])
            if before < 0:
                continue
            copy = buffers[slot].copy()
            if int(tags[slot]) == before:
                return before, torch.from_numpy(copy)
        return None


def flatten(module: torch.nn.Module) -> torch.Tensor:
    """The module's state (detached, as state_dict gives it) as one float32 CPU vector."""
    return torch.cat([t.reshape(-1) for t in module.state_dict().values()]).float().cpu()


def unflatten_into(module: torch.nn.Module, flat: torch.Tensor) -> None:
    state, offset = module.state_dict(), 0
    for key, value in state.items():
        n = value.numel()
        state[key] = flat[offset:offset + n].view_as(value).to(value.dtype)
        offset += n
    module.load_state_dict(state)


COLUMNS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


class ChunkRing:
    """One actor's data collection queue in shared memory (multiprocessing.shared_memory):
    `slots` slots, each of `steps` vector-env steps for each of a chunk's six columns. The
    actor writes its chunks' arrays into the slots in turn and sends only each chunk's small
    remainder (its returns, timings and slot; the arrays set to None); the host copies the
    rows out on receipt. An actor with at most `slots` chunks asked of it at a time never
    overwrites a slot the host has not read: it is asked for another only once the host has
    read one. The host creates and unlinks the segment; actors attach by name."""

    def __init__(self, steps: int, n_envs: int, obs_space, act_space, slots: int = 1,
                 name: str | None = None) -> None:
        from multiprocessing import shared_memory

        self.steps, self.n_envs, self.slots = steps, n_envs, slots
        self.next = 0  # the slot the actor's next chunk goes into
        self.obs_space, self.act_space = obs_space, act_space
        self.layout = [
            (obs_space.shape, np.dtype(obs_space.dtype)),
            (act_space.shape, np.dtype(act_space.dtype)),
            ((), np.dtype(np.float64)),
            (obs_space.shape, np.dtype(obs_space.dtype)),
            ((), np.dtype(bool)),
            ((), np.dtype(bool)),
        ]
        sizes = [steps * n_envs * int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
                 for shape, dtype in self.layout]
        self.offsets = np.concatenate([[0], np.cumsum([-(-s // 64) * 64 for s in sizes])])
        self.owner = name is None
        size = max(int(self.offsets[-1]) * slots, 1)
        self.shm = (shared_memory.SharedMemory(create=True, size=size) if self.owner
                    else _attach(name))
        self.name = self.shm.name

    def __getstate__(self):
        return (self.steps, self.n_envs, self.obs_space, self.act_space, self.slots, self.name)

    def __setstate__(self, state) -> None:
        *shape, slots, name = state
        self.__init__(*shape, slots=slots, name=name)

    def _views(self, slot: int, steps: int) -> list[np.ndarray]:
        start = slot * int(self.offsets[-1])
        return [np.ndarray((steps, self.n_envs, *shape), dtype, self.shm.buf,
                           start + int(offset))
                for (shape, dtype), offset in zip(self.layout, self.offsets)]

    def put(self, chunk):
        """Write the chunk's columns into the next slot; the chunk without them (sent
        instead)."""
        steps, slot = len(chunk.obs), self.next
        for view, column in zip(self._views(slot, steps), COLUMNS):
            view[...] = getattr(chunk, column)
        self.next = (slot + 1) % self.slots
        return dataclasses.replace(chunk, **dict.fromkeys(COLUMNS), stats={
            **chunk.stats, "ring_steps": float(steps), "ring_slot": float(slot)})

    def get(self, slim):
        """The whole chunk back: its slot's rows copied out of shared memory."""
        stats = dict(slim.stats)
        steps, slot = int(stats.pop("ring_steps")), int(stats.pop("ring_slot"))
        arrays = {c: v.copy() for c, v in zip(COLUMNS, self._views(slot, steps))}
        return dataclasses.replace(slim, stats=stats, **arrays)

    def close(self) -> None:
        self.shm.close()
        if self.owner:
            self.shm.unlink()


def _attach(name: str):
    """Attach to the host's segment. An actor shares the host's resource tracker (fork or
    spawn), whose one entry for the name the host's unlink clears."""
    from multiprocessing import shared_memory

    return shared_memory.SharedMemory(name=name)
