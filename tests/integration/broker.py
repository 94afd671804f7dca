"""Start and stop real `strom serve` processes for integration tests."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

READY_TIMEOUT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class BrokerProcess:
    """A `strom serve` child process: start() -> (kill()|stop()) -> start() ..."""

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        extra: Sequence[str] = (),
        more_listeners: Sequence[str] = (),
    ) -> None:
        """`more_listeners` (e.g. "SSL://127.0.0.1:9093") are served beside the
        PLAINTEXT listener on `port`, advertised as they are written."""
        self.data_dir = data_dir
        self.port = port or free_port()
        self.extra = list(extra)
        self.more_listeners = list(more_listeners)
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = data_dir.parent / f"{data_dir.name}-broker.log"
        self.ready_line = ""

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        assert self.process is None or self.process.poll() is not None
        log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "strom",
                "serve",
                "--data-dir",
                str(self.data_dir),
                *self._listen_options(),
                *self.extra,
            ],
            stdout=subprocess.PIPE,
            stderr=log_file,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log_file.close()
        self.ready_line = self._wait_ready()

    def _listen_options(self) -> list[str]:
        if not self.more_listeners:
            return ["--listen", self.bootstrap]
        listeners = ",".join([f"PLAINTEXT://{self.bootstrap}", *self.more_listeners])
        return ["--set", f"listeners={listeners}", "--set", f"advertised.listeners={listeners}"]

    def _wait_ready(self) -> str:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        fd = self.process.stdout.fileno()
        buffered = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([fd], [], [], 0.2)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buffered += chunk
                if b"\n" in buffered:
                    return buffered.split(b"\n", 1)[0].decode()
            if self.process.poll() is not None:
                break
        self.kill()
        raise RuntimeError(f"strom did not become ready; its log:\n{self.read_log()}")

    def read_log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, then wait; returns the exit code."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        if self.process is not None and self.process.stdout is not None:
            self.process.stdout.close()


def serve_refused(data_dir: Path, *settings: str) -> subprocess.CompletedProcess[str]:
    """`strom serve` with `settings` (KEY=VALUE) that must not start: its exit, stderr."""
    options = [part for setting in settings for part in ("--set", setting)]
    command = [sys.executable, "-m", "strom", "serve", "--data-dir", str(data_dir), *options]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)
