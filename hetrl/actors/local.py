"""`actors=local`: acting stays in the learner's process; only the evaluation is quantized."""

from __future__ import annotations

from typing import ClassVar

from hetrl.quant.spec import QuantSpec


class LocalActors:
    """The learner acts itself (sync and on-policy schedulers); `spec` is the precision the
    final policy is evaluated in next to fp32 (`ptq_reward_error_pct`)."""

    pool: ClassVar[bool] = False  # a pool of actors that a scheduler drives (scheduler=actorq)

    def __init__(self, precision: str, int8_mode: str, per_channel: bool,
                 eval_episodes: int) -> None:
        self.spec = QuantSpec(precision, int8_mode, per_channel)
        self.eval_episodes = eval_episodes
