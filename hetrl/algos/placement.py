"""Modules run on tensors of one's choosing, as `torch.func.functional_call` runs them, at a
fraction of what dynamo traces for it.

functional_call finds each tensor's module by walking every module for every name, twice
(to place the tensors and to put the module's own back), and checks ties on the way: in a
compiled update dynamo traces all of that Python, which was two thirds of the trace of
AlphaZero's update (65K of 91K bytecodes, 120 tensors in ~100 modules) and of MADDPG's.
Here a module's slots are found once, where it is built, and placing tensors is one write
a slot."""

from __future__ import annotations

import torch
from torch import nn

Slot = tuple[dict[str, torch.Tensor], str, str]
"""Where one tensor of a module sits: a submodule's `_parameters` or `_buffers`, its key there,
and the module's name of the tensor (a tied tensor sits in several slots under one name)."""


def slots(module: nn.Module, buffers: bool = True) -> list[Slot]:
    """Every slot of the module's parameters (and buffers), module by module in `modules()`
    order (each module's parameters, then its buffers): the order `parameters(submodules(m))`
    lists a module's parameters in."""
    named = [*module.named_parameters(), *(module.named_buffers() if buffers else ())]
    names = {id(t): name for name, t in named}
    return [(owner, key, names[id(t)]) for m in module.modules()
            for owner in (m._parameters, *((m._buffers,) if buffers else ()))
            for key, t in owner.items() if t is not None]


def place(where: list[Slot], tensors: list[torch.Tensor]) -> None:
    """The slots hold `tensors`, one a slot (the module's own again: `held(where)`, kept from
    before)."""
    for (owner, key, _), tensor in zip(where, tensors):
        owner[key] = tensor


def held(where: list[Slot]) -> list[torch.Tensor]:
    """What the slots hold now."""
    return [owner[key] for owner, key, _ in where]


def submodules(module: nn.Module) -> list[nn.Module]:
    """The module and every submodule, in `modules()` order: a plain walk, which dynamo
    traces in a fraction of `modules()`' bytecodes (no names, no memo of modules seen; a
    module held twice is listed twice)."""
    found = [module]
    for child in module._modules.values():
        if child is not None:
            found += submodules(child)
    return found


def parameters(modules: list[nn.Module]) -> list[torch.Tensor]:
    """The parameters of `modules` (a module's `submodules`) as they are now (placed ones
    included), in `parameters()` order (a tied one listed where it sits)."""
    return [p for m in modules for p in m._parameters.values() if p is not None]
