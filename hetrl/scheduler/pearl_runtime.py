"""The pieces of PEARL's host runtime (specs/ap-drl-pearl.md §B.2.3-B.2.4), each testable alone:
the replay-collision check and Algorithm 1 (dynamic resource management) on profiled timings
(the double buffer of weights and the chunk rings the actors share: hetrl.actors.shared)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# ---- collision-free scheduling (§B.2.3 step 4, D.2 #10) ------------------------------------


class CollisionCheck:
    """Which sampled slots a batched insertion overwrote before their priority update.

    `sampled(indices)` starts a batch's window; `written(slots)` records the slots an
    insertion overwrote since; `keep(indices)` is the mask of the sampled rows whose priority
    update may still go in, None where all may (the others' slots now hold a new experience:
    its priority must not be the old one's TD error, so that update is dropped and counted).
    A flag per slot of the ring's `capacity`: each call costs its own slots, not the ring's
    size."""

    def __init__(self, capacity: int) -> None:
        self.overwritten = np.zeros(capacity, dtype=bool)
        self.marked: list[np.ndarray] = []
        self.collisions = 0

    def sampled(self, indices: np.ndarray) -> None:
        for slots in self.marked:
            self.overwritten[slots] = False
        self.marked.clear()

    def written(self, slots: np.ndarray) -> None:
        if len(slots):
            self.overwritten[slots] = True
            self.marked.append(slots)

    def keep(self, indices: np.ndarray) -> np.ndarray | None:
        if not self.marked:  # nothing written since the sample (9 PEARL iterations in 10)
            return None
        stale = self.overwritten[indices]
        if not (collisions := np.count_nonzero(stale)):  # not stale.any(): a Python wrapper
            return None
        self.collisions += int(collisions)
        return ~stale


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
    BS/8; if the host sync's dominates, one CPU trainer goes back to acting (the last one
    takes b with it: no trainer is left to train it). `sub_batch` False (an update that
    cannot be split): b stays 0, and the freed cores act again when host sync dominates."""

    actors: int
    batch_size: int
    sub_batch: bool = True
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
            grows = self.cpu_trainers > 0 and self.sub_batch and (
                self.b + self.quantum < self.batch_size)
            if action == "none" and grows:
                action = "grow_b"
            if grows:
                self.b += self.quantum
        elif top == "train_cpu" and self.b > 0:
            self.b -= self.quantum
            action = "shrink_b"
        elif top == "sync" and self.cpu_trainers > 0:
            self.cpu_trainers -= 1
            self.actors += 1
            self.b = self.b if self.cpu_trainers else 0
            action = "give_core_back"
        decision = Decision(action, self.actors, self.cpu_trainers, self.b)
        if action != "none":
            self.log.append(decision)
        return decision
