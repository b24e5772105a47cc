"""The synchronous loop: act -> env step -> store -> update every `train_freq` env steps."""

from __future__ import annotations

import numpy as np

from hetrl.scheduler.context import StepBoundary, Training, loop_metrics
from hetrl.scheduler.state import LoopState, PhaseTimer


class SyncScheduler:
    """One process does everything in turn, like SB3's off-policy loop.

    Steps count transitions across all envs; a rollout of `train_freq` of them is followed
    by `gradient_steps` updates once `learning_starts` steps have been collected.
    """

    on_policy = False

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        envs, learner, replay = t.envs, t.learner, t.replay
        timer = PhaseTimer(state.phase_s)
        learner.time_phases(state.phase_s)
        autocast = t.precision.autocast(learner.device)
        n_envs = envs.num_envs
        obs = state.obs
        learner_metrics: dict = {}
        boundary = StepBoundary(t, state)

        while state.step < t.steps:
            with timer("act"):
                if state.step < learner.learning_starts:
                    actions = envs.action_space.sample()
                else:
                    actions = learner.act(obs, state.step)
            with timer("env"):
                next_obs, rewards, terminated, truncated, info = envs.step(actions)
            done = terminated | truncated
            with timer("replay_add"):
                stored_next = next_obs
                if done.any():  # same-step autoreset: the true last obs is in final_obs
                    stored_next = next_obs.copy()
                    stored_next[done] = np.stack(info["final_obs"][done])
                replay.add(obs, actions, rewards, stored_next, terminated, truncated)
            if done.any():
                learner.end_episodes(done)
                state.record_episodes(info["episode"]["r"][info["_episode"]])
            obs = next_obs
            state.step += n_envs

            rollouts, state.pending = divmod(state.pending + n_envs, learner.train_freq)
            if state.step > learner.learning_starts:
                for _ in range(rollouts * learner.gradient_steps):
                    with timer("sample"):
                        batch = replay.sample(learner.batch_size)
                    with timer("update"), autocast:
                        learner_metrics = learner.update(batch)
                    if batch.weights is not None:  # prioritized: new priorities
                        with timer("priority_update"):
                            replay.update_priorities(batch.indices,
                                                     learner_metrics.pop("td_errors"))
                    state.updates += 1

            boundary(n_envs, obs, learner_metrics)
        return loop_metrics(state, learner, learner_metrics)
