"""The plain-PyTorch limit vs_sb3.py holds learners to: DQN's and DDPG's update written out
by hand (as CleanRL would), on the same networks, with nothing between the steps."""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.base import Batch

Step = Callable[[Batch], None]


def mlp(sizes: list[int], out: nn.Module | None = None) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers += [nn.Linear(sizes[i], sizes[i + 1]), nn.ReLU()]
    return nn.Sequential(*layers[:-1], *([out] if out else []))


def plain_dqn(obs: int, actions: int, hidden: list[int], fused: bool) -> Step:
    q = mlp([obs, *hidden, actions])
    q_target = copy.deepcopy(q).requires_grad_(False)
    opt = torch.optim.Adam(q.parameters(), lr=1e-3, fused=fused)

    def step(b: Batch) -> None:
        with torch.no_grad():
            target = b.rewards + 0.99 * (1.0 - b.terminated) * q_target(b.next_obs).max(1).values
        loss = F.smooth_l1_loss(q(b.obs).gather(1, b.actions.view(-1, 1)).squeeze(1), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(q.parameters(), 10.0)
        opt.step()
    return step


def plain_ddpg(obs: int, act: int, hidden: list[int], fused: bool,
               scale: float) -> Step:
    actor, critic = mlp([obs, *hidden, act], nn.Tanh()), mlp([obs + act, *hidden, 1])
    actor_t, critic_t = (copy.deepcopy(m).requires_grad_(False) for m in (actor, critic))
    actor_opt, critic_opt = (torch.optim.Adam(m.parameters(), lr=1e-3, fused=fused)
                             for m in (actor, critic))
    online = [list(m.parameters()) for m in (actor, critic)]
    targets = [list(m.parameters()) for m in (actor_t, critic_t)]

    def step(b: Batch) -> None:
        with torch.no_grad():
            next_q = critic_t(torch.cat([b.next_obs, actor_t(b.next_obs) * scale], 1))
            target = b.rewards + 0.99 * (1.0 - b.terminated) * next_q.squeeze(1)
        critic_loss = F.mse_loss(critic(torch.cat([b.obs, b.actions], 1)).squeeze(1), target)
        critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        critic_opt.step()
        critic.requires_grad_(False)  # no critic weight gradients from the actor loss
        actor_loss = -critic(torch.cat([b.obs, actor(b.obs) * scale], 1)).mean()
        critic.requires_grad_(True)
        actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        actor_opt.step()
        with torch.no_grad():
            for t, o in zip(targets, online):
                torch._foreach_lerp_(t, o, 0.005)
    return step
