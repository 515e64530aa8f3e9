"""A minimal Chrome DevTools Protocol driver for the UI tests (headless Chromium, no Selenium).

``chromium --headless --dump-dom`` cannot set the browser's local storage, click or wait for a
selector, which the MLflow runs table and Kedro-Viz need (their column choice, expanded rows and
first-visit tours live in local storage). This opens one page over the DevTools web socket and
offers the few calls the tests use: navigate, evaluate JavaScript, wait for text, screenshot.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Page:
    """One headless Chromium tab; use as ``with Page(chromium, profile) as page: ...``."""

    def __init__(self, chromium: str, profile: Path, width: int = 1600, height: int = 900):
        self.port = _free_port()
        self.size = (width, height)
        self._proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--remote-debugging-port={self.port}", f"--user-data-dir={profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        self._loop = asyncio.new_event_loop()
        self._ws = None
        self._next = 0

    # -- connection -------------------------------------------------------------------------------
    def __enter__(self) -> "Page":
        import websockets

        deadline = time.monotonic() + 30
        while True:
            try:
                tabs = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{self.port}/json", timeout=2).read())
                url = next(t["webSocketDebuggerUrl"] for t in tabs if t["type"] == "page")
                break
            except Exception:
                if time.monotonic() > deadline or self._proc.poll() is not None:
                    self.close()
                    raise RuntimeError("headless chromium did not open its DevTools port") from None
                time.sleep(0.2)
        self._ws = self._loop.run_until_complete(websockets.connect(url, max_size=64_000_000))
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride", width=self.size[0], height=self.size[1],
                  deviceScaleFactor=1, mobile=False)
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._ws is not None:
            self._loop.run_until_complete(self._ws.close())
            self._ws = None
        if self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait(timeout=10)
        self._loop.close()

    async def _call(self, method: str, params: dict) -> dict:
        self._next += 1
        my_id = self._next
        await self._ws.send(json.dumps({"id": my_id, "method": method, "params": params}))
        while True:
            msg = json.loads(await self._ws.recv())
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    def call(self, method: str, **params) -> dict:
        return self._loop.run_until_complete(asyncio.wait_for(self._call(method, params), timeout=60))

    # -- what the tests use -----------------------------------------------------------------------
    def goto(self, url: str, settle_s: float = 1.0) -> None:
        self.call("Page.navigate", url=url)
        time.sleep(settle_s)

    def before_each_load(self, script: str) -> None:
        """Run ``script`` in every new document before its own scripts (e.g. to set local storage
        the app reads at start-up)."""
        self.call("Page.addScriptToEvaluateOnNewDocument", source=script)

    def evaluate(self, expression: str):
        res = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"JavaScript failed: {res['exceptionDetails']}")
        return res.get("result", {}).get("value")

    def text(self) -> str:
        """The page's visible text (``document.body.innerText``)."""
        return self.evaluate("document.body ? document.body.innerText : ''") or ""

    def wait_for_text(self, needles, timeout_s: float = 60.0) -> str:
        """Wait until every string of ``needles`` is in the visible text; return that text."""
        needles = [needles] if isinstance(needles, str) else list(needles)
        deadline = time.monotonic() + timeout_s
        while True:
            text = self.text()
            missing = [n for n in needles if n not in text]
            if not missing:
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {missing}; it shows:\n{text[:3000]}")
            time.sleep(0.5)

    def screenshot(self, path: Path) -> Path:
        data = self.call("Page.captureScreenshot", format="png")["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(data))
        return path


def find_chromium() -> str:
    """Path of Debian's chromium; installed with apt-get when missing and possible, else skip."""
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    if not shutil.which("apt-get"):
        pytest.skip("chromium is not installed and apt-get is not available to install it")
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it with apt-get needs root "
                    "(run: sudo apt-get install chromium)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    steps = [["apt-get", "update"],
             ["apt-get", "install", "-y", "--no-install-recommends", "chromium", "fonts-liberation"]]
    for step in steps:
        try:
            res = subprocess.run(step, env=env, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            pytest.skip(f"chromium is not installed and `{' '.join(step)}` did not finish in 600 s")
        if res.returncode != 0:
            pytest.skip(f"chromium is not installed and `{' '.join(step)}` failed "
                        f"({res.returncode}): {res.stderr.strip()[-500:]}")
    path = shutil.which("chromium")
    if not path:
        pytest.skip("apt-get installed chromium but no `chromium` command is on PATH")
    return path
