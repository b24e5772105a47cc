"""A sampled batch out of the uniform ring (hetrl/replay/uniform.py): `UniformReplay._batch`
against the column-by-column gather it replaced (one fancy-index per column), in the same run,
over record sizes from CartPole's to Atari's frames.

Run from the repository root:

    python benchmarks/replay_batch.py            # batch 32 and 256, six record sizes
    python benchmarks/replay_batch.py --smoke    # seconds

Each call gathers the next of 256 random index batches from a 50,000-slot ring, filled, so no
call finds the last one's rows in cache. Both sides return the same tensors; the figure is
the median of `torch.utils.benchmark` blocked runs, the two interleaved over rounds, on one
thread. The host is shared: compare the ratio within a run.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import torch
from common import host_line, median_seconds, parse_args, ratio, table, write_results

from hetrl.replay.base import as_tensors
from hetrl.replay.uniform import ROW_GATHER_BYTES, UniformReplay

OBS_SHAPES = {"CartPole (4)": (4,), "Hopper (11)": (11,), "BipedalWalker (24)": (24,),
              "64 floats": (64,), "1024 floats": (1024,), "Atari frames": (4, 84, 84)}
POOL = 256  # index batches cycled through


def filled(shape: tuple[int, ...], capacity: int) -> UniformReplay:
    frames = len(shape) == 3
    obs_space = gym.spaces.Box(0, 255, shape, np.uint8) if frames else gym.spaces.Box(-1, 1, shape)
    replay = UniformReplay(capacity, obs_space, gym.spaces.Box(-1, 1, (3,)), torch.device("cpu"),
                           n_step=1, gamma=0.99)
    chunk = 500
    obs = np.random.randint(0, 255, (chunk, *shape)).astype(obs_space.dtype)
    for _ in range(capacity // chunk):
        replay.add(obs, np.random.rand(chunk, 3).astype(np.float32), np.ones(chunk, np.float32),
                   obs, np.zeros(chunk, np.float32))
    return replay


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds: a small ring, short timings")
    args = parse_args(parser)
    capacity, repeats, run_time = (2_000, 1, 0.02) if args.smoke else (50_000, 5, 0.2)
    print(host_line())
    rows = []
    for name, shape in OBS_SHAPES.items():
        replay = filled(shape, capacity)
        for batch in (32, 256):
            pool = np.random.randint(replay.size, size=(POOL, batch))
            calls = [0, 0]

            def gather(k: int, batch_of) -> None:
                calls[k] = (calls[k] + 1) % POOL
                batch_of(pool[calls[k]])

            def by_column(idx: np.ndarray) -> list[torch.Tensor]:
                return as_tensors([column[idx] for column in replay._columns()], replay.device)

            assert all(torch.equal(a, b) for a, b in zip(replay._batch(pool[0]), by_column(pool[0]))
                       if isinstance(a, torch.Tensor))
            t = median_seconds({"hetrl": (lambda: gather(0, replay._batch), 1),
                                "by column": (lambda: gather(1, by_column), 1)},
                               repeats, run_time)
            whole = replay.records.itemsize <= ROW_GATHER_BYTES
            rows.append([name, f"{replay.records.itemsize:,}", batch,
                         "records" if whole else "columns", f"{t['hetrl'] * 1e6:,.1f}",
                         f"{t['by column'] * 1e6:,.1f}", ratio(t["by column"], t["hetrl"])])
    table(["observation", "record bytes", "batch", "hetrl gathers", "hetrl µs", "by column µs",
           "speedup"], rows, title="One sampled batch, hetrl's gather against column by column",
          align="llrlrrr")
    write_results()


if __name__ == "__main__":
    main()
