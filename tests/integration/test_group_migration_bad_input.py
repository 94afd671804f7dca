"""Hostile classic requests to a consumer group whose members speak both protocols
(KIP-848's migration): JoinGroup v0-v9, SyncGroup v0-v5, Heartbeat v0-v4 and LeaveGroup
v0-v5 for the group's id, Hypothesis choosing the member ids (the members', unknown,
empty), generations, instance ids, protocol types, protocol lists (none, garbage
metadata, truncated subscriptions, huge counts, hundreds of protocols) and timeouts.

The group lives on the `strom_broker` fixture's node: one member on the consumer protocol
(raw ConsumerGroupHeartbeat v1) and one classic member (raw JoinGroup, SyncGroup and
Heartbeat), both driven here, and offsets committed. Each example sends a few requests,
each on its own connection, with bounded waits:

- every request is answered with an error code Kafka's coordinator gives for it (only
  JoinGroup v0-v1, which Kafka 4 no longer serves, closes the connection instead); the
  first request of an example, sent to a group in a known state, gets exactly Kafka's
  answer (GroupMetadataManager's classicGroupJoinToConsumerGroup and its siblings, the
  checks in their order);
- a request that names the consumer-protocol member in a JoinGroup (which makes it a
  classic member) or a LeaveGroup (which turns the group back into a classic group) is
  only ever the last of its example;
- then the broker logged no bug, the committed offsets are as they were, the
  consumer-protocol member heartbeats (or rejoins, if the example named it), the classic
  member rejoins if it was moved, the members the requests added are removed, and the
  group is again a consumer group of those two members, each of its kind (ConsumerGroup-
  Describe v1 member_type), sharing the partitions.

At the end a confluent-kafka consumer on the consumer protocol joins the group beside
the two and reads its partitions from the committed offsets. Malformed frames of these
APIs close the connection and change nothing (one whose array count is 2^32 used to
abort the broker: strom.protocol.bounds), and a JoinGroup's session timeout is checked
against the broker's bounds in a consumer group too.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import kafka_wire as wire
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from mixed_group import (
    COMMITTED,
    GROUP,
    HEARTBEAT,
    JOIN,
    LEAVE,
    MAX_SESSION_MS,
    MEMBER_SESSION_MS,
    MIN_SESSION_MS,
    SYNC,
    TOPIC,
    WAIT_S,
    Mixed,
    committed,
    consumes_beside,
    exchange,
    partitions_of,
    start_mixed,
    subscription,
)
from node_files import port

from strom.client.codec import build_request
from strom.group.consumer_protocol import EmbeddedProtocolError, encode_subscription
from strom.protocol.codec import decode_response, encode_request
from strom.testing import StromCluster

SERVED_JOIN_VERSIONS = range(2, 10)  # Kafka 4 (KIP-896) and strom: v0-v1 are gone

pytestmark = pytest.mark.strom(
    config={
        "group.min.session.timeout.ms": MIN_SESSION_MS,
        "group.max.session.timeout.ms": MAX_SESSION_MS,
        "group.consumer.session.timeout.ms": 45_000,
        "group.initial.rebalance.delay.ms": 0,
    }
)

E = ErrorCode
JOIN_CODES = {E.none, E.member_id_required, E.inconsistent_group_protocol, E.unknown_member_id}
JOIN_CODES |= {E.fenced_instance_id, E.invalid_session_timeout}
MEMBER_CODES = {E.none, E.unknown_member_id, E.fenced_instance_id, E.illegal_generation}
ANSWERS = {
    JOIN: JOIN_CODES,
    SYNC: MEMBER_CODES | {E.inconsistent_group_protocol, E.rebalance_in_progress},
    HEARTBEAT: MEMBER_CODES | {E.rebalance_in_progress},
    LEAVE: {E.none, E.unknown_member_id, E.fenced_instance_id},
}
"""The codes Kafka's coordinator answers each request to a consumer group with."""


# --- the hostile requests ---------------------------------------------------------------

CONSUMER_ID, CLASSIC_ID = "<consumer>", "<classic>"
CURRENT, NEXT, PREVIOUS = "<g>", "<g+1>", "<g-1>"
"""Placeholders for what is known only when the request is sent: the members' ids and
the classic member's generation."""

names = st.text(alphabet="ab-_.\u00e9\U0001f600 ", max_size=8)
i32s = st.integers(-(2**31), 2**31 - 1)
# Most values are those of a real member, so that requests get past the first checks and
# meet the later ones; the rest are hostile.
member_ids = st.one_of(
    st.just(CLASSIC_ID),
    st.just(CLASSIC_ID),
    st.just(CONSUMER_ID),
    st.just(""),
    st.sampled_from([" ", "m" * 300]),
    names,
    st.uuids().map(lambda u: u.hex),
)
instance_ids = st.one_of(st.none(), st.none(), st.none(), st.sampled_from(["", " ", "i1"]), names)
generations = st.one_of(st.sampled_from([CURRENT, CURRENT, CURRENT, NEXT, PREVIOUS, -1, 0]), i32s)
session_timeouts = st.one_of(
    st.sampled_from([MEMBER_SESSION_MS, MIN_SESSION_MS, MAX_SESSION_MS]),
    st.integers(MIN_SESSION_MS, MAX_SESSION_MS),
    st.sampled_from([MIN_SESSION_MS - 1, MAX_SESSION_MS + 1, 0, -1, 2**31 - 1, -(2**31)]),
    i32s,
)
rebalance_timeouts = st.one_of(st.sampled_from([-1, 0, 1, 30_000, 2**31 - 1]), i32s)
protocol_types = st.one_of(
    st.just("consumer"), st.just("consumer"), st.sampled_from(["", "connect"]), names
)
protocol_names = st.one_of(
    st.just("range"),
    st.just("range"),
    st.sampled_from(["roundrobin", "cooperative-sticky", ""]),
    names,
)


@dataclass(frozen=True)
class Metadata:
    """A subscription as sent, and whether it is a valid one (None: do not know)."""

    data: bytes
    valid: bool | None

    def __repr__(self) -> str:  # a failing example stays readable
        shown = repr(self.data) if len(self.data) <= 64 else f"<{len(self.data)} bytes>"
        return f"Metadata({shown}, valid={self.valid})"


def subscriptions() -> st.SearchStrategy[Metadata]:
    topics = st.lists(st.sampled_from([TOPIC, "nope", "", "mixed\u00e9"]), max_size=3)
    owned = st.dictionaries(
        st.sampled_from([TOPIC, "nope"]),
        st.lists(st.sampled_from([0, 1, 2, 3, 4, -1, 2**31 - 1]), max_size=4).map(tuple),
        max_size=2,
    )
    valid = st.builds(
        lambda t, v, o, g, r: encode_subscription(
            t, version=v, owned=o, generation_id=g, rack_id=r
        ),
        topics,
        st.integers(0, 3),
        owned,
        i32s,
        st.none() | names,
    )
    truncated = st.tuples(valid, st.integers(0, 1000)).map(lambda vc: vc[0][: vc[1] % len(vc[0])])
    huge = st.builds(
        lambda version, count, tail: struct.pack(">hi", version, count) + tail,
        st.integers(0, 3),
        st.sampled_from([2**31 - 1, 2**20, -2]),
        st.binary(max_size=16),
    )
    return st.one_of(
        valid.map(lambda data: Metadata(data, valid=True)),
        valid.map(lambda data: Metadata(data, valid=True)),
        truncated.map(lambda data: Metadata(data, valid=False)),
        huge.map(lambda data: Metadata(data, valid=None)),
        st.binary(max_size=48).map(lambda data: Metadata(data, valid=None)),
        st.just(Metadata(encode_subscription([f"t{i}" for i in range(5000)]), valid=True)),
    )


protocol_lists = st.one_of(
    st.lists(st.tuples(protocol_names, subscriptions()), min_size=1, max_size=3),
    st.lists(st.tuples(protocol_names, subscriptions()), max_size=4),
    st.just([("range", Metadata(subscription(frozenset()), valid=True))] * 300),
)


@dataclass(frozen=True)
class Hostile:
    """One request: its API, version and fields (placeholders in them), and whether it
    may name the consumer-protocol member in a JoinGroup or LeaveGroup."""

    api_key: int
    version: int
    fields: Mapping[str, Any]

    def names_consumer(self) -> bool:
        ids = [self.fields.get("member_id")]
        ids += [m["member_id"] for m in self.fields.get("members", ())]
        return self.api_key in (JOIN, LEAVE) and CONSUMER_ID in ids


def joins(member_ids: st.SearchStrategy[str] = member_ids) -> st.SearchStrategy[Hostile]:
    return st.builds(
        lambda version, member_id, instance, kind, protocols, session, rebalance, reason: Hostile(
            JOIN,
            version,
            {
                "group_id": GROUP,
                "member_id": member_id,
                "group_instance_id": instance,
                "protocol_type": kind,
                "protocols": protocols,
                "session_timeout": session,
                "rebalance_timeout": rebalance,
                "reason": reason,
            },
        ),
        st.one_of(st.integers(2, 9), st.integers(0, 9)),  # v0-v1: not served
        member_ids,
        instance_ids,
        protocol_types,
        protocol_lists,
        session_timeouts,
        rebalance_timeouts,
        st.none() | names,
    )


def syncs() -> st.SearchStrategy[Hostile]:
    return st.builds(
        lambda version, member_id, instance, generation, kind, name, assignments: Hostile(
            SYNC,
            version,
            {
                "group_id": GROUP,
                "member_id": member_id,
                "group_instance_id": instance,
                "generation_id": generation,
                "protocol_type": kind,
                "protocol_name": name,
                "assignments": assignments,
            },
        ),
        st.integers(0, 5),
        member_ids,
        instance_ids,
        generations,
        st.none() | protocol_types,
        st.none() | protocol_names,
        st.lists(
            st.fixed_dictionaries({"member_id": member_ids, "assignment": st.binary(max_size=32)}),
            max_size=3,
        ),
    )


def heartbeats() -> st.SearchStrategy[Hostile]:
    return st.builds(
        lambda version, member_id, instance, generation: Hostile(
            HEARTBEAT,
            version,
            {
                "group_id": GROUP,
                "member_id": member_id,
                "group_instance_id": instance,
                "generation_id": generation,
            },
        ),
        st.integers(0, 4),
        member_ids,
        instance_ids,
        generations,
    )


def leaves(member_ids: st.SearchStrategy[str] = member_ids) -> st.SearchStrategy[Hostile]:
    identity = st.fixed_dictionaries(
        {"member_id": member_ids, "group_instance_id": instance_ids, "reason": st.none() | names}
    )
    return st.builds(
        lambda version, member_id, members: Hostile(
            LEAVE, version, {"group_id": GROUP, "member_id": member_id, "members": members}
        ),
        st.integers(0, 5),
        member_ids,
        st.lists(identity, max_size=4),
    )


def join(member_id: str = "", *, instance: str | None = None, session: int = 30_000) -> Hostile:
    """A JoinGroup v9 as a real member sends it (range, a valid subscription)."""
    protocols = [("range", Metadata(subscription(frozenset()), valid=True))]
    fields = {
        "group_id": GROUP,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": protocols,
        "session_timeout": session,
        "rebalance_timeout": 30_000,
        "reason": None,
    }
    return Hostile(JOIN, 9, fields)


def leave(*member_ids: str) -> Hostile:
    members = [{"member_id": m, "group_instance_id": None, "reason": None} for m in member_ids]
    return Hostile(LEAVE, 5, {"group_id": GROUP, "member_id": "", "members": members})


requests = st.one_of(joins(), syncs(), heartbeats(), leaves())
naming_the_consumer = st.one_of(joins(st.just(CONSUMER_ID)), leaves(st.just(CONSUMER_ID)))
examples = st.tuples(
    st.lists(requests.filter(lambda r: not r.names_consumer()), max_size=3),
    st.none() | requests | naming_the_consumer,
).map(lambda both: [*both[0], *([both[1]] if both[1] is not None else [])])
"""A few requests; one naming the consumer-protocol member (in a JoinGroup or a
LeaveGroup) only as the last."""


def resolved(hostile: Hostile, group: Mixed) -> dict[str, Any]:
    """The request's fields with the placeholders replaced by the members' ids now."""
    values = {
        CONSUMER_ID: group.consumer.member_id,
        CLASSIC_ID: group.classic.member_id,
        CURRENT: group.classic.generation,
        NEXT: group.classic.generation + 1,
        PREVIOUS: group.classic.generation - 1,
    }

    def value(v: Any) -> Any:
        if isinstance(v, str) and v in values:
            return values[v]
        if isinstance(v, Metadata):
            return v.data
        if isinstance(v, Mapping):
            return {k: value(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [value(x) for x in v]
        return v

    fields = {k: value(v) for k, v in hostile.fields.items()}
    if hostile.api_key == JOIN:
        fields["protocols"] = [{"name": n, "metadata": m} for n, m in fields["protocols"]]
    return fields


# --- what Kafka answers -----------------------------------------------------------------


def kafka_answer(hostile: Hostile, group: Mixed) -> set[ErrorCode]:
    """The codes Kafka's coordinator may answer `hostile` with, sent to the group as it
    is between examples: the consumer-protocol member and the classic member, Stable,
    no static member, the classic member offering "range" only. (For LeaveGroup v3+:
    the first member's code.)"""
    f, version = hostile.fields, hostile.version
    member_id, instance = f["member_id"], f.get("group_instance_id")
    if hostile.api_key == LEAVE and version >= 3:
        if not f["members"]:
            return {E.none}
        member_id, instance = f["members"][0]["member_id"], f["members"][0]["group_instance_id"]
    if version < {JOIN: 5, SYNC: 3, HEARTBEAT: 3, LEAVE: 3}[hostile.api_key]:
        instance = None  # a field this version does not have
    if hostile.api_key == JOIN:
        protocols = f["protocols"]
        if not MIN_SESSION_MS <= f["session_timeout"] <= MAX_SESSION_MS:
            return {E.invalid_session_timeout}
        if f["protocol_type"] != "consumer" or "range" not in {n for n, _ in protocols}:
            return {E.inconsistent_group_protocol}
        if version >= 4 and member_id == "" and instance is None:
            return {E.member_id_required}
        if instance is not None and member_id != "":
            return {E.unknown_member_id}  # no static member has this instance id
        valid = protocols[0][1].valid
        if valid is None:
            return {E.none, E.inconsistent_group_protocol}
        return {E.none} if valid else {E.inconsistent_group_protocol}
    if hostile.api_key == LEAVE:
        known = instance is None and member_id in (CONSUMER_ID, CLASSIC_ID)
        return {E.none} if known else {E.unknown_member_id}
    named = (f.get("protocol_type"), f.get("protocol_name"))
    if hostile.api_key == SYNC and version >= 5 and None in named:
        return {E.inconsistent_group_protocol}
    if instance is not None or member_id != CLASSIC_ID:
        return {E.unknown_member_id}  # not a member, or not one of the classic protocol
    if f["generation_id"] != CURRENT and f["generation_id"] != group.classic.generation:
        return {E.illegal_generation}
    if hostile.api_key == SYNC and version >= 5 and named != ("consumer", "range"):
        return {E.inconsistent_group_protocol}
    return {E.none}


API_NAMES = {JOIN: "JoinGroup", SYNC: "SyncGroup", HEARTBEAT: "Heartbeat", LEAVE: "LeaveGroup"}


def answered(hostile: Hostile, response: Any) -> str:
    """What the answer was, for Hypothesis's statistics."""
    if response is None:
        return "connection closed"
    codes = [response.error_code]
    if hostile.api_key == LEAVE and hostile.version >= 3:
        codes = [m.error_code for m in response.members] or codes
    return ErrorCode(codes[0]).name


def check_answer(hostile: Hostile, response: Any, expected: set[ErrorCode] | None) -> None:
    """Well-formed, a code Kafka gives for it (exactly Kafka's, when `expected`)."""
    if hostile.api_key == JOIN and hostile.version not in SERVED_JOIN_VERSIONS:
        assert response is None, f"JoinGroup v{hostile.version} answered: {response}"
        return
    assert response is not None, "the broker closed the connection"
    codes = [ErrorCode(response.error_code)]
    if hostile.api_key == LEAVE and hostile.version >= 3:
        assert response.error_code == E.none, response
        assert len(response.members) == len(hostile.fields["members"]), response
        codes = [ErrorCode(m.error_code) for m in response.members]
    for code in codes:
        assert code in ANSWERS[hostile.api_key], f"answered {code!r}: {response}"
    if expected is not None and codes:
        assert codes[0] in expected, (
            f"answered {codes[0]!r}, Kafka answers {sorted(expected)}: {response}"
        )
    if hostile.api_key == JOIN and codes[0] in (E.none, E.member_id_required):
        assert response.member_id, response
    if hostile.api_key == JOIN and codes[0] is E.none:
        assert response.generation_id > 0 and response.leader == "", response
        assert not response.members, "a classic member of a consumer group is never a leader"
        if hostile.version >= 7:
            first = hostile.fields["protocols"][0][0]
            assert (response.protocol_type, response.protocol_name) == ("consumer", first)
    if hostile.api_key == SYNC and codes[0] is E.none:
        try:
            partitions_of(response.assignment)
        except EmbeddedProtocolError as exc:
            raise AssertionError(f"an assignment that does not parse: {response}") from exc


# --- the tests --------------------------------------------------------------------------


@pytest.fixture
def mixed(strom_broker: StromCluster) -> Mixed:
    """The group on the fixture's broker (mixed_group.start_mixed)."""
    return start_mixed(strom_broker.bootstrap_servers, port(strom_broker))


def bugs_logged(caplog: pytest.LogCaptureFixture) -> str | None:
    text = caplog.text
    return text[-3000:] if "Traceback" in text or "bug while handling" in text else None


def test_hostile_classic_requests_to_a_mixed_group(
    mixed: Mixed, strom_broker: StromCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="strom")
    group = mixed

    @settings(
        max_examples=100,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(sent=examples)
    @example(sent=[join()])  # MEMBER_ID_REQUIRED
    @example(sent=[join(session=MIN_SESSION_MS - 1)])  # INVALID_SESSION_TIMEOUT
    @example(sent=[join("x", instance="i1")])  # UNKNOWN_MEMBER_ID: no such static member
    @example(sent=[join(instance="i1"), join(CLASSIC_ID, instance="i1")])  # FENCED
    @example(sent=[join(CONSUMER_ID)])  # the consumer-protocol member made a classic one
    @example(sent=[leave(CLASSIC_ID), join(CONSUMER_ID)])  # ... the only member left
    @example(sent=[leave(CONSUMER_ID)])  # the group turned back into a classic group
    @example(sent=[leave(CONSUMER_ID, CLASSIC_ID)])  # ... with no member
    def hostile(sent: list[Hostile]) -> None:
        for i, request in enumerate(sent):
            expected = kafka_answer(request, group) if i == 0 else None
            response = exchange(
                group.broker_port, request.api_key, request.version, resolved(request, group)
            )
            check_answer(request, response, expected)
            event(f"{API_NAMES[request.api_key]}: {answered(request, response)}")
        assert bugs_logged(caplog) is None, bugs_logged(caplog)
        assert committed(group.broker_port) == COMMITTED
        named = any(r.names_consumer() for r in sent)
        if named:
            event("the last request named the consumer-protocol member")
        group.heal(named_consumer=named)

    hostile()
    consumes_beside(group, strom_broker.bootstrap_servers)


def _join_frame(protocols: Sequence[tuple[str, bytes]]) -> bytes:
    body = build_request(
        JOIN,
        9,
        {
            "group_id": GROUP,
            "session_timeout": MEMBER_SESSION_MS,
            "rebalance_timeout": 30_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": n, "metadata": m} for n, m in protocols],
            "reason": None,
        },
    )
    return encode_request(JOIN, 9, 5, body)[4:]


def test_malformed_classic_frames_close_the_connection(mixed: Mixed) -> None:
    """Frames that do not decode (truncated, counts larger than the frame, a version
    the broker does not speak): the connection is closed or an error answered, and the
    group is as it was."""
    group = mixed
    join = _join_frame([("range", subscription(frozenset()))])
    count_at = join.index(b"range") - 2  # the protocols' count (a varint) before the name
    huge_count = join[:count_at] + b"\xff\xff\xff\xff\x0f" + join[count_at + 1 :]
    sync = encode_request(SYNC, 5, 6, build_request(SYNC, 5, group.classic.sync_fields()))[4:]
    frames = [join[:cut] for cut in (5, 12, 20, len(join) // 2, len(join) - 1)]
    frames += [huge_count, sync[: len(sync) - 3], wire.header(JOIN, 10, 9) + b"\x00" * 24]
    for frame in frames:
        with wire.connect(group.broker_port, WAIT_S) as sock:
            sock.sendall(wire.frame(frame))
            try:
                payload: bytes | None = wire.read_frame(sock)
            except wire.Closed:
                payload = None
        if payload is not None:  # an answer instead: a Kafka error code
            api_key, version = struct.unpack(">hh", frame[:4])
            _, response = decode_response(api_key, version, payload)
            assert response.error_code in ANSWERS[api_key], response
    assert committed(group.broker_port) == COMMITTED
    group.heal(named_consumer=False)


def test_a_join_out_of_the_session_timeout_bounds_is_refused(mixed: Mixed) -> None:
    """As Kafka's GroupCoordinatorService.joinGroup checks it before it looks at the group:
    a session timeout outside group.min/max.session.timeout.ms is INVALID_SESSION_TIMEOUT,
    in a consumer group too (a classic member would otherwise be fenced at once, or stay
    long after it is gone)."""
    group = mixed
    before = group.members()
    for session_ms in (MIN_SESSION_MS - 1, MAX_SESSION_MS + 1, 0, -1):
        for member_id in (group.classic.member_id, "", "someone"):
            fields = {
                "group_id": GROUP,
                "session_timeout": session_ms,
                "rebalance_timeout": 30_000,
                "member_id": member_id,
                "group_instance_id": None,
                "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": subscription(frozenset())}],
                "reason": None,
            }
            answer = exchange(group.broker_port, JOIN, 9, fields)
            assert answer.error_code == E.invalid_session_timeout, (session_ms, answer)
    assert group.members() == before
    group.heal(named_consumer=False)
