"""The enforcement arithmetic on a manual clock: Kafka's sampled rate (11 windows of a
second by default), the throttle time of a client over its quota, and KIP-599's token
bucket for controller mutations."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.security.quota_rates import SampledRate, TokenBucket, java_round, throttle_time_ms

T0 = 1_700_000_000_000


def test_a_first_burst_is_measured_over_ten_whole_windows() -> None:
    rate = SampledRate()
    rate.record(2000, T0)
    assert rate.measured_window_ms(T0) == 10_000
    assert rate.rate(T0) == 200.0
    # 100 B/s quota: (200 - 100) / 100 * 10 s.
    assert SampledRate().record_and_throttle(2000, T0, 100.0) == 10_000


def test_a_steady_client_is_measured_at_its_rate_and_not_throttled_at_its_quota() -> None:
    rate = SampledRate()
    throttles = [  # 1000 bytes every 100 ms for 30 s: 10,000 B/s
        rate.record_and_throttle(1000, T0 + step * 100, 10_500.0) for step in range(300)
    ]
    # Kafka counts the current, partial window as elapsed only so far: a little over.
    assert 10_000 < rate.rate(T0 + 29_900) < 10_100
    assert throttles == [0] * 300
    assert rate.record_and_throttle(50_000, T0 + 30_000, 10_500.0) > 0


def test_old_samples_expire_and_the_ring_is_reused() -> None:
    rate = SampledRate(samples=3, window_ms=1000)
    for second in range(3):
        rate.record(100, T0 + second * 1000)
    assert rate.total(T0 + 2999) == 300
    rate.record(100, T0 + 3000)  # a fourth sample (the ring holds samples + 1) ...
    assert rate.total(T0 + 3000) == 300  # ... while the first, idle for 3 windows, expired
    rate.record(100, T0 + 4000)  # reuses the first sample's slot
    assert len(rate._ring) == 4
    assert rate.total(T0 + 4000) == 300
    assert rate.total(T0 + 4000 + 3000) == 0  # every sample idle for 3 windows
    assert rate.measured_window_ms(T0 + 7000) == 2000


def test_throttle_time_is_kafkas_formula_rounded_as_java_rounds() -> None:
    assert throttle_time_ms(150.0, 100.0, 10_000) == 5000
    assert throttle_time_ms(100.0, 100.0, 10_000) == 0
    assert throttle_time_ms(100.5, 100.0, 1) == 0  # 0.005 ms
    assert java_round(2.5) == 3 and java_round(-2.5) == -2 and java_round(0.49) == 0


def test_request_percentage_throttle_is_capped_at_one_window() -> None:
    rate = SampledRate()
    assert rate.record_and_throttle(10_000, T0, 10.0, max_throttle_ms=1000) == 1000


@settings(max_examples=200)
@given(
    st.lists(st.tuples(st.integers(0, 999), st.integers(1, 10_000)), min_size=1, max_size=30),
    st.floats(1, 1e5),
)
def test_within_one_window_the_rate_is_the_sum_over_the_padded_window(
    events: list[tuple[int, int]], quota: float
) -> None:
    rate = SampledRate()
    events.sort()
    for offset_ms, value in events:
        throttle = rate.record_and_throttle(value, T0 + offset_ms, quota)
    now = T0 + events[-1][0]
    total = sum(value for _offset, value in events)
    assert rate.total(now) == total
    # One sample: its age plus nine whole windows of padding.
    window_ms = 10_000 + events[-1][0] - events[0][0]
    assert rate.measured_window_ms(now) == window_ms
    assert rate.rate(now) == total / (window_ms / 1000)
    assert throttle == throttle_time_ms(total / (window_ms / 1000), quota, window_ms)


def test_kip_599s_example_a_burst_of_560_waits_12_seconds() -> None:
    bucket = TokenBucket(samples=100, window_ms=1000)
    assert bucket.available(T0, 5.0) == 500.0  # a bucket long unused is full: 5 * 100 * 1
    assert bucket.try_take(560, T0, 5.0) is None  # taken, though it leaves -60
    assert bucket.throttle_ms(T0, 5.0) == 12_000
    assert bucket.try_take(1, T0 + 6000, 5.0) == 6000  # refused: still -30
    assert bucket.try_take(1, T0 + 12_000, 5.0) is None


def test_the_bucket_never_holds_more_than_its_burst() -> None:
    bucket = TokenBucket()
    bucket.take(1, T0, 2.0)
    assert bucket.available(T0 + 3_600_000, 2.0) == 22.0  # 11 windows * 1 s * 2/s


@settings(max_examples=200)
@given(st.lists(st.tuples(st.integers(0, 5000), st.integers(1, 20)), max_size=30))
def test_a_strict_bucket_refuses_exactly_while_it_is_below_zero(
    steps: list[tuple[int, int]],
) -> None:
    bucket, now, tokens, last = TokenBucket(), T0, 22.0, T0  # starts full: 11 * 1 s * 2/s
    for wait_ms, permits in steps:
        now += wait_ms
        tokens = min(22.0, tokens + 2.0 * (now - last) / 1000)
        last = now
        answer = bucket.try_take(permits, now, 2.0)
        if tokens < 0:
            assert answer == java_round(-tokens / 2.0 * 1000)
        else:
            assert answer is None
            tokens -= permits
        assert abs(bucket.tokens - tokens) < 1e-6
