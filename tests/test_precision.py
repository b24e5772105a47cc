"""Precision policies run real numerics: formats, per-layer dtypes, dynamic loss scaling."""

from __future__ import annotations

import contextlib

import gymnasium as gym
import pytest
import torch
from helpers import computed_dtype, loss_scaling, run_job
from torch import nn

from hetrl.algos.dqn import DQN
from hetrl.precision import native as precision_native
from hetrl.precision.layers import compute_layers_in, round_to_bfloat16
from hetrl.precision.native import RoundedCompute


def test_formats_behave_as_ieee_and_bfloat16_say():
    assert torch.tensor(1e-8).half() == 0
    assert torch.tensor(1e-30).bfloat16() != 0
    assert torch.isinf(torch.tensor(7e4).half())
    assert torch.isfinite(torch.tensor(3e38).bfloat16())
    one = torch.tensor(1.0)
    assert (torch.nextafter(one.half(), one.half() * 2) - 1).item() == 2**-10
    assert (torch.nextafter(one.bfloat16().float(), torch.tensor(2.0)).bfloat16() - 1).item() in (0, 2**-7)


def test_each_layer_computes_in_its_dtype_and_gradients_stay_fp32():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    seen: dict[str, torch.dtype] = {}
    for name, layer in net.named_modules():
        if name in ("0", "2", "4"):
            layer.register_forward_hook(
                lambda m, a, out, n=name: seen.__setitem__(n, computed_dtype(out)))
    dtypes = {"0": torch.float32, "2": torch.float16, "4": torch.bfloat16}
    compute_layers_in(net, dtypes)
    out = net(torch.randn(5, 4))
    assert seen == dtypes
    assert out.dtype == torch.float32 and not torch.is_autocast_enabled("cpu")
    out.sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in net.parameters())


def test_a_network_in_one_dtype_computes_in_one_region():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(5, 4)
    with precision_native.compute_in("cpu", torch.bfloat16):
        reference = net(x).float()
    compute_layers_in(net, {"0": torch.bfloat16, "1": torch.bfloat16, "2": torch.bfloat16})
    assert not any("forward" in vars(layer) for layer in net)  # no layer's own
    out = net(x)
    assert out.dtype == torch.float32 and computed_dtype(out) == torch.bfloat16
    assert torch.equal(out, reference) and not torch.is_autocast_enabled("cpu")
    out.sum().backward()
    assert all(p.grad.dtype == torch.float32 for p in net.parameters())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rounded_compute_is_autocasts_numerics(dtype: torch.dtype):
    """The emulation a CPU without `dtype` instructions runs: results and the gradients
    leaving each rounded operand on the dtype's grid, and equal to autocast's to within
    fp32 accumulation order."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 8),
                        nn.Tanh(), nn.Linear(8, 3))
    x = torch.randn(16, 2, 8, 8)

    def run(context) -> tuple[torch.Tensor, list[torch.Tensor]]:
        net.zero_grad()
        with context:
            out = net(x)
        out.float().square().sum().backward()
        return out.float(), [p.grad.clone() for p in net.parameters()]

    out, grads = run(RoundedCompute(dtype))
    reference, reference_grads = run(torch.autocast("cpu", dtype=dtype))
    exact, _ = run(contextlib.nullcontext())
    assert all(computed_dtype(t) == dtype for t in (out, *grads))
    assert not torch.equal(out, exact)
    ulp = 2.0 ** -(10 if dtype == torch.float16 else 7)
    for ours, theirs in zip([out, *grads], [reference, *reference_grads]):
        assert (ours - theirs).abs().max() <= 2 * ulp * theirs.abs().max()


def test_rounded_fp16_overflows_to_inf_as_fp16_does():
    with RoundedCompute(torch.float16):
        out = nn.functional.linear(torch.full((1, 4), 200.0), torch.full((1, 4), 100.0))
    assert torch.isinf(out).all()


@pytest.mark.filterwarnings("ignore:CUDA is not available")
@pytest.mark.parametrize("native", [True, False, None])
def test_a_cpu_without_the_dtypes_instructions_computes_it_by_rounding(monkeypatch, native):
    monkeypatch.setattr(precision_native, "cpu_native", lambda dtype: native)
    for dtype in (torch.float16, torch.bfloat16):
        context = precision_native.compute_in("cpu", dtype)
        assert isinstance(context, RoundedCompute if native is False else torch.autocast)
        assert isinstance(precision_native.compute_in("cuda", dtype), torch.autocast)


@pytest.mark.parametrize("native", [True, False])
def test_a_weight_stepped_inside_the_context_is_read_as_it_is_now(monkeypatch, native):
    # an update steps its optimizers inside the context: autocast's cast cache would go stale
    monkeypatch.setattr(precision_native, "cpu_native", lambda dtype: native)
    layer, x = nn.Linear(8, 8), torch.randn(4, 8)
    with precision_native.compute_in("cpu", torch.bfloat16):
        before = layer(x)
        with torch.no_grad():
            layer.weight.add_(1.0)
        after = layer(x)
    shift = x.sum(dim=1, keepdim=True).expand(4, 8)  # what adding 1 to every weight adds
    assert torch.allclose((after - before).float(), shift, atol=0.1)


def test_bfloat16_rounding_keeps_weights_on_the_bfloat16_grid():
    weights = torch.randn(100)
    round_to_bfloat16([weights])
    assert torch.equal(weights, weights.bfloat16().float())


def test_loss_scaling_rescues_tiny_fp16_gradients():
    torch.manual_seed(0)
    layer = nn.Linear(16, 16)
    x = torch.randn(32, 16)

    def grads(dtype: torch.dtype, scale: float) -> torch.Tensor:
        layer.zero_grad()
        with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
            out = layer(x)
        (out.float().sum() * 1e-9 * scale).backward()
        return layer.weight.grad / scale

    exact = grads(torch.float32, 1.0)
    assert torch.all(grads(torch.float16, 1.0) == 0)  # underflows unscaled
    scaled = grads(torch.float16, loss_scaling().init_scale)
    assert torch.allclose(scaled, exact, rtol=1e-2, atol=0)


def _dqn() -> DQN:
    return DQN(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), double_dqn=False,
               target_update_interval=10, exploration_fraction=0.1, exploration_initial_eps=1.0,
               exploration_final_eps=0.05, max_grad_norm=10.0, td_loss="huber", total_steps=100,
               device=torch.device("cpu"), batch_size=8, buffer_size=100, learning_starts=0,
               train_freq=1, gradient_steps=1, hidden=[16], lr=1e-3, gamma=0.99, cnn="nature",
               policy_hidden=None)


def test_an_overflow_skips_the_step_and_backs_off_clean_steps_grow_the_scale():
    learner = _dqn()
    learner.scaler = loss_scaling(init_scale=1024.0, growth_interval=3).scaler(learner.device)
    before = [p.detach().clone() for p in learner.q.parameters()]
    loss = learner.q(torch.randn(8, 4)).sum() * float("inf")
    learner.optimize(learner.optimizer, loss, max_grad_norm=10.0)
    assert all(torch.equal(a, b) for a, b in zip(before, learner.q.parameters()))
    assert learner.scaler.get_scale() == 512.0 and learner.skipped_steps == 1
    for _ in range(3):
        learner.optimize(learner.optimizer, learner.q(torch.randn(8, 4)).pow(2).mean())
    assert learner.scaler.get_scale() == 1024.0 and learner.skipped_steps == 1
    assert not all(torch.equal(a, b) for a, b in zip(before, learner.q.parameters()))


@pytest.mark.parametrize("precision", ["fp16", "bf16"])
def test_sixteen_bit_precisions_train_and_log_skipped_steps(tmp_path, precision):
    result = run_job(tmp_path, "algo=dqn", f"precision={precision}", "steps=600",
                     "algo.learning_starts=100", "algo.train_freq=4", "algo.gradient_steps=1",
                     "algo.hidden=[32]", "reference=find", "tracking=none")  # no fp32 twin
    assert result["updates"] == 125 and result["learner/loss"] >= 0
    assert result["precision/skipped_steps"] >= 0
