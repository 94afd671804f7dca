"""Partition replication under network partitions: every node (and ZooKeeper) in a
network namespace of its own, the network between them cut on a seeded schedule while
the clients, in the root namespace, still reach every node (network.py, docs/
fault-testing.md). Besides the history checks of test_faults.py, every partition with
enough live replicas must take an acks=all write within 15 s of each heal (recovery.py).

The cuts of a leader or the controller, and the quiet partition, run on both metadata
stores; the four longest mixes run on one each (split_one_two and cut_and_kill on
ZooKeeper, bridge and flapping on Raft; STROM_FAULT_ALL_STORES=1 runs them on both). They
skip where namespaces cannot be made (not root).

.venv/bin/pytest tests/fault/test_network_faults.py                   # all of them, ~7 min
STROM_FAULT_SEED=5 .venv/bin/pytest tests/fault -k "flapping and raft"
.venv/bin/python -m tests.fault.soak --network --minutes 10 --seed 7  # the long run
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from cluster import ClusterTimeout, TestCluster
from confluent_kafka import KafkaError, Producer

from .cluster_view import (
    PartitionView,
    active_controller,
    freshest,
    topic_views,
    zookeeper_controller,
)
from .clusters import started_cluster
from .runner import (
    DEFAULT_SETTINGS,
    FAST_FAILBACK,
    create_topic,
    seconds_from_env,
    seed_from_env,
    with_setting,
)
from .schedule import bridge, cut_and_kill, cut_controller, cut_leader, flapping, split_one_two
from .test_faults import run, scenario, stores
from .topology import WHOLE, ZOOKEEPER, isolate

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("network_faults")]


def test_cut_leader(tmp_path: Path, store: str) -> None:
    """The leader of partition 0 cut from the other nodes for 5-15 s (seeded); the clients
    and ZooKeeper still reach it. On Raft it is fenced and replaced; on ZooKeeper it keeps
    its session and its partitions, which cannot reach min.insync.replicas meanwhile."""
    schedule = cut_leader(times=1, partition=0, seed=seed_from_env(21))
    run(scenario("test_cut_leader", schedule, store), tmp_path)


def test_cut_controller(tmp_path: Path, store: str) -> None:
    """The active controller cut from the other nodes and from ZooKeeper for 8 s: its
    session expires (or it loses the Raft quorum), another node takes over and fences
    it; after the heal it must rejoin and every partition take writes again."""
    schedule = cut_controller(times=1, seed=seed_from_env(22))
    run(scenario("test_cut_controller", schedule, store), tmp_path)


@stores("zookeeper")
def test_split_one_two(tmp_path: Path, store: str) -> None:
    """A random node split from the other two, twice; on ZooKeeper, ZooKeeper is with the
    two the first time and with the lone node the second."""
    schedule = split_one_two(times=2, seed=seed_from_env(23))
    run(scenario("test_split_one_two", schedule, store), tmp_path)


@stores("raft")
def test_bridge(tmp_path: Path, store: str) -> None:
    """A follower of partition 0 as the only link between the two other nodes (the
    leader of partition 0 is one of them) for 10 s."""
    schedule = bridge(times=1, partition=0, seed=seed_from_env(24))
    run(scenario("test_bridge", schedule, store), tmp_path)


@stores("raft")
def test_flapping(tmp_path: Path, store: str) -> None:
    """A new random topology every 1-4 s for 20 s (STROM_FAULT_SECONDS)."""
    schedule = flapping(seconds_from_env(20.0), seed=seed_from_env(25))
    run(scenario("test_flapping", schedule, store), tmp_path)


@stores("zookeeper")
def test_cut_and_kill(tmp_path: Path, store: str) -> None:
    """A leader cut from the other nodes while a random node is killed with kill -9, then
    a flapping network with another kill."""
    schedule = cut_and_kill(seed=seed_from_env(26))
    run(scenario("test_cut_and_kill", schedule, store), tmp_path)


# --- the regression of a quiet partition ---------------------------------------------------

QUIET_TOPIC = "quiet"
QUIET_PARTITIONS = 3
"""The test cuts the leader of one the controller does not lead."""
QUIET_RECORDS = 10
"""Written to that partition before the cut; none after."""
CUT_S = 10.0
TAKEOVER_TIMEOUT_S = 15.0
MOVE_ON_TIMEOUT_S = 30.0
LAG_S = 4.0
"""replica.lag.time.max.ms of DEFAULT_SETTINGS: a follower that does not catch up is
dropped from the ISR this long after leadership moved."""
REJOIN_BOUND_S = 6.0
"""How long the interim leader may be out of the ISR once leadership has moved on."""
SAMPLE_S = 0.5


@stores("raft")  # the follower's epoch handling is the same on both stores
def test_quiet_partition_interim_leader_rejoins_isr(tmp_path: Path, store: str) -> None:
    """Regression: a partition takes a few writes, then none (it is quiet from then on);
    its leader (not the active controller) is cut from the other nodes for 10 s (on
    ZooKeeper from ZooKeeper too: a broker keeps its partitions while its session lives),
    another replica leads meanwhile (the interim leader) and takes no write, so its
    leader epoch starts at its log end and holds no record; after the heal the old leader
    catches up, rejoins the ISR and, as the preferred replica, leads again. From then on
    the interim leader, a follower again with no write to help it, must stay in the ISR
    or be back within REJOIN_BOUND_S, watched for LAG_S + REJOIN_BOUND_S (past the
    moment a stuck follower is dropped): a follower whose latest leader epoch holds no
    record (the new leader does not have that epoch) must not loop on diverging_epoch
    for ever."""
    with started_cluster(
        tmp_path,
        nodes=3,
        settings=with_setting(DEFAULT_SETTINGS, FAST_FAILBACK),
        store=store,
        session_timeout_ms=4000,
        network=True,
    ) as (cluster, network):
        assert network is not None
        setup = create_topic(cluster, QUIET_TOPIC, QUIET_PARTITIONS, 3, 2)
        partition, before = _led_by_a_broker_only(cluster, setup.partitions)
        _write(cluster, partition, QUIET_RECORDS)
        old_leader = before.leader
        others = [n for n in cluster.node_ids if n != old_leader]
        zookeeper = [ZOOKEEPER] if store == "zookeeper" else []
        started = time.monotonic()
        story = _Story(started)
        network.apply(isolate(old_leader, [*others, *zookeeper]))
        story.add(
            f"cut node {old_leader} (leader of partition {partition}, epoch {before.leader_epoch})"
        )
        try:
            interim = cluster.wait_until(
                lambda: _interim_leader(cluster, partition, others, old_leader),
                TAKEOVER_TIMEOUT_S,
                f"another replica to lead partition {partition} after node {old_leader} was cut",
            )
            story.add(f"node {interim} leads")
            while time.monotonic() < started + CUT_S:
                cluster.local.pump(0.1)
            network.apply(WHOLE)
            story.add("healed")
            moved = cluster.wait_until(
                lambda: _moved_on(cluster, partition, interim),
                MOVE_ON_TIMEOUT_S,
                f"leadership of partition {partition} to move on from the interim leader {interim}",
            )
            story.add(f"node {moved.leader} leads (epoch {moved.leader_epoch})")
            out_s = _watch_isr(cluster, partition, interim, story, LAG_S + REJOIN_BOUND_S)
        except ClusterTimeout as exc:
            pytest.fail(f"{story}\n{exc}", pytrace=False)
        finally:
            print(f"\nquiet partition ({store}): {story}")
        if out_s is not None and out_s > REJOIN_BOUND_S:
            pytest.fail(
                f"the interim leader {interim} was out of the ISR of partition {partition} for "
                f"{out_s:.1f} s after leadership moved on (at most {REJOIN_BOUND_S:g} s): "
                f"{story}\n{cluster.logs()}",
                pytrace=False,
            )


class _Story:
    """What happened when, in seconds since the cut."""

    def __init__(self, started: float) -> None:
        self.started = started
        self.lines: list[str] = []

    def add(self, text: str) -> None:
        self.lines.append(f"{time.monotonic() - self.started:.1f}s {text}")

    def __str__(self) -> str:
        return "; ".join(self.lines)


def _write(cluster: TestCluster, partition: int, count: int) -> None:
    """`count` records to the partition, each acknowledged by all of its ISR."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    failed: list[str] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            failed.append(error.str())

    for i in range(count):
        producer.produce(QUIET_TOPIC, f"q{i}".encode(), partition=partition, on_delivery=delivered)
    left = producer.flush(30)
    assert left == 0 and not failed, f"writes before the cut: {left} unanswered, {failed}"


def _partition(cluster: TestCluster, partition: int, nodes: list[int]) -> PartitionView | None:
    """A partition of the quiet topic, in the freshest view of `nodes`."""
    addresses = {n: cluster.address(n) for n in nodes}
    return freshest(topic_views(addresses, QUIET_TOPIC), partition)


def _led_by_a_broker_only(cluster: TestCluster, partitions: list[int]) -> tuple[int, PartitionView]:
    """The first partition whose leader is not the active controller (cutting the
    controller is test_cut_controller's business), and its view."""
    addresses = {n: cluster.address(n) for n in cluster.node_ids}
    zookeeper = cluster.zookeeper
    controller = zookeeper_controller(zookeeper) if zookeeper else active_controller(addresses)
    assert controller is not None, "no active controller"
    views = topic_views(addresses, QUIET_TOPIC)
    for partition in partitions:
        view = freshest(views, partition)
        if view is not None and view.leader not in (-1, controller):
            return partition, view
    raise AssertionError(f"the controller {controller} leads every partition: {views}")


def _interim_leader(
    cluster: TestCluster, partition: int, others: list[int], old_leader: int
) -> int | None:
    view = _partition(cluster, partition, others)
    if view is None or view.leader in (-1, old_leader):
        return None
    return view.leader


def _moved_on(cluster: TestCluster, partition: int, interim: int) -> PartitionView | None:
    view = _partition(cluster, partition, cluster.node_ids)
    if view is None or view.leader in (-1, interim):
        return None
    return view


def _watch_isr(
    cluster: TestCluster, partition: int, interim: int, story: _Story, watch_s: float
) -> float | None:
    """Watch the ISR (in the freshest view) for `watch_s`, and while the interim leader is
    out of it, until it has been out for longer than REJOIN_BOUND_S; how long it was out
    at the longest, or None if it never left."""
    deadline = time.monotonic() + watch_s
    out_since: float | None = None
    longest: float | None = None

    def watching(now: float) -> bool:
        if out_since is not None:
            return now < max(deadline, out_since + REJOIN_BOUND_S + SAMPLE_S)
        return now < deadline

    while watching(now := time.monotonic()):
        view = _partition(cluster, partition, cluster.node_ids)
        if view is not None:
            if interim not in view.isr and out_since is None:
                out_since = now
                story.add(f"node {interim} out of the ISR {list(view.isr)}")
            elif interim in view.isr and out_since is not None:
                longest = max(longest or 0.0, now - out_since)
                out_since = None
                story.add(f"node {interim} back in the ISR {list(view.isr)}")
        cluster.local.pump(SAMPLE_S)
    if out_since is not None:
        longest = max(longest or 0.0, time.monotonic() - out_since)
        story.add(f"node {interim} still out of the ISR")
    else:
        story.add(f"node {interim} in the ISR")
    return longest
