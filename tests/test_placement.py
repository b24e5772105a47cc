"""Placing tensors in a module's slots runs it as `torch.func.functional_call` runs it, ties and
buffers included, and placing its own back leaves it as it was."""

import torch
from torch import nn
from torch.func import functional_call

from hetrl.algos.placement import (aligned, held, parameters, place, place_ties, slots,
                                   submodules)


def _tied() -> nn.Module:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 3))
    net[3].weight = net[0].weight  # one tensor in two slots
    return net


def test_placed_tensors_run_the_module_as_functional_call_does():
    net, x = _tied(), torch.randn(5, 3)
    where, own = slots(net), held(slots(net))
    named = dict(net.named_parameters()) | dict(net.named_buffers())  # the tie named once
    assert sorted({name for _, _, name in where}) == sorted(named)
    assert len(where) == len(named) + 1  # the tied weight's second slot
    tensors = {name: torch.randn_like(t) if t.is_floating_point() else t.clone()
               for name, t in named.items()}
    expected = functional_call(_tied(), tensors, (x,))
    place(where, [tensors[name] for _, _, name in where])
    out = net(x)
    place(where, own)
    assert torch.equal(out, expected)
    assert all(a is b for a, b in zip(held(where), own))
    assert net[3].weight is net[0].weight


def test_the_plain_walks_list_what_modules_and_parameters_list():
    net = nn.Sequential(nn.Linear(2, 4), nn.Sequential(nn.ReLU(), nn.Linear(4, 1, bias=False)))
    assert submodules(net) == list(net.modules())
    assert all(a is b for a, b in zip(parameters(submodules(net)), net.parameters(), strict=True))


def test_aligned_slots_take_tensors_in_the_order_of_their_names_ties_included():
    net, x = _tied(), torch.randn(5, 3)
    where, own = slots(net), held(slots(net))
    names = sorted({name for _, _, name in where}, reverse=True)  # any order
    first, ties = aligned(where, names)
    assert [name for _, _, name in first] == names and len(ties) == 1
    tensors = [torch.randn_like(own[0]) if name == "0.weight" else dict(
        [*net.named_parameters(), *net.named_buffers()])[name].clone() for name in names]
    expected = functional_call(_tied(), dict(zip(names, tensors)), (x,))
    place(first, tensors)
    place_ties(ties, tensors)
    out = net(x)
    place(where, own)
    assert torch.equal(out, expected)
    assert net[3].weight is net[0].weight
