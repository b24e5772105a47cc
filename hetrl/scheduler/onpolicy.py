"""The on-policy loop: collect n_steps per env -> GAE -> n_epochs of minibatch updates."""

from __future__ import annotations

import numpy as np
import torch

from hetrl.actors.acting import episode_returns, final_obs
from hetrl.algos.base import OnPolicyLearner
from hetrl.replay.rollout import RolloutBuffer
from hetrl.scheduler.base import LoopNeeds
from hetrl.scheduler.boundary import StepBoundary, loop_metrics
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState
from hetrl.timing import PhaseTimer


class OnPolicyScheduler:
    """One process does everything in turn, like SB3's on-policy loop.

    A loop step is a whole rollout and its updates, so logs, checkpoints and stop requests
    land on rollout boundaries (a checkpoint never holds a half-filled rollout), and the
    budget `steps` is rounded up to whole rollouts. The replay group is not used.
    """

    needs = LoopNeeds(on_policy=True, replay=False)

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        envs = t.envs
        learner = t.learner_as(OnPolicyLearner)
        timer = PhaseTimer(state.phase_s)
        autocast = t.precision.autocast(learner.device)
        n_envs = envs.num_envs
        rollout = RolloutBuffer(learner.n_steps, n_envs, envs.single_observation_space,
                                envs.single_action_space, learner.device)
        obs = state.obs
        learner_metrics: dict = {}
        boundary = StepBoundary(t, state)

        while not t.done(state):
            while not rollout.full():
                with timer("act"):
                    actions, log_probs, values = learner.explore(obs)
                    env_actions = learner.env_actions(actions)
                with timer("env"):
                    next_obs, rewards, terminated, truncated, info = envs.step(env_actions)
                with timer("rollout_add"):
                    rewards_t, terminated_t, truncated_t = (
                        torch.as_tensor(x, device=learner.device)
                        for x in (rewards.astype(np.float32), terminated, truncated))
                    final_values = torch.zeros(n_envs, device=learner.device)
                    if truncated.any():  # bootstrap from the true last obs, not the reset one
                        with torch.no_grad():
                            last = learner.obs_tensor(final_obs(info, truncated))
                            final_values[truncated_t] = learner.value(last)
                    rollout.add(learner.obs_tensor(obs), actions, log_probs, values, rewards_t,
                                terminated_t, truncated_t, final_values)
                done = terminated | truncated
                if done.any():
                    state.record_episodes(episode_returns(info))
                obs = next_obs
                state.step += n_envs

            with timer("advantages"), torch.no_grad():
                rollout.finish(learner.value(learner.obs_tensor(obs)), learner.gamma,
                               learner.gae_lambda)
            for _ in range(learner.n_epochs):
                for indices in rollout.minibatches(learner.batch_size):
                    with timer("sample"):
                        batch = rollout.batch(indices)
                    with timer("update"), autocast:
                        learner_metrics = learner.learn(batch)
                    state.updates += 1

            boundary(learner.rollout_size, obs, learner_metrics)
        return loop_metrics(state, learner, learner_metrics)
