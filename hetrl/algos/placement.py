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


def slots(module: nn.Module) -> list[Slot]:
    """Every slot of the module's parameters and buffers, module by module in `modules()`
    order (each module's parameters, then its buffers): the order `parameters(submodules(m))`
    lists a module's parameters in."""
    named = [*module.named_parameters(), *module.named_buffers()]
    names = {id(t): name for name, t in named}
    return [(owner, key, names[id(t)]) for m in module.modules()
            for owner in (m._parameters, m._buffers) for key, t in owner.items()
            if t is not None]


def place(where: list[Slot], tensors: list[torch.Tensor]) -> None:
    """The slots hold `tensors`, one a slot (the module's own again: `held(where)`, kept from
    before)."""
    for (owner, key, _), tensor in zip(where, tensors):
        owner[key] = tensor


def aligned(where: list[Slot], names: list[str]) -> tuple[list[Slot], list[tuple[Slot, int]]]:
    """`where` in the order of `names` (each a tensor's name in the slots): the first slot of
    each, to `place` tensors listed in that order; and the other slots (a tied tensor's), each
    with the position of its tensor among `names` (`place_ties`)."""
    at = {name: k for k, name in enumerate(names)}
    first: dict[str, Slot] = {}
    ties: list[tuple[Slot, int]] = []
    for slot in where:
        if slot[2] in first:
            ties.append((slot, at[slot[2]]))
        else:
            first[slot[2]] = slot
    return [first[name] for name in names], ties


def place_ties(ties: list[tuple[Slot, int]], tensors: list[torch.Tensor]) -> None:
    """A tied tensor's other slots hold it too (`aligned`'s ties, of `tensors` in its order)."""
    for (owner, key, _), k in ties:
        owner[key] = tensors[k]


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
