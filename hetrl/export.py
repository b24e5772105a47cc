"""`python -m hetrl.export <run> --format onnx [--int8]`: a run's greedy policy as ONNX, for the
toolchains of FPGAs, AI Engines and DSPs (Vitis AI, OpenVINO, TensorRT, ONNX Runtime on Arm).

The graph takes a batch of observations (`obs`) and gives the greedy `action` and the `head`
it is chosen from (Q-values, logits, or the action before clipping). `--int8` writes it in
ONNX's QDQ form as QuaRL's PTQ quantizes the actors' int8 policy (`hetrl.quant.kernels`):
each Gemm/MatMul/Conv weight stored as the kernels' symmetric int8 codes (one scale per tensor,
per output channel for convolutions) behind a DequantizeLinear, each layer's input quantized
on the fly per tensor as fbgemm's dynamic kernels quantize it (7-bit codes over its range and 0:
ReduceMin/ReduceMax -> QuantizeLinear -> DequantizeLinear). Either file is checked against the
PyTorch policy with ONNX Runtime on observations of the policy's own episodes (fp32: heads
equal to 1e-5; int8: the same action as PyTorch's int8 policy on >= 99 % of them, a
continuous one within 1 % of the action range), then logged to the run (`onnx/`).
"""

from __future__ import annotations

import argparse
import io
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from hetrl.agent import Agent, GreedyPolicy
from hetrl.loading import load
from hetrl.config.errors import ConfigError
from hetrl.quant import ActorPrecision, Int8Mode, QuantSpec, quantize_policy

OPSET = 17
FP32_TOLERANCE = 1e-5
INT8_AGREEMENT = 0.99
QUANTIZED_OPS = {"Gemm": 1, "MatMul": 1, "Conv": 1}  # op -> index of its weight input
ACTION_TOLERANCE = 0.01
"""Two continuous actions are the same within this share of the action range."""
ACTIVATION_LEVELS = 127.0  # fbgemm's dynamic inputs: 7-bit codes (`reduce_range`)


class _Heads(torch.nn.Module):
    """The greedy policy with both of its outputs: (action, head)."""

    def __init__(self, greedy: GreedyPolicy) -> None:
        super().__init__()
        self.greedy = greedy

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        head = self.greedy.head(obs)
        return self.greedy.choose(head), head


def to_onnx(agent: Agent) -> bytes:
    """The fp32 greedy policy as an ONNX model (a dynamic batch dimension)."""
    sample = torch.zeros((1, *agent.obs_space.shape),
                         dtype=torch.from_numpy(np.zeros(0, agent.obs_space.dtype)).dtype)
    buffer = io.BytesIO()
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        # eval(): the exporter hands the module back in the mode it had (a new one trains)
        torch.onnx.export(_Heads(agent.greedy()).eval(), (sample,), buffer, dynamo=False,
                          opset_version=OPSET, input_names=["obs"],
                          output_names=["action", "head"],
                          dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"},
                                        "head": {0: "batch"}})
    return buffer.getvalue()


def to_qdq(model_bytes: bytes, per_channel: bool = True) -> bytes:
    """The model with each layer's weight as the int8 codes the actors' int8 kernels hold and
    its input quantized on the fly as theirs is, in QDQ form (see the module docstring)."""
    import onnx

    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    graph.initializer.extend(_constants())
    nodes = []
    for node in graph.node:
        index = QUANTIZED_OPS.get(node.op_type)
        if index is not None and node.input[index] in weights:
            name = node.input[index]
            nodes += _weight_qdq(graph, weights.pop(name), node.op_type == "Conv" and per_channel)
            nodes += _input_qdq(node.input[0], name)
            node.input[0], node.input[index] = f"{name}_x_dq", f"{name}_dq"
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _constants() -> list:
    from onnx import numpy_helper

    return [numpy_helper.from_array(np.array(v, np.float32), name)
            for name, v in (("q_zero", 0.0), ("q_levels", ACTIVATION_LEVELS),
                            ("q_unit", 0.1))]


def _weight_qdq(graph, init, per_channel: bool) -> list:
    """The weight as the kernels' symmetric int8 codes and scales behind a DequantizeLinear."""
    from onnx import helper, numpy_helper

    from hetrl.quant.kernels import qint8_weight

    w = torch.from_numpy(numpy_helper.to_array(init).copy())
    q = qint8_weight(w.reshape(w.shape[0], -1), per_channel)
    codes = q.int_repr().reshape(w.shape).numpy()
    scale = (q.q_per_channel_scales().float().numpy() if per_channel
             else np.array(q.q_scale(), np.float32))
    name = init.name
    graph.initializer.remove(init)
    graph.initializer.extend([numpy_helper.from_array(codes, f"{name}_q"),
                              numpy_helper.from_array(scale, f"{name}_scale"),
                              numpy_helper.from_array(np.zeros(scale.shape, np.int8),
                                                      f"{name}_zero")])
    return [helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_scale",
                                                  f"{name}_zero"], [f"{name}_dq"], axis=0)]


def _input_qdq(x: str, name: str) -> list:
    """`x` quantized per tensor on the fly as fbgemm's dynamic kernels do (7-bit unsigned
    codes, `reduce_range`, over the range of x and 0), then dequantized."""
    from onnx import helper

    p = f"{name}_x"

    def node(op: str, inputs: list[str], output: str, **attrs) -> object:
        return helper.make_node(op, inputs, [f"{p}_{output}"], **attrs)

    return [
        node("ReduceMin", [x], "min", keepdims=0), node("ReduceMax", [x], "max", keepdims=0),
        node("Min", [f"{p}_min", "q_zero"], "lo"), node("Max", [f"{p}_max", "q_zero"], "hi"),
        node("Sub", [f"{p}_hi", f"{p}_lo"], "range"),
        node("Div", [f"{p}_range", "q_levels"], "raw_scale"),
        node("Equal", [f"{p}_raw_scale", "q_zero"], "flat"),
        node("Where", [f"{p}_flat", "q_unit", f"{p}_raw_scale"], "scale"),
        node("Div", [f"{p}_lo", f"{p}_scale"], "lo_codes"),
        node("Sub", ["q_zero", f"{p}_lo_codes"], "zero_f"),
        node("Round", [f"{p}_zero_f"], "zero_r"),
        node("Cast", [f"{p}_zero_r"], "zero", to=2),  # uint8
        node("QuantizeLinear", [x, f"{p}_scale", f"{p}_zero"], "q"),
        node("DequantizeLinear", [f"{p}_q", f"{p}_scale", f"{p}_zero"], "dq"),
    ]


def check(agent: Agent, model_bytes: bytes, int8: bool, n: int = 4096) -> dict[str, float]:
    """Run the model with ONNX Runtime on `n` observations of the policy's episodes against
    the PyTorch policy, and raise if it is off: fp32, heads beyond 1e-5 (relative to |head|
    where it exceeds 1); int8, the greedy action of the actors' int8 policy (QuaRL's PTQ on
    hetrl's int8 kernels) on fewer than 99 % of them, each observation alone, as an actor
    acts (the inputs' scale is the observation's). What was measured is returned, with the
    int8 model's agreement with the fp32 policy (`same_action_fp32`, what quantizing costs)."""
    import onnxruntime

    obs = agent.observations(n)
    session = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    fp32 = agent.greedy()
    reference = GreedyPolicy(quantize_policy(fp32.policy, _int8(agent)), agent.act_space)
    batches = np.split(obs, n) if int8 else [obs]
    with torch.inference_mode():
        heads = [(session.run(None, {"obs": b})[1], (reference if int8 else fp32).head(
            torch.from_numpy(b)).numpy()) for b in batches]
        expected_fp32 = fp32(torch.from_numpy(obs)).numpy()
    head, expected = (np.concatenate(h) for h in zip(*heads))
    actions = fp32.choose(torch.from_numpy(head)).numpy()
    measured = {"observations": float(n),
                "same_action": _agreement(actions, fp32.choose(torch.from_numpy(expected)),
                                          agent.act_space),
                "same_action_fp32": _agreement(actions, expected_fp32, agent.act_space),
                "head_error": float(np.max(np.abs(head - expected)
                                           / np.maximum(1.0, np.abs(expected))))}
    if int8 and measured["same_action"] < INT8_AGREEMENT:
        raise AssertionError(f"the int8 model's greedy action differs from the PyTorch int8 "
                             f"policy's on {1 - measured['same_action']:.1%} of {n} "
                             f"observations (at most {1 - INT8_AGREEMENT:.0%} allowed)")
    if not int8 and measured["head_error"] > FP32_TOLERANCE:
        raise AssertionError(f"the ONNX model's head is off PyTorch's by "
                             f"{measured['head_error']:.2e} (at most {FP32_TOLERANCE:g} allowed)")
    return measured


def _int8(agent: Agent) -> QuantSpec:
    """The actors' int8 precision: hetrl's int8 kernels, per channel as the run set it."""
    return QuantSpec(ActorPrecision.int8, Int8Mode.kernel, agent.actor_spec().per_channel)


def _agreement(actions: np.ndarray, expected: np.ndarray | torch.Tensor,
               act_space: gym.Space) -> float:
    """The share of observations whose actions are the same: equal (discrete), or within
    ACTION_TOLERANCE of the action range in every dimension (continuous)."""
    actions, expected = np.asarray(actions), np.asarray(expected)
    if isinstance(act_space, gym.spaces.Discrete):
        same = actions == expected
    else:
        same = np.abs(actions - expected) <= ACTION_TOLERANCE * (act_space.high - act_space.low)
    return float(np.all(np.reshape(same, (len(actions), -1)), axis=1).mean())


def export(agent: Agent, path: Path, int8: bool = False, n: int = 4096) -> dict[str, float]:
    """Write the checked ONNX model of the agent's policy to `path`; what `check` measured."""
    model = to_onnx(agent)
    if int8:
        model = to_qdq(model, agent.actor_spec().per_channel)
    measured = check(agent, model, int8, n)
    path.write_bytes(model)
    return measured


def main(args: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m hetrl.export",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("run", help="a job folder, a policy.pt or checkpoint.pt, runs:/<id>")
    parser.add_argument("--format", default="onnx", choices=["onnx"])
    parser.add_argument("--int8", action="store_true", help="int8 weights and inputs (QDQ)")
    parser.add_argument("--out", type=Path, help="the file (default: policy[_int8].onnx in "
                        "the job folder, or here)")
    parser.add_argument("--observations", type=int, default=4096,
                        help="observations the check runs on (default 4096)")
    parser.add_argument("--tracking-uri", help="the MLflow store of runs:/<id>")
    options = parser.parse_args(args)
    agent = load(options.run, tracking_uri=options.tracking_uri)
    if options.tracking_uri:
        agent.tracking_uri = options.tracking_uri
    name = "policy_int8.onnx" if options.int8 else "policy.onnx"
    folder = Path(options.run) if Path(options.run).is_dir() else Path(".")
    path = options.out or folder / name
    measured = export(agent, path, options.int8, options.observations)
    print(f"wrote {path}: ONNX Runtime vs PyTorch{' int8' if options.int8 else ''} on "
          f"{measured['observations']:.0f} observations: same action "
          f"{measured['same_action']:.2%}, head error {measured['head_error']:.2e} (relative)"
          + (f"; same action as the fp32 policy {measured['same_action_fp32']:.2%}"
             if options.int8 else ""))
    if (where := agent.log_to_run([path], "onnx")) is not None:
        print(f"logged to {where}")


def cli() -> None:
    try:
        main(sys.argv[1:])
    except (ConfigError, AssertionError) as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    cli()
