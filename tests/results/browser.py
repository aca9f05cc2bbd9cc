"""A real headless Chromium (Debian's chromium and chromium-driver) driven by selenium, for the dashboard tests.

Chromium starts with --headless --no-sandbox --disable-gpu --disable-background-networking
--disable-component-update --disable-sync --no-first-run and a fresh --user-data-dir; the tests
skip, saying why, when chromium, chromedriver or selenium is missing (CI installs them:
scripts/ci_services.sh).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import time

import pytest

__all__ = ["chromium", "open_page", "errors", "colour_pixels"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@contextlib.contextmanager
def chromium(width: int = 1300, height: int = 1800):
    """A selenium driver of a headless Chromium with console logging on."""
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; CI "
                    "installs them)")
    webdriver = pytest.importorskip("selenium.webdriver", reason="needs selenium: pip install 'deep500lite[test]'")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="d5-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
                f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def open_page(driver, path, timeout: float = 60.0) -> list:
    """Load a local page, wait until every chart is drawn; returns the console's messages."""
    driver.get(path.as_uri() if hasattr(path, "as_uri") else "file://" + str(path))
    deadline = time.monotonic() + timeout
    script = ("return [document.querySelectorAll('.d5-chart').length, "
              "document.querySelectorAll('.d5-chart[data-drawn]').length, document.readyState]")
    while True:
        charts, drawn, state = driver.execute_script(script)
        if state == "complete" and drawn == charts:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"{path}: {drawn} of {charts} charts drawn after {timeout} s; console: "
                        f"{driver.get_log('browser')}")
        time.sleep(0.1)
    return driver.get_log("browser")


def errors(log: list) -> list:
    """The console messages at level SEVERE (errors, failed loads)."""
    return [entry for entry in log if entry.get("level") == "SEVERE"]


def colour_pixels(png: bytes, rgb, tolerance: int = 12) -> int:
    """How many pixels of a screenshot are within ``tolerance`` of a colour (Pillow)."""
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).astype(int)
    return int((np.abs(img - np.asarray(rgb)).max(axis=-1) <= tolerance).sum())
