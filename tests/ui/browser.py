"""Headless Chromium for the UI tests, driven by Playwright on the system's Chromium.

The tests never install anything: a missing Playwright package or browser is a test error that says
how to install it (``make test`` installs both). Playwright drives the Chromium of the system
(Debian's ``chromium``) through ``executable_path``, so no browser download is needed.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

INSTALL_CHROMIUM = "sudo apt-get update && sudo apt-get install -y chromium (or run `make test`, which does it)"
INSTALL_PLAYWRIGHT = "pip install -e '.[test]' (the test extras hold playwright; `make test` installs them)"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-quic",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def find_chromium() -> str:
    """The path of the system's Chromium; a test error saying how to install it when there is none."""
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    for path in ("/usr/bin/chromium", "/usr/bin/chromium-browser"):
        if Path(path).is_file():
            return path
    pytest.fail(f"Chromium is not installed; install it with: {INSTALL_CHROMIUM}", pytrace=False)


@contextlib.contextmanager
def open_page(width: int = 1600, height: int = 900) -> Iterator:
    """A Playwright page of headless system Chromium, ``width`` x ``height`` CSS pixels."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"the Python package playwright is missing; install it with: {INSTALL_PLAYWRIGHT}", pytrace=False)
    chromium = find_chromium()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(60_000)
            yield page
        finally:
            browser.close()


def wait_for_text(page_or_frame, needles, timeout_s: float = 60.0) -> str:
    """Wait until every string of ``needles`` is in the visible text of ``page_or_frame``; return it."""
    needles = [needles] if isinstance(needles, str) else list(needles)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            text = page_or_frame.inner_text("body")
        except Exception:  # the document is being replaced (navigation)
            text = ""
        missing = [n for n in needles if n not in text]
        if not missing:
            return text
        if time.monotonic() > deadline:
            raise AssertionError(f"the page never showed {missing}; it shows:\n{text[:3000]}")
        time.sleep(0.5)
