"""A group moving between the classic and the consumer protocol, decided by the two pure
cores as the shell drives them (server/consumer_groups.py): no sockets, no sleeps.

Every write goes through the records' bytes (the harnesses encode and decode them), and
every scenario ends by loading fresh cores from the records written: they must hold
what the live cores hold."""

from __future__ import annotations

import contextlib
from random import Random

import pytest
from consumer_harness import ConsumerHarness
from group_harness import Harness
from hypothesis import given
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.group.consumer.coordinator import ConsumerDecision
from strom.group.consumer.heartbeat import (
    ConsumerHeartbeatRequest,
    ConsumerHeartbeatResult,
    MigrationPolicy,
)
from strom.group.consumer.records import (
    ClassicMetadata,
    MemberSubscriptionKey,
    MemberSubscriptionValue,
    decode_consumer_value,
    encode_consumer_value,
)
from strom.group.consumer.state import MemberState
from strom.group.consumer_protocol import (
    EmbeddedProtocolError,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from strom.group.coordinator import GroupCoordinator
from strom.group.handover import adopt, hand_over
from strom.group.offsets import CommitRequest, OffsetToCommit
from strom.group.requests import JoinRequest, LeavingMember, SyncRequest
from strom.group.state import GroupConfig, GroupState, JoinResult, SyncResult, TopicPartition

TOPIC = "t"
SESSION_MS = 10_000


def subscription(owned: dict[str, tuple[int, ...]] | None = None) -> bytes:
    return encode_subscription([TOPIC], version=1, owned=owned or {})


class Migration:
    """Both cores of one coordinator, one clock, and the shell's steps between them."""

    def __init__(self, policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL) -> None:
        self.classic = Harness()
        self.consumer = ConsumerHarness({TOPIC: 4}, migration_policy=policy)
        self.consumer.now_ms = self.classic.now_ms

    @property
    def now_ms(self) -> int:
        return self.classic.now_ms

    def advance(self, ms: int) -> list[ConsumerDecision]:
        self.classic.advance(ms)
        self.consumer.now_ms = self.classic.now_ms
        decisions = self.consumer.core.tick(self.now_ms, self.consumer.topics)
        for decision in decisions:
            self._write(decision)
        return decisions

    def _write(self, decision: ConsumerDecision) -> None:
        """A consumer decision, and the classic group it left, if any (a downgrade)."""
        if decision.classic is not None:
            out = adopt(self.classic.core, decision.classic, self.now_ms, "downgrade")
            self.classic.run(out)
        self.consumer._apply(decision)

    def consumer_heartbeat(
        self, member_id: str, epoch: int, **fields: object
    ) -> ConsumerHeartbeatResult:
        """ConsumerGroupHeartbeat as the shell carries it: a member joining a live classic
        group upgrades it, the classic core handing it over in the same write."""
        group = self.classic.core.store.peek("g")
        live = group is not None and group.state not in (GroupState.EMPTY, GroupState.DEAD)
        classic = group if live and self.consumer.core.group("g") is None else None
        req = ConsumerHeartbeatRequest(
            group_id="g",
            member_id=member_id,
            member_epoch=epoch,
            rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=(TOPIC,) if epoch == 0 else None,
            owned={} if epoch == 0 else None,
            **fields,  # type: ignore[arg-type]
        )
        decision = self.consumer.core.heartbeat(
            req, self.consumer.topics, self.now_ms, None, classic
        )
        if classic is not None and decision.records:
            _, out = hand_over(self.classic.core, "g", self.now_ms)
            self.classic.run(out)
        self._write(decision)
        assert decision.result is not None
        return decision.result

    def classic_join(
        self,
        member_id: str,
        owned: dict[str, tuple[int, ...]] | None = None,
        *,
        name: str = "range",
        instance: str | None = None,
    ) -> JoinResult:
        req = JoinRequest(
            "g",
            member_id,
            instance,
            "consumer",
            ((name, subscription(owned)),),
            SESSION_MS,
            30_000,
            client_id="classic",
            client_host="/127.0.0.1",
        )
        result, decision = self.consumer.core.classic_join(req, self.consumer.topics, self.now_ms)
        self._write(decision)
        return result

    def classic_sync(self, member_id: str, generation: int) -> SyncResult:
        req = SyncRequest("g", member_id, None, generation, "consumer", "range")
        result, _ = self.consumer.core.classic_sync(req, self.consumer.topics, self.now_ms)
        return result

    def classic_heartbeat(self, member_id: str, generation: int) -> ErrorCode:
        error, _ = self.consumer.core.classic_heartbeat(
            "g", member_id, None, generation, self.now_ms
        )
        return error

    def owned_by(self, member_id: str) -> set[int]:
        group = self.consumer.core.group("g")
        assert group is not None
        member = group.members[member_id]
        return {p for ps in member.assigned.values() for p in ps} | {
            p for ps in member.pending_revocation.values() for p in ps
        }

    def check_replay(self) -> None:
        """Fresh cores loaded from the records written hold what the live ones hold."""
        replayed = self.consumer.replayed()
        assert replayed.committed == self.consumer.core.committed
        fresh = GroupCoordinator(GroupConfig(initial_rebalance_delay_ms=0), Random(0))
        for key, value in self.classic.records:
            fresh.load(key, value, self.now_ms)
        live = self.classic.core.groups.get("g")
        loaded = fresh.groups.get("g")
        assert (live is None) == (loaded is None)
        if live is not None and loaded is not None:
            assert loaded.offsets == live.offsets
            assert set(loaded.members) == set(live.members)


def classic_group(m: Migration) -> tuple[list[str], int]:
    """Two classic members, Stable, the leader giving the first 0-1 and the second 2-3;
    an offset committed at that generation."""
    h = m.classic
    protocols = (("range", subscription()),)
    first, t1 = h.join_new(protocols=protocols, session_ms=SESSION_MS)
    second, t2 = h.join_new(protocols=protocols, session_ms=SESSION_MS)
    if t1 in h.replies:
        t1 = h.join(first, protocols=protocols, session_ms=SESSION_MS)
    generation = h.joined(t2).generation_id
    assert h.joined(t1).generation_id == generation
    plan = {first: encode_assignment({TOPIC: (0, 1)}), second: encode_assignment({TOPIC: (2, 3)})}
    leader = h.joined(t1).leader_id
    for member in (first, second):
        h.sync(member, generation, plan if member == leader else None)
    assert h.group().state is GroupState.STABLE
    commit = CommitRequest(
        "g", generation, first, offsets=(OffsetToCommit(TOPIC, 0, 5),), api_version=2
    )
    assert h.commit(commit) == [ErrorCode.none]
    return [first, second], generation


def test_a_consumer_member_upgrades_a_classic_group_and_the_last_one_leaving_downgrades_it() -> (
    None
):
    m = Migration()
    (a, b), generation = classic_group(m)

    joined = m.consumer_heartbeat("c", 0)
    group = m.consumer.core.group("g")
    assert group is not None
    assert group.members[a].classic == ClassicMetadata(SESSION_MS, (("range", subscription()),))
    assert group.members[a].member_epoch == generation
    assert m.owned_by(a) == {0, 1} and m.owned_by(b) == {2, 3}
    assert joined.member_epoch == generation + 1
    assert m.owned_by("c") == set()  # its partitions are still held by the classic members
    holder = m.classic.core.groups["g"]
    assert not holder.members and holder.offsets[TopicPartition(TOPIC, 0)].offset == 5

    # The classic members hear they must rejoin; eager ones own nothing when they do.
    assert m.classic_heartbeat(a, generation) is ErrorCode.rebalance_in_progress
    for member in (a, b):
        rejoined = m.classic_join(member)
        assert rejoined.error is ErrorCode.none and rejoined.leader_id == ""
        synced = m.classic_sync(member, rejoined.generation_id)
        assert synced.error is ErrorCode.none
        by_name, _ = decode_assignment(synced.assignment)
        assert set(by_name.get(TOPIC, ())) == m.owned_by(member)
        assert m.classic_heartbeat(member, rejoined.generation_id) is ErrorCode.none
    m.consumer_heartbeat("c", generation + 1)
    owners = [m.owned_by(x) for x in (a, b, "c")]
    assert sorted(p for each in owners for p in each) == [0, 1, 2, 3]
    assert all(owners)

    # A classic member commits with its generation, at any OffsetCommit version.
    epoch = m.consumer.core.group("g").members[a].member_epoch  # type: ignore[union-attr]
    assert m.consumer.core.check_offset_commit("g", a, epoch, 2) is ErrorCode.none
    assert m.consumer.core.check_offset_commit("g", a, epoch - 1, 2) is ErrorCode.illegal_generation

    # The only consumer-protocol member leaves: the group is classic again.
    m.consumer_heartbeat("c", -1)
    assert m.consumer.core.group("g") is None
    back = m.classic.core.groups["g"]
    assert set(back.members) == {a, b}
    assert back.state is GroupState.PREPARING_REBALANCE
    assert back.offsets[TopicPartition(TOPIC, 0)].offset == 5
    assignments = {
        x: set(decode_assignment(back.members[x].assignment)[0].get(TOPIC, ())) for x in (a, b)
    }
    assert assignments[a] | assignments[b] <= {0, 1, 2, 3}
    m.check_replay()


def test_a_cooperative_member_revokes_before_its_partitions_move() -> None:
    m = Migration()
    members, generation = classic_group(m)
    m.consumer_heartbeat("c", 0)
    group = m.consumer.core.group("g")
    assert group is not None
    targets = {x: {p for ps in group.target[x].values() for p in ps} for x in members}
    # The new member's partition comes from one of them: that one must revoke it first.
    (loser,) = [x for x in members if targets[x] < m.owned_by(x)]
    owned = tuple(sorted(m.owned_by(loser)))
    rejoined = m.classic_join(loser, {TOPIC: owned})
    member = m.consumer.core.group("g").members[loser]  # type: ignore[union-attr]
    assert member.state is MemberState.UNREVOKED_PARTITIONS
    assert rejoined.generation_id == generation
    synced = m.classic_sync(loser, rejoined.generation_id)
    assert set(decode_assignment(synced.assignment)[0][TOPIC]) == targets[loser]
    assert m.classic_heartbeat(loser, generation) is ErrorCode.rebalance_in_progress
    assert m.owned_by("c") == set()  # not before the loser gave it up
    again = m.classic_join(loser, {TOPIC: tuple(sorted(targets[loser]))})
    assert again.generation_id > generation
    assert m.consumer.core.group("g").members[loser].state is MemberState.STABLE  # type: ignore[union-attr]
    m.check_replay()


def test_a_classic_members_session_is_its_own_and_a_fence_may_downgrade() -> None:
    m = Migration()
    (a, b), _ = classic_group(m)
    m.consumer_heartbeat("c", 0)
    for member in (a, b):
        m.classic_join(member)
    # The consumer member's session (45 s) outlives the classic members' (10 s).
    m.consumer_heartbeat("c", m.consumer.core.group("g").members["c"].member_epoch)  # type: ignore[union-attr]
    m.advance(SESSION_MS + 1)
    group = m.consumer.core.group("g")
    assert group is not None and set(group.members) == {"c"}
    m.check_replay()

    # A classic member joins again and keeps its session; the consumer member's ends:
    # it was the last one on the consumer protocol, so the group is classic again.
    required = m.classic_join("")
    assert required.error is ErrorCode.member_id_required
    joined = m.classic_join(required.member_id)
    assert joined.error is ErrorCode.none
    for _ in range(10):
        m.advance(5_000)
        if m.consumer.core.group("g") is None:
            break
        assert m.classic_heartbeat(required.member_id, joined.generation_id) in (
            ErrorCode.none,
            ErrorCode.rebalance_in_progress,
        )
    assert m.consumer.core.group("g") is None
    back = m.classic.core.groups["g"]
    assert set(back.members) == {required.member_id}
    assert back.state is GroupState.PREPARING_REBALANCE
    m.check_replay()


def test_a_classic_member_leaving_is_fenced_with_a_new_group_epoch() -> None:
    m = Migration()
    (a, b), _ = classic_group(m)
    m.consumer_heartbeat("c", 0)
    epoch = m.consumer.core.group("g").group_epoch  # type: ignore[union-attr]
    errors, decision = m.consumer.core.classic_leave(
        "g", [LeavingMember(a), LeavingMember("nobody")], m.consumer.topics, m.now_ms
    )
    m._write(decision)
    assert errors == [ErrorCode.none, ErrorCode.unknown_member_id]
    group = m.consumer.core.group("g")
    assert group is not None and set(group.members) == {b, "c"}
    assert group.group_epoch == epoch + 1
    m.check_replay()


def test_the_policy_decides_which_way_a_group_may_move() -> None:
    m = Migration(MigrationPolicy.DISABLED)
    classic_group(m)
    refused = m.consumer_heartbeat("c", 0)
    assert refused.error is ErrorCode.group_id_not_found
    assert "online upgrade is disabled" in (refused.message or "")
    assert m.consumer.core.group("g") is None
    assert m.classic.core.groups["g"].state is GroupState.STABLE

    m = Migration(MigrationPolicy.UPGRADE)
    (a, b), _ = classic_group(m)
    m.consumer_heartbeat("c", 0)
    m.consumer_heartbeat("c", -1)
    group = m.consumer.core.group("g")  # no downgrade: it stays a consumer group
    assert group is not None and set(group.members) == {a, b}


def test_a_classic_member_cannot_join_a_consumer_group_when_migration_is_disabled() -> None:
    m = Migration(MigrationPolicy.DISABLED)
    m.consumer_heartbeat("c", 0)
    assert m.classic_join("").error is ErrorCode.inconsistent_group_protocol


def _assigned_with_user_data(assignor: str) -> Migration:
    """One classic member whose assignment (from `assignor`) carries user data."""
    m = Migration()
    h = m.classic
    protocols = ((assignor, subscription()),)
    member, token = h.join_new(protocols=protocols, session_ms=SESSION_MS)
    generation = h.joined(token).generation_id
    data = bytearray(encode_assignment({TOPIC: (0,)}))
    data[-4:] = (3).to_bytes(4, "big", signed=True)
    data += b"xyz"
    h.sync(member, generation, {member: bytes(data)})
    return m


def test_a_custom_assignors_user_data_stops_the_upgrade() -> None:
    m = _assigned_with_user_data("custom")
    refused = m.consumer_heartbeat("c", 0)
    assert refused.error is ErrorCode.group_id_not_found
    assert "custom assignor" in (refused.message or "")
    assert m.classic.core.groups["g"].state is GroupState.STABLE


@pytest.mark.parametrize("assignor", ["sticky", "cooperative-sticky", "range", "roundrobin"])
def test_a_built_in_assignors_user_data_does_not(assignor: str) -> None:
    """librdkafka echoes its sticky data into assignments (strom's choice, not Kafka's)."""
    m = _assigned_with_user_data(assignor)
    joined = m.consumer_heartbeat("c", 0)
    assert joined.error is ErrorCode.none
    group = m.consumer.core.group("g")
    assert group is not None and len(group.members) == 2
    m.check_replay()


def test_a_join_that_does_not_speak_the_consumer_protocol_is_refused() -> None:
    m = Migration()
    m.consumer_heartbeat("c", 0)
    req = JoinRequest("g", "x", None, "connect", (("range", subscription()),), SESSION_MS, 30_000)
    result, _ = m.consumer.core.classic_join(req, m.consumer.topics, m.now_ms)
    assert result.error is ErrorCode.inconsistent_group_protocol
    garbage = JoinRequest("g", "x", None, "consumer", (("range", b"\x00"),), SESSION_MS, 30_000)
    result, _ = m.consumer.core.classic_join(garbage, m.consumer.topics, m.now_ms)
    assert result.error is ErrorCode.inconsistent_group_protocol


def test_a_join_naming_a_member_with_an_instance_id_no_static_member_has_is_refused() -> None:
    """Kafka's getOrMaybeSubscribeStaticConsumerGroupMember: a JoinGroup with a member id
    and an instance id is a static member rejoining, UNKNOWN_MEMBER_ID when no static
    member has that instance id (neither a new member of the request's choosing, nor a
    dynamic member made static), checked before the subscription is read."""
    m = Migration()
    m.consumer_heartbeat("c", 0)
    required = m.classic_join("")
    a = required.member_id
    assert m.classic_join(a).error is ErrorCode.none
    before = m.consumer.core.group("g")
    assert m.classic_join("x", instance="i1").error is ErrorCode.unknown_member_id
    assert m.classic_join(a, instance="i1").error is ErrorCode.unknown_member_id
    req = JoinRequest("g", "x", "i1", "consumer", (("range", b"\x00"),), SESSION_MS, 30_000)
    result, _ = m.consumer.core.classic_join(req, m.consumer.topics, m.now_ms)
    assert result.error is ErrorCode.unknown_member_id
    assert m.consumer.core.group("g") == before
    static = m.classic_join("", instance="i1")  # a new static member: its id is made here
    assert static.error is ErrorCode.none and static.member_id not in ("", "x", a)
    assert m.classic_join(static.member_id, instance="i1").error is ErrorCode.none
    assert m.classic_join("x", instance="i1").error is ErrorCode.fenced_instance_id
    m.check_replay()


def test_a_consumer_heartbeat_makes_a_classic_member_a_consumer_member_again() -> None:
    """A JoinGroup naming a member of the consumer protocol makes it a member using the
    classic protocol (as Kafka's classicGroupJoinToConsumerGroup does); its next
    ConsumerGroupHeartbeat makes it a consumer-protocol member again (Kafka's
    consumerGroupHeartbeat clears the classic metadata), so that it is not taken for a
    classic member (its kind, its session, whether its leaving downgrades the group)."""
    m = Migration()
    joined = m.consumer_heartbeat("c", 0)
    assert m.classic_join("c").error is ErrorCode.none
    group = m.consumer.core.group("g")
    assert group is not None and group.members["c"].classic is not None
    again = m.consumer_heartbeat("c", group.members["c"].member_epoch)
    assert again.error is ErrorCode.none, again
    group = m.consumer.core.group("g")
    assert group is not None and group.members["c"].classic is None
    assert joined.member_epoch <= again.member_epoch
    m.check_replay()


def test_a_consumer_member_takes_the_place_of_a_classic_static_member() -> None:
    """A static member restarted on the consumer protocol (same group.instance.id) takes
    the place of its classic self at once, without waiting for it to leave: Kafka's
    getOrMaybeSubscribeStaticConsumerGroupMember checks that the instance id was
    released only when both use the consumer protocol."""
    m = Migration()
    m.consumer_heartbeat("c", 0)
    old = m.classic_join("", instance="s1")
    assert old.error is ErrorCode.none
    new = m.consumer_heartbeat("n", 0, instance_id="s1")
    assert new.error is ErrorCode.none, new
    group = m.consumer.core.group("g")
    assert group is not None and set(group.members) == {"c", "n"}
    assert group.members["n"].instance_id == "s1" and group.members["n"].classic is None
    m.check_replay()


def test_a_group_metadata_tombstone_keeps_the_offsets_a_group_id_holds() -> None:
    m = Migration()
    classic_group(m)
    m.consumer_heartbeat("c", 0)
    fresh = GroupCoordinator(GroupConfig(), Random(0))
    for key, value in m.classic.records:
        fresh.load(key, value, m.now_ms)
    group = fresh.groups["g"]
    assert not group.members and group.offsets[TopicPartition(TOPIC, 0)].offset == 5


# --------------------------------------------------------------------------- layouts

names = st.text(max_size=8)
partitions = st.dictionaries(names, st.lists(st.integers(0, 2**31 - 1), max_size=4).map(tuple))


@given(
    st.lists(names, max_size=4),
    st.binary(max_size=8),
    st.integers(0, 3),
    partitions,
    st.integers(-1, 100),
    st.none() | names,
)
def test_subscriptions_read_back(
    topics: list[str],
    user_data: bytes,
    version: int,
    owned: dict[str, tuple[int, ...]],
    generation: int,
    rack: str | None,
) -> None:
    data = encode_subscription(
        topics, user_data, version=version, owned=owned, generation_id=generation, rack_id=rack
    )
    read = decode_subscription(data)
    assert read.topics == tuple(topics) and read.user_data == user_data
    assert dict(read.owned) == ({k: tuple(sorted(v)) for k, v in owned.items()} if version else {})
    assert read.generation_id == (generation if version >= 2 else -1)
    assert read.rack_id == (rack if version >= 3 else None)


@given(partitions, st.integers(0, 3))
def test_assignments_read_back(by_topic: dict[str, tuple[int, ...]], version: int) -> None:
    read, user_data = decode_assignment(encode_assignment(by_topic, version))
    assert read == {k: tuple(sorted(v)) for k, v in by_topic.items()} and user_data is None


@given(st.binary(max_size=64))
def test_any_bytes_parse_or_are_refused(data: bytes) -> None:
    for decode in (decode_subscription, decode_assignment):
        with contextlib.suppress(EmbeddedProtocolError):
            decode(data)


@given(
    st.integers(-1, 2**31 - 1),
    st.lists(st.tuples(names, st.binary(max_size=16)), max_size=3).map(tuple),
)
def test_a_classic_members_metadata_reads_back(
    session_ms: int, protocols: tuple[tuple[str, bytes], ...]
) -> None:
    key = MemberSubscriptionKey("g", "m")
    value = MemberSubscriptionValue(
        None, None, "c", "/h", ("t",), None, 1000, None, ClassicMetadata(session_ms, protocols)
    )
    assert decode_consumer_value(key, encode_consumer_value(value)) == value


def test_the_classic_metadata_is_kafkas_tagged_nullable_struct() -> None:
    value = MemberSubscriptionValue(
        None, None, "", "", (), None, -1, None, ClassicMetadata(6000, (("range", b"\x01"),))
    )
    data = encode_consumer_value(value)
    # ... the last bytes: one tagged field, tag 0, its size, presence 1, the struct.
    struct = (6000).to_bytes(4, "big") + b"\x02" + b"\x06range" + b"\x02\x01" + b"\x00" + b"\x00"
    assert data.endswith(b"\x01\x00" + bytes([len(struct) + 1]) + b"\x01" + struct)


@pytest.mark.parametrize("version", [0, 1, 2, 3, 7])
def test_a_newer_version_is_read_as_the_latest(version: int) -> None:
    data = encode_subscription([TOPIC], version=min(version, 3))
    patched = version.to_bytes(2, "big") + data[2:]
    assert decode_subscription(patched).topics == (TOPIC,)
