"""Cluster speed: controller failover, metadata commits per second, creating many topics.

    .venv/bin/python bench/cluster_metadata.py [--nodes 3] [--failovers 5] [--commits 3000]
        [--in-flight 64] [--topics 1000] [--store raft|zookeeper] [--session-ms 18000]
        [--json FILE]

--store zookeeper keeps the metadata in a private ZooKeeper server (Debian's `zookeeper`
package, started as the tests start it) instead of the built-in Raft quorum; the nodes'
zookeeper.session.timeout.ms is --session-ms (Kafka's and strom's default, 18000).

failover: the active controller is killed with SIGKILL; the figure is the time until a
surviving node reports a new active controller (Metadata's controller id), polled every
20 ms, and then until a CreateTopics (replication factor nodes - 1) through a survivor
succeeds. The killed node is
restarted before the next round. Default election timeout (1000 ms) on Raft; on
ZooKeeper the killed controller's /controller znode goes when its session expires.

commits: IncrementalAlterConfigs requests, each changing one topic config (one metadata
record: one Raft entry, or one ZooKeeper multi-op), sent with `--in-flight` requests
outstanding to the active controller's node; the figure is records committed (fsynced on
a majority, or by ZooKeeper) per second.

topics: creating `--topics` topics of 3 partitions (replication factor 3), once as one
CreateTopics request naming them all, once as one request per topic with `--in-flight`
outstanding, each time on a fresh set of names.

Starts its own cluster of combined broker+controller nodes (like `strom dev`) under a
temporary directory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))

from cluster import TestCluster
from zookeeper import metadata_store

from strom.client import ClientError, KafkaConnection
from strom.protocol.apis import ApiKey


async def connect(address: str) -> KafkaConnection:
    host, port = address.rsplit(":", 1)
    return await KafkaConnection.connect(host, int(port), timeout_s=5.0)


async def controller_id(address: str) -> int:
    connection = await connect(address)
    try:
        response = await connection.request(
            ApiKey.METADATA,
            12,
            {
                "topics": [],
                "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False,
            },
            timeout_s=2.0,
        )
        return int(response.controller_id)
    finally:
        connection.close()


async def wait_controller(cluster: TestCluster, exclude: int | None = None) -> int:
    while True:
        for node_id in cluster.node_ids:
            if node_id == exclude:
                continue
            try:
                found = await controller_id(cluster.address(node_id))
            except (OSError, ClientError):
                continue  # that node is down or restarting
            if found > 0 and found != exclude:
                return found
        await asyncio.sleep(0.02)


async def create_topics(
    address: str, names: list[str], *, replication_factor: int = 3, timeout_s: float = 120.0
) -> None:
    connection = await connect(address)
    try:
        response = await connection.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": 3,
                        "replication_factor": replication_factor,
                        "assignments": [],
                        "configs": [],
                    }
                    for name in names
                ],
                "timeout": int(timeout_s * 1000),
                "validate_only": False,
            },
            timeout_s=timeout_s,
        )
    finally:
        connection.close()
    # A forwarded request retried after a controller change may find its topic made.
    errors = [t for t in response.topics if int(t.error_code) not in (0, 36)]
    if errors:
        raise RuntimeError(f"CreateTopics failed: {errors[:3]}")


async def failovers(cluster: TestCluster, rounds: int) -> dict[str, Any]:
    elect_s: list[float] = []
    create_s: list[float] = []
    for round_ in range(rounds):
        leader = await wait_controller(cluster)
        started = time.monotonic()
        cluster.kill(leader)
        new = await wait_controller(cluster, exclude=leader)
        elect_s.append(time.monotonic() - started)
        survivor = next(n for n in cluster.node_ids if n != leader)
        # One replica fewer than nodes: on ZooKeeper the killed node's registration goes
        # with its session, so the new controller places replicas on the survivors only.
        await create_topics(
            cluster.address(survivor),
            [f"failover-{round_}"],
            replication_factor=len(cluster.node_ids) - 1,
        )
        create_s.append(time.monotonic() - started)
        print(
            f"failover {round_ + 1}: controller {leader} killed, node {new} active after "
            f"{elect_s[-1]:.2f} s, a topic created after {create_s[-1]:.2f} s",
            flush=True,
        )
        cluster.start(leader)
    return {
        "elect_s": elect_s,
        "elect_median_s": statistics.median(elect_s),
        "create_median_s": statistics.median(create_s),
    }


async def commits(cluster: TestCluster, total: int, in_flight: int) -> dict[str, Any]:
    leader = await wait_controller(cluster)
    address = cluster.address(leader)
    await create_topics(address, ["commit-bench"])
    connection = await connect(address)
    semaphore = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with semaphore:
            response = await connection.request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                1,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": "commit-bench",
                            "configs": [
                                {
                                    "name": "retention.ms",
                                    "config_operation": 0,
                                    "value": str(3_600_000 + i),
                                }
                            ],
                        }
                    ],
                    "validate_only": False,
                },
                timeout_s=60.0,
            )
            assert int(response.responses[0].error_code) == 0, response

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(total)))
    elapsed = time.monotonic() - started
    connection.close()
    rate = total / elapsed
    print(
        f"commits: {total} config records in {elapsed:.2f} s = {rate:,.0f} records/s "
        f"({in_flight} in flight)",
        flush=True,
    )
    return {"records": total, "seconds": elapsed, "records_per_s": rate}


async def many_topics(cluster: TestCluster, count: int, in_flight: int) -> dict[str, Any]:
    leader = await wait_controller(cluster)
    follower = next(n for n in cluster.node_ids if n != leader)
    started = time.monotonic()
    await create_topics(cluster.address(follower), [f"bulk-{i}" for i in range(count)])
    one_request_s = time.monotonic() - started
    print(f"topics: {count} x 3 partitions in one request: {one_request_s:.2f} s", flush=True)

    semaphore = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        async with semaphore:
            await create_topics(cluster.address(follower), [f"single-{i}"])

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    each_s = time.monotonic() - started
    print(
        f"topics: {count} x 3 partitions, one request each ({in_flight} in flight): {each_s:.2f} s",
        flush=True,
    )
    return {"one_request_s": one_request_s, "one_per_topic_s": each_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--commits", type=int, default=3000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--topics", type=int, default=1000)
    parser.add_argument("--store", choices=("raft", "zookeeper"), default="raft")
    parser.add_argument("--session-ms", type=int, default=18000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, Any] = {"store": args.store}
    root = Path(tempfile.mkdtemp(prefix="strom-bench-cluster-"))
    try:
        with metadata_store(args.store, root, args.session_ms) as (zookeeper, settings):
            cluster = TestCluster(
                root / "cluster",
                args.nodes,
                settings=["default.replication.factor=3", *settings],
                zookeeper=zookeeper,
            )
            try:
                cluster.start_all()
                print(f"{args.nodes} nodes, metadata in {zookeeper or 'the Raft quorum'}")
                if args.failovers > 0:  # 0 leaves a phase out
                    results["failover"] = asyncio.run(failovers(cluster, args.failovers))
                if args.commits > 0:
                    results["commits"] = asyncio.run(commits(cluster, args.commits, args.in_flight))
                if args.topics > 0:
                    results["topics"] = asyncio.run(
                        many_topics(cluster, args.topics, args.in_flight)
                    )
            finally:
                cluster.close()
    except BaseException:
        print(f"the nodes' logs are kept in {root}", file=sys.stderr)
        raise
    shutil.rmtree(root, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
