"""MADDPG (Lowe et al. 2017) as in openai/maddpg and the MARL paper (extract B.1.2):
decentralized actors, one centralized critic per agent on every agent's observation and
action, Gumbel-softmax actions for discrete moves, Polyak-averaged targets.

One update trains every agent's trainer, each on its own mini-batch of `batch_size` rows:
the sync scheduler samples them as one batch of n_agents × batch_size rows (the paper's
O(N²·B) sampling, timed as `sample`), and the update reads trainer i's from rows
[i·B, (i+1)·B). The trainers are trained together, not one after another (openai/maddpg's
loop): the critics, all of one shape, as one call (`hetrl.algos.ensemble`), the
actors in one call per group of equal observation and action sizes (simple_tag's
adversaries, its good agents), so each trainer reads the others' networks as they were
before the update. The update times its own phases: `target_q`, `q_loss`, `p_loss`,
`target_update`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.base import Batch, OffPolicyLearner, weighted_mean, with_td_errors
from hetrl.algos.ensemble import by_shape, ensemble
from hetrl.algos.networks import adam, frozen_copy, mlp
from hetrl.algos.rule import Metrics, Stage, TargetSync
from hetrl.config.enums import ActionSpace, Agents


class MADDPG(OffPolicyLearner):
    action_space = ActionSpace.discrete
    agents = Agents.multi
    target_phase = "target_update"

    def __init__(
        self,
        obs_space: gym.spaces.Box,
        act_space: gym.spaces.MultiDiscrete,
        *,
        tau: float,
        max_grad_norm: float,
        policy_reg: float,
        **common,
    ) -> None:
        super().__init__(**common)
        self.tau, self.max_grad_norm, self.policy_reg = tau, max_grad_norm, policy_reg
        self.n_agents = int(obs_space.shape[0])
        self.batch_size *= self.n_agents  # one update: every trainer's own mini-batch
        # observations are padded to the widest agent; the padding has bounds [0, 0]
        real = obs_space.high > obs_space.low
        self.obs_dims = [int(d) for d in real.sum(axis=1)]
        self.n_actions = [int(n) for n in act_space.nvec]
        self.register_buffer("real", torch.as_tensor(np.flatnonzero(real.reshape(-1))),
                             persistent=False)
        # trainer i's row of a (trainer, ...) tensor: where its own action goes
        self.register_buffer("mine", torch.eye(self.n_agents, dtype=torch.bool)[..., None, None],
                             persistent=False)
        self.padded = not real.all()
        joint_dim = sum(self.obs_dims) + sum(self.n_actions)
        self.actors = nn.ModuleList(mlp([d, *self.hidden, a])
                                    for d, a in zip(self.obs_dims, self.n_actions))
        self.critics = nn.ModuleList(mlp([joint_dim, *self.hidden, 1]) for _ in self.obs_dims)
        self.to(self.device)
        self.actor_targets = frozen_copy(self.actors)
        self.critic_targets = frozen_copy(self.critics)
        self.actor_groups = by_shape(list(zip(self.obs_dims, self.n_actions)))
        # one Adam per kind of network: Adam's arithmetic is per parameter, so this is N
        # independent optimizers in one (the gradient norms are clipped per trainer)
        self.actor_optimizer = adam(self.actors.parameters(), self.lr)
        self.critic_optimizer = adam(self.critics.parameters(), self.lr)

    @torch.no_grad()
    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        """Each agent's move from its own observation: a Gumbel-softmax sample when
        exploring, the most likely move otherwise. Shape (n_envs, n_agents)."""
        obs_t = self.obs_tensor(obs)
        moves = []
        for i, actor in enumerate(self.actors):
            logits = actor(obs_t[:, i, : self.obs_dims[i]])
            moves.append((F.gumbel_softmax(logits) if step is not None else logits).argmax(1))
        return torch.stack(moves, dim=1).cpu().numpy()

    def stages(self) -> list[Stage]:
        """Every trainer's critic step, then every trainer's actor step, each trainer's
        gradient norm clipped on its own."""
        agents = range(self.n_agents)
        return [Stage("critic_optimizer", self.critic_loss, self.max_grad_norm,
                      clip_each=tuple(self.critics_of(i) for i in agents), phase="q_loss"),
                Stage("actor_optimizer", self.actor_loss, self.max_grad_norm,
                      frozen=("critics",), clip_each=tuple((f"actors.{i}",) for i in agents),
                      phase="p_loss")]

    def critics_of(self, i: int) -> tuple[str, ...]:
        """Trainer i's critics (of the critic optimizer's, which holds every trainer's)."""
        return (f"critics.{i}",)

    def targets(self) -> list[TargetSync]:
        return [TargetSync("critic_targets", "critics", self.tau),
                TargetSync("actor_targets", "actors", self.tau)]

    def critic_loss(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """Each trainer's squared TD error against its target critic's bootstrap of every
        agent's target actions, on its own mini-batch."""
        b = self.by_trainer(batch)
        with self.timer("target_q"), torch.no_grad():
            next_actions = self._soft_actions(self.actor_targets, b.next_obs)
            next_q = self._q(self.critic_targets, self._joint(b.next_obs, next_actions))
            td_target = own(b.rewards) + self.gamma * (1.0 - own(b.terminated)) * next_q
        with self.timer("q_loss"):
            q = self._q(self.critics, self._joint(b.obs, self._one_hot(b.actions)))
            return self._critic_metrics(q - td_target, q, b)

    def actor_loss(self, batch: Batch, count: object) -> tuple[torch.Tensor, Metrics]:
        """Each trainer's -Q_i with agent i's action from its policy (a soft Gumbel-softmax
        sample), the others' from its mini-batch, plus openai/maddpg's small penalty on the
        logits; summed over trainers (each actor's gradient is its trainer's alone)."""
        b = self.by_trainer(batch)
        with self.timer("p_loss"):
            actions = self._one_hot(b.actions)
            penalty = 0.0
            for group in self.actor_groups:  # agent i's logits on trainer i's rows
                logits = self._actors(self.actors, group, b.obs[group, :, group])
                soft = F.gumbel_softmax(logits)
                for k, i in enumerate(group):
                    actions[i] = torch.where(self.mine[i], soft[k], actions[i])
                penalty = penalty + logits.pow(2).mean(dim=(1, 2)).sum()
            q = self._q(self.critics, self._joint(b.obs, actions))
            loss = -q.mean(dim=1).sum() + self.policy_reg * penalty
            return loss, {"actor_loss": loss.detach() / self.n_agents}

    def by_trainer(self, batch: Batch) -> Batch:
        """The batch as the trainers' own mini-batches: each tensor (N·B, ...) as (N, B, ...)."""
        return type(batch)(*(v.unflatten(0, (self.n_agents, -1)) if torch.is_tensor(v) else v
                             for v in batch))

    def _critic_metrics(self, td_error: torch.Tensor, q: torch.Tensor,
                        batch: Batch, *others: torch.Tensor) -> tuple[torch.Tensor, Metrics]:
        """The critic loss of the trainers' TD errors `td_error` (N, B) (and of `others`, a
        twin critic's) and its metrics: each trainer's mean squared TD error (weighted by
        importance weights when the batch has them), summed over trainers; the rows' TD
        errors in the batch's order."""
        mean = sum((weighted_mean(e.pow(2), batch.weights) for e in others),
                   weighted_mean(td_error.pow(2), batch.weights))
        metrics = {"critic_loss": mean.detach(), "q_mean": q.detach().mean()}
        # every trainer has B rows: N × the mean over all is the sum of the trainers' means
        return self.n_agents * mean, with_td_errors(metrics, batch, td_error.flatten())

    def _one_hot(self, actions: torch.Tensor) -> list[torch.Tensor]:
        return [F.one_hot(actions[..., j], n).float() for j, n in enumerate(self.n_actions)]

    def _actors(self, actors: nn.ModuleList, group: list[int], obs: torch.Tensor) -> torch.Tensor:
        """The logits of the agents of `group` (of equal sizes), agent k's on `obs[k]`, in
        one call."""
        dim = self.obs_dims[group[0]]
        return ensemble([actors[i] for i in group], obs[..., :dim])

    def _soft_actions(self, actors: nn.ModuleList, obs: torch.Tensor) -> list[torch.Tensor]:
        """Every agent's Gumbel-softmax action from `actors` on every trainer's rows `obs`
        (N, B, N, D): the critics' action inputs, by agent, each (N, B, n_actions)."""
        out: list[torch.Tensor] = [obs] * self.n_agents
        for group in self.actor_groups:
            soft = F.gumbel_softmax(self._actors(actors, group, obs[:, :, group].movedim(2, 0)))
            for k, i in enumerate(group):
                out[i] = soft[k]
        return out

    def _q(self, critics: nn.ModuleList, joint: torch.Tensor) -> torch.Tensor:
        """Trainer i's critic of `critics` on its rows of `joint` (N, B, ·), in one call."""
        return ensemble(list(critics), joint).squeeze(-1)

    def _joint(self, obs: torch.Tensor, actions: list[torch.Tensor]) -> torch.Tensor:
        """The critic's input: every agent's real observation features, then every action."""
        flat = obs.flatten(-2)
        return torch.cat([flat[..., self.real] if self.padded else flat, *actions], dim=-1)


def own(per_agent: torch.Tensor) -> torch.Tensor:
    """Trainer i's agent's entry of its rows: (N, B, N) -> (N, B)."""
    return per_agent.diagonal(dim1=0, dim2=2).t()
