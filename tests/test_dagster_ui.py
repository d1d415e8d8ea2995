"""The Dagster UI serves the code location: the webserver starts on the project's Definitions and
its asset graph shows the ctxdb tables, in a real headless Chromium (part of `make test` wherever
chromium is installed). The screenshot is kept as a test artifact; with
CTXDB_UPDATE_SCREENSHOTS=1 it waits for the graph's layout and refreshes docs/images/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest_components import BROWSER, without
from conftest_ports import free_port_pair
from headless_chromium import PRESENT, chromium

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.slow, without(BROWSER, PRESENT)]


def _wait_http(url: str, process: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "dagster-webserver exited during start-up"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"{url} did not answer within {timeout}s")


def _dismiss_prompt(driver) -> None:
    """Close the UI's one-time newsletter prompt, which opens a few seconds after the first page."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    skip = (By.XPATH, "//button[normalize-space()='Skip']")
    try:
        WebDriverWait(driver, 8, poll_frequency=0.25).until(lambda d: d.find_elements(*skip))
    except TimeoutException:
        return
    driver.find_element(*skip).click()
    WebDriverWait(driver, 10).until(lambda d: not d.find_elements(*skip))


def group_assets(group: str) -> list[str]:
    """The assets of `group` as the project's Definitions declare them."""
    from pipelines.definitions import defs

    graph = defs.resolve_asset_graph()
    names = [
        k.to_user_string() for k in graph.get_all_asset_keys() if graph.get(k).group_name == group
    ]
    assert names, group
    return sorted(names)


def test_asset_graph_shows_every_stage(tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    updating = os.environ.get("CTXDB_UPDATE_SCREENSHOTS") == "1"
    port = free_port_pair()
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(ROOT / "dagster.yaml", home / "dagster.yaml")
    webserver = Path(sys.executable).with_name("dagster-webserver")
    env = {**os.environ, "DAGSTER_HOME": str(home), "CTXDB_HOME": str(tmp_path / "var")}
    process = subprocess.Popen(
        [str(webserver), "-h", "127.0.0.1", "-p", str(port)],  # location from pyproject
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    driver = None
    try:
        _wait_http(f"http://127.0.0.1:{port}/server_info", process)
        driver = chromium("1800,1300")
        for group in ("turn_record", "index"):
            # the list names every asset of the group (the graph renders only what is in view)
            page = f"http://127.0.0.1:{port}/locations/ctxdb/asset-groups/{group}"
            wanted = group_assets(group)
            driver.get(f"{page}/list")
            WebDriverWait(driver, 300, poll_frequency=0.5).until(
                lambda d, wanted=wanted: all(f">{name}<" in d.page_source for name in wanted)
            )
            driver.get(f"{page}/lineage")  # the picture: the group's graph
            WebDriverWait(driver, 300, poll_frequency=0.5).until(
                lambda d, wanted=wanted: any(f">{name}<" in d.page_source for name in wanted)
            )
            _dismiss_prompt(driver)
            if updating:
                time.sleep(2)  # let the graph finish its layout before the picture
            shot = tmp_path / f"dagster-{group}.png"
            driver.save_screenshot(str(shot))
            assert shot.stat().st_size > 0
            if updating:
                shutil.copy(shot, ROOT / "docs" / "images" / shot.name)
    finally:
        if driver is not None:
            driver.quit()
        process.terminate()
        process.wait(30)
