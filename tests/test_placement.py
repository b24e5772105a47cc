"""Placing tensors in a module's slots runs it as `torch.func.functional_call` runs it, ties and
buffers included, and placing its own back leaves it as it was."""

import torch
from torch import nn
from torch.func import functional_call

from hetrl.algos.placement import held, parameters, place, slots, submodules


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
