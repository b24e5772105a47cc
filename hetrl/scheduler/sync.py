"""The synchronous loop: act -> env step -> store -> update every `train_freq` env steps."""

from __future__ import annotations

from hetrl.actors.acting import env_step
from hetrl.algos.base import OffPolicyLearner
from hetrl.scheduler.base import LoopNeeds
from hetrl.scheduler.boundary import StepBoundary, loop_metrics
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates
from hetrl.timing import PhaseTimer
from hetrl.config.enums import Agents


class SyncScheduler:
    """One process does everything in turn, like SB3's off-policy loop.

    Steps count transitions across all envs; a rollout of `train_freq` of them is followed
    by `gradient_steps` updates once `learning_starts` steps have been collected.
    """

    needs = LoopNeeds(agents=(Agents.single, Agents.multi))

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        envs, replay = t.envs, t.replay
        learner = t.learner_as(OffPolicyLearner)
        timer = PhaseTimer(state.phase_s)
        learner.time_phases(state.phase_s)
        updates = Updates(learner, replay, t.precision, state)
        n_envs = envs.num_envs
        obs = state.obs
        learner_metrics: dict = {}
        boundary = StepBoundary(t, state)

        while not t.done(state):
            taken = env_step(envs, learner, obs, state.step, timer)
            with timer("replay_add"):
                replay.add(*taken.transitions)
            state.record_episodes(taken.returns)
            obs = taken.next_obs
            for _ in range(updates.owed(n_envs)):
                learner_metrics = updates.step()
            boundary(n_envs, obs, learner_metrics)
        return loop_metrics(state, learner, learner_metrics)
