"""QuaRL's quantizers, PTQ policy copies (fp16, int8 paper and kernel), the q_c payload, QAT,
and the end-of-run ptq_reward_error_pct."""

from __future__ import annotations

import io

import gymnasium as gym
import pytest
import torch
from helpers import build_job, compose_job, metric_history, mlflow_runs, run_job
from torch import nn

from hetrl.algos.base import Batch
from hetrl.algos.networks import mlp
from hetrl.config.errors import ConfigError
from hetrl.quant import (QuantSpec, compress_state_dict, decompress_state_dict, dequantize_affine,
                         fake_quant_ste, load_into, paper_fake_quant, paper_scale,
                         payload_bytes, quantize_affine, quantize_policy)
from hetrl.validation import validate


def _weights(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"mixed": torch.randn(16, 8, generator=g),
            "positive": torch.rand(16, 8, generator=g) * 3,  # QuaRL's overflow corner
            "negative": -torch.rand(64, generator=g)}


@pytest.mark.parametrize("bits", [8, 4])
def test_paper_quantizer_is_the_printed_formula_and_round_trips_within_half_delta(bits):
    for name, w in _weights().items():
        delta = (w.min().clamp(max=0).abs() + w.max().clamp(min=0).abs()) / 2**bits
        assert torch.equal(paper_scale(w, bits), delta), name
        codes = torch.round(w / delta)
        assert torch.equal(paper_fake_quant(w, bits), codes * delta), name
        assert ((paper_fake_quant(w, bits) - w).abs() <= delta / 2 + 1e-6).all(), name
    # no clamp: an all-positive tensor maps its maximum to code 2^n (needs n + 1 bits)
    positive = _weights()["positive"]
    assert torch.round(positive.max() / paper_scale(positive, bits)) == 2**bits


def test_affine_quantizer_fits_its_bits_and_round_trips_within_half_delta():
    for per_channel in (False, True):
        for bits in (8, 3):
            for name, w in _weights(1).items():
                q = quantize_affine(w, bits, per_channel)
                assert q.codes.dtype == torch.int8
                assert q.codes.min() >= -(2 ** (bits - 1)) and q.codes.max() <= 2 ** (bits - 1) - 1
                error = (dequantize_affine(q) - w).abs()
                assert (error <= q.scale / 2 + 1e-6).all(), (name, bits, per_channel)
    w = _weights()["mixed"] * torch.logspace(-2, 1, 16).view(16, 1)
    assert quantize_affine(w, per_channel=True).scale.shape == (16, 1)
    assert len(set(paper_scale(w, 8, per_channel=True).flatten().tolist())) == 16


def test_fake_quant_backward_is_the_identity():
    w = torch.randn(5, 3, requires_grad=True)
    out = fake_quant_ste(w, 4)
    assert not torch.equal(out, w)
    (out * torch.arange(15.0).view(5, 3)).sum().backward()
    assert torch.equal(w.grad, torch.arange(15.0).view(5, 3))


def _linear_bound(layer: nn.Linear, x: torch.Tensor, weight_scale: float) -> torch.Tensor:
    """|y_int8 - y| <= sum_j |W_ij| dx/2 + |x_j| dw/2 + dw dx/4 for each output, with dx the
    step of the kernel's per-tensor 7-bit input quantization (x86/fbgemm's reduce_range)."""
    dx = (x.max().clamp(min=0) - x.min().clamp(max=0)) / 127
    dw = weight_scale
    n = layer.in_features
    return (layer.weight.abs().sum(1) * dx / 2 + x.abs().sum(1, keepdim=True) * dw / 2
            + n * dw * dx / 4)


def test_int8_kernel_agrees_with_fp32_within_the_quantization_bound():
    torch.manual_seed(0)
    layer = nn.Linear(64, 32)
    x = torch.randn(6, 64) * 3
    q = quantize_policy(nn.Sequential(layer), QuantSpec("int8", "kernel"))[0].gemm
    assert isinstance(q, torch.ao.nn.quantized.dynamic.Linear)
    assert q.weight().dtype == torch.qint8  # real int8 weights, not fake quant
    error = (q(x) - layer(x)).abs()
    assert error.max() > 0
    assert (error <= _linear_bound(layer, x, q.weight().q_scale()) + 1e-5).all()
    # the whole policy stays close (relative to its output range)
    net = mlp([8, 64, 64, 4])
    obs = torch.randn(16, 8)
    copy = quantize_policy(net, QuantSpec("int8", "kernel"))
    assert (copy(obs) - net(obs)).abs().max() < 0.05 * net(obs).abs().max()


def _uneven_conv() -> nn.Conv2d:
    torch.manual_seed(0)
    conv = nn.Conv2d(3, 8, kernel_size=3, stride=2, padding=1)
    with torch.no_grad():
        conv.weight.mul_(torch.logspace(-3, 1, 8).view(8, 1, 1, 1))  # channel ranges 1e-3..10
    return conv


@pytest.mark.parametrize("mode", ["paper", "kernel"])
def test_per_channel_error_is_at_most_per_tensor_error_on_uneven_conv_channels(mode):
    conv = _uneven_conv()
    x = torch.randn(4, 3, 12, 12)
    ref = conv(x)
    errors = {}
    for per_channel in (True, False):
        copy = quantize_policy(nn.Sequential(conv), QuantSpec("int8", mode, per_channel))
        errors[per_channel] = (copy(x) - ref).pow(2).mean(dim=(0, 2, 3))  # per output channel
    assert errors[True].sum() <= errors[False].sum()
    # the small channels are where per-tensor scales lose them
    assert (errors[True][:3] < errors[False][:3]).all()
    weight_errors = {pc: (paper_fake_quant(conv.weight, 8, pc) - conv.weight).abs().amax((1, 2, 3))
                     for pc in (True, False)}
    assert (weight_errors[True] <= weight_errors[False]).all()


def test_fp16_copy_rounds_weights_and_inputs_through_half():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    x = torch.randn(4, 5)
    h = x.half().float()
    for layer in (net[0], net[2]):
        h = nn.functional.linear(h.half().float(), layer.weight.half().float(), layer.bias)
        h = torch.tanh(h) if layer is net[0] else h
    copy = quantize_policy(net, QuantSpec("fp16"))
    torch.testing.assert_close(copy(x), h, rtol=1e-5, atol=1e-6)
    assert not torch.equal(copy(x), net(x))
    assert torch.equal(quantize_policy(net, QuantSpec("fp32"))(x), net(x))


class _ConvPolicy(nn.Module):
    """A conv layer, a linear head and a buffer outside both."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3, padding=1)
        self.head = nn.Sequential(nn.ReLU(), nn.Flatten(), nn.Linear(4 * 5 * 5, 3))
        self.register_buffer("scale", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x)) * self.scale


SPECS = [QuantSpec("fp16"), QuantSpec("int8", "paper", True), QuantSpec("int8", "paper", False),
         QuantSpec("int8", "kernel", True), QuantSpec("int8", "kernel", False),
         QuantSpec("int8", "paper", bits=4)]


@pytest.mark.parametrize("spec", SPECS, ids=str)
def test_a_pull_loads_new_weights_into_the_copy_in_place_as_a_new_copy_would(spec):
    torch.manual_seed(0)
    net, x = _ConvPolicy(), torch.randn(5, 2, 5, 5)
    copy = quantize_policy(net, spec)
    modules = list(copy.modules())
    with torch.no_grad():  # the learner's next weights
        for p in net.parameters():
            p.mul_(1.5).add_(0.1 * torch.randn_like(p))
        net.scale.fill_(2.0)
    fresh = quantize_policy(net, spec)(x)
    assert not torch.equal(copy(x), fresh)
    load_into(copy, net)
    assert torch.equal(copy(x), fresh)
    assert list(copy.modules()) == modules  # repacked in place, no layer rebuilt


def test_policy_copy_keeps_the_module_and_leaves_the_original_alone():
    from hetrl.algos.networks import Actor

    box = gym.spaces.Box(-2.0, 2.0, (2,))
    actor = Actor(3, [16, 16], box)
    before = {k: v.clone() for k, v in actor.state_dict().items()}
    obs = torch.randn(9, 3)
    for spec in (QuantSpec("fp16"), QuantSpec("int8", "paper"), QuantSpec("int8", "kernel")):
        copy = quantize_policy(actor, spec)
        out = copy(obs)
        assert out.shape == (9, 2) and (out.abs() <= 2.0).all()
        assert not any(p.requires_grad for p in copy.parameters())
    assert all(torch.equal(before[k], v) for k, v in actor.state_dict().items())


def test_compressed_payload_round_trips_and_is_four_times_smaller():
    net = mlp([64, 512, 512, 512, 6])
    state = net.state_dict()
    payload = compress_state_dict(state, bits=8)
    back = decompress_state_dict(payload)
    for name, value in state.items():
        entry = payload["tensors"][name]
        assert back[name].dtype == value.dtype
        assert ((back[name] - value).abs() <= entry["scale"] / 2 + 1e-6).all()
    raw = sum(v.numel() * v.element_size() for v in state.values())
    assert 3.9 < raw / payload_bytes(payload) <= 4.0

    def wire(obj) -> int:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        return len(buffer.getvalue())

    assert 3.5 <= wire(state) / wire(payload) <= 4.1  # the extract's D6 band
    buffer = io.BytesIO()
    torch.save(payload, buffer)
    buffer.seek(0)
    assert torch.load(buffer, weights_only=True)["bits"] == 8  # plain data on the wire
    half = compress_state_dict(state, bits=16)
    assert payload_bytes(half) == raw // 2
    assert torch.equal(decompress_state_dict(half)["0.weight"], state["0.weight"].half().float())


def _dqn(*overrides: str):
    return build_job("algo=dqn", "algo.hidden=[32,32]", "algo.batch_size=16",
                     "algo.target_update_interval=3", *overrides).learner


def _train(learner, updates: int = 8):
    g = torch.Generator().manual_seed(1)
    for _ in range(updates):
        learner.learn(Batch(torch.randn(16, 4, generator=g),
                             torch.randint(0, 2, (16,), generator=g).float(),
                             torch.randn(16, generator=g), torch.randn(16, 4, generator=g),
                             torch.zeros(16)))
    # the trained fp32 weights (QAT keeps them under its parametrization)
    return {k.replace("parametrizations.weight.original", "weight"): v
            for k, v in learner.state_dict().items()}


def test_qat_before_quant_delay_is_bitwise_fp32_training_and_quantizes_after():
    fp32 = _train(_dqn())
    delayed = _train(_dqn("precision=qat", "precision.quant_delay=8"))
    assert fp32.keys() == delayed.keys()
    assert all(torch.equal(fp32[k], delayed[k]) for k in fp32)
    learner = _dqn("precision=qat", "precision.quant_delay=4", "precision.bits=4")
    after = _train(learner)
    assert not any(torch.equal(fp32[k], after[k]) for k in fp32 if k.endswith("weight"))
    w = learner.q[0].weight  # the forward sees 4-bit weights: at most 2^4 + 1 levels
    assert w.unique().numel() <= 17
    # the int8 paper copy of a QAT'd policy computes what the QAT'd policy computes
    obs = torch.randn(5, 4)
    copy = quantize_policy(learner.q, QuantSpec("int8", "paper", bits=4))
    assert torch.equal(copy(obs), learner.q(obs))


@pytest.mark.parametrize("override", ["actors.precision=int4", "actors.int8_mode=fast",
                                      "actors.eval_episodes=0", "precision=qat",
                                      "precision.bits=1"])
def test_bad_actor_and_qat_settings_are_named(override):
    extra = ["precision=qat"] if override.startswith("precision.") else []
    cfg, choices = compose_job(*extra, override)
    if override == "precision=qat":  # a valid one, for contrast
        validate(cfg, choices)
        return
    with pytest.raises(ConfigError, match="valid values are") as err:
        validate(cfg, choices)
    key, value = override.split("=")
    assert key in str(err.value) and value in str(err.value)


def test_int8_run_logs_ptq_reward_error_against_fp32_on_the_same_episodes(tmp_path):
    """The PTQ error is the run's own (its policy quantized and not, on the same episodes):
    no fp32 reference run (reference=find) nor final greedy evaluation is needed for it."""
    results = run_job(tmp_path, "steps=300", "algo.learning_starts=100", "log_every=300",
                      "actors.precision=int8", "actors.int8_mode=paper", "actors.eval_episodes=2",
                      "precision=qat", "precision.quant_delay=0", "precision.bits=6",
                      "reference=find", "eval.final=0")
    (run,) = [r for r in mlflow_runs(tmp_path) if r.info.run_id == results["run_id"]]
    assert run.data.tags["actors"] == "local"
    fp32, quantized = run.data.metrics["ptq_return_fp32"], run.data.metrics["ptq_return_quantized"]
    assert fp32 >= 5 and quantized >= 5  # a CartPole episode lasts at least ~8 steps
    expected = abs(quantized - fp32) / abs(fp32) * 100
    assert metric_history(tmp_path, run.info.run_id, "ptq_reward_error_pct") == [(300, expected)]
    assert results["ptq_reward_error_pct"] == pytest.approx(expected)
