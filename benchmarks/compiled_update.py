"""The compiled update against the eager one (issue 38): per workload, one update of the job's
learner on a batch of its shapes, eager PyTorch (autograd and torch.optim, `compile=false`)
and compiled as one graph (`hetrl.compiled`, what `compile=true` trains with), timed in turns
in one process (the median of `--repeats` updates each), and the compiled update alone (one
update after another, as the issue's 80 µs goal reads: in turns each update starts on caches
the other left cold; measured here for PEARL's 4-64-2, 73 µs alone, 135 µs after an 8 MB
copy, 120 µs after a 100 µs sleep), with its rate of floating-point work (torch's FLOP
counter's GFLOP an update, over the compiled time in turns: a compute-bound update nears
this core's peak, ~95 GFLOP/s fp32 on its GEMMs); then what compiling it took here
(first compile: cold where this machine had never compiled the update, else from the
persistent cache) and a cached start (the same update compiled again in a new process, as
the next job of a sweep starts, from inductor's cache on disk: its first update less the
update's own run).

    python benchmarks/compiled_update.py            # the issue's workloads; appends its table
                                                    # to benchmarks/results/compiled_update.jsonl
    python benchmarks/compiled_update.py --smoke    # one tiny workload, nothing written
    python benchmarks/compiled_update.py --only MADDPG --before REV   # and each workload on
                                                    # the code of git revision REV, in turns

An MADDPG update trains every trainer, each on its own batch of 1024 (n_agents × 1024 rows).

An update that cannot compile (one written by hand, an optimizer or step hook with no
functional form) shows eager only, with the reason. Single-threaded, as hetrl's small-batch learners run. The limit beside
them: the same DQN update of an MLP under `jax.jit` (benchmarks/jax_reference.py: from the
learner's weights, on its batch, in the same turns; the `bench` extra brings JAX), for the
DQN workloads; the others name why they have none. Where the mixed plan is measured, a
second table gives bf16's own limit here: the GEMMs of DDPG's largest layer in fp32 and bf16
(a compute-bound update cannot gain more from bf16 than they do)."""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial

import jax_reference
import torch
from torch.utils.flop_counter import FlopCounterMode
from common import ROOT, build_job, host_line, parse_args, table, write_results

import hetrl
from hetrl.algos.base import Learner
from hetrl.build import Components
from hetrl.compiled.choose import (job_batch, last_compile, time_turns, time_updates,
                                   unchanged, update_compiler)
from hetrl.compiled.step import GraphStep, unsupported
from hetrl.compiled.toolchain import cache_dir

WORKLOADS = {
    "PEARL DQN-CartPole 4-64-2, batch 32": ("algo=dqn", "algo.hidden=[64]",
                                            "algo.batch_size=32"),
    "PEARL DQN-CartPole 4-64-2, batch 512": ("algo=dqn", "algo.hidden=[64]",
                                             "algo.batch_size=512"),
    "PEARL DQN-CartPole 4-64-2, batch 32, QAT 8-bit": ("algo=dqn", "algo.hidden=[64]",
                                                       "algo.batch_size=32", "precision=qat",
                                                       "precision.quant_delay=0"),
    "rl-zoo3 DQN-CartPole 256-256, batch 64": ("algo=dqn",),
    "DDPG-Pendulum [400,300], batch 256": ("algo=ddpg", "env=pendulum"),
    "DDPG-Pendulum [400,300], batch 256, mixed": ("algo=ddpg", "env=pendulum",
                                                  "precision=mixed"),
    "DDPG-Pendulum [64,64], batch 256": ("algo=ddpg", "env=pendulum", "algo.hidden=[64,64]"),
    "TD3-Pendulum [400,300], batch 256": ("algo=td3", "env=pendulum"),
    "TD3-Pendulum [64,64], batch 256": ("algo=td3", "env=pendulum", "algo.hidden=[64,64]"),
    "D4PG-Pendulum, batch 256": ("algo=d4pg", "env=pendulum"),
    "PPO-CartPole [64,64], batch 64": ("algo=ppo",),
    "MADDPG simple_spread, 3 agents, batch 1024": ("algo=maddpg", "env=simple_spread",
                                                   "env.n_agents=3"),
    "MADDPG simple_spread, 24 agents, batch 1024": ("algo=maddpg", "env=simple_spread",
                                                    "env.n_agents=24"),
    "Nature-CNN DQN Breakout, batch 32": ("algo=dqn", "env=breakout", "algo.batch_size=32",
                                          "algo.buffer_size=1000"),
    "AlphaZero 32x3, 9x9, batch 64": ("algo=alphazero", "env=go9", "algo.width=32",
                                      "algo.blocks=3"),
}
SMOKE = {"DQN-CartPole 4-16-2, batch 16": ("algo=dqn", "algo.hidden=[16]",
                                           "algo.batch_size=16")}


def measure(overrides: tuple[str, ...], repeats: int, compiled: bool, cached: bool) -> dict:
    """One workload's figures (seconds; `cached`: with the cached start), or its eager time
    and why it does not compile (`compiled` False: eager only); the rows of its batch."""
    c = _built(overrides)
    learner, device = c.learner, c.platform.device
    batch = job_batch(learner, c.spaces, c.replay)
    context = partial(c.precision.autocast, device)
    rows = {"rows": learner.batch_size}
    if why := unsupported(learner) or (None if compiled else "timed eager only"):
        eager = time_updates({"eager": lambda: learner.eager_update(batch)}, learner, context,
                             repeats=repeats)
        return {"eager_s": eager["eager"], "why_eager": why, **rows}
    updates = {"eager": lambda: learner.eager_update(batch)}
    jax = {"why_no_jax": jax_reference.why_none(learner)}
    if not jax["why_no_jax"]:  # checked against the learner as built: no Adam state yet
        updates["jax"], jax = _jax_reference(learner, batch)
    cache = "warm" if last_compile(learner, batch) else "cold"
    first_s = _compile(learner, batch, context)
    updates["compiled"] = lambda: learner.compiled_step(batch)
    times = time_updates(updates, learner, context, warmup=5, repeats=repeats)
    alone = time_updates({"compiled": updates["compiled"]}, learner, context, warmup=5,
                         repeats=repeats)["compiled"]
    return {"eager_s": times["eager"], "compiled_s": times["compiled"], "compile_s": first_s,
            "compiled_alone_s": alone, "gflop": update_gflop(learner, batch, context),
            "cache": cache, "cached_start_s": _cached_start(overrides) if cached else None,
            "jax_s": times.get("jax"), **jax, **rows}


def update_gflop(learner: Learner, batch: object, context: Callable) -> float:
    """The floating-point work of one eager update (forward, backward, optimizer), GFLOP as
    torch's FLOP counter counts it (matrix products and convolutions)."""
    with unchanged(learner), context(), FlopCounterMode(display=False) as counter:
        learner.eager_update(batch)
    return counter.get_total_flops() / 1e9


def _jax_reference(learner: Learner, batch: object) -> tuple[Callable, dict]:
    """`learner`'s update under jax.jit, compiled, and what its compile took; first checked
    to be the same update: one step of it lands where one eager step does (on a copy)."""
    difference = jax_reference.matches(copy.deepcopy(learner), batch)
    if difference > 1e-5:
        raise AssertionError(f"the JAX reference is not the same update: {difference:.1e}")
    reference = jax_reference.JaxDQN(learner, batch)
    start = time.perf_counter()
    reference()
    return reference, {"jax_compile_s": time.perf_counter() - start, "jax_diff": difference}


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[str]:
    """A folder holding the package `hetrl` and its `conf` as they were at git revision `rev`."""
    with tempfile.TemporaryDirectory() as tree:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "hetrl", "conf"],
                                 capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        yield tree


def measure_before(tree: str, overrides: tuple[str, ...], repeats: int, compiled: bool) -> dict:
    """The workload's figures on the package in `tree` (this benchmark in a new process with
    it first on PYTHONPATH, this checkout after it: `common` then adds no other), without
    the cached start."""
    flags = ["--repeats", str(repeats), *([] if compiled else ["--eager-only"])]
    out = subprocess.run([sys.executable, __file__, *flags, "--measure", *overrides],
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([tree, str(ROOT)])},
                         capture_output=True, text=True, check=True, timeout=1800)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    assert figures.pop("package").startswith(tree), "the code measured is not REV's"
    return figures


def _built(overrides: tuple[str, ...] | list[str]) -> Components:
    """The workload's job, built (planned where its precision needs a plan: mixed)."""
    c = build_job(*overrides, "tracking=none", "compile=false",
                  plan="precision=mixed" in overrides)
    c.envs.close()
    return c


def _compile(learner: Learner, batch: object, context: Callable) -> float:
    """Seconds to the first compiled update of `learner` (installed on it)."""
    learner.compiled_step = GraphStep(learner, update_compiler(learner))
    start = time.perf_counter()
    with context():
        learner.compiled_step(batch)
    return time.perf_counter() - start


def _cached_start(overrides: tuple[str, ...]) -> float:
    """The compile of the same update in a new process, as the next job of a sweep starts:
    from inductor's cache on disk (this process's own caches left out); its first update less
    that update's own run (MADDPG-24's takes 2 s), timed as a second update right after."""
    out = subprocess.run([sys.executable, __file__, "--compile-only", *overrides],
                         capture_output=True, text=True, check=True, timeout=600)
    return float(out.stdout.strip().splitlines()[-1])


def compile_only(overrides: list[str]) -> None:
    """Print the seconds the first compiled update of the workload takes here, less the
    seconds of the update's own run (a second update)."""
    c = _built(overrides)
    context = partial(c.precision.autocast, c.platform.device)
    batch = job_batch(c.learner, c.spaces, c.replay)
    first = _compile(c.learner, batch, context)
    start = time.perf_counter()
    with context():
        c.learner.compiled_step(batch)
    print(first - (time.perf_counter() - start))


def row(name: str, m: dict) -> list[str]:
    eager, rows = f"{1e6 * m['eager_s']:,.0f}", f"{m['rows']:,}"
    if "compiled_s" not in m:
        return [name, rows, eager, "—", "—", "—", "—", "—", "—", "—", "—",
                f"eager only: {m['why_eager']}"]
    cached = "—" if m["cached_start_s"] is None else f"{m['cached_start_s']:.1f}"
    jax, vs_jax = ("—", "—") if m.get("jax_s") is None else (
        f"{1e6 * m['jax_s']:,.0f}", f"{m['compiled_s'] / m['jax_s']:.2f}x")
    return [name, rows, eager, f"{1e6 * m['compiled_s']:,.0f}",
            f"{1e6 * m['compiled_alone_s']:,.0f}",
            f"{m['eager_s'] / m['compiled_s']:.2f}x", jax, vs_jax,
            f"{m['gflop'] / m['compiled_s']:,.1f}",
            f"{m['compile_s']:.1f} ({m['cache']})", cached,
            m.get("why_no_jax") or f"jax.jit's compile {m['jax_compile_s']:.1f} s"]


def measure_all(workloads: dict[str, tuple[str, ...]], args: argparse.Namespace,
                tree: str | None) -> dict[str, dict]:
    """Each workload's figures; with `tree` (--before), first on the code there, in turns."""
    results = {}
    for name, overrides in workloads.items():
        if tree is not None:
            results[f"{name} [before {args.before}]"] = measure_before(
                tree, overrides, args.repeats, not (args.eager_only or args.before_eager))
        results[name] = measure(overrides, args.repeats, not args.eager_only, True)
    return results


GEMMS = {"forward (256×400)·(400×300)": (256, 400, 300),
         "weight gradient (400×256)·(256×300)": (400, 256, 300),
         "input gradient (256×300)·(300×400)": (256, 300, 400),
         "square 1024³": (1024, 1024, 1024)}
"""DDPG [400,300] at batch 256: its largest layer's three GEMMs, and a large square one."""


def bf16_ceiling(repeats: int) -> None:
    """The most bf16 can give a compute-bound update on this CPU: its GEMMs timed in fp32
    and in bf16 (the mixed plan's dtype), one thread, in turns; the physical limit beside
    the mixed row's speedup over eager fp32."""
    rows = []
    for name, (m, k, n) in GEMMS.items():
        a, b = torch.randn(m, k), torch.randn(k, n)
        a16, b16 = a.bfloat16(), b.bfloat16()
        seconds = time_turns({"fp32": lambda: a @ b, "bf16": lambda: a16 @ b16},
                             contextlib.nullcontext, warmup=2, repeats=max(repeats // 4, 5))
        fp32, bf16 = seconds["fp32"], seconds["bf16"]
        rows.append([name, f"{1e6 * fp32:,.0f}", f"{1e6 * bf16:,.0f}",
                     f"{2 * m * k * n / bf16 / 1e9:,.0f}", f"{fp32 / bf16:.2f}x"])
    table(["GEMM", "fp32 µs", "bf16 µs", "bf16 GFLOP/s", "bf16 / fp32"], rows,
          title="bf16's ceiling on this CPU: a compute-bound update's GEMMs (median, 1 thread)",
          align="lrrrr")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="one tiny workload, no results")
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--only", nargs="*", default=None, help="workloads whose name has these")
    parser.add_argument("--eager-only", action="store_true", help="time the eager update only")
    parser.add_argument("--before", metavar="REV", help="each workload on the code of git "
                        "revision REV too (in a new process), before this code's")
    parser.add_argument("--before-eager", action="store_true",
                        help="REV's update eager only (MADDPG before d030873 compiled a graph "
                             "per trainer: 24 compiles at 24 agents)")
    parser.add_argument("--compile-only", nargs="*", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--measure", nargs="*", default=None, help=argparse.SUPPRESS)
    args = parse_args(parser)
    torch.set_num_threads(1)
    if args.compile_only is not None:
        return compile_only(args.compile_only)
    if args.measure is not None:  # one workload, for --before: its figures as JSON
        figures = measure(tuple(args.measure), args.repeats, not args.eager_only, False)
        return print(json.dumps({**figures, "package": hetrl.__file__}))
    workloads = SMOKE if args.smoke else WORKLOADS
    if args.only:
        workloads = {k: v for k, v in workloads.items() if any(o in k for o in args.only)}
    args.repeats = 5 if args.smoke else args.repeats
    print(host_line(), f"\ninductor cache: {cache_dir()}")
    with checkout(args.before) if args.before else contextlib.nullcontext() as tree:
        results = measure_all(workloads, args, tree)
    table(["workload", "rows", "eager µs", "compiled µs", "compiled alone µs", "speedup",
           "jax.jit µs", "compiled / jax", "compiled GFLOP/s", "first compile s",
           "cached start s", "note"],
          [row(name, m) for name, m in results.items()],
          title="One update, eager vs compiled vs jax.jit (median, 1 thread)",
          align="lrrrrrrrrrrl")
    if any("mixed" in name for name in workloads):
        bf16_ceiling(args.repeats)


if __name__ == "__main__":
    main()
    write_results()
