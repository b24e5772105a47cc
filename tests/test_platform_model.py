"""The analytical platform model: AP-DRL's PL/AIE crossover (T3), dtypes, links, and platforms
that are YAML only."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import compose_job
from hydra.utils import instantiate

from hetrl.build import build
from hetrl.config.errors import ConfigError
from hetrl.options import group_options
from hetrl.partition.graph import Edge, Kind, Node, Pass, TaskGraph
from hetrl.platform.model import ModeledPlatform
from hetrl.validation import validate

MODELED = [name for name in group_options("platform") if name != "host"]


def platform(*overrides: str) -> ModeledPlatform:
    cfg, choices = compose_job("device=cpu", *overrides)
    validate(cfg, choices)
    return instantiate(cfg.platform)


@pytest.fixture(scope="module")
def versal() -> ModeledPlatform:
    return platform("platform=versal")


def gemm(n: int, kind: Kind = Kind.matmul) -> Node:
    """One N x N x N float32 GEMM: an N x N input times an N x N weight."""
    square = 4.0 * n * n
    return Node(f"gemm{n}", "net", "0", Pass.forward, kind, flops=2.0 * n**3,
                bytes_in=square, bytes_out=square, param_bytes=square)


def test_t3_pl_wins_small_gemms_aie_wins_large_ones_with_one_crossover(versal):
    sizes = [2**p for p in range(5, 11)]  # 32 .. 1024
    pl = [versal.node_seconds(gemm(n), "pl", "float32") for n in sizes]
    aie = [versal.node_seconds(gemm(n), "aie", "float32") for n in sizes]
    assert pl[0] < aie[0] and aie[-1] < pl[-1]
    pl_wins = [p < a for p, a in zip(pl, aie)]
    assert sum(a != b for a, b in zip(pl_wins, pl_wins[1:])) == 1
    assert 2 <= pl[-1] / aie[-1] <= 8  # paper: the clock ratio 1 GHz / 245 MHz = 4.1


def test_native_bf16_beats_emulated_fp32_on_the_aie(versal):
    node = gemm(1024)
    assert versal.node_seconds(node, "aie", "bfloat16") < versal.node_seconds(node, "aie", "float32")


def test_node_time_is_launch_plus_roofline(versal):
    spec = versal.specs["pl"]
    tiny, big = gemm(8), gemm(1024)
    fp16_bytes = (tiny.bytes_in + tiny.bytes_out + tiny.param_bytes) / 2
    assert versal.node_seconds(tiny, "pl", "float16") == pytest.approx(
        spec.launch_s + fp16_bytes / spec.mem_bandwidth)  # memory-bound, half the bytes
    assert versal.node_seconds(big, "pl", "float32") == pytest.approx(
        spec.launch_s + big.flops / spec.rates["float32"])  # compute-bound


def test_pinning_and_unknown_dtypes(versal):
    assert versal.node_seconds(gemm(64, Kind.elementwise), "aie", "bfloat16") == math.inf
    assert versal.node_seconds(gemm(64, Kind.elementwise), "ps", "float32") < math.inf
    assert versal.node_seconds(gemm(64), "aie", "float16") == math.inf  # no fp16 on the AIE
    with pytest.raises(ValueError, match="'float8' is not a valid DType"):
        versal.node_seconds(gemm(64), "pl", "float8")


def test_links_same_device_is_free_and_a_missing_link_takes_two_hops(versal):
    nbytes = 1e6
    assert versal.edge_seconds(nbytes, "pl", "pl") == 0
    ps_pl, pl_aie = versal.edge_seconds(nbytes, "ps", "pl"), versal.edge_seconds(nbytes, "pl", "aie")
    assert versal.edge_seconds(nbytes, "ps", "aie") == pytest.approx(ps_pl + pl_aie)
    assert versal.edge_seconds(nbytes, "aie", "ps") > ps_pl
    assert ps_pl == pytest.approx(1e-6 + nbytes / 3.92e9)


def test_runtime_overhead_and_shared_memory():
    cgf = platform("platform=cpu_gpu_fpga")
    assert cgf.edge_seconds(0, "cpu", "gpu") == pytest.approx(1e-3 + 10e-6)
    assert cgf.edge_seconds(0, "gpu", "fpga") == pytest.approx(2 * (1e-3 + 10e-6))  # via the cpu
    assert platform("platform=cpu_dsp").edge_seconds(1e9, "cpu", "dsp") == 0
    copied = platform("platform=cpu_dsp", "platform.links.0.shared_memory=false")
    assert copied.edge_seconds(42.6e9, "cpu", "dsp") == pytest.approx(1 + 10e-6)


def mixed(node: Node, device: str) -> str:
    return {"ps": "float32", "pl": "float16", "aie": "bfloat16"}[device]


def test_cost_table_shapes_dtypes_and_resources(versal):
    layer, act = gemm(64), gemm(64, Kind.elementwise)
    graph = TaskGraph([layer, act], [Edge(0, 1, 4.0 * 64 * 64)])
    table = versal.cost_table(graph, mixed)
    assert table.devices == ["ps", "pl", "aie"]
    assert table.seconds.shape == (2, 3) and table.comm.shape == (1, 3, 3)
    assert table.seconds[1, 2] == math.inf  # no elementwise on the AIE
    assert np.all(np.diagonal(table.comm[0]) == 0)
    # the edge leaves the PL in fp16: half the bytes of the same edge leaving the PS in fp32
    assert table.comm[0, 1, 0] == pytest.approx(versal.edge_seconds(2.0 * 64 * 64, "pl", "ps"))
    assert table.usage["tiles"][0].tolist() == [0, 0, 8]
    assert table.usage["lut"][0, 2] > 0  # an AIE node takes PL LUTs for its PLIO movers
    assert table.capacity["dsp"] == 1312 and table.capacity["tiles"] == 304


def test_fp16_layers_fetch_master_weights_each_forward_and_write_them_back_at_the_update(versal):
    """The sync is part of an fp16 layer, not of where its update runs: a plan cannot dodge it
    by updating on the PS. Backward reuses the forward's working copy; bf16 (AIE) keeps no
    master; layers without weights move none."""
    layer = gemm(64)
    passes = [layer, dataclasses.replace(layer, pass_=Pass.backward),
              dataclasses.replace(layer, pass_=Pass.update, kind=Kind.optimizer),
              dataclasses.replace(layer, kind=Kind.elementwise, param_bytes=0.0)]
    graph = TaskGraph(passes, [])
    extra = (versal.cost_table(graph, mixed).seconds
             - versal.cost_table(graph, mixed, master_weight_sync=False).seconds)
    sync = versal.edge_seconds(layer.param_bytes, "pl", "ps")  # fp32 masters, to the host
    assert extra[:, 1] == pytest.approx([sync, 0, sync, 0])
    assert np.all(extra[:, [0, 2]][np.isfinite(extra[:, [0, 2]])] == 0)
    assert versal.node_seconds(passes[2], "aie", "bfloat16") < math.inf  # AIE updates in bf16


def test_a_slower_clock_scales_a_devices_rates_bandwidth_and_launch(versal):
    fixar = versal.clocked("pl", 164 / 245)
    big, tiny, spec = gemm(1024), gemm(8), versal.specs["pl"]
    assert fixar.node_seconds(big, "pl", "float32") == pytest.approx(
        spec.launch_s * 245 / 164 + big.flops / (spec.rates["float32"] * 164 / 245))
    assert fixar.node_seconds(tiny, "pl", "float16") == pytest.approx(
        versal.node_seconds(tiny, "pl", "float16") * 245 / 164)  # launch + memory-bound
    assert fixar.node_seconds(big, "aie", "float32") == versal.node_seconds(big, "aie", "float32")
    assert versal.specs["pl"] is spec  # the original is untouched


@pytest.mark.parametrize("name", MODELED)
def test_every_modeled_platform_composes_and_costs_a_graph(name):
    model = platform(f"platform={name}")
    assert model.device.type == "cpu" and model.describe()["platform"] == model.name
    graph = TaskGraph([gemm(32), gemm(32)], [Edge(0, 1, 4096.0)])
    table = model.cost_table(graph, lambda node, device: "float32")
    assert np.isfinite(table.seconds).all() and np.isfinite(table.comm).all()


MINE = """\
defaults:
  - /schema/platform/modeled@_here_
  - _self_
_target_: hetrl.platform.model.ModeledPlatform
name: mine
host: cpu
devices:
  cpu: {kind: cpu, rates: {float32: 1.0e+11}, native: [float32], mem_bandwidth: 2.0e+10}
  npu:
    kind: aie
    rates: {int8: 1.0e+13}
    native: [int8]
    mem_bandwidth: 1.0e+11
    launch_s: 1.0e-5
    runs: [matmul]
links:
  - {between: [cpu, npu], bandwidth: 8.0e+9, latency_s: 1.0e-6}
baselines: {}
"""


def test_a_new_platform_is_one_yaml_file(tmp_path: Path):
    (tmp_path / "platform").mkdir()
    (tmp_path / "platform" / "mine.yaml").write_text(MINE.replace("int8", "bfloat16"))
    model = platform(f"hydra.searchpath=[file://{tmp_path}]", "platform=mine")
    assert model.devices == ["cpu", "npu"]
    node = gemm(256)
    assert model.node_seconds(node, "npu", "bfloat16") < model.node_seconds(node, "cpu", "float32")
    assert model.edge_seconds(8e9, "npu", "cpu") == pytest.approx(1 + 1e-6)


def test_a_device_of_a_kind_the_repo_does_not_use_composes_and_plans(tmp_path: Path):
    """`kind` is a free-form label: a platform with an NPU is one YAML file too."""
    (tmp_path / "platform").mkdir()
    yaml = MINE.replace("kind: aie", "kind: npu").replace("{int8: 1.0e+13}", "{float32: 1.0e+13}")
    (tmp_path / "platform" / "mine.yaml").write_text(yaml.replace("int8", "float32"))
    cfg, choices = compose_job("device=cpu", f"hydra.searchpath=[file://{tmp_path}]",
                               "platform=mine", "algo=dqn", "env=cartpole", "partitioner=heft")
    validate(cfg, choices)
    job = build(cfg)
    job.envs.close()
    step = job.step_plan
    assert "npu (npu)" in job.platform.describe()["modeled_devices"]
    assert step.plan.devices == ["cpu", "npu"] and 0 < step.metrics(32)["platform/nodes_npu"]
    assert math.isfinite(step.plan.makespan)


@pytest.mark.parametrize(("override", "named"), [
    ("platform.links.0.bandwidth=-1", "platform.links.0.bandwidth=-1.0"),
    ("platform.devices.pl.mem_bandwidth=0", "platform.devices.pl.mem_bandwidth=0.0"),
    ("platform.devices.aie.launch_s=-1e-6", "platform.devices.aie.launch_s=-1e-06"),
    ("platform.devices.aie.rates.bfloat16=0", "platform.devices.aie.rates="),
    ("platform.host=gpu", "platform.host='gpu'"),
    ("platform.links.1.between=[ps,dsp]", "platform.links.1.between=['ps', 'dsp']"),
    ("+platform.devices.aie.usage.matmul.luts=5", "platform.devices.aie.usage.matmul="),
])
def test_bad_values_are_named_with_the_valid_range(override, named):
    cfg, choices = compose_job("platform=versal", override)
    with pytest.raises(ConfigError, match="valid values are") as err:
        validate(cfg, choices)
    assert named in str(err.value)


def test_a_disconnected_device_is_named():
    cfg, choices = compose_job("platform=versal", "platform.links=[{between:[ps,pl],bandwidth:1e9}]")
    with pytest.raises(ConfigError, match=r"no route to \['aie'\]"):
        validate(cfg, choices)


@pytest.mark.parametrize(("written", "malformed", "named"), [
    ("mem_bandwidth: 1.0e+11", "mem_bandwidth: fast", "platform.devices.npu.mem_bandwidth"),
    ("mem_bandwidth: 1.0e+11", "mem_bandwith: 1.0e+11", "platform.devices.npu.mem_bandwith"),
    ("mem_bandwidth: 1.0e+11", "mem_bandwidth: -1", "platform.devices.npu.mem_bandwidth=-1.0"),
    ("links:\n  - {between: [cpu, npu], bandwidth: 8.0e+9, latency_s: 1.0e-6}\n", "",
     "platform.links"),
    ("  npu:\n", "  npu: 3\n  other:\n", "platform.devices.npu"),
])
def test_a_malformed_platform_yaml_is_rejected_with_the_key_path(tmp_path: Path, written,
                                                                 malformed, named):
    yaml = MINE.replace("int8", "bfloat16")
    assert written in yaml
    (tmp_path / "platform").mkdir()
    (tmp_path / "platform" / "mine.yaml").write_text(yaml.replace(written, malformed, 1))
    with pytest.raises(Exception) as err:  # Hydra's composition error or a ConfigError
        cfg, choices = compose_job(f"hydra.searchpath=[file://{tmp_path}]", "platform=mine",
                                   "algo=dqn", "env=cartpole")
        validate(cfg, choices)
    assert named in str(err.value)
