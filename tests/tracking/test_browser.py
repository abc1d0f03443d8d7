"""The MLflow UI in a real headless Chromium: ``tuner ui`` serves a study, the browser finds its runs and plot.

Needs the Debian packages ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them) and
selenium (the ``test`` extra); skipped with the reason when they are missing. Screenshots are
saved under ``test-artifacts/ui/`` (git-ignored) and their paths printed.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest

SPECS = Path(__file__).parents[1] / "specs"
ARTIFACTS = Path(__file__).parents[2] / "test-artifacts" / "ui"
ENV = {**os.environ, "MLFLOW_TRACKING_URI": "", "TUNER_STORAGE": ""}
WAIT_S = 120.0
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(CHROMIUM is None or CHROMEDRIVER is None,
                                 reason="headless browser test needs the Debian packages chromium and "
                                        "chromium-driver (installed by .ci/run)")]


def read_line_with(process: subprocess.Popen[bytes], marker: str, timeout_s: float) -> str:
    """The first stdout line of ``process`` containing ``marker`` (raw reads: no hidden buffer)."""
    assert process.stdout is not None
    descriptor = process.stdout.fileno()
    deadline = time.monotonic() + timeout_s
    text = ""
    while time.monotonic() < deadline:
        for line in text.splitlines():
            if marker in line:
                return line
        ready, _, _ = select.select([descriptor], [], [], 1.0)
        if ready:
            chunk = os.read(descriptor, 65536)
            if not chunk:
                break
            text += chunk.decode(errors="replace")
    raise AssertionError(f"'tuner ui' printed no line with {marker!r}: {text[-2000:]}")


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
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                     "--window-size=1600,1000"):
        options.add_argument(argument)
    options.binary_location = str(CHROMIUM)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(WAIT_S)
    try:
        yield driver
    finally:
        driver.quit()


def test_mlflow_ui_shows_the_study_children_and_front_plot(tmp_path: Path, browser: Any) -> None:
    from selenium.webdriver.common.by import By

    done = subprocess.run([sys.executable, "-m", "tuner", "run", str(SPECS / "fake_ok.yaml"), "--study-name", "ui",
                           "--trials", "6"], cwd=tmp_path, capture_output=True, text=True, timeout=400, env=ENV)
    assert done.returncode == 0, done.stderr[-2000:]
    ui = subprocess.Popen([sys.executable, "-m", "tuner", "ui", "ui"], cwd=tmp_path, env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        run_url = read_line_with(ui, "study run:", 240).split("study run:", 1)[1].strip()
        assert run_url.startswith("http://127.0.0.1:"), "localhost by default"
        experiment_url = run_url.split("/runs/")[0]
        browser.get(experiment_url + "/runs")
        body = lambda: browser.find_element(By.TAG_NAME, "body").text  # noqa: E731
        wait_for(lambda: "ui" in body().split("\n") and "matching runs" in body(), "the study's run", browser,
                 "experiment-missing.png")
        expanders = wait_for(lambda: browser.find_elements(
            By.CSS_SELECTOR, "button[data-component-id*='runnamecellrenderer']"), "the run expander", browser,
            "expander-missing.png")
        for expander in expanders:
            expander.click()
        wait_for(lambda: all(f"trial {n}" in body() for n in range(6)), "the six child runs", browser,
                 "children-missing.png")
        shot = save_screenshot(browser, "experiment_runs.png")
        assert shot.stat().st_size > 10_000

        browser.get(run_url + "/artifacts")
        entry = wait_for(lambda: browser.find_elements(By.XPATH, "//*[text()='front.png']"), "front.png in the "
                         "artifact list", browser, "artifacts-missing.png")
        assert {"front.html", "hypervolume.png"} <= set(body().split("\n"))
        entry[0].click()
        width = wait_for(lambda: browser.execute_script(
            "return Math.max(0, ...Array.from(document.images).filter(i => i.src.startsWith('blob:'))"
            ".map(i => i.naturalWidth));"), "the front plot image", browser, "plot-missing.png")
        assert width >= 600, "front.png is 640 px wide"
        save_screenshot(browser, "front_plot.png")
    finally:
        ui.send_signal(signal.SIGTERM)
        try:
            ui.wait(60)
        except subprocess.TimeoutExpired:
            ui.kill()
            ui.wait(10)
