"""What every learner shares (device, networks, optimizer steps, checkpoint state), and what
each kind adds: off-policy learners a replay schedule, on-policy ones a rollout."""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any, Callable, ClassVar, Iterator, NamedTuple

import numpy as np
import torch
from torch import nn

from hetrl.algos.ensemble import per_slice, slice_scales
from hetrl.algos.rule import (Metrics, Stage, TargetSync, clip_groups, due, stage_loss,
                              sync_target)
from hetrl.config.enums import ActionSpace, Agents
from hetrl.timing import PhaseTimer


class Batch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    rewards: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor  # 1.0 where the episode terminated (not truncated)
    # prioritized replay: the rows' replay indices and importance weights; a learner given
    # weights weighs its TD loss by them and returns `td_errors` (one per row) for new priorities
    indices: np.ndarray | None = None
    weights: torch.Tensor | None = None
    # the bootstrap discount of each row (gamma^k for k-step returns); None: one-step rows
    discounts: torch.Tensor | None = None


class RolloutBatch(NamedTuple):
    """An on-policy minibatch of a rollout (`hetrl.replay.rollout.RolloutBuffer.batch`)."""

    obs: torch.Tensor
    actions: torch.Tensor  # as sampled (Box actions unclipped, as SB3 stores them)
    log_probs: torch.Tensor  # of the actions under the policy that collected them
    values: torch.Tensor  # V(obs) when collected
    advantages: torch.Tensor
    returns: torch.Tensor  # advantages + values: the critic's regression target


def weighted_mean(losses: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """The mean of per-row losses, each weighed by its importance weight when the batch is
    prioritized (`batch.weights`; None: the plain mean)."""
    return losses.mean() if weights is None else (losses * weights).mean()


def with_td_errors(metrics: dict[str, torch.Tensor], batch: Batch,
                   td_errors: torch.Tensor) -> dict[str, torch.Tensor]:
    """`metrics`, plus the rows' TD errors when the batch is prioritized: the update step
    hands them back to the replay as new priorities."""
    if batch.weights is not None:
        metrics["td_errors"] = td_errors.detach()
    return metrics


def clip_grad_norm_(params: list[nn.Parameter], max_norm: float) -> None:
    """`torch.nn.utils.clip_grad_norm_(params, max_norm, foreach=True)`, the same arithmetic
    on the same gradients (those that are set), without its per-call grouping of them by
    device and dtype: a learner's optimizer holds parameters of one device."""
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        total = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        torch._foreach_mul_(grads, torch.clamp(max_norm / (total + 1e-6), max=1.0))


def clip_slices_(params: list[nn.Parameter], max_norm: float) -> None:
    """Each stacked network's gradient (slice k of every one of `params`) clipped to
    `max_norm` on its own (`hetrl.algos.ensemble.slice_scales`)."""
    grads = [p.grad for p in params if p.grad is not None]
    if grads:
        scales = slice_scales(grads, max_norm)
        for g in grads:
            g.mul_(per_slice(scales, g))


class Learner(nn.Module):
    """Networks plus an update rule. Subclasses set `action_space` and implement `act`, and
    declare their update as `stages` (and `targets`: `hetrl.algos.rule`); their networks
    and optimizers are found by attribute. A learner is an `OffPolicyLearner` or an
    `OnPolicyLearner`: the loop that trains it reads its schedule there. `updates` counts
    the updates made: `learn` counts them, the rule never does.
    """

    action_space: ClassVar[ActionSpace]
    agents: ClassVar[Agents] = Agents.single
    on_policy: ClassVar[bool] = False  # trains on its own fresh rollouts (scheduler=onpolicy)
    policy_attr: ClassVar[str] = "actor"  # the attribute holding the network `act` runs
    target_phase: ClassVar[str | None] = None  # the phase that times the target syncs, if any
    batch_size: int  # rows of the batch one `update` takes (set by each kind)

    @classmethod
    def supports(cls, space: ActionSpace, agents: Agents = Agents.single) -> bool:
        """Whether the learner can act in an env with this kind of action space and agents."""
        return cls.action_space == space and cls.agents == agents

    def __init__(
        self,
        *,
        device: torch.device,
        hidden: list[int],
        lr: float,
        gamma: float,
        policy_hidden: list[int] | None,
    ) -> None:
        super().__init__()
        self.device = device
        self.hidden = list(hidden)
        self.policy_hidden = list(policy_hidden or hidden)  # the network `act` runs
        self.lr = lr
        self.gamma = gamma
        self.updates = 0
        self.scaler: torch.amp.GradScaler | None = None  # float16 loss scaling, if any
        self.skipped_steps = 0  # optimizer steps skipped on float16 overflow
        # the metrics of the stages that skip updates (`Stage.every`), as they last ran
        self.carried_metrics: Metrics = {}
        # the compiled update (`hetrl.compiled`), when one is installed: `update` runs it
        self.compiled_step: Callable[[Any], Metrics] | None = None
        # a stage's loss over its batch split in parts (PEARL's CPU trainers,
        # hetrl.scheduler.pearl_train), where a loop installed one: `stage_loss`'s signature
        self.split_loss: Callable[..., tuple[torch.Tensor, Metrics]] | None = None
        # what else sets the update's form beside the stages due (precision=qat's fake
        # quantization, on from its delay): a compiled update has a graph per combination
        self.modes: list[Callable[[], bool]] = []
        # whether actors compile their copy of the policy's forward (`hetrl.compiled.acting`)
        self.compile_acting = False
        # the update's own phases (`with self.timer("q_loss"):`), added up where the
        # scheduler points them (`time_phases`) next to the loop's phases
        self.timer = PhaseTimer({})

    def time_phases(self, totals: dict[str, float]) -> None:
        """Add the update's inner phases, if it times any, to `totals` (seconds by name)."""
        self.timer = PhaseTimer(totals)

    def act(self, obs: np.ndarray, step: int | None) -> np.ndarray:
        """Actions for a batch of observations; `step` (env steps so far) asks for
        exploration, None for the deterministic policy."""
        raise NotImplementedError

    def policy(self) -> nn.Module:
        """The network `act` runs (what actors copy and quantize)."""
        return getattr(self, self.policy_attr)

    @contextmanager
    def acting_with(self, module: nn.Module) -> Iterator[None]:
        """`act` runs `module` (a quantized copy of `policy()`) instead, inside the block;
        the learner's own network is back afterwards."""
        own = self._modules[self.policy_attr]
        self._modules[self.policy_attr] = module
        try:
            yield
        finally:
            self._modules[self.policy_attr] = own

    def stages(self) -> list[Stage]:
        """The update's optimizer steps, in order (`hetrl.algos.rule.Stage`)."""
        raise NotImplementedError

    def targets(self) -> list[TargetSync]:
        """The target networks that follow online ones after each update."""
        return []

    def updates_in(self, steps: int) -> int | None:
        """The updates a budget of `steps` env steps makes (None: the loop decides)."""
        return None

    def update(self, batch: Any) -> Metrics:
        """One update by the declared rule, compiled where a compiled step is installed;
        returns detached tensors (no host sync here)."""
        if self.compiled_step is not None:
            return self.compiled_step(batch)
        return self.eager_update(batch)

    def learn(self, batch: Any) -> Metrics:
        """One update (`update`), then counted: the one place `updates` grows (the checkpoint
        keeps it; the rule reads it: TD3's delay, DQN's target copy, MADDPG's trainer,
        AlphaZero's learning rate). Every loop's update step and the host's timing probes
        train through it."""
        metrics = self.update(batch)
        self.updates += 1
        return metrics

    def eager_update(self, batch: Any) -> Metrics:
        """One update by the declaration, with autograd and the torch optimizers (through
        the float16 loss scaler when there is one: `optimize`)."""
        count, metrics = self.updates, {}
        for stage in self.stages():
            if not due(stage.when, count):
                metrics.update(self.carried(stage))
                continue
            loss, out = (self.split_loss or stage_loss)(self, stage, batch, count)
            with self.timer(stage.phase) if stage.phase else nullcontext():
                self.optimize(getattr(self, stage.optimizer), loss, stage.max_grad_norm,
                              clip_groups(self, stage))
            if stage.when is not None:
                self.carry(out)
            metrics.update(out)
        with self.timer(self.target_phase) if self.target_phase else nullcontext():
            for sync in self.targets():
                if due(sync.when, count):
                    sync_target(self.get_submodule(sync.target),
                                self.get_submodule(sync.online), sync.tau)
        return metrics

    def carried(self, stage: Stage) -> Metrics:
        """The metrics of `stage` as it last ran (zeros before it first ran)."""
        return {name: self.carried_metrics.get(name, torch.zeros((), device=self.device))
                for name in stage.carried}

    def carry(self, metrics: Metrics) -> None:
        """Keep the metrics of a stage that skips updates, for the updates between."""
        self.carried_metrics.update(metrics)

    def __getstate__(self) -> dict[str, Any]:
        """A copy (an actor's, a timing probe's) runs the eager update on whole batches: a
        compiled function or a loop's CPU trainers neither pickle nor belong to another
        learner's tensors."""
        return {**super().__getstate__(), "compiled_step": None, "split_loss": None}

    def optimize(
        self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, max_grad_norm: float | None = None,
        groups: list[list[nn.Parameter]] | None = None,
    ) -> None:
        """Backward and step, through the loss scaler when float16 asks for one: an
        overflowing step is skipped, the weights stay as they were, and it is counted. The
        old gradients are dropped as `zero_grad(set_to_none=True)` drops them, without its
        profiler record (a small update pays for each call's bookkeeping, not its work).
        `groups`: stacked parameters whose networks' gradient norms are clipped each on its
        own (`clip_slices_`; None: all of the optimizer's together)."""
        scaler = self.scaler
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for p in params:
            p.grad = None
        (loss if scaler is None else scaler.scale(loss)).backward()
        if max_grad_norm is not None:
            if scaler is not None:
                scaler.unscale_(optimizer)
            if groups is None:
                clip_grad_norm_(params, max_grad_norm)
            else:
                for group in groups:
                    clip_slices_(group, max_grad_norm)
        if scaler is None:
            optimizer.step()
            return
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        self.skipped_steps += int(scaler.get_scale() < scale)

    def end_episodes(self, done: np.ndarray) -> None:
        """Called with a mask of the envs whose episode just ended (noise processes reset)."""

    def obs_tensor(self, obs: np.ndarray) -> torch.Tensor:
        """Observations on the learner's device: float32, or uint8 frames as they are (the
        network scales them)."""
        obs = torch.as_tensor(obs, device=self.device)
        return obs if obs.dtype == torch.uint8 else obs.float()

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """The learner's optimizers, by attribute name."""
        return {k: v for k, v in vars(self).items() if isinstance(v, torch.optim.Optimizer)}

    def checkpoint(self) -> dict[str, Any]:
        return {
            "modules": self.state_dict(),
            "optimizers": {k: opt.state_dict() for k, opt in self.optimizers().items()},
            "updates": self.updates,
            "skipped_steps": self.skipped_steps,
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
        }

    def restore(self, state: dict[str, Any]) -> None:
        self.load_state_dict(state["modules"])
        for key, opt in self.optimizers().items():
            opt.load_state_dict(state["optimizers"][key])
        self.updates = state["updates"]
        self.skipped_steps = state["skipped_steps"]
        if self.scaler is not None:
            self.scaler.load_state_dict(state["scaler"])


class OffPolicyLearner(Learner):
    """A learner trained from a replay. Its schedule belongs to the algorithm, as in SB3, and
    the loops read it here: after `learning_starts` env steps, `gradient_steps` updates on
    batches of `batch_size` every `train_freq` env steps (counted across envs), from a
    replay of `buffer_size` transitions."""

    def __init__(
        self,
        *,
        batch_size: int,
        buffer_size: int,
        learning_starts: int,
        train_freq: int,
        gradient_steps: int,
        **common: Any,
    ) -> None:
        super().__init__(**common)
        self.batch_size = batch_size
        self.buffer_size = buffer_size
        self.learning_starts = learning_starts
        self.train_freq = train_freq
        self.gradient_steps = gradient_steps

    def updates_in(self, steps: int) -> int:
        """The updates a budget of `steps` env steps makes."""
        return max(0, steps - self.learning_starts) // self.train_freq * self.gradient_steps


class OnPolicyLearner(Learner):
    """A learner trained on its own fresh rollouts of `n_steps` steps of each of `n_envs`
    envs: GAE advantages (`gamma`, `gae_lambda`), then `n_epochs` passes over the rollout in
    minibatches of `batch_size` (by default one epoch, one batch of the whole rollout)."""

    on_policy = True

    def __init__(self, *, n_steps: int, n_envs: int, gae_lambda: float, **common: Any) -> None:
        super().__init__(**common)
        self.n_steps, self.n_envs, self.gae_lambda = n_steps, n_envs, gae_lambda
        self.batch_size, self.n_epochs = self.rollout_size, 1

    def updates_in(self, steps: int) -> int:
        """The updates a budget of `steps` env steps makes (minibatches of every epoch)."""
        minibatches = -(-self.rollout_size // self.batch_size)
        return steps // self.rollout_size * self.n_epochs * minibatches

    @property
    def rollout_size(self) -> int:
        """Env steps (transitions) in one rollout, across envs."""
        return self.n_steps * self.n_envs

    def explore(self, obs: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sampled actions for a batch of observations, their log-probabilities, V(obs)."""
        raise NotImplementedError

    def env_actions(self, actions: torch.Tensor) -> np.ndarray:
        """Sampled actions as the env takes them."""
        raise NotImplementedError

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """V(obs), float32."""
        raise NotImplementedError
