"""The MLflow UI as a person sees it, in headless Chromium (Debian's chromium and chromedriver,
driven by Selenium): a real sweep tracked through hetrl's tracking server, then its parent with
the jobs nested under it, the runs table filtered by a tag, a job's plan Gantt and learning
curve, the parent's report, and hetrl's saved view of the runs table with the columns a
researcher compares. Each step's screenshot and page HTML are kept in SHOTS.

One test: its steps share the sweep, the server and the browser (a module of tests would be
split across pytest-xdist's workers, each running all three)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import struct
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import pytest
from mlflow.tracking import MlflowClient
from selenium import webdriver
from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions as shown
from selenium.webdriver.support.ui import WebDriverWait

from hetrl.tracking.mlflow import VIEW_NAME

from helpers import NOT_MEASURED, hetrl_cli, tracking_server_up

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
SHOTS = Path(__file__).resolve().parents[1] / "runs" / "test-artifacts" / "mlflow-ui"
WAIT_S = 90  # how long the UI may take to show something on a loaded host
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         # no background requests: on a closed network each would be refused, again and again
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1600,1000")

SWEEP = ("algo=dqn", "precision=fp32,mixed", "platform=versal,cpu_gpu", "steps=300",
         "algo.learning_starts=100", "log_every=100", "algo.hidden=[16]",
         "tracking.system_metrics_s=0", *NOT_MEASURED)
PARENT = "sweep precision=fp32,mixed platform=versal,cpu_gpu"
JOBS = ("dqn-cartpole-versal-fp32-s0", "dqn-cartpole-cpu_gpu-fp32-s0",
        "dqn-cartpole-versal-mixed-s0", "dqn-cartpole-cpu_gpu-mixed-s0")
COLUMNS = ("algo", "env", "platform", "precision", "return_mean_100", "reward_error_pct",
           "eps_host", "eps_platform")
REPORT_PNGS = ("eps.png", "learning_curves.png", "pareto.png", "phases.png")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
                       reason=f"no {CHROMIUM} or {CHROMEDRIVER}: the browser test needs Debian's "
                              "chromium and chromium-driver (apt-get install chromium "
                              "chromium-driver)"),
]


@dataclass
class Sweep:
    ui: str  # the tracking server's URL, the UI's too
    experiment_id: str
    runs: dict[str, str]  # run name -> run id: the parent's and each job's
    view_url: str  # where the sweep said its runs are side by side
    client: MlflowClient

    def page(self, name: str, tab: str = "") -> str:
        """The URL of a run's page (or one of its tabs)."""
        route = f"/experiments/{self.experiment_id}/runs/{self.runs[name]}"
        return f"{self.ui}/#{route}" + (f"/{tab}" if tab else "")


@pytest.fixture
def sweep(tmp_path) -> Iterator[Sweep]:
    """2 precisions x 2 platforms through hetrl's tracking server (sqlite), up until the test
    ends."""
    with tracking_server_up("sqlite") as (uri, _):
        out = hetrl_cli(tmp_path, "-m", *SWEEP, uri=uri, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        (view_url,) = re.findall(r"the runs side by side: (http://\S+)", out.stdout + out.stderr)
        client = MlflowClient(uri)
        experiment_id = client.get_experiment_by_name("hetrl").experiment_id
        runs = {r.info.run_name: r.info.run_id for r in client.search_runs([experiment_id])}
        assert sorted(runs) == sorted([PARENT, *JOBS])
        yield Sweep(uri, experiment_id, runs, view_url, client)


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    """Headless Chromium through Debian's chromedriver (so Selenium Manager never fetches one),
    its profile, config and cache in a fresh folder (so every one of its processes names the
    folder, its crash handlers too); when the test ends, none of them is left."""
    home = Path(tempfile.mkdtemp(prefix="hetrl-chromium-"))
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={home / 'profile'}"):
        options.add_argument(flag)
    service = Service(str(CHROMEDRIVER), env={**os.environ, "XDG_CONFIG_HOME": str(home / "config"),
                                              "XDG_CACHE_HOME": str(home / "cache")})
    driver = webdriver.Chrome(service=service, options=options)
    try:
        yield driver
    finally:
        driver.quit()
        left = _processes_naming(str(home))
        shutil.rmtree(home, ignore_errors=True)
        assert service.process.poll() is not None, "chromedriver still runs"
        assert not left, left


def _processes_naming(text: str, wait_s: float = 10.0) -> list[str]:
    """The live processes whose command line holds `text`, after up to `wait_s` seconds for
    them to exit."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                command = cmdline.read_text().replace("\0", " ")
                state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if text in command and state != "Z":
                alive.append(f"{cmdline.parent.name} {command[:200]}")
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.5)


@pytest.fixture
def shots() -> Path:
    """SHOTS, emptied of an earlier run's."""
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    print(f"MLflow UI screenshots: {SHOTS}")
    return SHOTS


def test_the_mlflow_ui_shows_a_sweep_as_a_person_sees_it(sweep, browser, shots):
    """Screenshots, in SHOTS: 1 the runs table in hetrl's saved view, opened from the parent's
    description; 2 the parent expanded, its jobs nested under it; 3 the table filtered by
    tags.platform; 4, 5 a job's plan Gantt and learning curve; 6 the parent's report."""
    view_columns_from_the_parents_link(sweep, browser, shots)
    jobs_nested_under_the_parent(sweep, browser, shots)
    filtered_by_platform(sweep, browser, shots)
    gantt_and_learning_curve_of_a_job(sweep, browser, shots)
    report_of_the_parent(sweep, browser, shots)


def view_columns_from_the_parents_link(sweep: Sweep, browser: WebDriver, shots: Path) -> None:
    """The parent's description links hetrl's saved view (the URL the sweep printed), which
    opens the runs table with the columns a researcher compares."""
    open_page(browser, sweep.page(PARENT))
    link = wait_for(browser, f"the link {VIEW_NAME!r} in the parent's description",
                    shown.visibility_of_element_located((By.LINK_TEXT, VIEW_NAME)))
    assert link.get_attribute("href") == sweep.view_url
    with step(browser, shots / "1-compared-view"):
        open_page(browser, sweep.view_url)
        wait_for(browser, f"the parent {PARENT!r}", shown.visibility_of_element_located(
            run_link(PARENT)))
        close_the_assistant(browser)
        for column in COLUMNS:
            wait_for(browser, f"the column {column}", shown.visibility_of_element_located(
                (By.CSS_SELECTOR, f'[data-testid="sort-header-{column}"]')))
        views = browser.find_element(By.CSS_SELECTOR, '[data-testid="saved-views-trigger"]')
        assert views.text == VIEW_NAME


def jobs_nested_under_the_parent(sweep: Sweep, browser: WebDriver, shots: Path) -> None:
    """The runs table shows the parent, its jobs only when it is expanded, right under it."""
    with step(browser, shots / "2-parent-expanded"):
        open_page(browser, sweep.view_url)
        wait_for(browser, f"the parent {PARENT!r}", shown.visibility_of_element_located(
            run_link(PARENT)))
        assert not browser.find_elements(*run_link(JOBS[0])), "a job shown outside its parent"
        expand(browser, PARENT)
        for job in JOBS:
            wait_for(browser, f"the job {job}", shown.visibility_of_element_located(run_link(job)))
        parent_row = row_index(browser, PARENT)
        assert sorted(row_index(browser, job) for job in JOBS) == [
            parent_row + k for k in range(1, len(JOBS) + 1)]


def filtered_by_platform(sweep: Sweep, browser: WebDriver, shots: Path) -> None:
    """`tags.platform = 'versal'` keeps the versal jobs and hides the cpu_gpu ones."""
    versal = [job for job in JOBS if "-versal-" in job]
    with step(browser, shots / "3-filtered-by-platform"):
        open_page(browser, sweep.view_url)
        search = wait_for(browser, "the runs search box", shown.element_to_be_clickable(
            (By.CSS_SELECTOR, '[data-testid="search-box"]')))
        search.send_keys("tags.platform = 'versal'", Keys.ENTER)
        wait_for(browser, "the filter in the page's URL",
                 lambda driver: "searchFilter=tags.platform" in driver.current_url)
        wait_for(browser, f"the parent {PARENT!r}", shown.visibility_of_element_located(
            run_link(PARENT)))
        expand(browser, PARENT)

        def only_versal(driver: WebDriver) -> bool:
            names = {a.text.strip() for a in driver.find_elements(By.CSS_SELECTOR,
                                                                   ".ag-row a")}
            return set(versal) <= names and not names & (set(JOBS) - set(versal))

        wait_for(browser, f"only {versal}", only_versal)


def gantt_and_learning_curve_of_a_job(sweep: Sweep, browser: WebDriver, shots: Path) -> None:
    """A job's artifacts show its plan Gantt and its learning curve, the images it logged."""
    job = "dqn-cartpole-versal-fp32-s0"
    open_page(browser, sweep.page(job, "artifacts"))
    wait_for(browser, f"the run's name {job}", shown.visibility_of_element_located(
        (By.XPATH, f"//h2[normalize-space()='{job}']")))
    for shot, png in (("4-job-plan-gantt", "plan_gantt.png"),
                      ("5-job-learning-curve", "learning_curve.png")):
        with step(browser, shots / shot):
            show_artifact(browser, png, png_size(sweep.client, sweep.runs[job], png))


def report_of_the_parent(sweep: Sweep, browser: WebDriver, shots: Path) -> None:
    """The parent's artifacts hold the sweep report, shown as a page with its plots."""
    open_page(browser, sweep.page(PARENT, "artifacts"))
    with step(browser, shots / "6-parent-report"):
        artifact(browser, "report").click()
        for png in REPORT_PNGS:
            wait_for(browser, f"the report's {png}", shown.visibility_of_element_located(
                artifact_node(png)))
        artifact(browser, "report.html").click()
        frame = wait_for(browser, "the report's page", shown.visibility_of_element_located(
            (By.CSS_SELECTOR, "iframe.mlflow-html-iframe")))
        browser.switch_to.frame(frame)
        try:
            title = wait_for(browser, "the report's title", shown.visibility_of_element_located(
                (By.TAG_NAME, "h1")))
            assert title.text == f"Sweep report: {PARENT}"
            drawn = wait_for(browser, "the report's plots", lambda driver: driver.execute_script(
                "const images = [...document.images];"
                "return images.every(i => i.complete) && images.filter(i => i.naturalWidth > 0)"
                ".length"))
            assert drawn == len(REPORT_PNGS)
        finally:
            browser.switch_to.default_content()


# --- the page ---------------------------------------------------------------------------------

def open_page(driver: WebDriver, url: str) -> None:
    """Load `url` afresh: moving between runs within the app keeps the state of the run before
    (MLflow 3.17 shows "No Artifacts Recorded" for the second run's artifacts)."""
    driver.get("about:blank")
    driver.get(url)


def wait_for(driver: WebDriver, what: str, condition: Callable[[WebDriver], object]) -> object:
    """What `condition` returns once it is truthy, or fail naming `what`; an element that
    the UI redrew meanwhile (stale) is looked for again."""
    return WebDriverWait(driver, WAIT_S, poll_frequency=0.25, ignored_exceptions=(
        NoSuchElementException, StaleElementReferenceException)).until(
        condition, message=f"the UI did not show {what} within {WAIT_S} s")


@contextlib.contextmanager
def step(driver: WebDriver, shot: Path) -> Iterator[None]:
    """Keep a screenshot and the HTML of what the step ends on, as `shot`.png/.html
    (`shot`-FAILED where it fails)."""
    try:
        yield
    except BaseException:
        shot = shot.with_name(f"{shot.name}-FAILED")
        raise
    finally:
        driver.switch_to.default_content()
        driver.save_screenshot(str(shot.with_suffix(".png")))
        shot.with_suffix(".html").write_text(driver.page_source)


def close_the_assistant(driver: WebDriver) -> None:
    """Close the MLflow Assistant's panel, where there is one: the runs table gets its width
    (the UI remembers it closed)."""
    close = (By.CSS_SELECTOR, '[data-component-id="mlflow.assistant.chat_panel.close"]')
    for button in driver.find_elements(*close):
        button.click()
        wait_for(driver, "the Assistant closed", shown.invisibility_of_element_located(close))


def run_link(name: str) -> tuple[str, str]:
    """A run's name in the runs table: a link to its page."""
    return By.XPATH, f"//div[contains(@class, 'ag-row')]//a[normalize-space()='{name}']"


def expand(driver: WebDriver, parent: str) -> None:
    """Click the button that expands `parent`'s row (the one in its name's cell)."""
    button = (By.XPATH,
              f"//a[normalize-space()='{parent}']/ancestor::div[@role='gridcell']//button")
    wait_for(driver, f"the expander of {parent!r}",
             lambda d: d.find_element(*button).click() or True)


def row_index(driver: WebDriver, name: str) -> int:
    """The row of the runs table that shows the run `name`."""
    row = driver.find_element(*run_link(name)).find_element(
        By.XPATH, "./ancestor::div[@role='row']")
    return int(row.get_attribute("row-index"))


def artifact_node(name: str) -> tuple[str, str]:
    """`name` (a file or folder, by its own name) in a run's artifact tree."""
    return By.CSS_SELECTOR, f'[data-testid="artifact-tree-node"][artifact-name="{name}"]'


def artifact(driver: WebDriver, name: str) -> WebElement:
    return wait_for(driver, f"the artifact {name}", shown.element_to_be_clickable(
        artifact_node(name)))


def show_artifact(driver: WebDriver, png: str, size: tuple[int, int]) -> None:
    """Click the image `png` in the artifact tree; wait until the preview shows an image of
    its `size` (the preview keeps the image before until the new one has loaded)."""
    artifact(driver, png).click()
    wait_for(driver, f"the image {png} ({size[0]}x{size[1]})", lambda d: d.execute_script(
        "const i = document.querySelector(arguments[0]);"
        "return i !== null && i.complete && i.naturalWidth === arguments[1]"
        " && i.naturalHeight === arguments[2]", f'img[alt="{png}"]', *size))


def png_size(client: MlflowClient, run_id: str, png: str) -> tuple[int, int]:
    """The width and height of a PNG the run logged (its IHDR chunk)."""
    with tempfile.TemporaryDirectory() as folder:
        head = Path(client.download_artifacts(run_id, png, folder)).read_bytes()[:24]
    return struct.unpack(">II", head[16:24])
