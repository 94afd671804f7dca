"""`strom cluster status`: what it makes of DescribeCluster and DescribeQuorum answers."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from kio.schema.errors import ErrorCode
from typer.testing import CliRunner

from strom.cli.cluster import (
    DESCRIBE_CLUSTER,
    DESCRIBE_CONFIGS,
    DESCRIBE_QUORUM,
    BrokerState,
    ClusterStatus,
    MemberRole,
    QuorumError,
    broker_rows,
    brokers_from,
    fetch_status,
    format_ago,
    print_status,
    quorum_from,
    quorum_rows,
)
from strom.cli.common import CommandError
from strom.cli.main import app
from strom.protocol.codec import build_response

NOW_MS = 1_700_000_000_000
runner = CliRunner()


def voter(node_id: int, log_end: int, contact_ms_ago: int | None) -> dict[str, Any]:
    contact = -1 if contact_ms_ago is None else NOW_MS - contact_ms_ago
    return {
        "replica_id": node_id,
        "replica_directory_id": None,
        "log_end_offset": log_end,
        "last_fetch_timestamp": contact,
        "last_caught_up_timestamp": contact,
    }


def quorum_response(
    *,
    leader: int = 2,
    high_watermark: int = 120,
    voters: list[dict[str, Any]] | None = None,
    observers: list[dict[str, Any]] | None = None,
    error: ErrorCode = ErrorCode.none,
    partition_error: ErrorCode = ErrorCode.none,
    version: int = 2,
) -> Any:
    if voters is None:
        voters = [voter(1, 120, 150), voter(2, 121, 0), voter(3, 100, 4200)]
    partition = {
        "partition_index": 0,
        "error_code": partition_error,
        "error_message": "no leader yet" if partition_error else None,
        "leader_id": leader,
        "leader_epoch": 7,
        "high_watermark": high_watermark,
        "current_voters": voters,
        "observers": observers or [],
    }
    nodes = [
        {"node_id": i, "listeners": [{"name": "CONTROLLER", "host": "127.0.0.1", "port": 9191 + i}]}
        for i in (1, 2, 3)
    ]
    return build_response(
        DESCRIBE_QUORUM,
        version,
        {
            "error_code": error,
            "error_message": "not the controller" if error else None,
            "topics": [{"topic_name": "__cluster_metadata", "partitions": [partition]}],
            "nodes": nodes,
        },
    )


def cluster_response(fenced: set[int], version: int = 2, controller: int = 2) -> Any:
    return build_response(
        DESCRIBE_CLUSTER,
        version,
        {
            "throttle_time": 0,
            "error_code": ErrorCode.none,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": "q1Sh-9_ISia_zwGINzRvyQ",
            "controller_id": controller,
            "brokers": [
                {
                    "broker_id": i,
                    "host": "127.0.0.1",
                    "port": 9091 + i,
                    "rack": "r1" if i == 1 else None,
                    "is_fenced": i in fenced,
                }
                for i in (3, 1, 2)
            ],
            "cluster_authorized_operations": -(2**31),
        },
    )


def configs_response(name: str | None, zookeeper: str | None = None) -> Any:
    configs = []
    for key, value in (("cluster.name", name), ("zookeeper.connect", zookeeper)):
        if value is None:
            continue
        configs.append(
            {
                "name": key,
                "value": value,
                "read_only": False,
                "config_source": 5,
                "is_default": True,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": 0,
                "documentation": None,
            }
        )
    return build_response(
        DESCRIBE_CONFIGS,
        4,
        {
            "throttle_time": 0,
            "results": [
                {
                    "error_code": ErrorCode.none,
                    "error_message": None,
                    "resource_type": 4,
                    "resource_name": "1",
                    "configs": configs,
                }
            ],
        },
    )


def test_quorum_members_with_lag_behind_the_high_watermark_and_last_contact() -> None:
    quorum = quorum_from(quorum_response(), NOW_MS)
    assert (quorum.leader_id, quorum.leader_epoch, quorum.high_watermark) == (2, 7, 120)
    assert quorum_rows(quorum) == [
        ("1", "follower", "127.0.0.1:9192", "120", "0", "150 ms ago"),
        ("2", "leader", "127.0.0.1:9193", "121", "0", "0 ms ago"),
        ("3", "follower", "127.0.0.1:9194", "100", "20", "4.2 s ago"),
    ]


def test_unknown_offsets_and_contacts_and_observers() -> None:
    answer = quorum_response(
        leader=-1,
        voters=[voter(1, -1, None)],
        observers=[voter(4, 90, 61_000)],
        version=1,
    )
    quorum = quorum_from(answer, NOW_MS)
    assert quorum.leader_id is None
    assert [m.role for m in quorum.members] == [MemberRole.FOLLOWER, MemberRole.OBSERVER]
    assert quorum_rows(quorum) == [
        ("1", "follower", "-", "-", "-", "-"),  # v1 has no node addresses
        ("4", "observer", "-", "90", "30", "1 min ago"),
    ]


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (
            quorum_response(error=ErrorCode.not_controller),
            "DescribeQuorum: NOT_CONTROLLER: not the controller",
        ),
        (
            quorum_response(partition_error=ErrorCode.leader_not_available),
            "DescribeQuorum: LEADER_NOT_AVAILABLE: no leader yet",
        ),
    ],
)
def test_quorum_errors_are_named(answer: Any, message: str) -> None:
    with pytest.raises(QuorumError) as caught:
        quorum_from(answer, NOW_MS)
    assert str(caught.value) == message


def test_brokers_sorted_with_fenced_state() -> None:
    brokers = brokers_from(cluster_response(fenced={3}), fenced_known=True)
    assert broker_rows(brokers) == [
        ("1", "127.0.0.1:9092", "r1", "live"),
        ("2", "127.0.0.1:9093", "-", "live"),
        ("3", "127.0.0.1:9094", "-", "fenced"),
    ]
    older = brokers_from(cluster_response(fenced=set(), version=1), fenced_known=False)
    assert {row[-1] for row in broker_rows(older)} == {"unfenced"}


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (None, "-"),
        (0, "0 ms ago"),
        (999, "999 ms ago"),
        (1000, "1.0 s ago"),
        (7_300_000, "2 h ago"),
    ],
)
def test_format_ago(ms: int | None, text: str) -> None:
    assert format_ago(ms) == text


class FakeSession:
    """Answers calls from a table; records what was asked."""

    def __init__(self, answers: Mapping[int, Any], address: tuple[str, int]) -> None:
        self.answers = dict(answers)
        self.address: tuple[str, int] | None = address
        self.asked: list[tuple[int, dict[str, Any]]] = []

    async def call(
        self, api_key: int, name: str, fields: Mapping[str, Any], **bounds: int | None
    ) -> tuple[int, Any]:
        self.asked.append((api_key, dict(fields)))
        answer = self.answers[api_key]
        if isinstance(answer, Exception):
            raise answer
        return answer.__version__, answer


def test_status_asks_for_fenced_brokers_and_the_answering_brokers_name() -> None:
    session = FakeSession(
        {
            DESCRIBE_CLUSTER: cluster_response(fenced={3}),
            DESCRIBE_QUORUM: quorum_response(),
            DESCRIBE_CONFIGS: configs_response("orders-prod"),
        },
        address=("127.0.0.1", 9093),
    )
    status = asyncio.run(fetch_status(session))  # type: ignore[arg-type]
    assert session.asked[0][1]["include_fenced_brokers"] is True
    [resource] = session.asked[1][1]["resources"]
    assert (resource["resource_name"], resource["configuration_keys"]) == (
        "2",
        ["cluster.name", "zookeeper.connect"],
    )
    assert status.cluster_name == "orders-prod"
    assert status.controller_id == 2
    assert status.quorum is not None and status.quorum_error is None
    assert [b.fenced for b in status.brokers] == [False, False, True]


def test_status_without_quorum_or_name_still_shows_the_brokers() -> None:
    session = FakeSession(
        {
            DESCRIBE_CLUSTER: cluster_response(fenced=set(), controller=-1),
            DESCRIBE_QUORUM: CommandError("DescribeQuorum: the broker cannot"),
            DESCRIBE_CONFIGS: configs_response(None),
        },
        address=("localhost", 9092),  # not an advertised address: ask with ""
    )
    status = asyncio.run(fetch_status(session))  # type: ignore[arg-type]
    assert session.asked[1][1]["resources"][0]["resource_name"] == ""
    assert status.quorum is None and status.quorum_error == "DescribeQuorum: the broker cannot"
    assert status.cluster_name is None and status.controller_id is None


def test_a_zookeeper_cluster_shows_its_ensemble_and_asks_for_no_quorum(
    capsys: pytest.CaptureFixture[str],
) -> None:
    session = FakeSession(
        {
            DESCRIBE_CLUSTER: cluster_response(fenced=set()),
            DESCRIBE_CONFIGS: configs_response("strom", zookeeper="zk1:2181,zk2:2181/strom"),
        },
        address=("127.0.0.1", 9092),
    )
    status = asyncio.run(fetch_status(session))  # type: ignore[arg-type]
    assert [api for api, _ in session.asked] == [DESCRIBE_CLUSTER, DESCRIBE_CONFIGS]
    assert (status.zookeeper, status.quorum, status.quorum_error) == (
        "zk1:2181,zk2:2181/strom",
        None,
        None,
    )
    print_status(status)
    assert capsys.readouterr().out.splitlines()[:5] == [
        "Cluster id:    q1Sh-9_ISia_zwGINzRvyQ",
        "Cluster name:  strom",
        "Controller:    node 2",
        "Metadata:      ZooKeeper zk1:2181,zk2:2181/strom",
        "",
    ]


def test_printed_status(capsys: pytest.CaptureFixture[str]) -> None:
    status = ClusterStatus(
        cluster_id="q1Sh",
        cluster_name="strom",
        controller_id=2,
        brokers=(BrokerState(1, "127.0.0.1:9092", None, False),),
        quorum=quorum_from(quorum_response(), NOW_MS),
        quorum_error=None,
    )
    print_status(status)
    assert capsys.readouterr().out == (
        "Cluster id:    q1Sh\n"
        "Cluster name:  strom\n"
        "Controller:    node 2\n"
        "\n"
        "Controller quorum: 3 voters, leader node 2, leader epoch 7, high watermark 120\n"
        "\n"
        "NODE   ROLE       CONTROLLER ADDRESS   LOG END OFFSET   LAG   LAST CONTACT\n"
        "1      follower   127.0.0.1:9192       120              0     150 ms ago\n"
        "2      leader     127.0.0.1:9193       121              0     0 ms ago\n"
        "3      follower   127.0.0.1:9194       100              20    4.2 s ago\n"
        "\n"
        "Brokers: 1 live, 0 fenced\n"
        "\n"
        "NODE   ADDRESS          RACK   STATE\n"
        "1      127.0.0.1:9092   -      live\n"
    )


@pytest.mark.parametrize(
    ("bootstrap", "message"),
    [
        (" ", "strom: --bootstrap-server must not be empty\n"),
        ("nohost", "strom: invalid value 'nohost' for '--bootstrap-server'"),
    ],
)
def test_status_refuses_a_bad_bootstrap_before_connecting(bootstrap: str, message: str) -> None:
    result = runner.invoke(app, ["cluster", "status", "-b", bootstrap])
    assert result.exit_code == 2
    assert result.stderr.startswith(message)


def test_sizes_in_decimal_units() -> None:
    from strom.cli.cluster import format_bytes

    assert [format_bytes(n) for n in (-1, 0, 999, 1000, 1_234_567, 80_044_482_560)] == [
        "-",
        "0 B",
        "999 B",
        "1.0 kB",
        "1.2 MB",
        "80.0 GB",
    ]
    assert format_bytes(5 * 10**15) == "5000.0 TB"


def test_log_dir_rows_from_a_describe_log_dirs_answer() -> None:
    from types import SimpleNamespace as N

    from strom.cli.cluster import log_dir_rows

    def part(index: int, size: int, lag: int = 0) -> N:
        return N(partition_index=index, partition_size=size, offset_lag=lag)

    answer = N(
        results=[
            N(
                error_code=0,
                log_dir="/data",
                total_bytes=10_000_000,
                usable_bytes=2_500_000,
                topics=[
                    N(name="b", partitions=[part(1, 500, 3), part(0, 1500)]),
                    N(name="a", partitions=[part(0, 0)]),
                ],
            ),
            N(error_code=ErrorCode.kafka_storage_error, log_dir="/broken", topics=[]),
        ]
    )
    rows, lines = log_dir_rows(2, answer)
    assert rows == [
        ("2", "/data", "a", "0", "0 B", "0"),
        ("2", "/data", "b", "0", "1.5 kB", "0"),
        ("2", "/data", "b", "1", "500 B", "3"),
    ]
    assert lines == [
        "broker 2: /data: 2.0 kB in partitions, 2.5 MB free of 10.0 MB",
        "broker 2: /broken: KAFKA_STORAGE_ERROR",
    ]
