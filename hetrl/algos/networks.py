"""Building blocks the learners share: MLPs, the Nature CNN, a bounded actor, a stochastic
policy, Q critics (scalar and distributional), target copies."""

from __future__ import annotations

import copy
from contextlib import contextmanager
from typing import Callable, Iterable, Iterator, TypeVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from hetrl.partition.flops import NoNode

Net = TypeVar("Net", bound=nn.Module)

ACTORQ_POLICY_HIDDEN = [2048, 2048, 2048]
"""QuaRL's ActorQ policy network (A.3): `algo.policy_hidden=[2048,2048,2048]`; its critic is
3 x 512 (`algo.hidden=[512,512,512]`)."""


def mlp(sizes: list[int], output_activation: type[nn.Module] | None = None,
        activation: type[nn.Module] = nn.ReLU,
        layer: Callable[[int, int], nn.Module] = nn.Linear) -> nn.Sequential:
    """Linear layers (`layer(n_in, n_out)`) of the given widths with `activation` between
    them."""
    layers: list[nn.Module] = []
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(layer(n_in, n_out))
        if i < len(sizes) - 2:
            layers.append(activation())
    if output_activation is not None:
        layers.append(output_activation())
    return nn.Sequential(*layers)


class ScaleImage(NoNode):
    """uint8 pixels to floats in [0, 1]: the replay keeps frames as bytes (4x less memory)."""

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return frames.float() / 255.0


def is_image(space: gym.Space) -> bool:
    """A stack of frames (channels, height, width) of uint8 pixels, as Atari envs give."""
    return isinstance(space, gym.spaces.Box) and space.dtype == np.uint8 and len(space.shape) == 3


def channels_last(net: Net) -> Net:
    """`net` with its convolutions' weights in channels-last (NHWC) memory, the layout
    oneDNN's CPU convolutions run fastest on (their activations follow it). Measured here,
    one thread, one update: AlphaZero 32x3 on 9x9 eager 28-33 -> 24-27 ms, compiled 24-30 ->
    20-22 ms; the Nature CNN at batch 32 eager 36-39 -> 33-35 ms, compiled 31-34 -> 29-30 ms."""
    return net.to(memory_format=torch.channels_last)


def nature_cnn(n_out: int, in_channels: int = 4) -> nn.Sequential:
    """The Q-network of Mnih et al. (2015) for stacks of 84×84 frames (AP-DRL's Breakout)."""
    return channels_last(nn.Sequential(
        ScaleImage(),
        nn.Conv2d(in_channels, 32, kernel_size=8, stride=4), nn.ReLU(),
        nn.Conv2d(32, 64, kernel_size=4, stride=2), nn.ReLU(),
        nn.Conv2d(64, 64, kernel_size=3, stride=1), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(64 * 7 * 7, 512), nn.ReLU(),
        nn.Linear(512, n_out),
    ))


def dqn2013_cnn(n_out: int, in_channels: int = 4) -> nn.Sequential:
    """The Q-network of Mnih et al. (2013), PEARL's Pong policy (spec §B.4): 16 8×8/4, 32 4×4/2,
    FC 256."""
    return channels_last(nn.Sequential(
        ScaleImage(),
        nn.Conv2d(in_channels, 16, kernel_size=8, stride=4), nn.ReLU(),
        nn.Conv2d(16, 32, kernel_size=4, stride=2), nn.ReLU(),
        nn.Flatten(),
        nn.Linear(32 * 9 * 9, 256), nn.ReLU(),
        nn.Linear(256, n_out),
    ))


CNNS = {"nature": nature_cnn, "dqn2013": dqn2013_cnn}
"""The CNNs an image observation can take (`algo.cnn`)."""


def network(obs_space: gym.Space, hidden: list[int], n_out: int,
            activation: type[nn.Module] = nn.ReLU, cnn: str = "nature") -> nn.Sequential:
    """A CNN (`cnn`: the Nature CNN by default) on stacked frames (`hidden` unused, as SB3's
    CnnPolicy), else an MLP of `hidden` widths on the flattened observation."""
    if is_image(obs_space):
        return CNNS[cnn](n_out, in_channels=obs_space.shape[0])
    return mlp([flat_dim(obs_space), *hidden, n_out], activation=activation)


def flat_dim(space: gym.Space) -> int:
    return int(gym.spaces.flatdim(space))


class Actor(nn.Module):
    """Deterministic policy: tanh output rescaled to the Box action bounds."""

    def __init__(self, obs_dim: int, hidden: list[int], action_space: gym.spaces.Box) -> None:
        super().__init__()
        self.net = mlp([obs_dim, *hidden, flat_dim(action_space)], output_activation=nn.Tanh)
        low = torch.as_tensor(action_space.low, dtype=torch.float32)
        high = torch.as_tensor(action_space.high, dtype=torch.float32)
        self.register_buffer("scale", (high - low) / 2)
        self.register_buffer("bias", (high + low) / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs) * self.scale + self.bias


class StochasticPolicy(nn.Module):
    """pi(a|s) of SB3's on-policy MlpPolicy (tanh MLP, no gSDE; the Nature CNN on frames): a Categorical over logits
    for a Discrete action space, a diagonal Gaussian with a state-independent log-std for a
    Box one. `forward` returns the logits or the mean, so the task-graph builder and
    per-layer precision see a plain network; `distribution` wraps them."""

    def __init__(self, obs_space: gym.Space, hidden: list[int], action_space: gym.Space) -> None:
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        n_out = int(action_space.n) if self.discrete else flat_dim(action_space)
        self.net = network(obs_space, hidden, n_out, activation=nn.Tanh)
        self.log_std = None if self.discrete else nn.Parameter(torch.zeros(n_out))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    def distribution(self, obs: torch.Tensor) -> torch.distributions.Distribution:
        out = self(obs).float()
        if self.log_std is None:
            return torch.distributions.Categorical(logits=out)
        normal = torch.distributions.Normal(out, self.log_std.exp())
        return torch.distributions.Independent(normal, 1)  # log-prob summed over action dims

    def mode(self, obs: torch.Tensor) -> torch.Tensor:
        """The deterministic action: the most likely class or the mean."""
        out = self(obs)
        return out.argmax(dim=1) if self.discrete else out


class QCritic(nn.Module):
    """Q(s, a) for continuous actions: the MLP sees observation and action concatenated."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int]) -> None:
        super().__init__()
        self.net = mlp([obs_dim + act_dim, *hidden, 1])

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], dim=1)).squeeze(1)


class DistributionalCritic(nn.Module):
    """Z(s, a) of D4PG/C51: logits over `atoms` fixed return values (the support)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], atoms: int) -> None:
        super().__init__()
        self.net = mlp([obs_dim + act_dim, *hidden, atoms])

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], dim=1))


def frozen_copy(module: nn.Module) -> nn.Module:
    """A target network: same weights, no gradients."""
    target = copy.deepcopy(module)
    target.requires_grad_(False)
    return target


@contextmanager
def frozen(module: nn.Module) -> Iterator[None]:
    """No gradients for the module's weights inside (they still flow through it): an actor
    loss backpropagates through the critic without computing the critic's weight gradients."""
    module.requires_grad_(False)
    try:
        yield
    finally:
        module.requires_grad_(True)


def adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with the fused kernel (CPU and CUDA): a third faster than the default on
    the small updates of RL (benchmarks/vs_sb3.py)."""
    return torch.optim.Adam(params, lr=lr, fused=True)
