"""Live throughput for the cluster page: the brokers' Prometheus counters, sampled every
few seconds, turned into rates, drawn as an SVG chart.

Pure: feed.py does the scraping.
Counters are summed over every series and every node; a counter that went down (a
broker restarted) restarts its rate from zero rather than showing a negative rate.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from strom.console.html import esc

SERIES = {
    "in_bytes": "strom_topic_in_bytes",
    "out_bytes": "strom_topic_out_bytes",
    "in_records": "strom_topic_in_records",
    "out_records": "strom_topic_out_records",
}
"""What the chart shows -> the counter family (Prometheus drops `_total` from the name)."""


@dataclass(frozen=True, slots=True)
class Sample:
    at_s: float
    totals: Mapping[str, float]


def parse_totals(text: str) -> dict[str, float]:
    """The sum of each SERIES counter over its labels, from one exposition text."""
    wanted = {family: name for name, family in SERIES.items()}
    totals = dict.fromkeys(SERIES, 0.0)
    for family in text_string_to_metric_families(text):
        name = wanted.get(family.name)
        if name is None:
            continue
        totals[name] += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return totals


def rates(samples: Sequence[Sample], name: str) -> list[tuple[float, float]]:
    """(time, per-second rate) between consecutive samples."""
    points = []
    for before, after in itertools.pairwise(samples):
        span = after.at_s - before.at_s
        if span <= 0:
            continue
        grown = after.totals.get(name, 0.0) - before.totals.get(name, 0.0)
        if grown < 0:  # a counter reset: count from zero
            grown = after.totals.get(name, 0.0)
        points.append((after.at_s, grown / span))
    return points


def human_rate(value: float, unit: str) -> str:
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= scale:
            return f"{value / scale:.1f} {prefix}{unit}/s"
    return f"{value:.0f} {unit}/s"


def chart(title: str, lines: Mapping[str, Sequence[tuple[float, float]]], unit: str) -> str:
    """An SVG line chart of rates over time, one line per name, with its latest value."""
    width, height, pad = 480, 120, 4
    points = [p for line in lines.values() for p in line]
    if not points:
        return (
            f'<figure class="chart"><figcaption>{esc(title)}</figcaption>'
            "<p class=empty>Waiting for two samples…</p></figure>"
        )
    start = min(t for t, _ in points)
    span = max(max(t for t, _ in points) - start, 1.0)
    top = max(max(v for _, v in points), 1.0)
    paths, legend = [], []
    for index, (name, line) in enumerate(lines.items()):
        coords = " ".join(
            f"{pad + (t - start) / span * (width - 2 * pad):.1f},"
            f"{height - pad - v / top * (height - 2 * pad):.1f}"
            for t, v in line
        )
        paths.append(f'<polyline class="line{index}" fill="none" points="{coords}"/>')
        latest = line[-1][1] if line else 0.0
        legend.append(
            f'<span class="line{index}">{esc(name)}: {esc(human_rate(latest, unit))}</span>'
        )
    return (
        f'<figure class="chart"><figcaption>{esc(title)} {" ".join(legend)}</figcaption>'
        f'<svg viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">'
        f"{''.join(paths)}</svg></figure>"
    )
