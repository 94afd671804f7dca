"""Broker registration, heartbeats, fencing, controlled shutdown and producer id blocks."""

from __future__ import annotations

from cluster_harness import (
    always,
    cluster,
    commit,
    create_topic,
    fence,
    heartbeat,
    incarnation,
    never,
    register,
    state,
)
from kio.schema.errors import ErrorCode

from strom.metadata import brokers
from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    BrokerEndpoint,
    FenceBrokerRecord,
    RegisterBrokerRecord,
    SecurityProtocol,
    UnfenceBrokerRecord,
)

# ---------------------------------------------------------------- registration


def test_a_new_broker_registers_fenced_with_the_next_offset_as_epoch() -> None:
    image = MetadataImage.empty().replay([], offset=10)
    records, result = brokers.register_broker(
        image, 1, incarnation(1), "host-1", 9092, "r1", session_alive=False
    )
    assert result == brokers.RegistrationResult(ErrorCode.none, None, 11)
    assert records == [RegisterBrokerRecord(1, incarnation(1), "host-1", 9092, "r1", fenced=True)]
    image = commit(image, records)
    assert image.brokers[1].epoch == 11 and image.brokers[1].fenced


def test_registering_the_same_incarnation_again_is_an_idempotent_retry() -> None:
    image = register(MetadataImage.empty(), 1)
    records, result = brokers.register_broker(
        commit(image, []), 1, incarnation(1), "localhost", 9001, None, session_alive=True
    )
    assert records == []
    assert result.error_code == ErrorCode.none and result.broker_epoch == image.brokers[1].epoch


def test_a_second_live_process_with_the_same_id_is_refused() -> None:
    image = cluster(1)
    records, result = brokers.register_broker(
        image, 1, incarnation(1, 2), "other", 9001, None, session_alive=True
    )
    assert records == [] and result.error_code == ErrorCode.duplicate_broker_registration
    assert result.message == (
        "broker 1 is already registered by a live process; it can register again once the "
        "old session times out (broker.session.timeout.ms)"
    )
    assert result.broker_epoch == -1


def test_a_restarted_broker_replaces_its_expired_registration_and_loses_leadership() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    old_epoch = image.brokers[1].epoch
    records, result = brokers.register_broker(
        image, 1, incarnation(1, 2), "localhost", 9001, None, session_alive=False
    )
    assert result.error_code == ErrorCode.none
    assert records[0] == FenceBrokerRecord(1, old_epoch)
    image = commit(image, records)
    assert image.brokers[1].incarnation_id == incarnation(1, 2)
    assert image.brokers[1].fenced and image.brokers[1].epoch == image.offset
    assert state(image, "t") == (2, (2,))


def test_a_fenced_registration_may_be_replaced_while_its_session_lives() -> None:
    image = register(MetadataImage.empty(), 1)
    records, result = brokers.register_broker(
        image, 1, incarnation(1, 2), "localhost", 9001, None, session_alive=True
    )
    assert result.error_code == ErrorCode.none and len(records) == 1


def test_bad_addresses_are_refused() -> None:
    image = MetadataImage.empty()
    for broker_id, host, port in ((-1, "h", 1), (1, "", 1), (1, "h", 70000)):
        records, result = brokers.register_broker(
            image, broker_id, incarnation(1), host, port, None, session_alive=False
        )
        assert records == [] and result.error_code == ErrorCode.invalid_request
        assert result.message


_PLAIN = BrokerEndpoint("PLAINTEXT", "10.0.0.1", 9092)
_TLS = BrokerEndpoint("SSL", "broker-1.example", 9093, SecurityProtocol.SSL)


def test_a_registration_keeps_every_listener_and_clients_get_their_own() -> None:
    records, result = brokers.register_broker(
        MetadataImage.empty(),
        1,
        incarnation(1),
        "10.0.0.1",
        9092,
        None,
        session_alive=False,
        endpoints=(_PLAIN, _TLS),
    )
    assert result.error_code == ErrorCode.none
    broker = commit(MetadataImage.empty(), records).brokers[1]
    assert broker.endpoints == (_PLAIN, _TLS)
    assert broker.address("SSL") == ("broker-1.example", 9093)
    assert broker.address("PLAINTEXT") == ("10.0.0.1", 9092)
    assert broker.address("EXTERNAL") is None  # Kafka leaves such a broker out
    assert broker.address(None) == ("10.0.0.1", 9092)  # the inter-broker address


def test_a_registration_from_before_listeners_serves_every_listener() -> None:
    broker = register(MetadataImage.empty(), 1).brokers[1]
    assert broker.endpoints == ()
    assert broker.address("SSL") == broker.address("PLAINTEXT") == (broker.host, broker.port)


def test_bad_listeners_are_refused() -> None:
    for endpoints in (
        (_PLAIN, _PLAIN),
        (BrokerEndpoint("", "h", 1),),
        (BrokerEndpoint("SSL", "", 1),),
        (BrokerEndpoint("SSL", "h", 65536),),
    ):
        records, result = brokers.register_broker(
            MetadataImage.empty(),
            1,
            incarnation(1),
            "h",
            1,
            None,
            session_alive=False,
            endpoints=endpoints,
        )
        assert records == [] and result.error_code == ErrorCode.invalid_request
        assert result.message


# ---------------------------------------------------------------- heartbeats


def test_a_fenced_broker_is_unfenced_once_it_caught_up_with_its_registration() -> None:
    image = register(MetadataImage.empty(), 1)
    epoch = image.brokers[1].epoch
    records, result = brokers.broker_heartbeat(
        image, 1, epoch, epoch - 1, False, False, unclean=never
    )
    assert records == []
    assert result == brokers.HeartbeatResult(ErrorCode.none, False, True, False)
    records, result = brokers.broker_heartbeat(image, 1, epoch, epoch, False, False, unclean=never)
    assert records == [UnfenceBrokerRecord(1, epoch)]
    assert result == brokers.HeartbeatResult(ErrorCode.none, True, False, False)
    image = commit(image, records)
    assert image.live_broker_ids() == [1]
    image, result = heartbeat(image, 1)
    assert image.brokers[1].fenced is False and not result.is_fenced and result.is_caught_up


def test_heartbeats_from_unknown_brokers_or_stale_epochs_are_refused() -> None:
    image = cluster(1)
    records, result = brokers.broker_heartbeat(image, 9, 0, 100, False, False, unclean=never)
    assert records == [] and result.error_code == ErrorCode.broker_id_not_registered
    assert result.is_fenced and "broker 9 is not registered" in (result.message or "")
    stale = image.brokers[1].epoch - 1
    records, result = brokers.broker_heartbeat(image, 1, stale, 100, False, False, unclean=never)
    assert records == [] and result.error_code == ErrorCode.stale_broker_epoch
    assert f"sent epoch {stale}" in (result.message or "")


def test_want_fence_fences_and_keeps_fenced() -> None:
    image = cluster(1)
    image, result = heartbeat(image, 1, want_fence=True)
    assert result.is_fenced and not result.should_shutdown and image.brokers[1].fenced
    image, result = heartbeat(image, 1, want_fence=True)
    assert result.is_fenced and image.brokers[1].fenced


def test_controlled_shutdown_moves_leadership_to_live_isr_members_then_fences() -> None:
    image = cluster(1, 2, 3)
    image = create_topic(image, "a", {0: (1, 2, 3), 1: (2, 1, 3)})
    image = create_topic(image, "solo", {0: (1,)})
    image, result = heartbeat(image, 1, want_shutdown=True)
    assert result == brokers.HeartbeatResult(ErrorCode.none, True, True, True)
    assert image.brokers[1].fenced
    assert state(image, "a", 0) == (2, (2, 3))
    assert state(image, "a", 1) == (2, (2, 3))
    assert state(image, "solo") == (-1, (1,))  # nobody else has its data
    assert brokers.partitions_led_by(image, 1) == []
    image, result = heartbeat(image, 1, want_shutdown=True)  # retries change nothing
    assert result.should_shutdown and result.is_fenced


# ---------------------------------------------------------------- producer ids


def test_producer_ids_come_in_blocks_to_current_registrations() -> None:
    image = cluster(1, 2)
    records, first = brokers.allocate_producer_ids(image, 1, image.brokers[1].epoch)
    assert first == brokers.ProducerIdsResult(ErrorCode.none, 0, 1000)
    image = commit(image, records)
    records, second = brokers.allocate_producer_ids(image, 2, image.brokers[2].epoch, 10)
    assert (second.first_id, second.count) == (1000, 10)
    image = commit(image, records)
    assert image.next_producer_id == 1010
    records, stale = brokers.allocate_producer_ids(image, 2, 0)
    assert records == [] and stale.error_code == ErrorCode.stale_broker_epoch
    records, unknown = brokers.allocate_producer_ids(image, 5, 0)
    assert unknown.error_code == ErrorCode.broker_id_not_registered
    records, bad = brokers.allocate_producer_ids(image, 2, image.brokers[2].epoch, 0)
    assert records == [] and bad.error_code == ErrorCode.invalid_request


def test_producer_ids_run_out_with_an_error_not_an_overflow() -> None:
    image = cluster(1)
    records, _ = brokers.allocate_producer_ids(image, 1, image.brokers[1].epoch, 2**63 - 1)
    image = commit(image, records)
    records, result = brokers.allocate_producer_ids(image, 1, image.brokers[1].epoch)
    assert records == [] and result.error_code == ErrorCode.unknown_server_error


# ---------------------------------------------------------------- unregistration


def test_unregistering_fences_first_then_removes() -> None:
    image = create_topic(cluster(1, 2), "t", {0: (1, 2)})
    records, result = brokers.unregister_broker(image, 1)
    assert result.error_code == ErrorCode.none
    image = commit(image, records)
    assert 1 not in image.brokers and state(image, "t") == (2, (2,))
    _, result = brokers.unregister_broker(image, 1)
    assert result.error_code == ErrorCode.broker_id_not_registered


def test_fencing_unknown_or_fenced_brokers_writes_nothing() -> None:
    image = fence(cluster(1, 2), 2)
    assert brokers.fence_brokers(image, [2, 7], unclean=always) == []
