"""`python -m hetrl.export <run> --format onnx [--int8]`: a run's greedy policy as ONNX, for the
toolchains of FPGAs, AI Engines and DSPs (Vitis AI, OpenVINO, TensorRT, ONNX Runtime on Arm).

The graph takes a batch of observations (`obs`) and gives the greedy `action` and the `head`
it is chosen from (Q-values, logits, or the action before clipping). `--int8` writes it in
ONNX's QDQ form as QuaRL's PTQ quantizes the actors' int8 policy (`hetrl.quant.kernels`):
each Gemm/MatMul/Conv weight stored as symmetric int8 codes (one scale per tensor, per output
channel for convolutions) behind a DequantizeLinear, each layer's input quantized on the fly
per tensor (DynamicQuantizeLinear -> DequantizeLinear). Either file is checked against the
PyTorch policy with ONNX Runtime on observations of the policy's own episodes (fp32: heads
equal to 1e-5; int8: the same action on >= 99 % of them), then logged to the run (`onnx/`).
"""

from __future__ import annotations

import argparse
import io
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

from hetrl.agent import Agent, GreedyPolicy, load
from hetrl.config.errors import ConfigError
from hetrl.quant.quantizers import affine_params

OPSET = 17
FP32_TOLERANCE = 1e-5
INT8_AGREEMENT = 0.99
QUANTIZED_OPS = {"Gemm": 1, "MatMul": 1, "Conv": 1}  # op -> index of its weight input


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
        torch.onnx.export(_Heads(agent.greedy()), (sample,), buffer, dynamo=False,
                          opset_version=OPSET, input_names=["obs"],
                          output_names=["action", "head"],
                          dynamic_axes={"obs": {0: "batch"}, "action": {0: "batch"},
                                        "head": {0: "batch"}})
    return buffer.getvalue()


def to_qdq(model_bytes: bytes, per_channel: bool = True) -> bytes:
    """The model with each layer's weight as int8 codes and its input quantized per tensor
    on the fly, in QDQ form (see the module docstring)."""
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    weights = {init.name: init for init in graph.initializer}
    nodes = []
    for node in graph.node:
        index = QUANTIZED_OPS.get(node.op_type)
        if index is None or node.input[index] not in weights:
            nodes.append(node)
            continue
        name = node.input[index]
        w = torch.from_numpy(numpy_helper.to_array(weights[name]).copy())
        conv = node.op_type == "Conv"
        scale, _ = affine_params(w, bits=8, per_channel=conv and per_channel, symmetric=True)
        codes = torch.clamp(torch.floor(w / scale + 0.5), -127, 127).to(torch.int8)
        scale = scale.flatten() if conv and per_channel else scale.reshape(())
        graph.initializer.extend([
            numpy_helper.from_array(codes.numpy(), f"{name}_q"),
            numpy_helper.from_array(scale.float().numpy(), f"{name}_scale"),
            numpy_helper.from_array(np.zeros(scale.shape, np.int8), f"{name}_zero")])
        x = node.input[0]
        nodes += [
            helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_scale", f"{name}_zero"],
                             [f"{name}_dq"], axis=0),
            helper.make_node("DynamicQuantizeLinear", [x], [f"{name}_x_q", f"{name}_x_scale",
                                                            f"{name}_x_zero"]),
            helper.make_node("DequantizeLinear", [f"{name}_x_q", f"{name}_x_scale",
                                                  f"{name}_x_zero"], [f"{name}_x_dq"])]
        node.input[0], node.input[index] = f"{name}_x_dq", f"{name}_dq"
        nodes.append(node)
        graph.initializer.remove(weights[name])
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model.SerializeToString()


def check(agent: Agent, model_bytes: bytes, int8: bool, n: int = 4096) -> dict[str, float]:
    """Run the model with ONNX Runtime on `n` observations of the policy's episodes against
    the PyTorch policy; raise if it is off (fp32: heads beyond 1e-5; int8: actions agreeing
    on fewer than 99 %). Returns what was measured."""
    import onnxruntime

    obs = agent.observations(n)
    session = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    actions, heads = session.run(None, {"obs": obs})
    greedy = agent.greedy()
    with torch.inference_mode():
        head = greedy.head(torch.from_numpy(obs))
        expected, expected_head = greedy.choose(head).numpy(), head.numpy()
    same = np.all(np.reshape(actions == expected, (n, -1)), axis=1).mean()
    error = float(np.max(np.abs(heads - expected_head) / np.maximum(1.0, np.abs(expected_head))))
    measured = {"observations": float(n), "same_action": float(same), "head_error": error}
    if int8 and same < INT8_AGREEMENT:
        raise AssertionError(f"the int8 model's greedy action differs from PyTorch's on "
                             f"{1 - same:.1%} of {n} observations (at most "
                             f"{1 - INT8_AGREEMENT:.0%} allowed)")
    if not int8 and error > FP32_TOLERANCE:
        raise AssertionError(f"the ONNX model's head is off PyTorch's by {error:.2e} "
                             f"(at most {FP32_TOLERANCE:g} allowed)")
    return measured


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
    print(f"wrote {path}: ONNX Runtime vs PyTorch on {measured['observations']:.0f} "
          f"observations: same action {measured['same_action']:.2%}, head error "
          f"{measured['head_error']:.2e} (relative)")
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
