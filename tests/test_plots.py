"""Pictures say what they show: the Gantt names devices by what they are, shows each node's
dtype in mixed runs and the transfers, legend beside the rows; the learning curve marks
learning_starts and the fp32 reference's final return."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest
from helpers import build_job
from matplotlib.backends.backend_agg import FigureCanvasAgg

from hetrl.options import compose_job
from hetrl.scheduler.state import LoopState
from hetrl.tracking import plots
from hetrl.tracking.artifacts import log_learning_curve, log_plan
from hetrl.tracking.base import NullTracker


@pytest.fixture
def figures(monkeypatch):
    """The figures the plots draw, kept for inspection."""
    kept = []
    close = plt.close

    def keep(fig=None):
        kept.append(fig)
        close(fig)

    monkeypatch.setattr(plots.plt, "close", keep)
    return kept


def legend_texts(ax) -> list[str]:
    return [t.get_text() for t in ax.get_legend().get_texts()]


def legend_is_outside(fig, ax) -> bool:
    canvas = FigureCanvasAgg(fig)  # a closed figure's canvas no longer renders
    canvas.draw()
    renderer = canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    return legend.x0 >= ax.get_window_extent(renderer).x1


def test_the_gantt_names_devices_dtypes_and_transfers(tmp_path, figures):
    c = build_job("algo=ddpg", "platform=versal", "precision=mixed", "partitioner=heft",
                  "algo.hidden=[64,64]", "compile=false", plan=True)  # the plan, no compile
    tracker = NullTracker(None, None)
    log_plan(tracker, c.step_plan, c.precision, c.platform, c.learner.batch_size, tmp_path,
             "ddpg-versal-mixed")
    (fig,) = figures
    ax = fig.axes[0]
    rows = [t.get_text() for t in ax.get_yticklabels()]
    assert rows == ["Arm Cortex-A72 CPU (PS) [ps]", "FPGA fabric (PL) [pl]",
                    "AI Engine (AIE-ML) [aie]"]
    texts = legend_texts(ax)
    assert {"dtype float32", "dtype float16", "dtype bfloat16"} <= set(texts)
    (transfers,) = [t for t in texts if t.startswith("transfer (")]
    assert int(transfers.split("(")[1].split(",")[0]) > 0
    assert any(type(child).__name__ == "Annotation" for child in ax.get_children())  # arrows
    assert legend_is_outside(fig, ax)
    assert (tmp_path / "plan_gantt.png").stat().st_size > 10_000


def test_devices_without_a_label_are_named_by_their_kind():
    c = build_job("platform=cpu_gpu_fpga")
    assert plots.device_labels(c.platform) == {"cpu": "CPU [cpu]", "gpu": "GPU [gpu]",
                                               "fpga": "FPGA [fpga]"}


def test_the_learning_curve_marks_learning_starts_and_the_fp32_reference(tmp_path, figures):
    cfg, _ = compose_job("algo=dqn", "algo.learning_starts=500")
    state = LoopState()
    state.history = [(step, step / 100) for step in range(250, 3001, 250)]
    log_learning_curve(NullTracker(None, None), state.history, cfg.algo.learning_starts,
                       {"reward_reference": 42.0}, tmp_path, "dqn-cartpole-host-bf16-s0")
    (fig,) = figures
    ax = fig.axes[0]
    texts = legend_texts(ax)
    assert "learning_starts = 500" in texts
    assert "fp32 reference, final return: 42" in texts
    assert legend_is_outside(fig, ax)
    assert (tmp_path / "learning_curve.png").exists()
