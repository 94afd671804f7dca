"""`strom txn`: what it makes of the transactional admin APIs' answers, without a broker."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Mapping
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from kio.serial import entity_writer
from typer.testing import CliRunner

from strom.cli.common import CommandError
from strom.cli.main import app
from strom.cli.txn import (
    DESCRIBE_TRANSACTIONS,
    FIND_COORDINATOR,
    LIST_TRANSACTIONS,
    METADATA,
    describe_transaction,
    list_everywhere,
)
from strom.cli.txn_model import (
    STATE_NAMES,
    AbortSpec,
    BrokerAddress,
    CoordinatorMoved,
    ProducerInfo,
    TxnDescription,
    TxnListing,
    abort_spec,
    coordinator_from,
    description_from,
    description_lines,
    format_duration_ms,
    format_time_ms,
    list_rows,
    listings_from,
    marker_errors,
    parse_state,
    parse_states,
    partition_leader,
    producer_rows,
    producers_from,
)
from strom.client import build_request
from strom.client.codec import decode_response, encode_request
from strom.protocol.codec import build_response
from strom.txn.state import TxnState

runner = CliRunner()
NOW_MS = 1_700_000_000_000
COORDINATOR = BrokerAddress(2, "10.0.0.2", 9092)


def test_state_names_are_the_coordinators() -> None:
    assert tuple(state.wire_name for state in TxnState) == STATE_NAMES


@pytest.mark.parametrize(
    ("typed", "name"),
    [
        ("Ongoing", "Ongoing"),
        ("ongoing", "Ongoing"),
        ("prepare-commit", "PrepareCommit"),
        ("COMPLETE_ABORT", "CompleteAbort"),
        (" empty ", "Empty"),
    ],
)
def test_states_are_read_as_kafka_spells_them(typed: str, name: str) -> None:
    assert parse_state(typed) == name


def test_unknown_states_are_usage_errors_listing_the_known_ones() -> None:
    with pytest.raises(CommandError) as caught:
        parse_states(["Ongoing", "Running"])
    assert caught.value.exit_code == 2
    assert "unknown transaction state 'Running'" in caught.value.message
    assert "PrepareEpochFence" in caught.value.message
    assert parse_states(["ongoing", "Ongoing", "Empty"]) == ["Ongoing", "Empty"]


def list_answer(*listed: tuple[str, int, str], error: ErrorCode = ErrorCode.none) -> Any:
    return build_response(
        66,
        1,
        {
            "throttle_time": 0,
            "error_code": error,
            "unknown_state_filters": [],
            "transaction_states": [
                {"transactional_id": t, "producer_id": p, "transaction_state": s}
                for t, p, s in listed
            ],
        },
    )


def test_listings_and_their_rows() -> None:
    one = listings_from(list_answer(("b", 7, "Ongoing"), ("a", 3, "Empty")), 1)
    two = listings_from(list_answer(("c", 9, "PrepareAbort")), 2)
    assert one[0] == TxnListing("b", 1, 7, "Ongoing")
    assert list_rows(one + two) == [
        ("a", "1", "3", "Empty"),
        ("b", "1", "7", "Ongoing"),
        ("c", "2", "9", "PrepareAbort"),
    ]
    with pytest.raises(CommandError, match="ListTransactions: COORDINATOR_LOAD_IN_PROGRESS"):
        listings_from(list_answer(error=ErrorCode.coordinator_load_in_progress), 1)


def describe_answer(
    txn_id: str, start_ms: int, error: ErrorCode = ErrorCode.none, version_wire: bool = True
) -> Any:
    built = build_response(
        65,
        0,
        {
            "throttle_time": 0,
            "transaction_states": [
                {
                    "error_code": error,
                    "transactional_id": txn_id,
                    "transaction_state": "Ongoing",
                    "transaction_timeout": 60_000,
                    "transaction_start_time": start_ms,
                    "producer_id": 4000,
                    "producer_epoch": 3,
                    "topics": [
                        {"topic": "t", "partitions": [1, 0]},
                        {"topic": "a", "partitions": [2]},
                    ],
                }
            ],
        },
    )
    if not version_wire:
        return built
    # As strom's client reads it off the wire (start time as int, -1 allowed).
    buffer = io.BytesIO()
    buffer.write(b"\0\0\0\1\0")  # response header v1: correlation id, no tagged fields
    entity_writer(type(built))(buffer, built)
    return decode_response(65, 0, buffer.getvalue())


@pytest.mark.parametrize("version_wire", [True, False])
def test_a_description_from_the_wire_with_or_without_an_open_transaction(
    version_wire: bool,
) -> None:
    open_one = description_from(
        describe_answer("x", NOW_MS - 4200, version_wire=version_wire), COORDINATOR, "x"
    )
    assert open_one == TxnDescription(
        transactional_id="x",
        coordinator=COORDINATOR,
        state="Ongoing",
        producer_id=4000,
        producer_epoch=3,
        timeout_ms=60_000,
        start_ms=NOW_MS - 4200,
        partitions=(("a", 2), ("t", 0), ("t", 1)),
    )
    assert description_lines(open_one, NOW_MS) == [
        "Transactional id:  x",
        "Coordinator:       node 2 (10.0.0.2:9092)",
        "State:             Ongoing",
        "Producer id:       4000",
        "Producer epoch:    3",
        "Timeout:           60000 ms",
        "Started:           2023-11-14T22:13:15.800Z (4.2 s ago)",
        "Partitions:        3",
    ]
    idle = description_from(describe_answer("x", -1, version_wire=version_wire), COORDINATOR, "x")
    assert idle.start_ms == -1
    assert "Started:           -" in description_lines(idle, NOW_MS)


def test_description_errors() -> None:
    unknown = describe_answer("gone", -1, ErrorCode.transactional_id_not_found)
    with pytest.raises(CommandError, match=r"^transactional id 'gone' does not exist$"):
        description_from(unknown, COORDINATOR, "gone")
    moved = describe_answer("x", -1, ErrorCode.not_coordinator)
    with pytest.raises(CoordinatorMoved, match="NOT_COORDINATOR"):
        description_from(moved, COORDINATOR, "x")


def find_answer(version: int, error: ErrorCode = ErrorCode.none) -> Any:
    node = {
        "node_id": 2,
        "host": "10.0.0.2",
        "port": 9092,
        "error_code": error,
        "error_message": None,
    }
    return build_response(
        10, version, {"throttle_time": 0, **node, "coordinators": [{"key": "x", **node}]}
    )


@pytest.mark.parametrize("version", [1, 3, 4, 6])
def test_the_coordinator_of_either_form_of_find_coordinator(version: int) -> None:
    assert coordinator_from(find_answer(version), "x") == COORDINATOR
    with pytest.raises(CoordinatorMoved, match="COORDINATOR_NOT_AVAILABLE"):
        coordinator_from(find_answer(version, ErrorCode.coordinator_not_available), "x")


def metadata_answer(partitions: int, leader: int = 1, error: ErrorCode = ErrorCode.none) -> Any:
    return build_response(
        3,
        12,
        {
            "throttle_time": 0,
            "brokers": [
                {"node_id": 2, "host": "h2", "port": 2, "rack": None},
                {"node_id": 1, "host": "h1", "port": 1, "rack": None},
            ],
            "cluster_id": "c",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": error,
                    "name": "t",
                    "topic_id": None,
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": i,
                            "leader_id": leader,
                            "leader_epoch": 0,
                            "replica_nodes": [1],
                            "isr_nodes": [1],
                            "offline_replicas": [],
                        }
                        for i in range(partitions)
                    ],
                    "topic_authorized_operations": -2147483648,
                }
            ],
        },
    )


def test_partition_leaders_and_why_there_is_none() -> None:
    assert partition_leader(metadata_answer(2, leader=2), "t", 1) == 2
    with pytest.raises(CommandError, match=r"has no partition 5 \(it has 2: 0-1\)"):
        partition_leader(metadata_answer(2), "t", 5)
    with pytest.raises(CommandError, match="t-0 has no leader now"):
        partition_leader(metadata_answer(1, leader=-1), "t", 0)
    with pytest.raises(CommandError, match=r"^topic 't' does not exist$"):
        partition_leader(metadata_answer(0, error=ErrorCode.unknown_topic_or_partition), "t", 0)
    with pytest.raises(CommandError, match=r"^topic 'u' does not exist$"):
        partition_leader(metadata_answer(1), "u", 0)


def producers_answer(*producers: tuple[int, int, int], error: ErrorCode = ErrorCode.none) -> Any:
    """(producer id, coordinator epoch, transaction start offset) each."""
    return build_response(
        61,
        0,
        {
            "throttle_time": 0,
            "topics": [
                {
                    "name": "t",
                    "partitions": [
                        {
                            "partition_index": 0,
                            "error_code": error,
                            "error_message": None,
                            "active_producers": [
                                {
                                    "producer_id": p,
                                    "producer_epoch": 1,
                                    "last_sequence": 9,
                                    "last_timestamp": NOW_MS,
                                    "coordinator_epoch": c,
                                    "current_txn_start_offset": s,
                                }
                                for p, c, s in producers
                            ],
                        }
                    ],
                }
            ],
        },
    )


def test_producers_and_their_rows() -> None:
    found = producers_from(producers_answer((8, -1, 40), (5, 2, -1)), "t", 0, "broker 1")
    assert found[0] == ProducerInfo(8, 1, 9, NOW_MS, -1, 40)
    assert producer_rows(found) == [
        ("5", "1", "9", "2023-11-14T22:13:20.000Z", "2", "-"),
        ("8", "1", "9", "2023-11-14T22:13:20.000Z", "-", "40"),
    ]
    refused = producers_answer(error=ErrorCode.not_leader_or_follower)
    with pytest.raises(CommandError, match="t-0 at broker 1: NOT_LEADER_OR_FOLLOWER"):
        producers_from(refused, "t", 0, "broker 1")


def test_the_abort_takes_the_producer_whose_transaction_starts_there() -> None:
    producers = producers_from(producers_answer((8, -1, 40), (5, 2, 12), (6, 3, -1)), "t", 0, "b")
    assert abort_spec(producers, "t", 0, 12) == AbortSpec("t", 0, 5, 1, 2, 12)
    # No marker seen yet (-1): sent as 0, as Kafka's tool does.
    assert abort_spec(producers, "t", 0, 40).coordinator_epoch == 0
    with pytest.raises(
        CommandError, match=r"offset 13 on t-0 \(open transactions start at 12, 40\)"
    ):
        abort_spec(producers, "t", 0, 13)
    with pytest.raises(CommandError, match=r"\(no transaction is open there\)"):
        abort_spec([], "t", 0, 13)


def test_the_abort_is_one_abort_marker_for_the_one_partition() -> None:
    request = build_request(27, 1, AbortSpec("t", 3, 5, 1, 2, 12).request())
    (marker,) = request.markers
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (5, 1, 2)
    assert marker.transaction_result is False
    assert [(t.name, list(t.partition_indexes)) for t in marker.topics] == [("t", [3])]
    encode_request(27, 1, 1, request, client_id="strom-cli")  # kio accepts every field


def test_refused_markers_are_named() -> None:
    def answer(error: ErrorCode) -> Any:
        return build_response(
            27,
            1,
            {
                "markers": [
                    {
                        "producer_id": 5,
                        "topics": [
                            {
                                "name": "t",
                                "partitions": [{"partition_index": 3, "error_code": error}],
                            }
                        ],
                    }
                ]
            },
        )

    assert marker_errors(answer(ErrorCode.none)) == []
    assert marker_errors(answer(ErrorCode.invalid_producer_epoch)) == [
        "t-3: INVALID_PRODUCER_EPOCH"
    ]


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "0 ms"),
        (999, "999 ms"),
        (4200, "4.2 s"),
        (125_000, "2 min 5 s"),
        (7_500_000, "2 h 5 min"),
    ],
)
def test_durations(ms: int, text: str) -> None:
    assert format_duration_ms(ms) == text


def test_times() -> None:
    assert format_time_ms(-1) == "-"
    assert format_time_ms(NOW_MS + 7) == "2023-11-14T22:13:20.007Z"


# --- the calls, with fake sessions ----------------------------------------------------------


class FakeSession:
    def __init__(self, answers: Mapping[int, Any]) -> None:
        self.answers = {k: list(v) if isinstance(v, list) else [v] for k, v in answers.items()}
        self.asked: list[tuple[int, dict[str, Any], dict[str, Any]]] = []

    async def call(
        self, api_key: int, name: str, fields: Mapping[str, Any], **bounds: int | None
    ) -> tuple[int, Any]:
        self.asked.append((api_key, dict(fields), bounds))
        queue = self.answers[api_key]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer.__version__, answer


class FakeCluster:
    timeout_s = 1.0

    def __init__(self, bootstrap: FakeSession, brokers: Mapping[int, FakeSession]) -> None:
        self.bootstrap = bootstrap
        self.brokers = brokers

    async def metadata(self, topic: str | None = None) -> Any:
        _, answer = await self.bootstrap.call(METADATA, "Metadata", {})
        return answer

    def session(self, broker: BrokerAddress) -> FakeSession:
        return self.brokers[broker.node_id]


def test_list_asks_every_broker_and_says_which_did_not_answer() -> None:
    one = FakeSession({LIST_TRANSACTIONS: list_answer(("a", 3, "Ongoing"))})
    two = FakeSession(
        {LIST_TRANSACTIONS: CommandError("cannot reach a broker at h2:2 (connection refused)", 3)}
    )
    cluster = FakeCluster(FakeSession({METADATA: metadata_answer(1)}), {1: one, 2: two})
    listings, notes, failures = asyncio.run(
        list_everywhere(cluster, ["Ongoing"], [3], 5000)  # type: ignore[arg-type]
    )
    assert listings == [TxnListing("a", 1, 3, "Ongoing")]
    assert failures == ["broker 2 (h2:2): cannot reach a broker at h2:2 (connection refused)"]
    assert notes == []
    (asked,) = one.asked
    assert asked[1] == {
        "state_filters": ["Ongoing"],
        "producer_id_filters": [3],
        "duration_filter": 5000,
    }
    assert asked[2]["min_version"] == 1  # a duration filter needs v1


def test_describe_asks_again_while_the_coordinator_moves() -> None:
    bootstrap = FakeSession(
        {FIND_COORDINATOR: [find_answer(4, ErrorCode.coordinator_not_available), find_answer(4)]}
    )
    coordinator = FakeSession({DESCRIBE_TRANSACTIONS: describe_answer("x", NOW_MS)})
    cluster = FakeCluster(bootstrap, {2: coordinator})
    found = asyncio.run(describe_transaction(cluster, "x"))  # type: ignore[arg-type]
    assert found.coordinator == COORDINATOR and found.start_ms == NOW_MS
    assert [a[1]["key_type"] for a in bootstrap.asked] == [1, 1]


def test_usage_errors_exit_2() -> None:
    bad_state = runner.invoke(app, ["txn", "list", "--state", "nope"])
    assert bad_state.exit_code == 2
    assert bad_state.stderr.startswith("strom: --state: unknown transaction state 'nope'")
    empty = runner.invoke(app, ["txn", "describe", "--transactional-id", ""])
    assert (empty.exit_code, empty.stderr) == (2, "strom: --transactional-id must not be empty\n")
    negative = runner.invoke(
        app, ["txn", "abort", "--topic", "t", "--partition", "-1", "--start-offset", "0"]
    )
    assert negative.exit_code == 2
