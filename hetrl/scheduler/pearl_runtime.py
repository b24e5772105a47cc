"""The pieces of PEARL's host runtime (specs/ap-drl-pearl.md §B.2.3-B.2.5), each testable alone:
the replay-collision check, the version-tagged double buffer of weights, and Algorithm 1
(dynamic resource management) on profiled timings."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import torch

# ---- collision-free scheduling (§B.2.3 step 4, D.2 #10) ------------------------------------


class CollisionCheck:
    """Which sampled slots a batched insertion overwrote before their priority update.

    `sampled(indices)` starts a batch's window; `written(slots)` records the slots an
    insertion overwrote since; `keep(indices)` is the mask of the sampled rows whose priority
    update may still go in (the others' slots now hold a new experience: its priority must not
    be the old one's TD error, so that update is dropped and counted). A flag per slot of the
    ring's `capacity`: each call costs its own slots, not the ring's size."""

    def __init__(self, capacity: int) -> None:
        self.overwritten = np.zeros(capacity, dtype=bool)
        self.marked: list[np.ndarray] = []
        self.collisions = 0

    def sampled(self, indices: np.ndarray) -> None:
        for slots in self.marked:
            self.overwritten[slots] = False
        self.marked.clear()

    def written(self, slots: np.ndarray) -> None:
        self.overwritten[slots] = True
        self.marked.append(slots)

    def keep(self, indices: np.ndarray) -> np.ndarray:
        stale = self.overwritten[indices]
        self.collisions += int(np.count_nonzero(stale))
        return ~stale


# ---- double-buffered weights with version tags (§B.2.5) ---------------------------------


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

    def write(self, version: int, flat: torch.Tensor, during=None) -> None:
        """Publish `flat` as `version` (`during(slot)`: a test's hook mid-write)."""
        slot = version % 2
        self.tags[slot] = -1
        half = len(flat) // 2
        self.buffers[slot, :half] = flat[:half]
        if during is not None:
            during(slot)
        self.buffers[slot, half:] = flat[half:]
        self.tags[slot] = version
        self.latest[0] = slot

    def read(self, tries: int = 1000) -> tuple[int, torch.Tensor] | None:
        """(version, weights) of a complete version, or None if none is published yet."""
        for _ in range(tries):
            slot = int(self.latest[0])
            if slot < 0:
                return None
            before = int(self.tags[slot])
            if before < 0:
                continue
            copy = self.buffers[slot].clone()
            if int(self.tags[slot]) == before:
                return before, copy
        return None


def flatten(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).float().cpu() for p in module.state_dict().values()])


def unflatten_into(module: torch.nn.Module, flat: torch.Tensor) -> None:
    state, offset = module.state_dict(), 0
    for key, value in state.items():
        n = value.numel()
        state[key] = flat[offset:offset + n].view_as(value).to(value.dtype)
        offset += n
    module.load_state_dict(state)


# ---- Algorithm 1: dynamic resource management (§B.2.4 with the [S] fixes) ----------------


@dataclass
class Timings:
    """One iteration's profiled times (seconds): all actors' (A of them), one learner step on
    BS rows, the host's gradient sync and the CPU trainers' sub-batch step (b rows)."""

    actor_s: float
    learner_s: float
    sync_host_s: float = 0.0
    train_cpu_s: float = 0.0


@dataclass
class Decision:
    action: str  # "shrink_actors", "grow_b", "shrink_b", "give_core_back", "none"
    actors: int
    cpu_trainers: int
    b: int


@dataclass
class ResourceManager:
    """Algorithm 1, per experience: the four times normalized to seconds per experience
    (T_Actor / experiences the actors made, T_Learner / (BS − b), T_train-CPU / b,
    T_sync-host / BS). If the Learner's dominates and is > 2× the actors', halve the actor pool
    (once) into CPU trainers and raise b by BS/8; if the CPU trainers' dominates, lower b by
    BS/8; if the host sync's dominates, one CPU trainer goes back to acting."""

    actors: int
    batch_size: int
    cpu_trainers: int = 0
    b: int = 0
    halved: bool = False
    log: list[Decision] = field(default_factory=list)

    @property
    def quantum(self) -> int:
        return max(1, self.batch_size // 8)

    def step(self, t: Timings, experiences: int) -> Decision:
        per = {
            "actor": t.actor_s / max(experiences, 1),
            "learner": t.learner_s / max(self.batch_size - self.b, 1),
            "train_cpu": t.train_cpu_s / self.b if self.b else 0.0,
            "sync": t.sync_host_s / self.batch_size,
        }
        top = max(per, key=per.get)
        action = "none"
        if top == "learner" and per["learner"] > 2 * per["actor"]:
            if not self.halved and self.actors > 1:
                freed = self.actors // 2
                self.actors -= freed
                self.cpu_trainers += freed
                self.halved = True
                action = "shrink_actors"
            elif self.cpu_trainers > 0 and self.b + self.quantum < self.batch_size:
                action = "grow_b"
            if self.cpu_trainers > 0 and self.b + self.quantum < self.batch_size:
                self.b += self.quantum
        elif top == "train_cpu" and self.b > 0:
            self.b -= self.quantum
            action = "shrink_b"
        elif top == "sync" and self.cpu_trainers > 0:
            self.cpu_trainers -= 1
            self.actors += 1
            action = "give_core_back"
        decision = Decision(action, self.actors, self.cpu_trainers, self.b)
        if action != "none":
            self.log.append(decision)
        return decision


COLUMNS = ("obs", "actions", "rewards", "next_obs", "terminated", "truncated")


class ChunkRing:
    """One actor's data collection queue in shared memory (multiprocessing.shared_memory):
    a slot of `steps` vector-env steps for each of a chunk's six columns. The actor writes its
    chunk's arrays into the slot and sends only the chunk's small remainder (its returns and
    timings; the arrays set to None); the host copies the rows out on receipt. One slot is
    enough: an actor writes again only after the host, having read the slot, sends it off.
    The host creates and unlinks the segment; actors attach by name."""

    def __init__(self, steps: int, n_envs: int, obs_space, act_space,
                 name: str | None = None) -> None:
        from multiprocessing import shared_memory

        self.steps, self.n_envs = steps, n_envs
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
        self.shm = (shared_memory.SharedMemory(create=True, size=max(int(self.offsets[-1]), 1))
                    if self.owner else _attach(name))
        self.name = self.shm.name

    def __getstate__(self):
        return (self.steps, self.n_envs, self.obs_space, self.act_space, self.name)

    def __setstate__(self, state) -> None:
        steps, n_envs, obs_space, act_space, name = state
        self.__init__(steps, n_envs, obs_space, act_space, name=name)

    def _views(self, steps: int) -> list[np.ndarray]:
        return [np.ndarray((steps, self.n_envs, *shape), dtype, self.shm.buf, int(offset))
                for (shape, dtype), offset in zip(self.layout, self.offsets)]

    def put(self, chunk):
        """Write the chunk's columns into the slot; the chunk without them (sent instead)."""
        steps = len(chunk.obs)
        for view, column in zip(self._views(steps), COLUMNS):
            view[...] = getattr(chunk, column)
        return dataclasses.replace(chunk, **dict.fromkeys(COLUMNS), stats={
            **chunk.stats, "ring_steps": float(steps)})

    def get(self, slim):
        """The whole chunk back: the slot's rows copied out of shared memory."""
        stats = dict(slim.stats)
        steps = int(stats.pop("ring_steps"))
        arrays = {c: v.copy() for c, v in zip(COLUMNS, self._views(steps))}
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
