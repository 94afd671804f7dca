"""DescribeTransactions, ListTransactions and DescribeProducers, and the transactional
handlers against hostile request bodies (Hypothesis): every answer is a response with
error codes, read back through the codec at every served version."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from quorum_harness import answered
from server_harness import TOPIC, batch, request, run
from txn_harness import (
    add_offsets,
    add_partitions,
    broker_add_partitions,
    end_txn,
    init_producer_id,
    txn_image,
    txn_node,
)

from strom.protocol.apis import SUPPORTED_APIS, ApiKey
from strom.protocol.codec import encode_response
from strom.protocol.records import NewRecord, encode_batch, validate_batches
from strom.server.handlers import txn_admin
from strom.server.handlers.produce import handle_init_producer_id
from strom.server.handlers.transactions import (
    handle_add_offsets_to_txn,
    handle_add_partitions_to_txn,
    handle_end_txn,
)
from strom.server.handlers.txn_admin import (
    handle_describe_producers,
    handle_describe_transactions,
    handle_list_transactions,
)

E = ErrorCode
TX = "payments"


async def described(context: Any, asked: Any) -> Any:
    """DescribeTransactions' answer as built, once it has encoded: kio refuses to read
    back the start time -1 ("no transaction") that Kafka sends, which Java reads."""
    answer = await handle_describe_transactions(context, asked)
    assert encode_response(7, answer)
    return answer


def describe_transactions(*txn_ids: str) -> Any:
    return request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": txn_ids})


def list_transactions(
    states: tuple[str, ...] = (),
    producer_ids: tuple[int, ...] = (),
    duration_ms: int = -1,
    *,
    version: int = 1,
) -> Any:
    return request(
        ApiKey.LIST_TRANSACTIONS,
        version,
        {
            "state_filters": states,
            "producer_id_filters": producer_ids,
            "duration_filter": duration_ms,
        },
    )


def describe_producers(topic: str, *indexes: int) -> Any:
    return request(
        ApiKey.DESCRIBE_PRODUCERS,
        0,
        {"topics": [{"name": topic, "partition_indexes": indexes}]},
    )


# --- DescribeTransactions ------------------------------------------------------------------


def test_describe_transactions_tells_the_state_of_each_id(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX, (TOPIC, 1), (TOPIC, 0))
        await node.txns.begin("idle")
        node.txns.now_ms += 5
        answer = await described(node.context, describe_transactions(TX, "idle", "gone", ""))
        ongoing, idle, gone, blank = answer.transaction_states
        assert (ongoing.error_code, ongoing.transactional_id, ongoing.transaction_state) == (
            E.none,
            TX,
            "Ongoing",
        )
        assert (ongoing.producer_id, ongoing.producer_epoch) == (producer_id, epoch)
        assert ongoing.transaction_timeout.total_seconds() == 60
        assert ongoing.transaction_start_time.timestamp() * 1000 == node.txns.now_ms - 5
        assert [(t.topic, list(t.partitions)) for t in ongoing.topics] == [(TOPIC, [0, 1])]
        assert (idle.error_code, idle.transaction_state, list(idle.topics)) == (E.none, "Empty", [])
        assert idle.transaction_start_time.timestamp() == -0.001  # -1: no transaction open
        assert gone.error_code == E.transactional_id_not_found
        assert blank.error_code == E.invalid_request
        node.txns.unavailable = E.not_coordinator
        away = await described(node.context, describe_transactions(TX))
        assert away.transaction_states[0].error_code == E.not_coordinator

    run(scenario())
    node.close()


# --- ListTransactions ----------------------------------------------------------------------


def test_list_transactions_filters_by_state_producer_and_duration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = txn_node(tmp_path)
    monkeypatch.setattr(txn_admin, "now_ms", lambda: node.txns.now_ms + 60_001)

    async def scenario() -> None:
        open_id, _ = await node.txns.begin("open", (TOPIC, 0))
        idle_id, _ = await node.txns.begin("idle")

        async def listed(*args: Any, **kwargs: Any) -> tuple[set[tuple[str, int, str]], Any]:
            answer = await answered(
                handle_list_transactions, node.context, list_transactions(*args, **kwargs)
            )
            assert answer.error_code == E.none
            states = answer.transaction_states
            return {(t.transactional_id, t.producer_id, t.transaction_state) for t in states}, (
                answer.unknown_state_filters
            )

        everyone = {("open", open_id, "Ongoing"), ("idle", idle_id, "Empty")}
        assert (await listed())[0] == everyone
        assert await listed(("Ongoing", "Sleeping")) == (
            {("open", open_id, "Ongoing")},
            ("Sleeping",),
        )
        assert (await listed((), (idle_id, 99)))[0] == {("idle", idle_id, "Empty")}
        # v1: only transactions running longer than the duration (an idle id has started
        # at -1, so it always is); v0 has no duration filter
        assert (await listed((), (), 60_001))[0] == {("idle", idle_id, "Empty")}
        assert (await listed((), (), 60_000))[0] == everyone
        assert (await listed((), (), 60_001, version=0))[0] == everyone

    run(scenario())
    node.close()


def test_list_transactions_while_loading_says_so(tmp_path: Path) -> None:
    node = txn_node(tmp_path, unavailable=E.coordinator_load_in_progress)

    async def scenario() -> None:
        answer = await answered(handle_list_transactions, node.context, list_transactions())
        assert (answer.error_code, answer.transaction_states) == (
            E.coordinator_load_in_progress,
            (),
        )

    run(scenario())
    node.close()


# --- DescribeProducers --------------------------------------------------------------------


def test_describe_producers_lists_a_partitions_producers(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(partitions=2))

    def append(producer_id: int, epoch: int, sequence: int, *, transactional: bool) -> None:
        records = encode_batch(
            [NewRecord(key=None, value=b"v")] * 2,
            base_timestamp_ms=1_000 + sequence,
            producer_id=producer_id,
            producer_epoch=epoch,
            base_sequence=sequence,
            is_transactional=transactional,
        )
        batches = validate_batches(records, max_batch_bytes=1 << 20)
        node.at.partition(0).append(batches, now_ms=0)

    async def scenario() -> None:
        append(5, 1, 0, transactional=False)  # offsets 0-1
        append(5, 1, 2, transactional=False)  # 2-3
        append(9, 0, 0, transactional=True)  # 4-5, then its COMMIT marker at 6
        node.at.partition(0).append_marker(9, 0, 4, commit=True, now_ms=0)
        append(7, 0, 0, transactional=True)  # 7-8, still open
        plain = validate_batches(batch(b"plain"), max_batch_bytes=1 << 20)
        node.at.partition(0).append(plain, now_ms=0)
        answer = await answered(
            handle_describe_producers, node.context, describe_producers(TOPIC, 0, 1, 7)
        )
        (topic,) = answer.topics
        first, second, missing = topic.partitions
        assert first.error_code == E.none
        producers = {
            p.producer_id: (
                p.producer_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.coordinator_epoch,
                p.current_txn_start_offset,
            )
            for p in first.active_producers
        }
        assert producers == {
            5: (1, 3, 1_002, -1, -1),
            9: (0, 1, 0, 4, -1),  # the last timestamp is its marker's
            7: (0, 1, 1_000, -1, 7),
        }
        assert (second.error_code, second.active_producers) == (E.none, ())
        assert missing.error_code == E.unknown_topic_or_partition
        nowhere = await answered(
            handle_describe_producers, node.context, describe_producers("nope", 0)
        )
        assert nowhere.topics[0].partitions[0].error_code == E.unknown_topic_or_partition
        bad = await answered(handle_describe_producers, node.context, describe_producers("a/b", 0))
        assert bad.topics[0].partitions[0].error_code == E.invalid_topic_exception

    run(scenario())
    node.close()


def test_describe_producers_of_a_partition_held_elsewhere(tmp_path: Path) -> None:
    node = txn_node(tmp_path, txn_image(replicas=(2,), leader=2))

    async def scenario() -> None:
        answer = await answered(
            handle_describe_producers, node.context, describe_producers(TOPIC, 0)
        )
        assert answer.topics[0].partitions[0].error_code == E.not_leader_or_follower

    run(scenario())
    node.close()


# --- every served version -------------------------------------------------------------------


@pytest.mark.parametrize(
    "api_key",
    [
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN,
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.LIST_TRANSACTIONS,
    ],
    ids=lambda key: ApiKey(key).name,
)
def test_every_served_version_answers_with_its_own_fields(tmp_path: Path, api_key: ApiKey) -> None:
    node = txn_node(tmp_path)

    async def scenario() -> None:
        producer_id, epoch = await node.txns.begin(TX)
        served = SUPPORTED_APIS[api_key]
        for version in range(served.min_version, served.max_version + 1):
            if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
                if version < 4:
                    asked = add_partitions(TX, producer_id, epoch, [(TOPIC, 0)], version=version)
                else:
                    asked = broker_add_partitions(
                        [(TX, producer_id, epoch, [(TOPIC, 0)], True)], version=version
                    )
                answer = await answered(handle_add_partitions_to_txn, node.context, asked)
                has_batches = hasattr(answer, "results_by_transaction")
                assert has_batches is (version >= 4)
                assert hasattr(answer, "results_by_topic_v3_and_below") is (version < 4)
            elif api_key == ApiKey.ADD_OFFSETS_TO_TXN:
                asked = add_offsets(TX, producer_id, epoch, "g", version=version)
                answer = await answered(handle_add_offsets_to_txn, node.context, asked)
                assert answer.error_code == E.none
            elif api_key == ApiKey.END_TXN:
                asked = end_txn(TX, producer_id, epoch + 7, version=version)
                answer = await answered(handle_end_txn, node.context, asked)
                assert hasattr(answer, "producer_id") is (version >= 5)
                assert answer.error_code in (E.producer_fenced, E.invalid_producer_epoch)
            elif api_key == ApiKey.INIT_PRODUCER_ID:
                asked = init_producer_id(f"v{version}", version=version)
                answer = await answered(handle_init_producer_id, node.produce, asked)
                assert (answer.error_code, answer.producer_epoch) == (E.none, 0)
            else:
                asked = list_transactions(("Empty",), version=version)
                answer = await answered(handle_list_transactions, node.context, asked)
                assert [t.transactional_id for t in answer.transaction_states] == [TX]
            assert answer.__version__ == version

    run(scenario())
    node.close()


# --- hostile bodies --------------------------------------------------------------------------

ids = st.text(alphabet="ab-_.\u00e9\U0001f600 ", max_size=6)
producer_ids = st.sampled_from([-1, 0, 999, 1000, 1001, 2**63 - 1, -(2**63)])
epochs = st.sampled_from([-1, 0, 1, 2, 32766, 32767, -32768])
partitions = st.lists(
    st.tuples(st.sampled_from([TOPIC, "nope", "", "__consumer_offsets"]), st.integers(-3, 3)),
    max_size=4,
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    data=st.lists(
        st.tuples(
            st.sampled_from(["init", "add", "broker_add", "offsets", "end", "describe", "list"]),
            ids,
            producer_ids,
            epochs,
            partitions,
            st.integers(0, 5),
            st.booleans(),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_hostile_transactional_requests_get_error_codes(
    tmp_path_factory: pytest.TempPathFactory, data: list[Any]
) -> None:
    node = txn_node(tmp_path_factory.mktemp("hostile"))

    async def scenario() -> None:
        await node.txns.begin(TX, (TOPIC, 0))
        for kind, txn_id, producer_id, epoch, parts, version, flag in data:
            if kind == "init":
                asked = init_producer_id(
                    txn_id,
                    producer_id=producer_id,
                    epoch=epoch,
                    timeout_ms=60_000 if flag else -5,
                    version=min(version, 5),
                )
                answer = await answered(handle_init_producer_id, node.produce, asked)
            elif kind == "add":
                asked = add_partitions(txn_id, producer_id, epoch, parts, version=min(version, 3))
                answer = await answered(handle_add_partitions_to_txn, node.context, asked)
            elif kind == "broker_add":
                asked = broker_add_partitions(
                    [(txn_id, producer_id, epoch, parts, flag), (TX, producer_id, epoch, [], flag)],
                    version=4 + version % 2,
                )
                answer = await answered(handle_add_partitions_to_txn, node.context, asked)
            elif kind == "offsets":
                asked = add_offsets(txn_id, producer_id, epoch, txn_id, version=min(version, 4))
                answer = await answered(handle_add_offsets_to_txn, node.context, asked)
            elif kind == "end":
                asked = end_txn(txn_id, producer_id, epoch, commit=flag, version=version)
                answer = await answered(handle_end_txn, node.context, asked)
            elif kind == "describe":
                asked = describe_transactions(txn_id, TX)
                answer = await described(node.context, asked)
            else:
                asked = list_transactions((txn_id,), (producer_id,), epoch, version=version % 2)
                answer = await answered(handle_list_transactions, node.context, asked)
            assert answer.__version__ == asked.api_version

    try:
        run(scenario())
    finally:
        node.close()
