"""The MLflow UI in a real headless Chromium: ``tuner ui`` serves a study (a real ``mlflow server``), the
browser finds its runs (named after their objectives, lasting as long as their trials), the comparison view,
the study run's description and the front plot.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and
selenium (the ``test`` extra); skipped with the reason when they are missing. Screenshots are
saved under ``test-artifacts/ui/`` (git-ignored) and their paths printed.
"""

from __future__ import annotations

import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SPECS = Path(__file__).parents[1] / "specs"
ARTIFACTS = Path(__file__).parents[2] / "test-artifacts" / "ui"
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
WAIT_S = 120.0
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
NAME_COLUMN = "attributes.`Run Name`"  # column ids of the MLflow 3.17 runs table (ag-grid col-id)
GRID_JS = """
const root = document.querySelector('.ag-root').getBoundingClientRect();
const rows = {};
for (const cell of document.querySelectorAll('.ag-row .ag-cell[col-id]')) {
  const row = cell.closest('.ag-row');
  const index = Number(row.getAttribute('row-index'));
  const box = cell.getBoundingClientRect();
  const cut = [cell, ...cell.querySelectorAll('*')].some(
    e => getComputedStyle(e).textOverflow === 'ellipsis' && e.scrollWidth > e.clientWidth + 1);
  rows[index] = rows[index] || {index: index, cells: {}};
  rows[index].cells[cell.getAttribute('col-id')] = {
    text: cell.innerText, cut: cut, in_view: box.left >= root.left - 1 && box.right <= root.right + 1};
}
return Object.values(rows).sort((a, b) => a.index - b.index);
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        CHROMIUM is None or CHROMEDRIVER is None,
        reason="headless browser test needs the Debian packages chromium and chromium-driver (installed by .ci/run)",
    ),
]


def read_lines_with(process: subprocess.Popen[bytes], markers: list[str], timeout_s: float) -> list[str]:
    """The first stdout line of ``process`` containing each marker (raw reads: no hidden buffer)."""
    assert process.stdout is not None
    descriptor = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        found = [next((line for line in text.splitlines() if marker in line), None) for marker in markers]
        if all(line is not None for line in found):
            return [line for line in found if line is not None]
        ready, _, _ = select.select([descriptor], [], [], 1.0)
        if ready:
            chunk = os.read(descriptor, 65536)
            if not chunk:
                break
            text += chunk.decode(errors="replace")
    raise AssertionError(f"'tuner ui' printed no line with each of {markers!r}: {text[-2000:]}")


def wait_for(condition: Callable[[], Any], what: str, driver: Any, shot: str) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            found = condition()
        except Exception:  # noqa: BLE001 - the React app is still rendering
            found = None
        if found:
            return found
        time.sleep(1.0)
    path = save_screenshot(driver, shot)
    raise AssertionError(f"the MLflow UI did not show {what} within {WAIT_S:g} s (screenshot: {path})")


def save_screenshot(driver: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    driver.save_screenshot(str(path))
    print(f"screenshot: {path}")
    return path


@pytest.fixture()
def browser() -> Iterator[Any]:
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is in the test extra")
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1600,1000",
    ):
        options.add_argument(argument)
    options.binary_location = str(CHROMIUM)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def duration_s(shown: str) -> float:
    """Seconds of a duration as the MLflow 3.17 runs table prints it (``Utils.formatDuration``: ``72ms``,
    ``1.4s`` — one decimal —, ``2.5min``, ``1.1h``, ``1.0d``)."""
    match = re.fullmatch(r"([0-9.]+)(ms|s|min|h|d)", shown.strip())
    assert match is not None, f"not an MLflow duration: {shown!r}"
    return float(match.group(1)) * {"ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}[match.group(2)]


def grid_rows(browser: Any) -> list[dict[str, Any]]:
    """The runs table as rendered, in display order: per row its cells by column id (``text``; ``cut``:
    shown with an ellipsis; ``in_view``: inside the table's visible area) and ``name``, the run name."""
    rows = browser.execute_script(GRID_JS)
    for row in rows:
        row["name"] = row["cells"].get(NAME_COLUMN, {}).get("text", "").split("\n")[-1]
    return [row for row in rows if row["name"]]


def header_order(browser: Any) -> list[str]:
    """Column ids of the runs table's headers, left to right as drawn."""
    return list(
        browser.execute_script(
            "return Array.from(document.querySelectorAll('.ag-header-cell[col-id]'))"
            ".sort((a, b) => a.getBoundingClientRect().left - b.getBoundingClientRect().left)"
            ".map(c => c.getAttribute('col-id'));"
        )
    )


def widen_column(browser: Any, column_id: str, pixels: int) -> None:
    """Drag the right edge of a column's header, as a person widens a column, then move the pointer away."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By

    handle = browser.find_element(By.CSS_SELECTOR, f".ag-header-cell[col-id='{column_id}'] .ag-header-cell-resize")
    ActionChains(browser).click_and_hold(handle).move_by_offset(pixels // 2, 0).move_by_offset(
        pixels - pixels // 2, 0
    ).release().move_by_offset(0, 500).perform()


def close_assistant(browser: Any) -> None:
    """Close the MLflow Assistant side panel when it is open (it hides half of the runs table)."""
    from selenium.webdriver.common.by import By

    for button in browser.find_elements(By.CSS_SELECTOR, "button[aria-label='Close']"):
        try:
            button.click()
        except Exception:  # noqa: BLE001 - not the panel's, or not clickable
            continue


def expanded_description(browser: Any) -> None:
    """Open a long run description the MLflow UI shows collapsed ("Show more"): a study whose proposals were
    skipped has a longer one, and its front table and "Compare all trials" link lie past the fold."""
    from selenium.webdriver.common.by import By

    for button in browser.find_elements(By.XPATH, "//*[normalize-space(text())='Show more']"):
        try:
            button.click()
        except Exception:  # noqa: BLE001 - not clickable yet (the page is still rendering)
            continue


def test_mlflow_ui_shows_the_study_children_and_front_plot(tmp_path: Path, browser: Any) -> None:
    import optuna
    from mlflow.tracking import MlflowClient
    from selenium.webdriver.common.by import By

    done = subprocess.run(
        [sys.executable, "-m", "tuner", "run", str(SPECS / "fake_ok.yaml"), "--study-name", "ui", "--trials", "6"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
        env=ENV,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ui = subprocess.Popen(
        [sys.executable, "-m", "tuner", "ui", "ui"],
        cwd=tmp_path,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        run_line, compare_line = read_lines_with(ui, ["study run:", "comparison of its trials:"], 240)
        run_url = run_line.split("study run:", 1)[1].strip()
        compare_url = compare_line.split("comparison of its trials:", 1)[1].strip()
        assert run_url.startswith("http://127.0.0.1:"), "localhost by default"
        experiment_url = run_url.split("/runs/")[0]
        browser.get(experiment_url + "/runs")
        body = lambda: browser.find_element(By.TAG_NAME, "body").text  # noqa: E731
        wait_for(
            lambda: "ui" in body().split("\n") and "matching runs" in body(),
            "the study's run",
            browser,
            "experiment-missing.png",
        )
        expanders = wait_for(
            lambda: browser.find_elements(By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']"),
            "the run expander",
            browser,
            "expander-missing.png",
        )
        for expander in expanders:
            expander.click()
        study = optuna.load_study(study_name="ui", storage=f"sqlite:///{tmp_path / 'studies' / 'studies.db'}")
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow' / 'mlflow.db'}")
        parent_id = run_url.rsplit("/", 1)[1]
        children = {
            int(r.data.tags["tuner.trial_number"]): r
            for r in client.search_runs(
                [client.get_run(parent_id).info.experiment_id], f"tags.mlflow.parentRunId = '{parent_id}'"
            )
        }
        assert sorted(children) == [t.number for t in study.trials]
        trials: dict[str, Any] = {}  # run name -> its trial
        for trial in study.trials:
            run = children[trial.number]
            assert trial.datetime_start is not None and trial.datetime_complete is not None
            start, end = trial.datetime_start.timestamp() * 1000, trial.datetime_complete.timestamp() * 1000
            assert abs(run.info.start_time - start) <= 1 and abs(run.info.end_time - end) <= 1, (
                "the run starts and ends when its trial did"
            )
            name = run.info.run_name
            assert name.startswith(f"t{trial.number} · ") and ("· front" in name) == (
                run.data.tags["tuner.on_front"] == "true"
            ), name
            if trial.user_attrs["outcome"] == "OK" and trial.user_attrs.get("duplicate_of") is None:
                latency, psnr = trial.user_attrs["metrics"]["latency_p50_s"]["value"], trial.values[1]
                assert f" · {latency:.3g} s · PSNR {psnr:.3g} dB" in name, name
            trials[name] = trial

        # the runs list as a user first sees it (their own columns), the run name column widened by hand
        close_assistant(browser)
        wait_for(
            lambda: set(trials) <= {row["name"] for row in grid_rows(browser)},
            "the six trial runs by name",
            browser,
            "children-missing.png",
        )
        widen_column(browser, NAME_COLUMN, 220)
        close_assistant(browser)
        rows = wait_for(
            lambda: [
                row for row in grid_rows(browser) if row["name"] in trials and not row["cells"][NAME_COLUMN]["cut"]
            ],
            "the trial names in full",
            browser,
            "names-cut.png",
        )
        assert len(rows) == len(trials), [row["name"] for row in grid_rows(browser)]
        assert "trial 0" not in body(), "no bare 'trial N' names"
        for row in rows:
            trial = trials[row["name"]]
            shown = row["cells"]["duration"]
            assert row["cells"][NAME_COLUMN]["in_view"] and shown["in_view"], (row["name"], "on screen")
            trial_s = (trial.datetime_complete - trial.datetime_start).total_seconds()
            worker_s = trial.user_attrs.get("wall_time_s")
            print(f"{row['name']}: Duration {shown['text']}, trial {trial_s:.3f} s, worker wall {worker_s} s")
            assert abs(duration_s(shown["text"]) - trial_s) <= 0.051, (row["name"], shown["text"], trial_s)
            if worker_s:
                assert duration_s(shown["text"]) >= worker_s - 0.051, "the trial's time, not the time to log it"
        shot = save_screenshot(browser, "runs_list.png")
        assert shot.stat().st_size > 10_000

        # the comparison view: trial runs only, best first, duration, objectives, front, outcome, params
        assert compare_url == experiment_url + "/runs?viewStateShareKey=tuner-ui", "'tuner ui' prints the view"
        browser.get(compare_url)
        columns = [
            "duration",
            "metrics.`latency_p50_s`",
            "metrics.`psnr_db`",
            "tags.`tuner.on_front`",
            "tags.`tuner.outcome`",
            "params.`sleep_s`",
            "params.`noise`",
            "params.`batch_size`",
        ]

        def after_pinned() -> list[str]:  # the columns drawn right of Run Name and Created (pinned left)
            order = header_order(browser)
            return order[order.index("runDateAndNestInfo") + 1 :] if "runDateAndNestInfo" in order else []

        wait_for(
            lambda: {row["name"] for row in grid_rows(browser)} == set(trials) and len(after_pinned()) >= 5,
            "only the trial runs, with the comparison's columns",
            browser,
            "compare-missing.png",
        )
        close_assistant(browser)
        drawn = after_pinned()  # ag-grid draws only the columns that fit the window
        assert drawn == columns[: len(drawn)], ("duration, objectives, front, outcome, parameters first", drawn)
        rows = grid_rows(browser)
        latency = {name: children[trial.number].data.metrics.get("latency_p50_s") for name, trial in trials.items()}
        measured = [row["name"] for row in rows if latency[row["name"]] is not None]
        assert measured == sorted(measured, key=lambda name: latency[name]), "sorted by the first objective, best first"
        assert not any(row["cells"][NAME_COLUMN]["cut"] for row in rows), "the names read in full"
        assert all(row["cells"][column]["in_view"] for row in rows for column in columns[:3]), "duration, objectives"
        shot = save_screenshot(browser, "runs_compare.png")
        assert shot.stat().st_size > 10_000

        browser.get(run_url)
        front_names = [name for name in trials if name.endswith("· front")]
        assert front_names
        wait_for(  # the description's table may be drawn after its first lines (a busy host): wait for its rows too
            lambda: (
                expanded_description(browser) is None
                and "on the Pareto front" in body()
                and "Compare all trials" in body()
                and all(n in body() for n in front_names)
            ),
            "the study run's description, its table listing the front",
            browser,
            "description-missing.png",
        )
        link = browser.find_element(By.PARTIAL_LINK_TEXT, "Compare all trials").get_attribute("href")
        assert link == experiment_url + "/runs?viewStateShareKey=tuner-ui", link
        save_screenshot(browser, "study_run.png")

        browser.get(run_url + "/artifacts")
        entry = wait_for(
            lambda: browser.find_elements(By.XPATH, "//*[text()='front.png']"),
            "front.png in the artifact list",
            browser,
            "artifacts-missing.png",
        )
        assert {"front.html", "hypervolume.png", "trials.json", "trials.csv"} <= set(body().split("\n"))
        entry[0].click()
        width = wait_for(
            lambda: browser.execute_script(
                "return Math.max(0, ...Array.from(document.images).filter(i => i.src.startsWith('blob:'))"
                ".map(i => i.naturalWidth));"
            ),
            "the front plot image",
            browser,
            "plot-missing.png",
        )
        assert width >= 600, "front.png is 640 px wide"
        save_screenshot(browser, "front_plot.png")
    finally:
        ui.send_signal(signal.SIGTERM)
        try:
            ui.wait(60)
        except subprocess.TimeoutExpired:
            ui.kill()
            ui.wait(10)
