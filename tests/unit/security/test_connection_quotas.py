"""Kafka's connection quotas as a pure core: max.connections (broker and listener), the
protected inter-broker listener, max.connections.per.ip with overrides, and the creation
rates, on a manual clock."""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.security.connection_quotas import (
    WINDOW_MS,
    ConnectionLimits,
    ConnectionQuotas,
)

A, B = "10.0.0.1", "10.0.0.2"


def limits(**given: object) -> ConnectionLimits:
    for name in ("per_ip_overrides", "listener_max_connections", "listener_max_creation_rate"):
        if name in given:
            given[name] = MappingProxyType(dict(given[name]))  # type: ignore[call-overload]
    return ConnectionLimits(**given)  # type: ignore[arg-type]


def test_without_limits_everything_comes_in_at_once() -> None:
    quotas = ConnectionQuotas(ConnectionLimits())
    for _ in range(1000):
        assert quotas.throttle_ms("PLAINTEXT", 0) == 0
        assert quotas.has_slot("PLAINTEXT")
        assert quotas.open("PLAINTEXT", A)
    assert (quotas.total, quotas.by_ip, quotas.by_listener) == (
        1000,
        {A: 1000},
        {"PLAINTEXT": 1000},
    )


def test_an_address_over_its_limit_is_refused_and_overrides_win() -> None:
    quotas = ConnectionQuotas(limits(max_connections_per_ip=2, per_ip_overrides={B: 3}))
    assert quotas.open("PLAINTEXT", A) and quotas.open("EXTERNAL", A)
    assert not quotas.open("PLAINTEXT", A)  # across listeners
    assert quotas.by_ip == {A: 2} and quotas.total == 2  # the refusal counted nothing
    assert all(quotas.open("PLAINTEXT", B) for _ in range(3))
    assert not quotas.open("PLAINTEXT", B)
    quotas.close("EXTERNAL", A)
    assert quotas.open("PLAINTEXT", A)


def test_zero_per_address_with_an_override_admits_only_the_override() -> None:
    quotas = ConnectionQuotas(limits(max_connections_per_ip=0, per_ip_overrides={A: 1}))
    assert not quotas.open("PLAINTEXT", B)
    assert quotas.open("PLAINTEXT", A)
    assert not quotas.open("PLAINTEXT", A)


def test_a_full_broker_has_no_slot_until_one_closes_or_the_limit_rises() -> None:
    quotas = ConnectionQuotas(limits(max_connections=2))
    assert quotas.open("PLAINTEXT", A) and quotas.open("PLAINTEXT", B)
    assert not quotas.has_slot("PLAINTEXT")
    quotas.close("PLAINTEXT", B)
    assert quotas.has_slot("PLAINTEXT")
    assert quotas.open("PLAINTEXT", B)
    quotas.reconfigure(limits(max_connections=3))
    assert quotas.has_slot("PLAINTEXT")


def test_a_listener_has_its_own_limit() -> None:
    quotas = ConnectionQuotas(limits(listener_max_connections={"EXTERNAL": 1}))
    assert quotas.open("EXTERNAL", A)
    assert not quotas.has_slot("EXTERNAL")
    assert quotas.has_slot("INTERNAL")


def test_the_inter_broker_listener_is_protected_and_takes_the_broker_over() -> None:
    quotas = ConnectionQuotas(limits(max_connections=2, protected_listener="INTERNAL"))
    assert quotas.open("EXTERNAL", A) and quotas.open("EXTERNAL", B)
    assert not quotas.has_slot("EXTERNAL")
    assert quotas.has_slot("INTERNAL")
    assert quotas.open("INTERNAL", "10.0.0.9")
    assert quotas.over_limit()  # the shell closes another listener's oldest connection
    quotas.close("EXTERNAL", A)
    assert not quotas.over_limit()


def test_the_creation_rate_paces_connections_one_interval_apart() -> None:
    quotas = ConnectionQuotas(limits(max_creation_rate=4))
    delays = [quotas.throttle_ms("PLAINTEXT", 0) for _ in range(4)]
    assert delays == [0, 250, 500, 750]
    assert quotas.throttle_ms("PLAINTEXT", 2000) == 0  # idle long enough: at once


def test_the_throttle_never_exceeds_one_window() -> None:
    quotas = ConnectionQuotas(limits(max_creation_rate=1))
    assert [quotas.throttle_ms("PLAINTEXT", 0) for _ in range(3)] == [0, WINDOW_MS, WINDOW_MS]
    zero = ConnectionQuotas(limits(max_creation_rate=0))
    assert zero.throttle_ms("PLAINTEXT", 5) == WINDOW_MS


def test_a_listener_rate_and_the_broker_rate_both_hold_and_the_protected_one_is_free() -> None:
    quotas = ConnectionQuotas(
        limits(
            max_creation_rate=2,
            listener_max_creation_rate={"EXTERNAL": 1},
            protected_listener="INTERNAL",
        )
    )
    assert quotas.throttle_ms("EXTERNAL", 0) == 0
    assert quotas.throttle_ms("OTHER", 0) == 500  # the broker's rate: 2 a second
    assert quotas.throttle_ms("EXTERNAL", 0) == WINDOW_MS  # the listener's: 1 a second
    assert quotas.throttle_ms("INTERNAL", 0) == 0  # no broker-wide rate for it


@settings(max_examples=300)
@given(
    rate=st.integers(1, 50),
    arrivals=st.lists(st.integers(0, 3000), min_size=1, max_size=120).map(sorted),
)
def test_no_second_lets_more_than_the_rate_in(rate: int, arrivals: list[int]) -> None:
    """Connections taken through the throttle one at a time, as the shell does: each
    waits its delay before the next is asked about. In any window of one second no
    more than `rate` are let in."""
    quotas = ConnectionQuotas(limits(max_creation_rate=rate))
    admitted: list[int] = []
    free_at = 0
    for arrival in arrivals:
        now = max(arrival, free_at)
        at = now + quotas.throttle_ms("PLAINTEXT", now)
        admitted.append(at)
        free_at = at
    for start in admitted:
        inside = [t for t in admitted if start <= t < start + WINDOW_MS]
        assert len(inside) <= rate


OPS = st.lists(
    st.tuples(
        st.sampled_from(["open", "close"]),
        st.sampled_from(["EXTERNAL", "INTERNAL"]),
        st.sampled_from([A, B, "10.0.0.3"]),
    ),
    max_size=80,
)


@settings(max_examples=300)
@given(
    ops=OPS,
    max_connections=st.integers(0, 6),
    per_ip=st.integers(0, 4),
    listener_max=st.integers(0, 4),
)
def test_counts_follow_a_model_and_limits_hold(
    ops: list[tuple[str, str, str]], max_connections: int, per_ip: int, listener_max: int
) -> None:
    """Opens only where the shell would (a slot exists), closes only what is open: the
    counts equal a model's, no address holds more than its limit, the unprotected
    listener never takes the broker over max.connections, and its own limit holds."""
    quotas = ConnectionQuotas(
        limits(
            max_connections=max_connections,
            max_connections_per_ip=per_ip,
            per_ip_overrides={B: per_ip + 1},
            listener_max_connections={"EXTERNAL": listener_max},
            protected_listener="INTERNAL",
        )
    )
    model: list[tuple[str, str]] = []
    for op, listener, ip in ops:
        if op == "close":
            if (listener, ip) in model:
                model.remove((listener, ip))
                quotas.close(listener, ip)
            continue
        if not quotas.has_slot(listener):
            continue
        expected = sum(1 for _, held in model if held == ip) < (per_ip + 1 if ip == B else per_ip)
        assert quotas.open(listener, ip) == expected
        if expected:
            model.append((listener, ip))
            if listener == "EXTERNAL":
                assert quotas.total <= max_connections
    assert quotas.total == len(model)
    assert quotas.by_ip == {
        ip: n for ip in {i for _, i in model} if (n := [i for _, i in model].count(ip))
    }
    assert quotas.by_listener.get("EXTERNAL", 0) <= listener_max
