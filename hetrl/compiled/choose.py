"""`compile=auto|true|false`: whether a job's updates run compiled, decided while it is built.

`auto` weighs what compiling costs against what it can save over the job's budget of
updates, before paying for it: the eager update is timed on the job's real shapes (a few
updates); the saving is the budget's eager time times what compiling the same update saved
last time on this machine (the cache's record), else what it is assumed to save
(ASSUMED_SPEEDUP); the compile time is that of a compile from the cache where the record
exists, else COLD_COMPILE_S. Compiling goes ahead only where the saving exceeds it. Once compiled, the two updates are timed in turns and the faster one trains (the
compile time is spent by then). `true` compiles whatever the budget, and fails before
training where the update cannot compile or the machine cannot build kernels; `false` keeps
the eager update."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import logging
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import Any, Callable, Iterator

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hetrl.algos.base import Batch, Learner
from hetrl.compiled.step import GraphStep, unsupported
from hetrl.compiled.toolchain import missing, record, records, use_caches
from hetrl.config.errors import ConfigError
from hetrl.platform.measure import random_batch
from hetrl.replay.samplers import PrioritizedSampler
from hetrl.seeding import rng_states, set_rng_states

log = logging.getLogger("hetrl")

COLD_COMPILE_S = 60.0
"""The compile time assumed for an update this machine never compiled (first compiles took
11-63 s on the project's busy 2-core hosts; a warm cache 3-4 s)."""
ASSUMED_SPEEDUP = 2.0
"""What a never-compiled update is assumed to gain (the issue measured 1.0x for DDPG
[400,300], 1.8x for the rl-zoo3 DQN, 5.2x for PEARL's 4-64-2 DQN): the compiled update's
measured time replaces it once this machine compiled the update."""
COLD_OVER_WARM = 4.0
"""How much longer a cold compile takes than one from the cache (11-49 s against 3-4 s in
the issue; 82 s against 12 s on a busy 2-core host)."""
WARM_COMPILE_S = 3.0
"""The least a compile takes, from a warm cache: a budget that cannot save this is eager at
once, without timing anything beyond a few eager updates."""


@dataclass
class UpdateChoice:
    """What `compile` chose for the job's update (or, `subject="acting"`, for the actors'
    policy forward: hetrl.compiled.acting) and the figures it chose on."""

    mode: str
    compiled: bool
    reason: str
    eager_s: float | None = None
    compiled_s: float | None = None
    compile_s: float | None = None
    subject: str = "update"

    def metrics(self) -> dict[str, float]:
        """host/update_eager_s, host/update_compiled_s, host/compile_s (acting:
        host/act_eager_s, host/act_compiled_s, host/act_compile_s): those measured."""
        if self.subject == "update":
            names = ("update_eager_s", "update_compiled_s", "compile_s")
        else:
            names = ("act_eager_s", "act_compiled_s", "act_compile_s")
        figures = zip(names, (self.eager_s, self.compiled_s, self.compile_s))
        return {f"host/{k}": v for k, v in figures if v is not None}

    def line(self) -> str:
        kind = "compiled" if self.compiled else "eager"
        return f"compile={self.mode}: {kind} {self.subject} ({self.reason})"


AUTOCAST_REGIONS = {f"torch.amp.autocast_mode.{name}": torch.__version__
                    for name in ("_enter_autocast", "_exit_autocast")}
"""Autocast's region markers in a graph (a 16-bit layer of a precision plan), which AOT
autograd's cache refuses as unknown functions: their arguments (device, dtype, enabled) are
constants of the graph, so its cache key tells the regions apart. Without them, a graph with
a region is traced through AOT autograd again by every job (the mixed plan's cached start
21 s, against 4-5 s for the same update in float32)."""


def compiler(device: torch.device, cpp_wrapper: bool = False) -> Callable[[Callable], Callable]:
    """torch.compile as the update takes it: one whole graph, static shapes, random numbers
    drawn as eager draws them (the same run, compiled or not); on CUDA, captured as a CUDA
    graph (`reduce-overhead`, which takes no options); on the CPU with `cpp_wrapper`, its
    kernels called from one C++ function, not one by one from Python (`update_compiler`).

    Each function compiled gets its own graphs (`isolate_recompiles`), and on the CPU they
    keep only dynamo's guards on the input tensors (shapes, strides, dtypes), which inductor
    does not check again (`size_asserts`): the default guards on the learner's modules,
    attributes and the function's closure cost half a small update (PEARL's 4-64-2 at batch
    32: 146 µs a step with them, 84 µs without; benchmarks/compiled_update.py) and guard
    what a job never changes while it trains. What does change is the update's form, and
    each form is a function of its own (`GraphStep`); a loss reads no Python state that
    changes between updates (the update count comes in as a tensor)."""
    use_caches()
    # every form of every learner's update in a process (TD3's two, a benchmark's workloads)
    # is a graph of one function: past dynamo's default of 8
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    # on every device: a CUDA graph's update goes through AOT autograd's cache too
    torch._inductor.config.unsafe_marked_cacheable_functions.update(AUTOCAST_REGIONS)
    if device.type == "cuda":
        return lambda fn: torch.compile(fn, fullgraph=True, dynamic=False,
                                        mode="reduce-overhead", isolate_recompiles=True)
    return lambda fn: torch.compile(fn, fullgraph=True, dynamic=False, isolate_recompiles=True,
                                    options=cpu_options(cpp_wrapper))


def cpu_options(cpp_wrapper: bool = False) -> dict:
    """Inductor's options for a graph on the CPU (a new dict: torch.compile pops from it)."""
    return {"fallback_random": True, "size_asserts": False, "cpp_wrapper": cpp_wrapper,
            "guard_filter_fn": torch.compiler.keep_tensor_guards_unsafe}


def update_compiler(learner: Learner) -> Callable[[Callable], Callable]:
    """The compiler of `learner`'s update: with the C++ wrapper unless its networks convolve.
    Measured here (one thread, compiled µs an update, Python wrapper -> C++): PEARL's 4-64-2
    93 -> 85, its QAT 129 -> 103, in fp16 382 -> 148, rl-zoo3's DQN 585 -> 555, PPO 492 ->
    464, TD3 [64,64] 548 -> 498, A2C 221 -> 193, MADDPG-3 and D4PG even; the Nature CNN's
    30.2-30.7 ms -> 33.8-35.8 ms (its convolutions' calls through the C shim, not found
    why), so a convolving update keeps the Python wrapper. A first compile takes up to 2x."""
    convolves = any(isinstance(module, (nn.Conv1d, nn.Conv2d, nn.Conv3d))
                    for module in learner.modules())
    return compiler(learner.device, cpp_wrapper=not convolves)


def choose_update(learner: Learner, mode: str, updates: int | None, batch: Any,
                  context: Callable[[], contextlib.AbstractContextManager]) -> UpdateChoice:
    """Decide, install (`learner.compiled_step`) and return the job's update choice; `updates`
    is the job's budget of updates (None: unknown), `batch` one of the job's shapes,
    `context()` the precision's autocast each update runs in. A small budget is told at once:
    one eager update is timed, nothing is compiled."""
    if mode == "false":
        return UpdateChoice(mode, False, "as asked")
    if mode == "auto" and updates is None:
        return UpdateChoice(mode, False, "the job's number of updates is unknown")
    if (why := unsupported(learner)) is not None:
        return _cannot_compile(learner, mode, why)
    eager_s = None
    if mode == "auto":
        eager_s = time_updates({"eager": lambda: learner.eager_update(batch)}, learner,
                               context, warmup=1, repeats=1)["eager"]
        if (why := too_small(updates, eager_s)) is not None:  # not even a cached compile
            return UpdateChoice(mode, False, why, eager_s=eager_s)
    if (why := missing(learner.device)) is not None:  # imports inductor: past the cheap exits
        return _cannot_compile(learner, mode, why, eager_s)
    if mode == "auto" and (not_worth := _not_worth_compiling(learner, updates, batch, context)):
        return not_worth
    try:
        return _compile_and_time(learner, mode, updates, batch, context)
    except Exception as error:  # noqa: BLE001 - a compiler's failure: eager trains instead
        if mode == "true":
            raise RuntimeError(f"compile=true: the update of {type(learner).__name__} did not "
                               f"compile: {error}") from error
        log.debug("compile failed", exc_info=True)
        return UpdateChoice(mode, False, f"compiling failed: {str(error).splitlines()[0]}",
                            eager_s=eager_s)


def _cannot_compile(learner: Learner, mode: str, why: str,
                    eager_s: float | None = None) -> UpdateChoice:
    """compile=true fails naming `why` the update cannot compile; auto and false train eager."""
    if mode == "true":
        raise ConfigError(f"compile=true cannot compile the update of {type(learner).__name__}: "
                          f"{why} (compile=auto or false run it eager)")
    return UpdateChoice(mode, False, f"cannot compile: {why}", eager_s=eager_s)


def _not_worth_compiling(learner: Learner, updates: int, batch: Any,
                         context: Callable[[], contextlib.AbstractContextManager]
                         ) -> UpdateChoice | None:
    """compile=auto's choice of eager where compiling would not pay (`unpaid`)."""
    eager_s = time_updates({"eager": lambda: learner.eager_update(batch)}, learner,
                           context)["eager"]
    if (why := unpaid(_key(learner, batch), updates, eager_s)) is None:
        return None
    return UpdateChoice("auto", False, why, eager_s=eager_s)


def unpaid(key: str, calls: int, eager_s: float, compiles: int = 1,
           noun: str = "updates") -> str | None:
    """Why compiling the computation `key` would not pay (None: it may): the saving over
    its budget of `calls` (at the speedup measured last time on this machine, else
    ASSUMED_SPEEDUP) is less than its `compiles` compiles would take (each from the cache
    where this machine compiled it before, else COLD_COMPILE_S)."""
    last = records().get(key)
    ratio = last["ratio"] if last else 1.0 / ASSUMED_SPEEDUP
    saving = calls * eager_s * max(0.0, 1.0 - ratio)
    expected = COLD_COMPILE_S
    if last:  # the kernels are cached: a compile as quick as the last warm one
        expected = last["compile_s"] / (1.0 if last.get("warm") else COLD_OVER_WARM)
    expected *= compiles
    if saving >= max(expected, WARM_COMPILE_S):
        return None
    source = "as last time on this machine" if last else "not compiled on this machine yet"
    return _not_worth(calls, eager_s, saving, expected, source, noun)


def too_small(calls: int, eager_s: float, noun: str = "updates") -> str | None:
    """Why a budget of `calls` of `eager_s` cannot repay even a compile from a warm cache
    (None: it may)."""
    if calls * eager_s >= WARM_COMPILE_S / 2:
        return None
    return _not_worth(calls, eager_s, calls * eager_s, WARM_COMPILE_S, "from a warm cache", noun)


def _not_worth(calls: int, eager_s: float, saving: float, expected: float,
               source: str, noun: str) -> str:
    return (f"{calls:,} {noun} of {1e3 * eager_s:.2f} ms eager save at most "
            f"{saving:.1f} s, less than compiling ({expected:.0f} s, {source})")


def _compile_and_time(learner: Learner, mode: str, updates: int | None, batch: Any,
                      context: Callable[[], contextlib.AbstractContextManager]) -> UpdateChoice:
    step = GraphStep(learner, update_compiler(learner))
    key = _key(learner, batch)
    with unchanged(learner):
        start = perf_counter()
        with context():
            step(batch)
        compile_s = perf_counter() - start
    times = time_updates({"eager": lambda: learner.eager_update(batch),
                          "compiled": lambda: step(batch)}, learner, context)
    choice = decided(mode, key, updates, times, compile_s)
    if choice.compiled:
        learner.compiled_step = step
    return choice


def decided(mode: str, key: str, calls: int | None, times: dict[str, float], compile_s: float,
            subject: str = "update", forced: bool = True) -> UpdateChoice:
    """The choice once the computation `key` compiled (in `compile_s`) and was timed eager
    and compiled (`times`): compiled where asked (`true`, where it `forced`) or faster; what
    it took is kept for the next job's `unpaid`."""
    eager_s, compiled_s = times["eager"], times["compiled"]
    _remember(key, compile_s, compiled_s / eager_s, warm=key in records())
    faster, asked = compiled_s < eager_s, mode == "true" and forced
    figures = (f"{'an update' if subject == 'update' else 'a forward'} "
               f"{1e3 * compiled_s:.2f} ms compiled, {1e3 * eager_s:.2f} ms eager, "
               f"compiled in {compile_s:.1f} s")
    if asked:
        reason = f"as asked; {figures}"
    elif faster:
        saving = f", saving about {calls * (eager_s - compiled_s):.0f} s" if calls else ""
        reason = f"{eager_s / compiled_s:.1f}x faster{saving}; {figures}"
    else:
        reason = f"compiled is no faster here; {figures}"
    return UpdateChoice(mode, asked or faster, reason, eager_s, compiled_s, compile_s, subject)


def time_updates(updates: dict[str, Callable[[], Any]], learner: Learner,
                 context: Callable[[], contextlib.AbstractContextManager],
                 warmup: int = 3, repeats: int = 15) -> dict[str, float]:
    """Median seconds of each update, taking turns, each turn on the next update count (so
    each update meets every form of a rule that changes with the count: TD3's delayed actor
    on every other turn); the learner is put back as it was (`unchanged`): timing trains
    nothing."""
    def next_turn() -> None:
        learner.updates += 1

    sync = (partial(torch.cuda.synchronize, learner.device) if learner.device.type == "cuda"
            else None)
    with unchanged(learner):
        return time_turns(updates, context, warmup, repeats, next_turn, sync)


def time_turns(calls: dict[str, Callable[[], Any]],
               context: Callable[[], contextlib.AbstractContextManager],
               warmup: int, repeats: int, after: Callable[[], None] | None = None,
               sync: Callable[[], None] | None = None) -> dict[str, float]:
    """Median seconds of each call (each inside `context()`, then `sync()`: a device's
    queue drained), the calls taking turns so that a busy host's drift hits them alike;
    `after()` runs between turns, untimed."""
    samples: dict[str, list[float]] = {name: [] for name in calls}
    for i in range(warmup + repeats):
        for name, call in calls.items():
            start = perf_counter()
            with context():
                call()
            if sync is not None:
                sync()
            if i >= warmup:
                samples[name].append(perf_counter() - start)
        if after is not None:
            after()
    return {name: float(np.median(s)) for name, s in samples.items()}


@contextlib.contextmanager
def unchanged(learner: Learner) -> Iterator[None]:
    """The updates inside the block (timing probes, on a random batch of the job's shapes)
    leave no trace: the learner's parameters, optimizer state, update count and carried
    metrics, and every RNG, are put back as they were."""
    saved = copy.deepcopy((learner.checkpoint(), learner.carried_metrics))
    rngs = rng_states()
    try:
        yield
    finally:
        checkpoint, learner.carried_metrics = saved
        learner.restore(checkpoint)
        set_rng_states(rngs)


def job_batch(learner: Learner, spaces: dict[str, gym.Space], replay: object = None) -> Any:
    """A batch of the job's shapes and fields, drawn from a generator of its own: as the
    job's replay samples them (a uniform replay's bootstrap discounts, a prioritized one's
    indices and importance weights), so the graph compiled on it is the one training runs."""
    batch = random_batch(learner, **spaces, n=learner.batch_size, device=learner.device)
    if replay is None or not isinstance(batch, Batch):
        return batch
    n = len(batch.rewards)
    if hasattr(replay, "gamma"):  # a single-agent replay: every row's discount
        batch = batch._replace(discounts=torch.full((n,), replay.gamma, device=learner.device))
    if isinstance(getattr(replay, "sampler", None), PrioritizedSampler) or getattr(
            replay, "prioritized", False):
        batch = batch._replace(indices=np.arange(n), weights=torch.ones(n, device=learner.device))
    return batch


def _key(learner: Learner, batch: Any) -> str:
    """The update's identity for the records: learner, device, parameter and batch shapes."""
    return record_key(f"{type(learner).__name__}|{learner.device}", learner.state_dict(),
                      [t for t in batch if torch.is_tensor(t)])


def record_key(name: str, tensors: dict[str, Any], inputs: list[torch.Tensor]) -> str:
    """A compiled computation's identity for the records: `name`, the torch version, the
    shapes and dtypes of its (named) `tensors` and the shapes of its `inputs`."""
    shapes: list = [(n, tuple(t.shape), str(t.dtype)) for n, t in tensors.items()
                    if torch.is_tensor(t)]
    shapes += [tuple(t.shape) for t in inputs]
    text = f"{name}|{torch.__version__}|{shapes}"
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def last_compile(learner: Learner, batch: Any) -> dict | None:
    """What compiling this update took on this machine last time (compile_s, and ratio: the
    compiled over the eager update's time), None where it never compiled it."""
    return records().get(_key(learner, batch))


def _remember(key: str, compile_s: float, ratio: float, warm: bool) -> None:
    """Keep what this compile took (from the cache or not) and the compiled/eager time ratio
    it measured."""
    record(key, {"compile_s": compile_s, "ratio": ratio, "warm": warm})
