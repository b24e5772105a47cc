"""The learners' optimizers as arithmetic on tensors, to run inside one compiled graph: Adam,
RMSprop and momentum SGD, each computing what its `torch.optim` class computes (default
options: no weight decay, amsgrad, Nesterov or centering), on the state tensors that class
keeps (`optimizer.state[p]`), so a checkpoint moves between the eager and the compiled update.
Each is written in foreach calls, as torch's own foreach optimizers are: one call a list of
tensors, where a comprehension is Python that dynamo traces tensor by tensor.

The step count is a tensor (a Python number would be baked into the graph, and every step
would compile it again). A step also returns the 0-d coefficients it computes from the count
(Adam's bias corrections, the clip's scale), which the graph returns: inductor's CPU kernels
keep libm's errno semantics, so a `pow` or `sqrt` they inline into an elementwise loop is
computed again in every iteration of it (2.3x Adam's time on a 67k-parameter net); a value
the graph returns is computed once, into a buffer the loop reads."""

from __future__ import annotations

from typing import Callable

import torch

Tensors = list[torch.Tensor]


class Unsupported(ValueError):
    """An optimizer, or an option of one, that has no functional twin here."""


def _require_defaults(optimizer: torch.optim.Optimizer, **defaults: object) -> None:
    for group in optimizer.param_groups:
        for key, value in defaults.items():
            if group.get(key, value) != value:
                raise Unsupported(f"{type(optimizer).__name__}({key}={group[key]!r}) has no "
                                  f"compiled form (supported: {key}={value!r})")


class FunctionalOptimizer:
    """One `torch.optim` optimizer's update rule: `keys` names its per-parameter state."""

    keys: tuple[str, ...] = ()

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        (group,) = optimizer.param_groups  # one group: the learners make no more
        self.group = group
        self.post = post_step(optimizer)

    def init_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        """The state `torch.optim` would create for `p` at its first step."""
        raise NotImplementedError

    def step(self, params: Tensors, grads: Tensors, state: dict[str, Tensors],
             lr: torch.Tensor) -> tuple[Tensors, dict[str, Tensors], Tensors]:
        """The new parameters and state (nothing is written in place), and the coefficients
        computed from the step count (see the module's note)."""
        raise NotImplementedError


def post_step(optimizer: torch.optim.Optimizer
              ) -> list[tuple[Tensors, Callable[[torch.Tensor], torch.Tensor]]]:
    """The optimizer's step post-hooks as rules on each new value of the parameters they
    name (a hook's `params`, its `out_of_place` rule: mixed precision's rounding of bf16
    weights); Unsupported where a hook has no such rule, or runs before the step."""
    pre, post = (list(optimizer._optimizer_step_pre_hooks.values()),
                 list(optimizer._optimizer_step_post_hooks.values()))
    for hook in [*pre, *[h for h in post if not hasattr(h, "out_of_place")]]:
        raise Unsupported(f"{type(optimizer).__name__} has a step hook ({hook!r}) with no "
                          "compiled form: it runs in the eager update")
    return [(hook.params, hook.out_of_place) for hook in post]


def _step_tensor(optimizer_fused: bool, p: torch.Tensor) -> torch.Tensor:
    """torch.optim's step count: a float32 0-d tensor, on the parameter's device when fused."""
    return torch.zeros((), dtype=torch.float32, device=p.device if optimizer_fused else "cpu")


class Adam(FunctionalOptimizer):
    keys = ("step", "exp_avg", "exp_avg_sq")

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        _require_defaults(optimizer, weight_decay=0, amsgrad=False, maximize=False)
        super().__init__(optimizer)
        self.beta1, self.beta2 = self.group["betas"]
        self.eps, self.fused = self.group["eps"], bool(self.group.get("fused"))

    def init_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        zeros = torch.zeros_like(p, memory_format=torch.preserve_format)
        return {"step": _step_tensor(self.fused, p), "exp_avg": zeros,
                "exp_avg_sq": zeros.clone()}

    def step(self, params: Tensors, grads: Tensors, state: dict[str, Tensors],
             lr: torch.Tensor) -> tuple[Tensors, dict[str, Tensors], Tensors]:
        b1, b2 = self.beta1, self.beta2
        steps = torch._foreach_add(state["step"], 1)
        # the bias corrections in double precision, as torch computes them (on the host)
        t = steps[0].to(params[0].device, torch.float64)
        step_size = (lr / (1 - b1 ** t)).float()
        bias2_sqrt = (1 - b2 ** t).sqrt().float()
        m = torch._foreach_lerp(state["exp_avg"], grads, 1 - b1)
        v = torch._foreach_addcmul(torch._foreach_mul(state["exp_avg_sq"], b2), grads, grads,
                                   value=1 - b2)
        denom = torch._foreach_add(torch._foreach_div(torch._foreach_sqrt(v), bias2_sqrt),
                                   self.eps)
        new = torch._foreach_sub(params, torch._foreach_div(torch._foreach_mul(m, step_size),
                                                            denom))
        return new, {"step": steps, "exp_avg": m, "exp_avg_sq": v}, [step_size, bias2_sqrt]


class RMSprop(FunctionalOptimizer):
    keys = ("step", "square_avg")

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        _require_defaults(optimizer, weight_decay=0, momentum=0, centered=False, maximize=False)
        super().__init__(optimizer)
        self.alpha, self.eps = self.group["alpha"], self.group["eps"]

    def init_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"step": _step_tensor(False, p),
                "square_avg": torch.zeros_like(p, memory_format=torch.preserve_format)}

    def step(self, params: Tensors, grads: Tensors, state: dict[str, Tensors],
             lr: torch.Tensor) -> tuple[Tensors, dict[str, Tensors], Tensors]:
        a = self.alpha
        sq = torch._foreach_addcmul(torch._foreach_mul(state["square_avg"], a), grads, grads,
                                    value=1 - a)
        denom = torch._foreach_add(torch._foreach_sqrt(sq), self.eps)
        new = torch._foreach_sub(params, torch._foreach_div(torch._foreach_mul(grads, lr), denom))
        return new, {"step": torch._foreach_add(state["step"], 1), "square_avg": sq}, []


class SGD(FunctionalOptimizer):
    """Momentum SGD (AlphaZero's). The momentum buffer starts at zero, which gives the first
    step torch's (buffer = gradient) exactly."""

    keys = ("momentum_buffer",)

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        _require_defaults(optimizer, weight_decay=0, dampening=0, nesterov=False, maximize=False)
        super().__init__(optimizer)
        self.momentum = self.group["momentum"]

    def init_state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"momentum_buffer": torch.zeros_like(p, memory_format=torch.preserve_format)}

    def step(self, params: Tensors, grads: Tensors, state: dict[str, Tensors],
             lr: torch.Tensor) -> tuple[Tensors, dict[str, Tensors], Tensors]:
        buf = torch._foreach_add(torch._foreach_mul(state["momentum_buffer"], self.momentum),
                                 grads)
        return (torch._foreach_sub(params, torch._foreach_mul(buf, lr)),
                {"momentum_buffer": buf}, [])


RULES: dict[type, Callable[[torch.optim.Optimizer], FunctionalOptimizer]] = {
    torch.optim.Adam: Adam, torch.optim.RMSprop: RMSprop, torch.optim.SGD: SGD}


def functional(optimizer: torch.optim.Optimizer) -> FunctionalOptimizer:
    """The functional twin of `optimizer` (Unsupported, naming it, where there is none)."""
    rule = RULES.get(type(optimizer))
    if rule is None:
        raise Unsupported(f"{type(optimizer).__name__} has no compiled form (supported: "
                          f"{', '.join(cls.__name__ for cls in RULES)})")
    return rule(optimizer)


def clip_grad_norm(grads: Tensors, max_norm: float) -> tuple[Tensors, torch.Tensor]:
    """`torch.nn.utils.clip_grad_norm_`'s arithmetic, out of place; and its scale (a
    coefficient: see the module's note)."""
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)
    return [g * coef for g in grads], coef
