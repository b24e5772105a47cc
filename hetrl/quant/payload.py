"""ActorQ's parameter quantizer `q_c`: a state dict compressed for the wire, and back.

A payload is plain data (dicts of tensors, ints and strings), so `torch.save(...,
weights_only=True)`, pickle and Ray all carry it:

    {"bits": 8, "per_channel": False,
     "tensors": {name: tensor                                          # kept as it is
                       | {"codes": int8, "scale": f32, "zero_point": i32, "dtype": "float32"}}}

Floating tensors are quantized with the clamped affine quantizer (bits <= 8: one int8 code a
value; codes of fewer bits are not packed further), or cast to float16 (bits = 16); others
(step counters, integer buffers) travel as they are. bits = 32 sends everything unchanged.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from hetrl.quant.quantizers import QTensor, dequantize_affine, quantize_affine

Payload = dict[str, Any]
BITS = (2, 3, 4, 5, 6, 7, 8, 16, 32)


def compress_state_dict(state_dict: Mapping[str, torch.Tensor], bits: int = 8,
                        per_channel: bool = False) -> Payload:
    """The state dict with every floating tensor at `bits` (one scale per tensor, or per slice
    of axis 0 with `per_channel`); tensors are detached and moved to the CPU."""
    if bits not in BITS:
        raise ValueError(f"bits={bits!r} is invalid: valid values are {list(BITS)}")
    tensors: dict[str, Any] = {}
    for name, value in state_dict.items():
        value = value.detach().cpu()
        if not value.is_floating_point() or bits == 32 or value.dim() == 0:
            tensors[name] = value.clone()
        elif bits == 16:
            tensors[name] = {"half": value.half(), "dtype": str(value.dtype).removeprefix("torch.")}
        else:
            q = quantize_affine(value.float(), bits, per_channel)
            tensors[name] = {"codes": q.codes, "scale": q.scale, "zero_point": q.zero_point,
                             "dtype": str(value.dtype).removeprefix("torch.")}
    return {"bits": bits, "per_channel": per_channel, "tensors": tensors}


def decompress_state_dict(payload: Payload) -> dict[str, torch.Tensor]:
    """The state dict back, each tensor in its original dtype (values within δ/2)."""
    out: dict[str, torch.Tensor] = {}
    for name, entry in payload["tensors"].items():
        if isinstance(entry, torch.Tensor):
            out[name] = entry
            continue
        dtype = getattr(torch, entry["dtype"])
        if "half" in entry:
            out[name] = entry["half"].to(dtype)
        else:
            q = QTensor(entry["codes"], entry["scale"], entry["zero_point"])
            out[name] = dequantize_affine(q).to(dtype)
    return out


def payload_bytes(payload: Payload) -> int:
    """Bytes of tensor data in the payload (codes, scales, zero-points, kept tensors): what a
    broadcast carries, without the few bytes of names and framing."""
    total = 0
    for entry in payload["tensors"].values():
        parts = [entry] if isinstance(entry, torch.Tensor) else [
            v for v in entry.values() if isinstance(v, torch.Tensor)]
        total += sum(t.numel() * t.element_size() for t in parts)
    return total
