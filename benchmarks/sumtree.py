"""The sum tree of `replay=prioritized` (hetrl/replay/sumtree.py): the compiled (numba) path
against the numpy reference in the same run, next to the C++ k-ary tree of PEARL's authors
and RLlib's Python tree (issue 12 item 2), and the fanout curve.

Run from the repository root:

    python benchmarks/sumtree.py            # capacity 131,072, batch 128; curve at 10^6
    python benchmarks/sumtree.py --smoke    # seconds: small trees, short timings

What is timed, per batch of 128, on one core (numba compiles serial code; numpy's ops here
are single-threaded; torch's Timer runs at 1 thread):

- sample: 128 uniform draws (numpy's global generator, as the replay draws them) and the
  stratified walk, one leaf per stratum of the total (Eq. (1));
- update: 128 leaves written and every ancestor recomputed (insertion is the same write);
- PER sample / PER update: the replay's whole priority path (`PrioritizedSampler`: the tree
  plus importance weights; (|δ| + ε)^α and the running max), for context.

The tree is filled with random priorities first; each call takes the next of 256 random
index batches, so no call finds the previous one's path in cache. Each figure is the median
of `torch.utils.benchmark` blocked runs, the contenders interleaved over rounds. Compilation
is kept out of the timed figures: the kernels are compiled (or loaded from numba's cache)
before timing, and the compile and cache-load times are measured apart, each in a fresh
process (cold: an empty cache folder).

The host is shared (other jobs run on its 2 cores): the load average is printed; compare
ratios within one run, not absolute times across runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
from common import ROOT, host_line, median_seconds, parse_args, table, verdict, write_results

from hetrl.replay.samplers import PrioritizedSampler
from hetrl.replay.sumtree import COMPILED, SumTree, compile_kernels

PEARL_CPP_US = {"sample": 20.1, "update": 16.8}  # hipc21's k-ary C++ tree, batch 128
RLLIB_US = {"sample": 1000.0, "update": 2600.0}  # RLlib's Python sum tree, same setting
GOAL_US = {"sample": 20.0, "update": 17.0}
RLLIB_FACTOR = 50
BATCH = 128
POOL = 256  # index batches cycled through


def filled(capacity: int, fanout: int, compiled: bool, rng: np.random.Generator) -> SumTree:
    tree = SumTree(capacity, fanout, compiled=compiled)
    tree.set(np.arange(capacity), rng.random(capacity))
    return tree


def tree_ops(tree: SumTree, rng: np.random.Generator) -> dict[str, object]:
    """sample and update callables on `tree`, each call on the next of POOL random batches."""
    idx = rng.integers(0, tree.capacity, (POOL, BATCH))
    values = rng.random((POOL, BATCH))
    calls = [0, 0]

    def sample() -> None:
        tree.stratified(np.random.random(BATCH))

    def update() -> None:
        k = calls[1] = (calls[1] + 1) % POOL
        tree.set(idx[k], values[k])

    return {"sample": sample, "update": update}


def per_ops(capacity: int, fanout: int, compiled: bool,
            rng: np.random.Generator) -> dict[str, object]:
    """The replay's priority path: PrioritizedSampler.sample and .update."""
    sampler = PrioritizedSampler(capacity, 0.6, 0.4, 1.0, 10_000, 0.01, fanout=fanout,
                                 stratified=True)
    sampler.tree.compiled = compiled
    sampler.added(np.arange(capacity))
    sampler.update(np.arange(capacity), rng.standard_normal(capacity))
    idx = rng.integers(0, capacity, (POOL, BATCH))
    td = rng.standard_normal((POOL, BATCH)).astype(np.float32)
    calls = [0]

    def update() -> None:
        k = calls[0] = (calls[0] + 1) % POOL
        sampler.update(idx[k], td[k])

    return {"PER sample": lambda: sampler.sample(BATCH, capacity), "PER update": update}


def first_call_seconds() -> tuple[float, float]:
    """Seconds the kernels take before their first call in a fresh process: compiled cold
    (an empty cache folder), then loaded from that cache."""
    code = "from hetrl.replay.sumtree import compile_kernels; print(compile_kernels())"
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache, "PYTHONPATH": str(ROOT)}
        runs = [subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                               text=True, check=True) for _ in range(2)]
    cold, cached = (float(run.stdout.split()[-1]) for run in runs)
    return cold, cached


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="seconds: small trees")
    parser.add_argument("--capacity", type=int, default=131_072)
    parser.add_argument("--fanout", type=int, default=16)
    parser.add_argument("--curve-capacity", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-run-time", type=float, default=0.3)
    args = parse_args(parser)
    if args.smoke:
        args.capacity, args.curve_capacity, args.repeats, args.min_run_time = 4096, 4096, 1, 0.01
    if not COMPILED:
        sys.exit("numba is not installed: pip install numba (a hetrl dependency)")

    print(host_line("numpy", "numba"))
    cold, cached = first_call_seconds()
    compile_kernels()  # this process: out of every timed figure
    print(f"first call of the kernels in a fresh process: {cold:.2f} s compiling (empty cache), "
          f"{cached * 1e3:.1f} ms loading numba's cache (cache=True)")

    rng = np.random.default_rng(0)
    capacity, fanout = args.capacity, args.fanout
    compiled = filled(capacity, fanout, True, rng)
    reference = SumTree(capacity, fanout, compiled=False)
    reference.tree[:] = compiled.tree
    contenders = {}
    for path, tree in (("numba", compiled), ("numpy", reference)):
        for op, fn in tree_ops(tree, np.random.default_rng(1)).items():
            contenders[f"{op} {path}"] = (fn, 1)
        for op, fn in per_ops(capacity, fanout, path == "numba", np.random.default_rng(2)).items():
            contenders[f"{op} {path}"] = (fn, 1)
    t = median_seconds(contenders, args.repeats, args.min_run_time)

    rows = []
    for op in ("sample", "update"):
        fast, slow = t[f"{op} numba"], t[f"{op} numpy"]
        ok = fast * 1e6 <= GOAL_US[op] and RLLIB_US[op] / (fast * 1e6) >= RLLIB_FACTOR
        rows.append([op, us(fast), us(slow), f"{slow / fast:.1f}x", PEARL_CPP_US[op],
                     f"{PEARL_CPP_US[op] / (fast * 1e6):.2f}x", f"{RLLIB_US[op]:,.0f}",
                     f"{RLLIB_US[op] / (fast * 1e6):.0f}x",
                     f"<= {GOAL_US[op]:g}, >= {RLLIB_FACTOR}x RLlib", verdict(ok)])
    for op in ("PER sample", "PER update"):
        fast, slow = t[f"{op} numba"], t[f"{op} numpy"]
        rows.append([op, us(fast), us(slow), f"{slow / fast:.1f}x", "", "", "", "", "", ""])
    table(["per batch of 128", "numba µs", "numpy µs", "numpy / numba", "PEARL C++ µs",
           "C++ / numba", "RLlib µs", "RLlib / numba", "goal µs", ""], rows,
          title=f"Sum tree, capacity {capacity:,} (depth {compiled.depth}, {compiled.leaves:,} "
                f"leaves at fanout {fanout}), batch {BATCH}, one core", align="lrrrrrrrll")

    curve_rows = []
    for f in (2, 4, 8, 16, 32):
        tree = filled(args.curve_capacity, f, True, rng)
        twin = SumTree(args.curve_capacity, f, compiled=False)
        twin.tree[:] = tree.tree
        ops = {f"{op} {path}": (fn, 1) for path, tr in (("numba", tree), ("numpy", twin))
               for op, fn in tree_ops(tr, np.random.default_rng(f)).items()}
        c = median_seconds(ops, max(1, args.repeats // 2), args.min_run_time)
        curve_rows.append([f, tree.depth, f"{tree.leaves:,}", us(c["sample numba"]),
                           us(c["update numba"]), us(c["sample numpy"]), us(c["update numpy"])])
    table(["fanout F", "depth", "leaves", "sample numba µs", "update numba µs",
           "sample numpy µs", "update numpy µs"], curve_rows,
          title=f"Fanout curve, capacity {args.curve_capacity:,}, batch {BATCH}",
          align="rrrrrrr")
    print(f"\n{host_line('numpy', 'numba')}")


if __name__ == "__main__":
    main()
    write_results()
