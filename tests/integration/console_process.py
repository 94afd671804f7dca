"""`strom console` as a child process, and Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from broker import free_port

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
READY_TIMEOUT_S = 30.0


class ConsoleProcess:
    """start() -> ... -> stop(); its stderr goes to `log_path`."""

    def __init__(self, root: Path, bootstrap: str, extra: Sequence[str] = ()) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [
            sys.executable,
            "-m",
            "strom",
            "console",
            "-b",
            bootstrap,
            "--listen",
            f"127.0.0.1:{self.port}",
            *extra,
        ]
        self.log_path = root / f"console-{self.port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                self.command,
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline and self.process.poll() is None:
            if "strom console on" in self.read_log():
                return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"strom console did not start: {self.read_log()}")

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)

    def get(self, path: str) -> tuple[int, str]:
        return request(self.url + path)

    def post(self, path: str, body: bytes, content_type: str) -> tuple[int, str]:
        return request(self.url + path, body, content_type)


def request(url: str, body: bytes | None = None, content_type: str = "") -> tuple[int, str]:
    """(status, text) of a GET, or a POST when there is a body; redirects are followed."""
    headers = {"Content-Type": content_type} if content_type else {}
    asked = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(asked, timeout=30) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


@contextmanager
def running_console(
    root: Path, bootstrap: str, extra: Sequence[str] = ()
) -> Iterator[ConsoleProcess]:
    console = ConsoleProcess(root, bootstrap, extra)
    console.start()
    try:
        yield console
    finally:
        console.stop()


def chromium_missing() -> str | None:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        return "no Debian chromium (apt install chromium; ./dev test installs it)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "no playwright (pip install -e '.[dev]')"
    return None


@contextmanager
def chromium_page(*, javascript: bool = True) -> Iterator[Any]:
    """A Playwright page in Debian's headless Chromium; a CI run without one fails."""
    missing = chromium_missing()
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(
                viewport={"width": 1280, "height": 900}, java_script_enabled=javascript
            )
            page = context.new_page()
            page.set_default_timeout(30_000)
            yield page
        finally:
            browser.close()
