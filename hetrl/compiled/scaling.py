"""float16's dynamic loss scaling as arithmetic on `torch.amp.GradScaler`'s own state tensors,
to run inside the compiled update: the loss scaled, the gradients unscaled and checked for
inf/nan, the step kept or dropped by `torch.where` (no Python branch on data), and the scale's
backoff and growth as `torch._amp_update_scale_` computes them. The state is the scaler's
(`_scale`, `_growth_tracker`), written back in place, so its `state_dict` and a checkpoint
move between the eager and the compiled update."""

from __future__ import annotations

import torch

Tensors = list[torch.Tensor]


class GraphScaler:
    """The learner's GradScaler as functions of its (scale, growth tracker) tensors. Its
    growth factor, backoff factor and growth interval are the scaler's when the graph is
    made (a config's: a checkpoint of the same job carries the same)."""

    def __init__(self, scaler: torch.amp.GradScaler, device: torch.device) -> None:
        if scaler._scale is None:  # made at the eager scaler's first `scale()`
            scaler._lazy_init_scale_growth_tracker(device)
        self.scaler = scaler
        self.growth, self.backoff = scaler.get_growth_factor(), scaler.get_backoff_factor()
        self.interval = scaler.get_growth_interval()

    def state(self) -> Tensors:
        """The scaler's (scale, growth tracker) tensors, which the graph writes back into."""
        return [self.scaler._scale, self.scaler._growth_tracker]

    @staticmethod
    def unscale(grads: Tensors, scale: torch.Tensor) -> tuple[Tensors, torch.Tensor]:
        """The gradients over the scale (its reciprocal taken in float64, as GradScaler
        takes it) and whether any of them is inf or nan."""
        inv = scale.double().reciprocal().float()
        found = ~torch.stack([g.isfinite().all() for g in grads]).all()
        return [g * inv for g in grads], found

    def update(self, scale: torch.Tensor, tracker: torch.Tensor,
               found: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The next scale and growth tracker: backed off on an overflow, grown after
        `growth_interval` clean steps (but not past float32's range to inf)."""
        clean = tracker + 1
        grows = ~found & (clean == self.interval)
        grown = (scale.double() * self.growth).float()
        grown = torch.where(grown.isfinite(), grown, scale)
        backed_off = (scale.double() * self.backoff).float()
        new_scale = torch.where(found, backed_off, torch.where(grows, grown, scale))
        new_tracker = torch.where(found | grows, torch.zeros_like(tracker), clean)
        return new_scale, new_tracker


def kept(found: torch.Tensor, new: Tensors, old: Tensors) -> Tensors:
    """`old` where the step overflowed (`found`: skipped), else `new`."""
    return [torch.where(found, o, n) for n, o in zip(new, old)]
