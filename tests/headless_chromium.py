"""The browser the page tests drive: Chromium headless through chromedriver (both from the system
packages; the tests are skipped without them)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
PRESENT = CHROMIUM.exists() and CHROMEDRIVER.exists()


def chromium(window: str, prefs: dict[str, Any] | None = None) -> Any:
    """A headless Chromium driver with a `window` ("width,height") and browser `prefs`."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={window}",
    ):
        options.add_argument(argument)
    if prefs:
        options.add_experimental_option("prefs", prefs)
    return webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
