"""The config enums that runtime code imports; this module imports nothing of hetrl."""

from __future__ import annotations

from enum import Enum


class ActionSpace(str, Enum):
    discrete = "discrete"
    continuous = "continuous"


class Agents(str, Enum):
    """How many agents an env has, so that single- and multi-agent learners are matched."""

    single = "single"
    multi = "multi"
    game = "game"  # a two-player board game (Go), learned by self-play (algo=alphazero)


class Reference(str, Enum):
    """What a job compared with a reference run does when the MLflow store has none yet."""

    train = "train"  # trains it first, into the same store
    find = "find"  # logs no comparison: the twin's cost is not spent


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Noise(str, Enum):
    normal = "normal"
    ornstein_uhlenbeck = "ornstein_uhlenbeck"
    none = "none"


class DType(str, Enum):
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"
    # 16-bit fixed point: a modeled device's rate only (FIXAR's PL, D.1 #16); no precision
    # policy computes in it (hetrl.config.precision rejects it)
    int16 = "int16"


COMPUTE_DTYPES = (DType.float32, DType.bfloat16, DType.float16)
"""The dtypes a precision policy computes a learner's update in (under torch autocast)."""


class ActorPrecision(str, Enum):
    """The inference precision `q` of a policy copy (QuaRL's PTQ, ActorQ's actors)."""

    fp32 = "fp32"
    fp16 = "fp16"
    int8 = "int8"


class Int8Mode(str, Enum):
    """How int8 is computed.

    `paper`: QuaRL's quantizer exactly as printed (delta over 2^n, no zero-point, no clamp),
    as fake quant in float on weights and activations: the reward-error study.
    `kernel`: standard clamped int8 (symmetric weights, affine activations) run by real
    int8 kernels (PyTorch's dynamically quantized Linear/Conv): the speed study.
    """

    paper = "paper"
    kernel = "kernel"


class ReturnDefinition(str, Enum):
    """What `return_mean_100` means in a multi-agent env (peers disagree on it)."""

    team_sum = "team_sum"  # the sum over agents of each agent's episode return
    agent_mean = "agent_mean"  # the mean over agents of each agent's episode return


class Kind(str, Enum):
    """The kind of a node of a step's task graph (what a modeled device may run)."""

    matmul = "matmul"  # Linear and Conv: may go to PL or AIE (AP-DRL's "MM layers")
    elementwise = "elementwise"  # activations and other non-MM layers
    loss = "loss"
    optimizer = "optimizer"  # per-layer weight update
