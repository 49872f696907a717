"""A real browser for tests: Debian's Chromium driven by its chromedriver through Selenium.

Every WebDriver call blocks, and the tests run the worker in their own event loop, so each call goes
through a thread (``await browser.get(...)``). The flags are the ones this kind of machine needs; every
browser gets a fresh profile. The calls use the browser's own thread, never the event loop's default
executor, which the worker's sandbox needs for itself. ``CHROMIUM_MISSING`` says why the browser tests skip, when they do.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM_MISSING = (None if CHROMIUM and CHROMEDRIVER else
                    "Chromium or chromedriver is not installed: `make install` installs Debian's chromium and "
                    "chromium-driver with apt when run as root")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage")


class Browser:
    def __init__(self, base_url: str, shots: Path, width: int = 1100, height: int = 900) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in FLAGS:
            options.add_argument(flag)
        self._profile = tempfile.mkdtemp(prefix="bamboo-chromium-")
        options.add_argument(f"--user-data-dir={self._profile}")
        options.add_argument(f"--window-size={width},{height}")
        # The console's messages (a refused frame is reported there) are readable through get_log("browser").
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="browser")
        self.base_url = base_url.rstrip("/")
        self.shots = shots

    async def call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def get(self, path: str) -> None:
        await self.call(self.driver.get, self.base_url + path if path.startswith("/") else path)

    async def find(self, css: str):
        from selenium.webdriver.common.by import By

        return await self.call(self.driver.find_element, By.CSS_SELECTOR, css)

    async def find_all(self, css: str):
        from selenium.webdriver.common.by import By

        return await self.call(self.driver.find_elements, By.CSS_SELECTOR, css)

    async def fill(self, css: str, text: str) -> None:
        element = await self.find(css)
        await self.call(element.clear)
        await self.call(element.send_keys, text)

    async def click(self, css: str) -> None:
        element = await self.find(css)
        await self.call(element.click)

    async def text(self, css: str = "body") -> str:
        element = await self.find(css)
        return await self.call(lambda: element.text)

    async def js(self, script: str, *args):
        return await self.call(self.driver.execute_script, script, *args)

    @property
    def path(self) -> str:
        from urllib.parse import urlparse

        return urlparse(self.driver.current_url).path

    async def wait_text(self, needle: str, css: str = "body", timeout: float = 60.0) -> str:
        """Wait until ``css`` shows ``needle`` (pages reload themselves; this waits across reloads)."""
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                last = await self.text(css)
            except Exception:  # noqa: BLE001 — the page is reloading or the element not there yet
                last = ""
            if needle in last:
                return last
            await asyncio.sleep(0.3)
        if not last:
            last = await self.text("body")
        raise AssertionError(f"{needle!r} did not appear in {css} within {timeout} s; it shows (the end):\n{last[-2000:]}")

    async def screenshot(self, name: str) -> Path:
        """A full-page screenshot (the window grows to the page's height first)."""
        height = await self.js("return Math.max(document.body.scrollHeight, 600)")
        width = await self.js("return window.outerWidth")
        await self.call(self.driver.set_window_size, width, min(int(height) + 120, 6000))
        self.shots.mkdir(parents=True, exist_ok=True)
        path = self.shots / f"{name}.png"
        await self.call(self.driver.save_screenshot, str(path))
        return path

    def quit(self) -> None:
        self.driver.quit()
        self._thread.shutdown(wait=False)
        shutil.rmtree(self._profile, ignore_errors=True)
