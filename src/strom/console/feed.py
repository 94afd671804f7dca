"""Samples the brokers' Prometheus endpoints for the cluster page's throughput charts."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections import deque
from collections.abc import Iterable

from strom.console.html import esc
from strom.console.throughput import SERIES, Sample, chart, parse_totals, rates

SAMPLE_EVERY_S = 2.0
KEEP_SAMPLES = 150
MAX_SCRAPE_BYTES = 16 * 1024 * 1024


class MetricsFeed:
    """Scrapes the given /metrics URLs every SAMPLE_EVERY_S seconds, keeping the last
    KEEP_SAMPLES sums; a URL that fails is reported and the others still count."""

    def __init__(self, urls: Iterable[str]) -> None:
        self.urls = tuple(urls)
        self.samples: deque[Sample] = deque(maxlen=KEEP_SAMPLES)
        self.failures: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-feed", daemon=True)

    @property
    def enabled(self) -> bool:
        return bool(self.urls)

    def start(self) -> None:
        if self.urls:
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample_once()
            self._stop.wait(SAMPLE_EVERY_S)

    def sample_once(self) -> None:
        totals = dict.fromkeys(SERIES, 0.0)
        for url in self.urls:
            try:
                with urllib.request.urlopen(url, timeout=SAMPLE_EVERY_S) as answer:
                    text = answer.read(MAX_SCRAPE_BYTES).decode("utf-8", errors="replace")
                found = parse_totals(text)
            except (OSError, ValueError) as exc:
                self.failures[url] = str(exc)
                continue
            self.failures.pop(url, None)
            for name, value in found.items():
                totals[name] += value
        self.samples.append(Sample(time.monotonic(), totals))

    def charts(self) -> str:
        samples = list(self.samples)
        problems = "".join(
            f'<p class="notice error">{esc(url)}: {esc(reason)}</p>'
            for url, reason in sorted(self.failures.items())
        )
        bytes_chart = chart(
            "Bytes", {"in": rates(samples, "in_bytes"), "out": rates(samples, "out_bytes")}, "B"
        )
        records_chart = chart(
            "Records",
            {"in": rates(samples, "in_records"), "out": rates(samples, "out_records")},
            "rec",
        )
        return problems + bytes_chart + records_chart
