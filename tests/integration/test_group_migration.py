"""Online migration of a consumer group between the classic protocol (JoinGroup, SyncGroup,
Heartbeat) and the consumer protocol of KIP-848 (ConsumerGroupHeartbeat), with real
confluent-kafka consumers in child processes replaced one at a time while a producer
keeps writing, as in Kafka 4.x (`group.consumer.migration.policy`, default
`bidirectional`):

- a ConsumerGroupHeartbeat for a live classic group of protocol type "consumer" converts
  it to a consumer group; its classic members go on through JoinGroup/SyncGroup/Heartbeat;
- when the last member of the consumer protocol leaves a group whose other members are
  classic, the group becomes a classic group again;
- with the policy `disabled` a consumer-protocol member is refused by a live classic group
  (GROUP_ID_NOT_FOUND, which librdkafka makes a fatal error) and the group goes on.

The broker is also killed with SIGKILL and restarted on the same data directory and
port while the group is mixed, and right after it became a classic group again: the
records of both protocols' cores, written in one batch, are replayed into the same group
with the same members and commits.

Each member consumes in batches and commits each batch synchronously before the next
(migration_member.py). After clean replacements every record is consumed and committed
exactly once (a lost commit would make a member read again from an older offset), the
committed offsets are the log ends, and no partition is ever owned by two members at
once (by the members' rebalance callbacks, on the machine's monotonic clock).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest
from broker import BrokerProcess
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from group_members import KIP848_BROKER_SETTINGS, KIP848_SESSION_MS
from kio.schema.errors import ErrorCode
from migration_feeder import Feeder
from migration_members import (
    MigrationMember,
    Record,
    check_after_a_kill,
    check_commits_kept,
    check_consumed_at_least_once,
    check_each_committed_once,
    never_shared,
    owned_once,
    wait_for,
)
from migration_views import (
    CLASSIC_MEMBER,
    CONSUMER_MEMBER,
    GroupView,
    committed_offsets,
    consumer_group_members,
    describe,
    log_end_offsets,
    member_ids,
    member_types,
)

PARTITIONS = 6
CLASSIC_SESSION_S = 6.0  # migration_member.py's session.timeout.ms for classic members
CONSUMER = {"group.protocol": "consumer"}
STEP_TIMEOUT_S = 30.0
COORDINATOR_NOT_READY = (
    int(ErrorCode.coordinator_load_in_progress),
    int(ErrorCode.coordinator_not_available),
    int(ErrorCode.not_coordinator),
)
T = TypeVar("T")
MIGRATION_SETTINGS = (*KIP848_BROKER_SETTINGS, "group.initial.rebalance.delay.ms=0")
"""The `kip848_broker` fixture's short KIP-848 timers, and classic groups that do not
wait 3 s for more members before their first rebalance."""


def classic(strategy: str) -> dict[str, str]:
    return {"group.protocol": "classic", "partition.assignment.strategy": strategy}


def first_answer(ask: Callable[[], T], timeout_s: float = STEP_TIMEOUT_S) -> T:
    """What `ask()` returns the first time it does not raise (a broker just started
    may not answer yet)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ask()
        except Exception:
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


@pytest.fixture
def start_broker(new_broker: Callable[..., BrokerProcess]) -> Callable[..., BrokerProcess]:
    """Start a broker with MIGRATION_SETTINGS and `settings` (KEY=VALUE); killed after."""

    def start(*settings: str) -> BrokerProcess:
        every = (*MIGRATION_SETTINGS, *settings)
        return new_broker(*[part for setting in every for part in ("--set", setting)])

    return start


@pytest.fixture
def started() -> Iterator[list[MigrationMember]]:
    """Every member process a test starts, killed after it."""
    members: list[MigrationMember] = []
    try:
        yield members
    finally:
        for member in members:
            member.kill()


class Migration:
    """One group on one topic of PARTITIONS partitions: its members (`live`: those that
    should be in the group now), and the waits and checks every scenario uses."""

    def __init__(self, broker: BrokerProcess, name: str, started: list[MigrationMember]):
        self.broker = broker
        self.bootstrap = broker.bootstrap
        self.group = f"{name}-group"
        self.topic = name
        self.members = started
        self.live: list[MigrationMember] = []
        self.feeding: Feeder | None = None
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(self.topic, PARTITIONS, 1)]).values():
            future.result(10)

    def feeder(self) -> Feeder:
        """The producer of the test's records (3,000), nudged by wait_settled."""
        self.feeding = Feeder(self.bootstrap, self.topic, PARTITIONS)
        return self.feeding

    def start(self, name: str, **config: Any) -> MigrationMember:
        member = MigrationMember(self.bootstrap, self.group, self.topic, name, **config)
        self.members.append(member)
        return member

    def add(self, name: str, **config: Any) -> MigrationMember:
        member = self.start(name, **config)
        self.live.append(member)
        return member

    def story(self) -> str:
        """The group as the broker describes it, and what each member process reported."""
        try:
            view: object = describe(self.bootstrap, self.group)
            types: object = member_types(self.broker.port, self.group)
        except Exception as error:  # told on a failure: it must not hide that failure
            view = types = error
        lines = [
            f"group {self.group}: {view}",
            f"  ConsumerGroupDescribe v1 (error, types): {types}",
        ]
        lines += [f"  {member.summary()}" for member in self.members]
        return "\n".join(lines)

    def wait_settled(self, what: str, timeout_s: float = STEP_TIMEOUT_S) -> None:
        """Until every partition is owned by one live member, each owning some and each
        having committed records."""

        def settled() -> bool:
            if self.feeding is not None:
                self.feeding.nudge()
            return owned_once(self.live, PARTITIONS) and all(m.committed for m in self.live)

        wait_for(settled, timeout_s, what, self.live, self.story)

    def replace(self, old: MigrationMember, name: str, **config: Any) -> MigrationMember:
        """Stop `old` cleanly (close(): it leaves the group), start `name` in its place and
        wait until it owns partitions and consumes, beside the others."""
        old.stop()
        assert any("closed" in e for e in old.history), f"{old.name} did not close cleanly"
        self.live.remove(old)
        new = self.add(name, **config)
        self.wait_settled(f"{name} (group.protocol={new.protocol}) in place of {old.name}")
        return new

    def wait_described(self, group_type: str, timeout_s: float = 20.0) -> None:
        """Until describe_consumer_groups says `group_type` (CONSUMER or CLASSIC), STABLE,
        with the live members; a consumer group's ConsumerGroupDescribe v1 must also give
        each member its kind (classic or consumer)."""
        names = frozenset(m.name for m in self.live)
        kinds = {
            m.name: CONSUMER_MEMBER if m.protocol == "consumer" else CLASSIC_MEMBER
            for m in self.live
        }

        def matches() -> bool:
            try:
                view = describe(self.bootstrap, self.group)
            except Exception:  # the story tells the error if it lasts
                return False
            if view != GroupView(group_type, "STABLE", names):
                return False
            error, types = member_types(self.broker.port, self.group)
            return group_type == "CLASSIC" or (error == 0 and types == kinds)

        wait_for(
            matches,
            timeout_s,
            f"the group described as {group_type}, STABLE, with members {sorted(kinds.items())}"
            " (client id: ConsumerGroupDescribe v1 member_type, 0 classic, 1 consumer)",
            self.live,
            self.story,
        )

    def wait_consumed(self, produced: set[Record], committed: bool = True) -> None:
        """Until every record produced is committed (or just processed) by some member."""

        def done() -> bool:
            seen = {r for m in self.members for r in (m.committed if committed else m.processed)}
            return produced <= seen

        wait_for(done, 60, f"all {len(produced)} records consumed", self.live, self.story)

    def restart_broker(self) -> float:
        """SIGKILL the broker and start it again on the same data directory and port;
        returns when it was killed (monotonic clock). Aimed (for up to 5 s) at a moment
        when some member has processed a batch and not yet seen its commit answered."""
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not any(m.committing for m in self.live):
            time.sleep(0.001)
        self.broker.kill()
        killed_at = time.monotonic()
        self.broker.start()
        return killed_at

    def loaded(self, timeout_s: float = STEP_TIMEOUT_S) -> tuple[int, dict[str, tuple[str, int]]]:
        """The first ConsumerGroupDescribe v1 answer of the group once its coordinator has
        loaded it: the error code, each member's (member id, member_type) by client id."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                error, members = consumer_group_members(self.broker.port, self.group)
            except OSError:  # not listening yet, or the connection dropped
                error, members = COORDINATOR_NOT_READY[0], {}
            if error not in COORDINATOR_NOT_READY:
                return error, members
            assert time.monotonic() < deadline, f"the group not loaded in {timeout_s} s"
            time.sleep(0.05)

    def wait_resumed(self, since_s: float, timeout_s: float = STEP_TIMEOUT_S) -> None:
        """Until every live member has committed records after `since_s` (monotonic)."""

        def resumed() -> bool:
            if self.feeding is not None:
                self.feeding.nudge()
            return all(any(at > since_s for _, at in m.committed_at()) for m in self.live)

        wait_for(resumed, timeout_s, "every live member committing again", self.live, self.story)

    def check_offsets(self, produced: set[Record]) -> None:
        """(c) The group's committed offsets are the log end offsets."""
        ends = log_end_offsets(self.bootstrap, self.topic, PARTITIONS)
        written = {p: 1 + max(o for q, o, _ in produced if q == p) for p in range(PARTITIONS)}
        assert ends == written, f"log ends {ends}, records written {written}"
        committed = committed_offsets(self.bootstrap, self.group, self.topic, PARTITIONS)
        assert committed == ends, f"committed offsets {committed}, log ends {ends}"


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_classic_members_are_replaced_one_by_one_by_consumer_members(
    strategy: str, start_broker: Callable[..., BrokerProcess], started: list[MigrationMember]
) -> None:
    """Online upgrade: the first consumer-protocol member converts the classic group to a
    consumer group, which serves the classic members left until they are all replaced."""
    run = Migration(start_broker(), "upgrade", started)
    with run.feeder() as feeder:
        for i in range(3):
            run.add(f"classic-{i}", **classic(strategy))
        run.wait_settled("three classic members, each consuming")
        run.wait_described("CLASSIC")
        for i, old in enumerate(list(run.live)):
            run.replace(old, f"consumer-{i}", **CONSUMER)
            run.wait_described("CONSUMER")  # while mixed: members of both kinds
        produced = feeder.finish()
    run.wait_consumed(produced)
    check_each_committed_once(run.members, produced)
    run.check_offsets(produced)
    run.wait_described("CONSUMER")
    never_shared(run.members, PARTITIONS)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_consumer_members_are_replaced_one_by_one_by_classic_members(
    strategy: str, start_broker: Callable[..., BrokerProcess], started: list[MigrationMember]
) -> None:
    """Online downgrade: classic members join the consumer group; when the last
    consumer-protocol member leaves, the group becomes a classic group."""
    run = Migration(start_broker(), "downgrade", started)
    with run.feeder() as feeder:
        for i in range(3):
            run.add(f"consumer-{i}", **CONSUMER)
        run.wait_settled("three consumer-protocol members, each consuming")
        run.wait_described("CONSUMER")
        for i, old in enumerate(list(run.live)):
            run.replace(old, f"classic-{i}", **classic(strategy))
            run.wait_described("CONSUMER" if i < 2 else "CLASSIC")
        produced = feeder.finish()
    run.wait_consumed(produced)
    check_each_committed_once(run.members, produced)
    run.check_offsets(produced)
    run.wait_described("CLASSIC")
    never_shared(run.members, PARTITIONS)


def test_a_classic_member_killed_while_the_group_is_mixed(
    start_broker: Callable[..., BrokerProcess], started: list[MigrationMember]
) -> None:
    """SIGKILL of a classic member of a converted group: its partitions go to the others
    once its own session (6 s) is over, every record is consumed, and a record is read
    again only where the killed member had not committed it (or, as in any rebalance,
    where a member lost a partition right after a failed commit)."""
    run = Migration(start_broker(), "killed", started)
    with run.feeder() as feeder:
        first, victim, last = (run.add(f"classic-{i}", **classic("range")) for i in range(3))
        run.wait_settled("three classic members, each consuming")
        run.replace(first, "consumer-0", **CONSUMER)
        run.wait_described("CONSUMER")
        victim.kill()
        run.live.remove(victim)
        run.wait_settled(
            f"{victim.name}'s partitions with the others after its session timeout",
            CLASSIC_SESSION_S + STEP_TIMEOUT_S,
        )
        assert victim.killed_at is not None
        taken_s = time.monotonic() - victim.killed_at
        assert taken_s >= CLASSIC_SESSION_S - 1, (
            f"{victim.name}'s partitions moved {taken_s:.1f} s after it was killed: before "
            f"its own session timeout ({CLASSIC_SESSION_S} s), as if it had the group's "
            f"group.consumer.session.timeout.ms ({KIP848_SESSION_MS} ms)\n{run.story()}"
        )
        run.add("consumer-1", **CONSUMER)
        run.wait_settled("consumer-1 consuming beside the others")
        run.replace(last, "consumer-2", **CONSUMER)
        run.wait_described("CONSUMER")
        produced = feeder.finish()
    run.wait_consumed(produced, committed=False)
    check_after_a_kill(run.members, victim, produced)
    run.check_offsets(produced)
    never_shared(run.members, PARTITIONS)


def test_migration_policy_disabled_refuses_a_consumer_member(
    start_broker: Callable[..., BrokerProcess], started: list[MigrationMember]
) -> None:
    """With group.consumer.migration.policy=disabled a consumer-protocol member of a live
    classic group is refused: Kafka answers its ConsumerGroupHeartbeat GROUP_ID_NOT_FOUND
    ("Group ... is not a consumer group."), which librdkafka 2.16 reports as a fatal error
    (code _FATAL, "ConsumerGroupHeartbeat fatal error: Broker: The group id does not
    exist"). The classic group is not touched: no rebalance, and it goes on consuming."""
    try:
        broker = start_broker("group.consumer.migration.policy=disabled")
    except RuntimeError as error:
        pytest.fail(
            f"no broker with group.consumer.migration.policy=disabled: {str(error)[-2000:]}"
        )
    run = Migration(broker, "disabled", started)
    with run.feeder() as feeder:
        for i in range(2):
            run.add(f"classic-{i}", **classic("range"))
        run.wait_settled("two classic members, each consuming")
        run.wait_described("CLASSIC")
        moves = [sum(1 for e in m.history if "assigned" in e or "revoked" in e) for m in run.live]
        refused = run.start("consumer-0", **CONSUMER)
        wait_for(
            lambda: refused.refusal() is not None,
            STEP_TIMEOUT_S,
            "the consumer-protocol member refused (GROUP_ID_NOT_FOUND)",
            run.live,
            run.story,
        )
        assert "group id does not exist" in str(refused.refusal()).lower(), refused.refusal()
        assert not refused.assignment and not refused.processed, refused.summary()
        run.wait_described("CLASSIC")
        produced = feeder.finish()
    run.wait_consumed(produced)
    check_each_committed_once(run.members, produced)
    run.check_offsets(produced)
    after = [sum(1 for e in m.history if "assigned" in e or "revoked" in e) for m in run.live]
    assert after == moves, f"the classic members rebalanced: {moves} -> {after}\n{run.story()}"
    never_shared(run.members, PARTITIONS)


def test_the_broker_killed_while_the_group_is_mixed(
    start_broker: Callable[..., BrokerProcess], started: list[MigrationMember]
) -> None:
    """SIGKILL of the broker while a converted group has members of both protocols, then
    a restart on the same data directory and port. The upgrade wrote the classic group's
    tombstone and the consumer group's records in one batch; replaying them must give
    the consumer group back, with the same members (ids and kinds) and every commit a
    member saw succeed before the kill. The members go on where they were, the upgrade
    then completes, and a record is read twice only where it was not committed."""
    run = Migration(start_broker(), "brokerkill", started)
    with run.feeder() as feeder:
        for i in range(3):
            run.add(f"classic-{i}", **classic("range"))
        run.wait_settled("three classic members, each consuming")
        run.wait_described("CLASSIC")
        run.replace(run.live[0], "consumer-0", **CONSUMER)
        run.wait_described("CONSUMER")
        run.wait_resumed(time.monotonic())  # commits of the mixed group, just before
        error, before = run.loaded()
        assert error == 0, f"ConsumerGroupDescribe: error {error}\n{run.story()}"
        killed_at = run.restart_broker()
        error, after = run.loaded()
        assert (error, after) == (0, before), (
            f"after the restart the group is not the consumer group it was: error {error}, "
            f"members {after} (before: {before})\n{run.story()}"
        )
        committed = committed_offsets(run.bootstrap, run.group, run.topic, PARTITIONS)
        check_commits_kept(run.members, killed_at, committed)
        run.wait_resumed(time.monotonic())
        run.wait_described("CONSUMER")
        still_classic = [m for m in run.live if m.protocol == "classic"]
        for i, old in enumerate(still_classic, start=1):
            run.replace(old, f"consumer-{i}", **CONSUMER)
            run.wait_described("CONSUMER")
        produced = feeder.finish()
    run.wait_consumed(produced, committed=False)
    check_consumed_at_least_once(run.members, produced)
    run.check_offsets(produced)
    never_shared(run.members, PARTITIONS)


def test_the_broker_killed_right_after_the_group_became_classic_again(
    start_broker: Callable[..., BrokerProcess], started: list[MigrationMember]
) -> None:
    """SIGKILL of the broker right after the last consumer-protocol member left (the
    consumer group's tombstones and the classic group's record, one batch), then a
    restart on the same data directory and port: the group is a classic group with the
    same members and commits, the members go on, and a new classic member joins."""
    run = Migration(start_broker(), "downkill", started)
    with run.feeder() as feeder:
        for i in range(3):
            run.add(f"consumer-{i}", **CONSUMER)
        run.wait_settled("three consumer-protocol members, each consuming")
        run.wait_described("CONSUMER")
        for i in range(2):
            run.replace(run.live[0], f"classic-{i}", **classic("range"))
            run.wait_described("CONSUMER")
        last = run.live[0]
        ids = member_ids(run.bootstrap, run.group)
        last.stop()
        run.live.remove(last)
        wait_for(
            lambda: describe(run.bootstrap, run.group).type == "CLASSIC",
            STEP_TIMEOUT_S,
            f"the group classic again once {last.name} left",
            run.live,
            run.story,
        )
        killed_at = run.restart_broker()
        view = first_answer(lambda: describe(run.bootstrap, run.group))
        assert view.type == "CLASSIC", f"after the restart: {view}\n{run.story()}"
        left = {name: ids[name] for name in ("classic-0", "classic-1")}
        assert member_ids(run.bootstrap, run.group) == left, run.story()
        committed = committed_offsets(run.bootstrap, run.group, run.topic, PARTITIONS)
        check_commits_kept(run.members, killed_at, committed)
        run.wait_resumed(time.monotonic())
        run.add("classic-2", **classic("range"))
        run.wait_settled("classic-2 consuming beside the others")
        run.wait_described("CLASSIC")
        produced = feeder.finish()
    run.wait_consumed(produced, committed=False)
    check_consumed_at_least_once(run.members, produced)
    run.check_offsets(produced)
    never_shared(run.members, PARTITIONS)


def test_an_empty_consumer_group_becomes_classic_when_a_classic_member_joins(
    start_broker: Callable[..., BrokerProcess],
) -> None:
    """Kafka converts an empty consumer group on a JoinGroup: the group is classic again,
    and the classic consumer goes on from the offsets the consumer-protocol one committed."""
    broker = start_broker()
    migration = Migration(broker, "emptied", [])
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(60):
        producer.produce(migration.topic, f"r{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0

    def consume(config: dict[str, str], want: int) -> list[str]:
        consumer = Consumer(
            {
                "bootstrap.servers": broker.bootstrap,
                "group.id": migration.group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": "false",
                **config,
            }
        )
        got: list[str] = []
        try:
            consumer.subscribe([migration.topic])
            deadline = time.monotonic() + STEP_TIMEOUT_S
            while len(got) < want and time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and not message.error():
                    got.append(message.value().decode())
                    consumer.commit(message, asynchronous=False)
        finally:
            consumer.close()
        return got

    first = consume(CONSUMER, 30)
    assert len(first) == 30
    assert describe(broker.bootstrap, migration.group).type == "CONSUMER"
    for i in range(60, 90):
        producer.produce(migration.topic, f"r{i}".encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    rest = consume(classic("range"), 60)
    assert sorted(first + rest) == sorted(f"r{i}" for i in range(90)), "read twice or lost"
    view = first_answer(lambda: describe(broker.bootstrap, migration.group))
    assert view.type == "CLASSIC"
