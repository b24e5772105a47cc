"""The sweep report: the Pareto front it computes, what it draws from a sweep in a real MLflow
store (finished jobs in the plots, failed and killed ones in the table only), the report a
real sweep logs to its parent when it ends, and `python -m hetrl.report`."""

from __future__ import annotations

import base64
import logging
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import yaml
from helpers import NOT_MEASURED, hetrl_cli, mlflow_runs, new_store, tracking_uri
from mlflow.tracking import MlflowClient

from hetrl.report import log_report, pareto_front
from hetrl.report.__main__ import DEFAULT_URI, main
from hetrl.report.pareto import panels
from hetrl.report.runs import load_sweep
from hetrl.sweep.mlflow import MlflowSweep

PNGS = {"pareto.png", "eps.png", "learning_curves.png", "phases.png"}
VOID = {"meta", "img", "br", "hr", "link", "input"}


class Page(HTMLParser):
    """A strict reading of the report: every element closed in order, the images' data, the
    table's cells, the links and the text."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.open: list[str] = []
        self.images: list[bytes] = []
        self.rows: list[list[str]] = []
        self.links: list[dict[str, str]] = []
        self.text: list[str] = []
        self.feed(html)
        self.close()
        assert not self.open, f"unclosed: {self.open}"

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            src = dict(attrs)["src"]
            assert src.startswith("data:image/png;base64,"), src[:40]
            self.images.append(base64.b64decode(src.split(",", 1)[1]))
        elif tag == "tr":
            self.rows.append([])
        elif tag == "a":
            self.links.append(dict(attrs))
        if tag not in VOID:
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, f"</{tag}> closes {self.open[-1:]}"
        self.open.pop()

    def handle_data(self, data):
        self.text.append(data)
        if self.open and self.open[-1] in ("td", "th", "a"):
            self.rows[-1].append(data)


def _report(client: MlflowClient, run_id: str, tmp: Path) -> tuple[Page, dict[str, bytes]]:
    """The parent's report page, parsed, and its PNGs as logged."""
    names = {Path(a.path).name for a in client.list_artifacts(run_id, "report")}
    assert names == PNGS | {"report.html"}, names
    files = {n: Path(client.download_artifacts(run_id, f"report/{n}", str(tmp))).read_bytes()
             for n in names}
    return Page(files.pop("report.html").decode()), files


@pytest.mark.parametrize("points, front", [
    ([], []),
    ([(1.0, 3.0)], [0]),
    # ties stay together; equal speed, more error is dominated; slower, as wrong is dominated
    ([(1.0, 0.0), (2.0, 1.0), (2.0, 1.0), (3.0, 5.0), (1.5, 2.0), (3.0, 6.0), (0.5, 0.0)],
     [0, 1, 2, 3]),
    ([(4.0, 1.0), (1.0, 9.0), (2.0, 0.5)], [2, 0]),  # ordered by speedup
])
def test_the_pareto_front_is_the_non_dominated_points(points, front):
    assert pareto_front(points) == front


def _hand_made_sweep(client: MlflowClient) -> tuple[str, dict[str, str]]:
    """A sweep's parent and children written straight to MLflow: their names, statuses and
    metrics chosen so that the front and what is left out are known."""
    experiment = client.create_experiment("hand")
    parent = client.create_run(experiment, run_name="sweep by hand", tags={
        "sweep": "true", "sweep_dir": "runs/multirun/hand",
        "overrides": "algo=dqn precision=fp32,fp16,mixed,bf16 platform=versal,host seed=0,1,2"})
    for key, value in (("algo", "dqn"), ("precision", "fp32,fp16,mixed,bf16"),
                       ("platform", "versal,host"), ("seed", "0,1,2")):
        client.log_param(parent.info.run_id, key, value)
    ids = {}
    jobs = [  # name, platform, precision, seed, status, metrics
        ("v-fp32-s0", "versal", "fp32", "0", "FINISHED", {"eps_platform": 100.0}),
        ("v-fp16-s0", "versal", "fp16", "0", "FINISHED", {"eps_platform": 400.0,
                                                          "reward_error_pct": 5.0}),
        ("v-fp16-s1", "versal", "fp16", "1", "FINISHED", {"eps_platform": 400.0,
                                                          "reward_error_pct": 5.0}),
        ("v-mixed-s0", "versal", "mixed", "0", "FINISHED", {"eps_platform": 300.0,
                                                            "reward_error_pct": 8.0}),
        # faster and exact, but FAILED: in the table, never on the front
        ("v-fp16-s2", "versal", "fp16", "2", "FAILED", {"eps_platform": 1000.0,
                                                        "reward_error_pct": 0.0}),
        ("h-fp32-s0", "host", "fp32", "0", "FINISHED", {}),
        ("h-bf16-s0", "host", "bf16", "0", "FINISHED", {}),  # no reward error: left out
        ("h-bf16-s1", "host", "bf16", "1", "KILLED", {"reward_error_pct": 1.0}),
    ]
    for name, platform, precision, seed, status, metrics in jobs:
        run = client.create_run(experiment, run_name=name, tags={
            "mlflow.parentRunId": parent.info.run_id, "algo": "dqn", "env": "cartpole",
            "platform": platform, "precision": precision, "seed": seed})
        run_id = ids[name] = run.info.run_id
        client.log_param(run_id, "steps", "300")
        for step, value in ((100, 10.0), (200, 20.0 + int(seed)), (300, 30.0)):
            client.log_metric(run_id, "return_mean_100", value, step=step)
        for phase, share in (("act", 10.0), ("env", 20.0), ("update", 50.0)):
            client.log_metric(run_id, f"phase/{phase}_pct", share)
        client.log_metric(run_id, "eps_host", 50.0 + 10 * int(seed))
        for key, value in metrics.items():
            client.log_metric(run_id, key, value)
        client.set_terminated(run_id, status=status)
    client.log_metric(parent.info.run_id, "jobs_not_started", 1)
    client.log_metric(parent.info.run_id, "jobs_rejected", 2)
    client.set_terminated(parent.info.run_id, status="FAILED")
    return parent.info.run_id, ids


def test_the_report_of_a_sweep_in_mlflow_plots_finished_jobs_and_tables_every_job(tmp_path):
    new_store(tmp_path)
    client = MlflowClient(tracking_uri(tmp_path))
    parent_id, ids = _hand_made_sweep(client)
    video = tmp_path / "episode_0.mp4"  # as python -m hetrl.evaluate <job> video=true logs it
    video.write_bytes(b"\x00\x00\x00\x18ftypmp42")
    client.log_artifact(ids["v-fp16-s0"], str(video), "videos")
    logged = log_report(client, parent_id)
    assert set(logged) == {f"report/{n}" for n in PNGS | {"report.html"}}
    page, pngs = _report(client, parent_id, tmp_path)
    assert sorted(page.images) == sorted(pngs.values())  # every PNG, embedded

    found, left_out = panels(load_sweep(client, parent_id))
    assert [p.metric for p in found] == ["eps_platform", "eps_host"]  # modeled, measured
    modeled, measured = found
    assert {p.name for p in modeled.points} == {"v-fp32-s0", "v-fp16-s0", "v-fp16-s1",
                                                "v-mixed-s0"}
    assert {modeled.points[i].name for i in modeled.front} == {"v-fp32-s0", "v-fp16-s0",
                                                              "v-fp16-s1"}
    assert [p.speedup for p in modeled.points if p.name == "v-fp16-s0"] == [4.0]
    assert [(p.name, p.error) for p in measured.points] == [("h-fp32-s0", 0.0)]
    assert left_out == ["h-bf16-s0 (no reward_error_pct)"]

    header, *rows = page.rows
    assert header == ["run", "status", "precision", "platform", "seed", "return_mean_100",
                      "reward_error_pct", "eps_platform", "eps_host", "video",
                      "Pareto front"]  # not algo, env, steps: they do not vary
    assert len(rows) == 8
    by_name = {row[0]: row for row in rows}
    assert by_name["v-fp16-s2"][1] == "FAILED" and by_name["h-bf16-s1"][1] == "KILLED"
    assert {name for name, row in by_name.items() if row[-1] == "yes"} == {
        "v-fp32-s0", "v-fp16-s0", "v-fp16-s1", "h-fp32-s0"}
    # the one job with a video links it on its run page in the UI; the others have none
    assert [name for name, row in by_name.items() if "video" in row] == ["v-fp16-s0"]
    run = client.get_run(ids["v-fp16-s0"])
    assert [link["href"] for link in page.links] == [
        f"http://127.0.0.1:5000/#/experiments/{run.info.experiment_id}/runs/"
        f"{run.info.run_id}/artifacts/videos/episode_0.mp4"]
    text = " ".join(page.text)
    assert "in the table only, not in the plots: v-fp16-s2, h-bf16-s1" in text
    assert "1 never started" in text and "h-bf16-s0 (no reward_error_pct)" in text
    assert "2 rejected before they ran (summary.md lists them)" in text
    assert "video column links each setting's episode videos" in text


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> tuple[Path, MlflowClient]:
    """A real sweep through `python -m hetrl -m`: 2 precisions × 2 platforms, one seed (the
    hand-made sweep above has the seeds the report averages over); no job makes the final
    greedy evaluation or the compile decision, which the report does not show."""
    tmp = tmp_path_factory.mktemp("sweep")
    out = hetrl_cli(tmp, "-m", "algo=dqn", "precision=fp32,mixed", "platform=versal,cpu_gpu",
                    "steps=300", "algo.learning_starts=100", "log_every=100", "algo.hidden=[16]",
                    *NOT_MEASURED)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "sweep report not written" not in out.stderr
    return tmp, MlflowClient(tracking_uri(tmp))


def _parent_and_children(tmp: Path) -> tuple:
    runs = mlflow_runs(tmp)
    (parent,) = [r for r in runs if r.data.tags.get("sweep") == "true"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, children


def test_a_sweep_logs_its_report_to_its_parent_when_it_ends(sweep, tmp_path):
    tmp, client = sweep
    parent, children = _parent_and_children(tmp)
    assert parent.info.status == "FINISHED" and len(children) == 4
    page, pngs = _report(client, parent.info.run_id, tmp_path)
    assert sorted(page.images) == sorted(pngs.values())
    header, *rows = page.rows
    options = header[2:header.index("return_mean_100")]
    assert options == ["precision", "platform"]  # what varies, in the command's order
    assert len(rows) == 4
    # the front: each job's modeled EPS over the slowest's, its reward error (fp32: 0)
    points = {c.info.run_name: (c.data.metrics["eps_platform"],
                                c.data.metrics.get("reward_error_pct", 0.0)) for c in children}
    names = sorted(points)
    expected = {names[i] for i in pareto_front([points[n] for n in names])}
    assert expected == {n for n in names if "versal" in n}  # cpu_gpu's plan is slower
    assert {row[0] for row in rows if row[-1] == "yes"} == expected
    text = " ".join(page.text)
    assert "PEARL" not in text or "Φ" in text
    assert "Options that vary across the jobs: precision, platform." in text


def test_a_sweep_over_platforms_logs_phi_p_as_eq_7_gives_it(sweep, tmp_path):
    """PEARL's Φ(P) (Eq. 7) in the parent, worked by hand from the children: for each
    precision, the harmonic mean over versal and cpu_gpu of each platform's best EPS (here
    `eps_platform`: no composer), 2 / (1/EPS_versal + 1/EPS_cpu_gpu); the arithmetic mean or
    the best alone would be far off (versal's plan is the faster)."""
    import csv

    tmp, client = sweep
    parent, children = _parent_and_children(tmp)
    eps = {(c.data.tags["precision"], c.data.tags["platform"]): c.data.metrics["eps_platform"]
           for c in children}
    table = Path(client.download_artifacts(parent.info.run_id, "portability.csv", str(tmp_path)))
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 2 and {r["platforms"] for r in rows} == {"cpu_gpu|versal"}
    for k, row in enumerate(rows):
        (precision,) = [p for p in ("fp32", "mixed") if f"precision={p}," in row["setting"]]
        versal, cpu_gpu = eps[precision, "versal"], eps[precision, "cpu_gpu"]
        by_hand = 2 / (1 / versal + 1 / cpu_gpu)
        assert versal > 1.5 * cpu_gpu  # so the harmonic mean is no other mean
        assert parent.data.metrics[f"phi_p/{k}"] == pytest.approx(by_hand, rel=1e-6)
        assert float(row["phi_p"]) == pytest.approx(by_hand, rel=1e-5)


def test_python_m_hetrl_report_regenerates_it_from_the_sweep_dir(sweep, tmp_path):
    tmp, client = sweep
    parent, _ = _parent_and_children(tmp)
    report_dir = Path(parent.info.artifact_uri.removeprefix("file://")) / "report"
    for file in report_dir.iterdir():
        file.unlink()
    sweep_dir = parent.data.tags["sweep_dir"]  # runs/multirun/<date>/<time>, under tmp
    out = subprocess.run([sys.executable, "-m", "hetrl.report", str(tmp / sweep_dir),
                          "--tracking-uri", tracking_uri(tmp), "--out", str(tmp_path / "copy")],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert parent.info.run_id in out.stdout
    assert {p.name for p in report_dir.iterdir()} == PNGS | {"report.html"}
    assert {p.name for p in (tmp_path / "copy").iterdir()} == PNGS | {"report.html"}
    Page((report_dir / "report.html").read_text())


@pytest.mark.parametrize("target", ["runs/multirun/1999-01-01/00-00-00", "0123456789abcdef"])
def test_a_target_that_is_no_sweep_is_named(sweep, target, capsys):
    tmp, _ = sweep
    assert main([target, "--tracking-uri", tracking_uri(tmp)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and target in err


def test_a_child_run_is_not_a_sweep_and_a_missing_store_is_named(sweep, tmp_path, capsys):
    tmp, _ = sweep
    _, children = _parent_and_children(tmp)
    child = children[0].info.run_id
    assert main([child, "--tracking-uri", tracking_uri(tmp)]) == 1
    assert f"run {child} is not a sweep's parent" in capsys.readouterr().err
    missing = f"sqlite:///{tmp_path / 'nowhere.db'}"
    assert main([child, "--tracking-uri", missing]) == 1
    assert str(tmp_path / "nowhere.db") in capsys.readouterr().err
    assert not (tmp_path / "nowhere.db").exists()


def test_the_default_store_is_hetrls_and_the_sweep_imports_no_matplotlib():
    conf = Path(__file__).parents[1] / "conf" / "tracking" / "mlflow.yaml"
    assert DEFAULT_URI == yaml.safe_load(conf.read_text())["uri"]
    probe = ("import sys, hetrl.__main__, hetrl.sweep.mlflow; "
             "print('matplotlib' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert out.stdout.strip() == "False False", out.stderr[-2000:]


def test_a_report_that_fails_is_a_warning_not_the_sweeps_failure(tmp_path, caplog):
    callback = MlflowSweep(tracking_uri(tmp_path), "hetrl")
    callback._client()
    missing = "0" * 32  # the parent run is not in the store: reading the sweep fails
    with caplog.at_level(logging.WARNING, logger="hetrl"):
        callback._log_report(missing)
    assert "sweep report not written" in caplog.text and missing in caplog.text
