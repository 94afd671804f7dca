"""Throughput from Prometheus counters: sums over series, rates, resets, the chart."""

from __future__ import annotations

from strom.console.throughput import Sample, chart, human_rate, parse_totals, rates

EXPOSITION = """\
# HELP strom_topic_in_bytes_total Bytes appended.
# TYPE strom_topic_in_bytes_total counter
strom_topic_in_bytes_total{topic="a"} 100.0
strom_topic_in_bytes_total{topic="b"} 50.0
# HELP strom_topic_in_bytes_created created
# TYPE strom_topic_in_bytes_created gauge
strom_topic_in_bytes_created{topic="a"} 1.7e9
# HELP strom_topic_out_records_total Records sent.
# TYPE strom_topic_out_records_total counter
strom_topic_out_records_total{topic="a"} 7.0
# HELP other_total Something else.
# TYPE other_total counter
other_total 99.0
"""


def test_counters_are_summed_over_their_series_and_others_ignored() -> None:
    totals = parse_totals(EXPOSITION)
    assert totals == {"in_bytes": 150.0, "out_bytes": 0.0, "in_records": 0.0, "out_records": 7.0}


def test_rates_between_samples_and_a_reset_counts_from_zero() -> None:
    samples = [
        Sample(0.0, {"in_bytes": 0.0}),
        Sample(2.0, {"in_bytes": 200.0}),
        Sample(4.0, {"in_bytes": 50.0}),  # a broker restarted
        Sample(4.0, {"in_bytes": 60.0}),  # no time passed: skipped
    ]
    assert rates(samples, "in_bytes") == [(2.0, 100.0), (4.0, 25.0)]


def test_a_chart_has_a_line_per_series_and_the_latest_rates() -> None:
    drawn = chart("Bytes", {"in": [(0.0, 0.0), (2.0, 1500.0)], "out": [(2.0, 10.0)]}, "B")
    assert drawn.count("<polyline") == 2
    assert "in: 1.5 kB/s" in drawn and "out: 10 B/s" in drawn
    assert "Waiting for two samples" in chart("Bytes", {"in": []}, "B")
    assert human_rate(2_500_000, "rec") == "2.5 Mrec/s"
