"""A real Prometheus server (Debian's `prometheus` package) for the metrics tests: started
on a free port with a private data directory, scraping the given targets every second."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from broker import free_port
from prometheus_client.parser import text_string_to_metric_families

READY_TIMEOUT_S = 30.0


def prometheus_missing() -> str | None:
    if shutil.which("prometheus") is None:
        return "no prometheus on PATH (apt install prometheus; ./dev test installs it)"
    return None


class PrometheusServer:
    """start() -> query()* -> stop(); scrapes `targets` (host:port) every second."""

    def __init__(self, root: Path, targets: Sequence[str]) -> None:
        self.root = root
        self.port = free_port()
        self.log_path = root / "prometheus.log"
        config = root / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
            "scrape_configs:\n  - job_name: strom\n    static_configs:\n"
            f"      - targets: {json.dumps(list(targets))}\n"
        )
        self._config = config
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self._process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={self._config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"prometheus did not become ready:\n{self.log()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:]

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """An instant query's samples: (labels, value)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return [(r["metric"], float(r["value"][1])) for r in body["data"]["result"]]

    def value(self, promql: str) -> float | None:
        """The single value a query gives; None while it gives none."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return result[0][1] if result else None

    def wait_for(self, promql: str, check: str, want: float, timeout_s: float = 30.0) -> float:
        """Poll `promql` until its value is `check` ("==", ">=", "<=") `want`."""
        compare = {"==": float.__eq__, ">=": float.__ge__, "<=": float.__le__}[check]
        deadline = time.monotonic() + timeout_s
        last: float | None = None
        while time.monotonic() < deadline:
            last = self.value(promql)
            if last is not None and compare(last, want):
                return last
            time.sleep(0.5)
        raise AssertionError(f"{promql} stayed at {last}, wanted {check} {want}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(10)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    status, text = get(f"{url}/metrics")
    assert status == 200, text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
