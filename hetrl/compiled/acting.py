"""`compile` for the acting path: the actors' policy forward (fp32, fp16, int8), compiled
where that pays, by the update's own rule (hetrl.compiled.choose).

The choice is made once, in the learner's process while the job is built, on a CPU copy of
the policy in the actors' precision and at their batch (one row per env of an actor), on one
torch thread as the actors run: so every actor acts alike, the figures are logged beside the
update's (host/act_eager_s, host/act_compiled_s, host/act_compile_s), and the probe's compile
fills this machine's kernel cache, from which each actor compiles its own copy (a compiled
function cannot be sent to another process) on its first forward. The cost weighed is one
compile per actor against the forward time saved over the actors' share of the budget: one
forward per vector-env step past `learning_starts`.

What torch 2.13 traces (measured on the project's 2-core hosts): fp32 policies, and int8
`paper` fake quant, compile as one graph; the torch.ao kernels (int8 `kernel`, and fp16's
fbgemm GEMM) hold their packed weights in a TorchScript object that dynamo cannot put in a
graph ("Failed to convert args/kwargs to proxy ... ScriptObject"), so those policies act
eager whatever `compile` says, and the choice line says why.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
from torch import nn

from hetrl.compiled.choose import (UpdateChoice, decided, record_key, time_turns, too_small,
                                   unpaid)
from hetrl.compiled.toolchain import missing, use_caches
from hetrl.quant import QuantSpec, quantize_policy

BACKEND = "inductor"
"""torch.compile's backend for the acting forward (tests trace with `aot_eager`)."""
NOUN = "actor forwards"


def compiled_policy(policy: nn.Module) -> nn.Module:
    """`policy` with its forward compiled as one graph of static shapes; its parameters and
    buffers are read at each call, so a pull's in-place load needs no recompile."""
    use_caches()
    return torch.compile(policy, backend=BACKEND, fullgraph=True, dynamic=False)


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Torch on one thread inside the block, as each actor runs (`configure_torch(1)`)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def choose_acting(policy: nn.Module, spec: QuantSpec, obs: torch.Tensor, mode: str,
                  forwards: int, actors: int) -> UpdateChoice:
    """Whether the actors' forward of `policy` (the fp32 network on the CPU, as the actors
    copy it) in `spec`'s precision compiles; `obs` is one actor's batch of observations,
    `forwards` the actors' forwards over the budget, `actors` how many compile it (`true`
    skips the budget, not the timing)."""
    if mode == "false":
        return UpdateChoice(mode, False, "as asked", subject="acting")
    acting = quantize_policy(policy, spec)
    with one_thread():
        eager_s = time_turns({"eager": lambda: acting(obs)}, torch.inference_mode, warmup=3,
                             repeats=15)["eager"]
        if mode == "auto" and (why := too_small(forwards, eager_s, NOUN)) is not None:
            return UpdateChoice(mode, False, why, eager_s=eager_s, subject="acting")
        if (why := missing(torch.device("cpu"))) is not None:
            return UpdateChoice(mode, False, f"cannot compile: {why}", eager_s=eager_s,
                                subject="acting")
        key = record_key(f"acting|{BACKEND}|{type(policy).__name__}|{spec.name}",
                         policy.state_dict(), [obs])
        if mode == "auto" and (why := unpaid(key, forwards, eager_s, actors, NOUN)):
            return UpdateChoice(mode, False, why, eager_s=eager_s, subject="acting")
        return _compile_and_time(acting, spec.name, obs, mode, key, forwards, eager_s)


def _compile_and_time(policy: nn.Module, name: str, obs: torch.Tensor, mode: str, key: str,
                      forwards: int, eager_s: float) -> UpdateChoice:
    """Compile the forward (eager, with the reason, where dynamo cannot trace it whole:
    under `true` too, since the update compiled as asked), then time it against eager in
    turns: it acts compiled only where that measured faster, `true` included (`true` asks
    for the compiled update; a slower forward in every actor would only cost: PEARL's
    DQN-CartPole actors acted at 0.72x the EPS with the compiled forward forced)."""
    compiled = compiled_policy(policy)
    try:
        compile_s = time_turns({"first": lambda: compiled(obs)}, torch.inference_mode,
                               warmup=0, repeats=1)["first"]
    except Exception as error:  # noqa: BLE001 - dynamo's or inductor's: eager acts instead
        text = str(error).strip()
        why = f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"
        if "ScriptObject" in text:
            why = f"torch.ao's packed weights are a TorchScript object dynamo cannot trace ({why})"
        return UpdateChoice(mode, False, f"cannot compile the {name} policy as one graph: {why}",
                            eager_s=eager_s, subject="acting")
    times = time_turns({"eager": lambda: policy(obs), "compiled": lambda: compiled(obs)},
                       torch.inference_mode, warmup=3, repeats=15)
    return decided(mode, key, forwards, times, compile_s, subject="acting", forced=False)
