"""MADDPG (Lowe et al. 2017) as in openai/maddpg and the MARL paper (extract B.1.2):
decentralized actors, one centralized critic per agent on every agent's observation and
action, Gumbel-softmax actions for discrete moves, Polyak-averaged targets.

One update trains every agent's trainer, each on its own mini-batch of `batch_size` rows:
the sync scheduler samples them as one batch of n_agents × batch_size rows (the paper's
O(N²·B) sampling, timed as `sample`), and the update reads trainer i's from rows
[i·B, (i+1)·B). The trainers are trained together, not one after another (openai/maddpg's
loop): the critics, all of one shape, are one stacked network (`hetrl.algos.ensemble`: each
layer one tensor of every trainer's weights), the actors one per group of equal observation
and action sizes (simple_tag's adversaries, its good agents), so one call runs them all and
each trainer reads the others' networks as they were before the update. The update times
its own phases: `target_q`, `q_loss`, `p_loss`, `target_update`.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from hetrl.algos.base import Batch, OffPolicyLearner, weighted_mean, with_td_errors
from hetrl.algos.ensemble import by_shape, stacked_mlp
from hetrl.algos.networks import adam, frozen_copy
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
        # actions are one-hot (N trainers, B, N agents, A) tensors, padded to the widest
        # agent's A moves as observations to the widest's D features: the critics' input is
        # the real columns of both, flattened, in agent order
        self.widest = max(self.n_actions)
        moves = np.arange(self.widest)[None, :] < np.array(self.n_actions)[:, None]
        columns = np.concatenate([real.reshape(-1), moves.reshape(-1)])
        self.padded = not columns.all()
        self.register_buffer("real", torch.as_tensor(np.flatnonzero(columns)), persistent=False)
        joint_dim = sum(self.obs_dims) + sum(self.n_actions)
        # the agents of equal sizes, and their actors stacked: group g's agent k is slice k
        self.actor_groups = by_shape(list(zip(self.obs_dims, self.n_actions)))
        grouped = [i for group in self.actor_groups for i in group]
        self.in_order = grouped == sorted(grouped)
        self.register_buffer("order", torch.as_tensor(np.argsort(grouped)), persistent=False)
        # group g's agents' own entries of a (trainer, B, agent, A) tensor (trainer i's,
        # agent i's), and where each trainer's agent sits in its group
        eye = torch.eye(self.n_agents, dtype=torch.bool)
        self.register_buffer("owned", torch.stack([
            eye & torch.isin(torch.arange(self.n_agents), torch.tensor(group))
            for group in self.actor_groups])[:, :, None, :, None], persistent=False)
        slot = torch.zeros(len(self.actor_groups), self.n_agents, dtype=torch.long)
        for g, group in enumerate(self.actor_groups):
            slot[g, group] = torch.arange(len(group))
        self.register_buffer("slot", slot, persistent=False)
        self.actors = nn.ModuleList(
            stacked_mlp(len(group), [self.obs_dims[group[0]], *self.hidden,
                                     self.n_actions[group[0]]])
            for group in self.actor_groups)
        self.critics = stacked_mlp(self.n_agents, [joint_dim, *self.hidden, 1])  # trainer i's: i
        self.to(self.device)
        self.actor_targets = frozen_copy(self.actors)
        self.critic_targets = frozen_copy(self.critics)
        # one Adam per kind of network: Adam's arithmetic is per parameter, so this is N
        # independent optimizers in one (the gradient norms are clipped per trainer)
        self.actor_optimizer = adam(self.actors.parameters(), self.lr)
        self.critic_optimizer = adam(self.critics.parameters(), self.lr)

    @torch.no_grad()
    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        """Each agent's move from its own observation: a Gumbel-softmax sample when
        exploring, the most likely move otherwise. Shape (n_envs, n_agents)."""
        obs_t = self.obs_tensor(obs)
        moves: list[torch.Tensor] = [obs_t] * self.n_agents
        for group, actors in zip(self.actor_groups, self.actors):
            logits = self._logits(actors, group, obs_t[:, group].movedim(1, 0))
            chosen = (gumbel_softmax(logits) if step is not None else logits).argmax(-1)
            for k, i in enumerate(group):
                moves[i] = chosen[k]
        return torch.stack(moves, dim=1).cpu().numpy()

    def stages(self) -> list[Stage]:
        """Every trainer's critic step, then every trainer's actor step, each trainer's
        gradient norm clipped on its own."""
        actors = tuple((f"actors.{g}",) for g in range(len(self.actors)))
        return [Stage("critic_optimizer", self.critic_loss, self.max_grad_norm,
                      clip_slices=(self.trained_critics(),), phase="q_loss"),
                Stage("actor_optimizer", self.actor_loss, self.max_grad_norm,
                      frozen=("critics",), clip_slices=actors, phase="p_loss")]

    def trained_critics(self) -> tuple[str, ...]:
        """The stacked critics the critic optimizer trains: slice i of each is trainer i's."""
        return ("critics",)

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
            for g, (group, actors) in enumerate(zip(self.actor_groups, self.actors)):
                # agent i's logits on trainer i's rows, its soft action into trainer i's
                logits = self._logits(actors, group, b.obs[group, :, group])
                soft = self._padded(gumbel_softmax(logits))
                by_trainer = soft if len(group) == self.n_agents else soft[self.slot[g]]
                actions = torch.where(self.owned[g], by_trainer[:, :, None], actions)
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

    def _one_hot(self, actions: torch.Tensor) -> torch.Tensor:
        """Moves (N, B, N) as one-hot (N, B, N, A) actions."""
        return F.one_hot(actions, self.widest).float()

    def _padded(self, soft: torch.Tensor) -> torch.Tensor:
        """(..., n) actions of agents with fewer moves than the widest padded to A."""
        return F.pad(soft, (0, self.widest - soft.shape[-1]))

    def _logits(self, actors: nn.Module, group: list[int], obs: torch.Tensor) -> torch.Tensor:
        """The logits of the agents of `group` (of equal sizes) from their stacked `actors`,
        agent k's on `obs[k]` (padded observations cut to the group's width)."""
        return actors(obs[..., :self.obs_dims[group[0]]])

    def _soft_actions(self, actors: nn.ModuleList, obs: torch.Tensor) -> torch.Tensor:
        """Every agent's Gumbel-softmax action from `actors` on every trainer's rows `obs`
        (N, B, N, D): the critics' action inputs, (N, B, N, A)."""
        blocks = [self._padded(gumbel_softmax(
                      self._logits(stacked, group, obs[:, :, group].movedim(2, 0)))).movedim(0, 2)
                  for group, stacked in zip(self.actor_groups, actors)]
        if len(blocks) == 1:
            return blocks[0]
        grouped = torch.cat(blocks, dim=2)
        return grouped if self.in_order else grouped[:, :, self.order]

    def _q(self, critics: nn.Module, joint: torch.Tensor) -> torch.Tensor:
        """Trainer i's critic of the stacked `critics` on its rows of `joint` (N, B, ·)."""
        return critics(joint).squeeze(-1)

    def _joint(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The critic's input: every agent's real observation features, then every agent's
        action (its real moves)."""
        joint = torch.cat([obs.flatten(-2), actions.flatten(-2)], dim=-1)
        return joint[..., self.real] if self.padded else joint


def own(per_agent: torch.Tensor) -> torch.Tensor:
    """Trainer i's agent's entry of its rows: (N, B, N) -> (N, B)."""
    return per_agent.diagonal(dim1=0, dim2=2).t()


def gumbel_softmax(logits: torch.Tensor) -> torch.Tensor:
    """`F.gumbel_softmax(logits)` (soft, temperature 1): softmax(logits + g), with the Gumbel
    noise g = -log(-log(u)) of uniform draws u, where torch draws -log(E) of exponential ones:
    its CPU exponential_ is 4.7x slower than rand and a log (890 against 187 us for MADDPG-3's
    46K target actions here), an eighth of the compiled update."""
    gumbels = -(-torch.rand_like(logits).log()).log()
    return (logits + gumbels).softmax(-1)
