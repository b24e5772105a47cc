"""Quantization: QuaRL's PTQ and QAT quantizers, ActorQ's policy copies and parameter quantizer.

    spec = QuantSpec(ActorPrecision.int8, Int8Mode.kernel, per_channel=True)
    actor_policy = quantize_policy(learner.policy(), spec)       # q: inference copy
    load_into(actor_policy, learner.policy())                    # a pull: new weights in place
    payload = compress_state_dict(learner.policy().state_dict(), bits=8)   # q_c: the wire
    state_dict = decompress_state_dict(payload); payload_bytes(payload)
"""

from hetrl.quant.payload import Payload, compress_state_dict, decompress_state_dict, payload_bytes
from hetrl.quant.ptq import load_into, quantize_policy
from hetrl.quant.quantizers import (QTensor, dequantize_affine, fake_quant_ste, paper_fake_quant,
                                    paper_scale, quantize_affine)
from hetrl.quant.spec import ActorPrecision, Int8Mode, QuantSpec

__all__ = [
    "ActorPrecision", "Int8Mode", "Payload", "QTensor", "QuantSpec", "compress_state_dict",
    "decompress_state_dict", "dequantize_affine", "fake_quant_ste", "load_into",
    "paper_fake_quant", "paper_scale", "payload_bytes", "quantize_affine", "quantize_policy",
]
