"""Tensor quantizers: QuaRL's formula as printed (fake quant) and standard clamped affine int8.

QuaRL (A.1.1): Q_n(W) = round(W / δ), δ = (|min(W, 0)| + |max(W, 0)|) / 2^n, D = δ · Q_n(W).
No zero-point and no clamp: an all-positive tensor maps its maximum to code 2^n, which needs
n + 1 bits, so this quantizer exists only as fake quant (codes stay in float). The affine
quantizer below spreads the same range over 2^n - 1 steps with a zero-point, so its codes fit
n-bit integers; that is the one real int8 kernels and compressed payloads use.
QuaRL's rounding is `torch.round` (half to even); the affine one rounds half up. `per_channel` means one δ per slice along axis 0
(the output channel of a conv or linear weight).
"""

from __future__ import annotations

from typing import NamedTuple

import torch


def _range(w: torch.Tensor, per_channel: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """min(W, 0) and max(W, 0), per tensor or per slice of axis 0 (shaped to broadcast)."""
    if per_channel and w.dim() > 1:
        flat = w.detach().reshape(w.shape[0], -1)
        shape = (-1,) + (1,) * (w.dim() - 1)
        lo, hi = flat.amin(dim=1).view(shape), flat.amax(dim=1).view(shape)
    else:
        lo, hi = w.detach().min(), w.detach().max()
    return lo.clamp(max=0), hi.clamp(min=0)


def _nonzero(scale: torch.Tensor) -> torch.Tensor:
    """An all-zero tensor (or slice) gets δ = 1: its codes are 0 either way."""
    return torch.where(scale > 0, scale, torch.ones_like(scale))


def paper_scale(w: torch.Tensor, bits: int, per_channel: bool = False) -> torch.Tensor:
    """QuaRL's δ = (|min(W, 0)| + |max(W, 0)|) / 2^n."""
    lo, hi = _range(w, per_channel)
    return (hi - lo) / 2**bits


def paper_fake_quant(w: torch.Tensor, bits: int, per_channel: bool = False) -> torch.Tensor:
    """D(Q_n(W)) = δ · round(W / δ) in float, exactly as QuaRL prints it."""
    delta = _nonzero(paper_scale(w, bits, per_channel))
    return torch.round(w / delta) * delta


def fake_quant_ste(w: torch.Tensor, bits: int, per_channel: bool = False) -> torch.Tensor:
    """QuaRL's fake quant with a straight-through gradient (dQ/dW = I), for QAT: the fake
    quant of w, constant to autograd, plus w - w (zero, exactly, with the identity as its
    gradient). Plain ops, not an autograd.Function: dynamo under torch.func's gradient (a
    compiled update) traces a Function's forward and differentiates that, so round's zero
    gradient would replace the identity."""
    return paper_fake_quant(w.detach(), bits, per_channel) + (w - w.detach())


class QTensor(NamedTuple):
    """Integer codes with their scale and zero-point: x ≈ (codes - zero_point) · scale.
    `scale` and `zero_point` are 0-dim (per tensor) or shaped to broadcast along axis 0."""

    codes: torch.Tensor  # int8 (bits <= 8)
    scale: torch.Tensor  # float32
    zero_point: torch.Tensor  # int32


def _code_range(bits: int) -> tuple[int, int]:
    """The smallest and largest signed `bits`-bit code."""
    if not 2 <= bits <= 8:
        raise ValueError(f"bits={bits!r} is invalid: valid values are integers in [2, 8]")
    return -(2 ** (bits - 1)), 2 ** (bits - 1) - 1


def affine_params(w: torch.Tensor, bits: int = 8, per_channel: bool = False,
                  symmetric: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The scale (in w's dtype) and integer zero-point of `quantize_affine`, without its
    codes (what a kernel that quantizes on its own needs)."""
    qmin, qmax = _code_range(bits)
    lo, hi = _range(w, per_channel)
    if symmetric:
        scale = _nonzero(torch.maximum(-lo, hi) / qmax)
        return scale, torch.zeros_like(scale, dtype=torch.int32)
    scale = _nonzero((hi - lo) / (qmax - qmin))
    return scale, (qmin - torch.floor(lo / scale + 0.5)).to(torch.int32)


def quantize_affine(w: torch.Tensor, bits: int = 8, per_channel: bool = False,
                    symmetric: bool = False) -> QTensor:
    """Standard clamped affine quantization to signed `bits`-bit codes.

    The range [min(W, 0), max(W, 0)] is spread over 2^n - 1 steps and the zero-point is an
    integer, so 0 is exact, every element lies within the code range and the round trip is
    off by at most δ/2. `symmetric` uses ±max|W| and zero-point 0 (int8 kernel weights).
    """
    scale, zero_point = affine_params(w, bits, per_channel, symmetric)
    qmin, qmax = _code_range(bits)
    # floor(x + 1/2) commutes with adding the integer zero-point, so no code is clamped
    codes = torch.clamp(torch.floor(w.detach() / scale + 0.5) + zero_point, qmin, qmax)
    return QTensor(codes.to(torch.int8), scale.float(), zero_point)


def dequantize_affine(q: QTensor) -> torch.Tensor:
    """(codes - zero_point) · scale, in float32 (the difference, a small integer, is exact in
    float32: one new tensor, updated in place)."""
    return q.codes.float().sub_(q.zero_point).mul_(q.scale)
