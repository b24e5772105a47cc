"""A scheduler added from outside hetrl (docs/extending.md, "A scheduler"): the sync loop with
its updates deferred to episode ends, as in Fujimoto et al.'s TD3 code, which trains after
each episode for as long as the episode took."""

from __future__ import annotations

from hetrl.actors.acting import env_step
from hetrl.algos.base import OffPolicyLearner
from hetrl.scheduler.base import LoopNeeds
from hetrl.scheduler.boundary import StepBoundary, loop_metrics
from hetrl.scheduler.context import Training
from hetrl.scheduler.state import LoopState
from hetrl.scheduler.updates import Updates
from hetrl.timing import PhaseTimer


class EpisodicScheduler:
    """Act, step, store as `scheduler=sync`; the updates the env steps are owed (the algo's
    `train_freq`, `gradient_steps` and `learning_starts`, counted by the one update step
    `Updates`) are paid in one burst whenever an episode ends. Updates owed at the end of the
    budget, or at a checkpoint in the middle of an episode, are not made."""

    # what validation reads, declared once: every default of LoopNeeds, that is off-policy
    # algos (on_policy=False) storing into the replay option, single-agent envs, acting in
    # the learner's process (actor_pool=False: actors=local)
    needs = LoopNeeds()

    def run(self, t: Training, state: LoopState) -> dict[str, float]:
        envs, replay = t.envs, t.replay
        learner = t.learner_as(OffPolicyLearner)  # the kind its needs say it trains
        timer = PhaseTimer(state.phase_s)
        learner.time_phases(state.phase_s)
        updates = Updates(learner, replay, t.precision, state)
        boundary = StepBoundary(t, state)
        obs, owed, learner_metrics = state.obs, 0, {}

        while not t.done(state):  # the budget spent, or stop_return reached
            taken = env_step(envs, learner, obs, state.step, timer)
            with timer("replay_add"):
                replay.add(*taken.transitions)
            owed += updates.owed(envs.num_envs)
            if len(taken.returns):  # an episode is over: pay what its steps are owed
                state.record_episodes(taken.returns)
                for _ in range(owed):
                    learner_metrics = updates.step()
                owed = 0
            obs = taken.next_obs
            boundary(envs.num_envs, obs, learner_metrics)
        return loop_metrics(state, learner, learner_metrics)
