"""Which client quotas a request counts against and how long its client waits
(strom.security.quota_sensors): Kafka's produce, fetch and request quotas, its sensor per
client, and the sensors dropped once idle. A manual clock; no socket."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.metadata.quota_entities import QuotaEntity
from strom.security.quota_rates import throttle_time_ms
from strom.security.quota_sensors import EXEMPT, ClientQuotaSensors, MutationBuckets, QuotaUse

PRODUCE, FETCH, METADATA = 0, 1, 3
WINDOW_MS, SAMPLES = 1000, 11
MEASURED_MS = (SAMPLES - 1) * WINDOW_MS  # a first burst is measured over ten windows


def use(
    api_key: int = PRODUCE,
    *,
    user: str = "alice",
    client_id: str = "app",
    request_bytes: int = 0,
    response_bytes: int = 0,
    handler_s: float = 0.0,
    follower: bool = False,
) -> QuotaUse:
    return QuotaUse(user, client_id, api_key, request_bytes, response_bytes, handler_s, follower)


def expected_wait(total: float, quota: float) -> int:
    return throttle_time_ms(total / (MEASURED_MS / 1000), quota, MEASURED_MS)


ALICE_PRODUCES = {QuotaEntity.user("alice"): {"producer_byte_rate": 1000.0}}


def test_a_producer_over_its_byte_rate_waits_kafkas_throttle_time() -> None:
    sensors = ClientQuotaSensors()
    assert sensors.throttle_ms(use(request_bytes=2_000), ALICE_PRODUCES, 0) == 0  # 200 B/s
    wait = sensors.throttle_ms(use(request_bytes=20_000), ALICE_PRODUCES, 0)
    assert wait == expected_wait(22_000, 1000) == 12_000
    # Fetches and other users are not the producer quota's.
    assert sensors.throttle_ms(use(FETCH, response_bytes=10**6), ALICE_PRODUCES, 0) == 0
    assert sensors.throttle_ms(use(user="bob", request_bytes=10**6), ALICE_PRODUCES, 0) == 0


def test_a_consumer_counts_its_answers_bytes_and_a_follower_is_not_a_consumer() -> None:
    quotas = {QuotaEntity.client("app"): {"consumer_byte_rate": 100.0}}
    sensors = ClientQuotaSensors()
    assert sensors.throttle_ms(use(FETCH, response_bytes=50_000, follower=True), quotas, 0) == 0
    assert len(sensors) == 0
    wait = sensors.throttle_ms(use(FETCH, request_bytes=10, response_bytes=5_000), quotas, 0)
    assert wait == expected_wait(5_000, 100) == 40_000


def test_a_default_quota_is_each_users_own_and_a_users_quota_is_shared_by_its_clients() -> None:
    default = {QuotaEntity.user(None): {"producer_byte_rate": 1000.0}}
    sensors = ClientQuotaSensors()
    assert sensors.throttle_ms(use(user="alice", request_bytes=15_000), default, 0) > 0
    assert sensors.throttle_ms(use(user="bob", request_bytes=5_000), default, 0) == 0
    assert len(sensors) == 2

    shared = ClientQuotaSensors()
    assert shared.throttle_ms(use(client_id="one", request_bytes=6_000), ALICE_PRODUCES, 0) == 0
    # alice's second client id adds to the same rate: 11 000 bytes over 10 s.
    wait = shared.throttle_ms(use(client_id="two", request_bytes=5_000), ALICE_PRODUCES, 0)
    assert wait == expected_wait(11_000, 1000) > 0
    assert len(shared) == 1


def test_the_request_quota_counts_handler_time_and_waits_at_most_a_window() -> None:
    quotas = {QuotaEntity.user_client("alice", None): {"request_percentage": 10.0}}
    sensors = ClientQuotaSensors()
    assert sensors.throttle_ms(use(METADATA, handler_s=0.5), quotas, 0) == 0  # 5 %
    assert sensors.throttle_ms(use(METADATA, handler_s=30.0), quotas, 0) == WINDOW_MS
    for exempt in EXEMPT:  # the nodes' own requests
        assert sensors.throttle_ms(use(exempt, handler_s=30.0), quotas, 0) == 0


def test_the_longest_wait_of_the_quotas_a_request_is_over_wins() -> None:
    quotas = {QuotaEntity.user("alice"): {"producer_byte_rate": 1000.0, "request_percentage": 1.0}}
    sensors = ClientQuotaSensors()
    wait = sensors.throttle_ms(use(request_bytes=50_000, handler_s=10.0), quotas, 0)
    assert wait == expected_wait(50_000, 1000) > WINDOW_MS


def test_without_quotas_nothing_is_measured() -> None:
    sensors = ClientQuotaSensors()
    assert sensors.throttle_ms(use(request_bytes=10**9, handler_s=99.0), {}, 0) == 0
    assert len(sensors) == 0


def test_a_rate_falls_back_under_its_quota_as_time_passes() -> None:
    sensors = ClientQuotaSensors()
    assert sensors.throttle_ms(use(request_bytes=20_000), ALICE_PRODUCES, 0) > 0
    # Twenty seconds on, the burst has left the samples.
    assert sensors.throttle_ms(use(request_bytes=1_000), ALICE_PRODUCES, 20_000) == 0


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.text(min_size=1, max_size=8), st.integers(min_value=0, max_value=3_000)),
        max_size=200,
    )
)
def test_idle_sensors_are_dropped_so_invented_client_ids_cost_nothing_for_long(
    requests: list[tuple[str, int]],
) -> None:
    default = {QuotaEntity.client(None): {"producer_byte_rate": 10.0}}
    sensors = ClientQuotaSensors()
    now = 0
    recent: list[tuple[int, str]] = []
    for client_id, step_ms in requests:
        now += step_ms
        sensors.throttle_ms(use(client_id=client_id, request_bytes=1), default, now)
        recent.append((now, client_id))
        # Held: at most the clients seen in the last two idle periods.
        seen = {c for at, c in recent if now - at < 2 * SAMPLES * WINDOW_MS}
        assert len(sensors) <= len(seen)


def test_an_address_over_its_connection_creation_rate_is_refused_others_are_not() -> None:
    quotas = {
        QuotaEntity.ip(None): {"connection_creation_rate": 100.0},
        QuotaEntity.ip("0:0:0:0:0:0:0:1"): {"connection_creation_rate": 2.0},
    }
    sensors = ClientQuotaSensors()
    # A first burst is measured over ten windows: 20 connections pass at 2 a second.
    waits = [sensors.connection_ms("::1", quotas, 0) for _ in range(21)]
    assert waits[:20] == [0] * 20 and waits[20] > 0
    # Another address falls to the default, measured on its own.
    assert all(sensors.connection_ms("10.0.0.1", quotas, 0) == 0 for _ in range(21))
    # Ten seconds later the burst is behind ::1.
    assert sensors.connection_ms("::1", quotas, 11_000) == 0


def test_without_an_ip_quota_connections_are_not_counted() -> None:
    sensors = ClientQuotaSensors()
    only_users = {QuotaEntity.user(None): {"producer_byte_rate": 1.0}}
    assert sensors.connection_ms("10.0.0.1", {}, 0) == 0
    assert sensors.connection_ms("10.0.0.1", only_users, 0) == 0
    host = {QuotaEntity.ip("db.example"): {"connection_creation_rate": 1.0}}
    assert all(sensors.connection_ms("10.0.0.1", host, 0) == 0 for _ in range(50))
    assert len(sensors) == 0


def test_a_host_names_quota_counts_for_the_addresses_it_resolved_to() -> None:
    quotas = {QuotaEntity.ip("db.example"): {"connection_creation_rate": 1.0}}
    hosts = {"db.example": frozenset({"10.0.0.7", "fd00:0:0:0:0:0:0:7"})}
    sensors = ClientQuotaSensors()
    for address in ("10.0.0.7", "fd00::7"):
        waits = [sensors.connection_ms(address, quotas, 0, hosts) for _ in range(11)]
        assert waits[:10] == [0] * 10 and waits[10] > 0, address
    assert all(sensors.connection_ms("10.0.0.8", quotas, 0, hosts) == 0 for _ in range(50))
    # Not resolved (yet, or at all): not counted.
    unresolved = {"db.example": frozenset[str]()}
    fresh = ClientQuotaSensors()
    assert all(fresh.connection_ms("10.0.0.7", quotas, 0, unresolved) == 0 for _ in range(50))


MUTATIONS = {QuotaEntity.user("alice"): {"controller_mutation_rate": 2.0}}


def test_strict_topic_changes_are_refused_once_the_bucket_is_below_zero() -> None:
    buckets = MutationBuckets()
    # The bucket holds 11 windows of 2 a second: 22 partitions; the change that empties
    # it may take it below zero, the next is refused.
    assert buckets.admit("alice", "app", 20, MUTATIONS, 1_000, strict=True)
    assert buckets.admit("alice", "app", 10, MUTATIONS, 1_000, strict=True)  # to -8
    assert not buckets.admit("alice", "app", 1, MUTATIONS, 1_000, strict=True)
    assert buckets.throttle_ms("alice", "app", MUTATIONS, 1_000) == 4_000  # 8 at 2 a second
    # Permissive (older versions): let through and counted.
    assert buckets.admit("alice", "app", 4, MUTATIONS, 1_000, strict=False)
    assert buckets.throttle_ms("alice", "app", MUTATIONS, 1_000) == 6_000
    # Six seconds on it is back at zero and takes changes again.
    assert buckets.admit("alice", "app", 1, MUTATIONS, 7_000, strict=True)
    # Others have no quota, or their own bucket.
    assert buckets.admit("bob", "app", 10**6, MUTATIONS, 1_000, strict=True)
    assert buckets.throttle_ms("bob", "app", MUTATIONS, 1_000) == 0


def test_idle_buckets_are_dropped() -> None:
    default = {QuotaEntity.client(None): {"controller_mutation_rate": 1.0}}
    buckets = MutationBuckets()
    for i in range(50):
        buckets.admit("u", f"client-{i}", 1, default, 0, strict=True)
    assert len(buckets) == 50
    buckets.admit("u", "late", 1, default, SAMPLES * WINDOW_MS, strict=True)
    assert len(buckets) == 1
