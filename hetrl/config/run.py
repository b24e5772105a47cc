"""The run-level schema: one node per config group and the job's own keys (conf/config.yaml
holds their values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from omegaconf import MISSING

from hetrl.config.enums import Device, Reference
from hetrl.config.errors import require


COMPILE_MODES = ("auto", "true", "false")
"""`compile`: auto times the eager and the compiled update while the job is built and keeps
the faster where compiling pays over the budget; true compiles; false stays eager."""


def compile_mode(value: Any) -> str:
    """`compile` as one of COMPILE_MODES' names (a bool as Hydra parses `compile=true`)."""
    return str(value).lower()


@dataclass
class EvalConfig:
    """Deterministic evaluation of the policy during training (hetrl.evaluation.Evaluator)."""

    every: int = MISSING  # env steps between evaluations, and one at the end (0: none)
    episodes: int = MISSING  # episodes per evaluation, each from its own fixed eval seed
    final: int = MISSING  # greedy episodes of the final policy for the end summary (0: none)

    def __post_init__(self) -> None:
        require(self.every >= 0, "eval.every", self.every, "integers >= 0 (0: no evaluation)")
        require(self.episodes >= 1, "eval.episodes", self.episodes, "integers >= 1")
        require(self.final >= 0, "eval.final", self.final, "integers >= 0 (0: none)")


@dataclass
class RunConfig:
    env: Any = MISSING
    algo: Any = MISSING
    platform: Any = MISSING
    precision: Any = MISSING
    scheduler: Any = MISSING
    selfplay: Any = None  # scheduler=selfplay: its options, which `scheduler` points at
    replay: Any = MISSING
    tracking: Any = MISSING
    partitioner: Any = MISSING
    actors: Any = MISSING
    seed: int = MISSING
    steps: int = MISSING
    stop_return: Optional[float] = MISSING
    device: Device = MISSING
    checkpoint_every: int = MISSING
    reference: Reference = MISSING
    resume: Optional[str] = MISSING
    log_every: int = MISSING
    eval: EvalConfig = MISSING
    compile: Any = MISSING  # auto | true | false (the command line reads true/false as bools)

    def __post_init__(self) -> None:
        require(compile_mode(self.compile) in COMPILE_MODES, "compile", self.compile,
                ", ".join(COMPILE_MODES))
        require(self.steps >= 1, "steps", self.steps, "integers >= 1")
        require(self.seed >= 0, "seed", self.seed, "integers >= 0")
        require(self.checkpoint_every >= 0, "checkpoint_every", self.checkpoint_every,
                "integers >= 0 (0: checkpoint only at the end)")
        require(self.log_every >= 1, "log_every", self.log_every, "integers >= 1")
