"""ActorQ's parameter quantizer between the learner and its actors (QuaRL/ActorQ A.1.4, A.1.6).

The learner publishes its fp32 policy as a serialized state dict (the smallest message, as
in the paper). With `quantize_on=learner` (q_c) the floating tensors are quantized before they
leave (8 bits for int8 actors, 16 for fp16: hetrl.quant's compressed payload, 4× / 2×
smaller); with `quantize_on=actor` (q) they travel in fp32 and only the actor quantizes.
Either way the actor loads what it receives into its inference copy (made once by
`quantize_policy`; at each pull `load_into` repacks its quantized layers in place).
"""

from __future__ import annotations

import io
from enum import Enum

import torch
from torch import nn

from hetrl.quant import ActorPrecision, QuantSpec, compress_state_dict, decompress_state_dict

WIRE_BITS = {ActorPrecision.fp32: 32, ActorPrecision.fp16: 16, ActorPrecision.int8: 8}
"""q_c: the width the broadcast weights take for each actor precision q (q = 8 ⇒ q_c = 8)."""


class QuantizeOn(str, Enum):
    learner = "learner"  # q_c: compressed before sending
    actor = "actor"  # q: fp32 on the wire, quantized after receiving


def publish(policy: nn.Module, spec: QuantSpec, quantize_on: QuantizeOn) -> bytes:
    """The message an actor pulls: the policy's state dict, compressed for q_c, serialized."""
    state = {k: v.detach().cpu() for k, v in policy.state_dict().items()}
    if quantize_on == QuantizeOn.learner:
        message = {"compressed": compress_state_dict(state, WIRE_BITS[spec.precision],
                                                     spec.per_channel)}
    else:
        message = {"state_dict": state}
    buffer = io.BytesIO()
    torch.save(message, buffer)
    return buffer.getvalue()


def deserialize(payload: bytes) -> dict[str, torch.Tensor]:
    """The fp32 state dict a message carries (decompressed when it was compressed)."""
    message = torch.load(io.BytesIO(payload), weights_only=True)
    if "compressed" in message:
        return decompress_state_dict(message["compressed"])
    return message["state_dict"]
