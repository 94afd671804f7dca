"""ACL checks of CreateTopics, DeleteTopics and CreatePartitions (the config APIs' are in
test_acl_configs.py), handler by handler around a real ControllerService on the
in-memory metadata store (admin_harness): what each needs, Kafka's codes and messages
when refused, what is never disclosed, that a refused entry never reaches the
controller, and that without an authorizer nothing changes. No socket, no sleep."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from acl_admin_helpers import (
    ALICE,
    ALLOW,
    AUTHORIZER,
    DENY,
    HOST,
    PREFIXED,
    Op,
    acl,
    by_alice,
    cluster_acl,
    guarded,
)
from admin_harness import (
    TOPIC,
    controller_with_brokers,
    create_partitions,
    create_topics,
    delete_named,
    delete_topic_ids,
    delete_topics,
)
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to
from server_harness import request, run

from strom.config import load_config
from strom.metadata import acl_changes
from strom.metadata.controller import NewTopic
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, decode_request
from strom.security.acls import AclBinding, PatternType
from strom.security.operations import AclResourceType
from strom.server.broker import Broker
from strom.server.handlers import admin
from strom.server.private import decode_forward_request

E = ErrorCode


async def topics(node: Broker, *names: str) -> None:
    """Create `names` (one partition, one replica each) with no authorizer asked."""
    answer = await answered(
        admin.handle_create_topics,
        admin_context(node),
        create_topics(*((name, 1, 1, {}) for name in names)),
    )
    assert {t.error_code for t in answer.topics} == {E.none}


def forwarded(sent: list[tuple[int, int, bytes]]) -> list[Request]:
    """The client requests a Loopback carried to the controller (FORWARD frames), each as
    the principal and host it was sent for."""
    requests = []
    for _key, version, payload in sent:
        carried = decode_forward_request(version, payload)
        assert carried.principal is not None, "a client's request is forwarded as its own"
        requests.append(
            decode_request(
                carried.frame, client_host=carried.client_host, principal=carried.principal
            )
        )
    return requests


# --- CreateTopics ---------------------------------------------------------------------


def test_create_topics_needs_create_on_the_topic_and_hides_whether_it_exists(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "secret")
        context = guarded(
            admin_context(one),
            acl(Op.CREATE, TOPIC),
            acl(Op.CREATE, "ok-", pattern=PREFIXED),
            acl(Op.ALTER_CONFIGS, "ok-", pattern=PREFIXED),  # allows DESCRIBE_CONFIGS too
            acl(Op.CREATE, "ok-no", pattern=PREFIXED, permission=DENY),
        )
        asked = create_topics(
            ("secret", 1, 1, {}),
            (TOPIC, 2, 1, {"retention.ms": "1000"}),
            ("nope", 1, 1, {}),
            ("ok-1", 1, 1, {}),
            ("ok-not", 1, 1, {}),
        )
        answer = await answered(admin.handle_create_topics, context, by_alice(asked))
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("secret", E.topic_authorization_failed),  # not TOPIC_ALREADY_EXISTS
            (TOPIC, E.none),
            ("nope", E.topic_authorization_failed),
            ("ok-1", E.none),
            ("ok-not", E.topic_authorization_failed),
        ]
        for refused in (answer.topics[0], answer.topics[2], answer.topics[4]):
            assert refused.error_message == "Authorization failed."
            assert (refused.num_partitions, refused.replication_factor) == (-1, -1)
            assert refused.topic_id is None and refused.configs == ()
        image = one.metadata.image
        assert {"nope", "ok-not"}.isdisjoint(image.topics_by_name)
        assert len(image.topics_by_name[TOPIC].partitions) == 2

        # Created, but without DESCRIBE_CONFIGS on it its configs are not told.
        hidden, shown = answer.topics[1], answer.topics[3]
        assert hidden.topic_config_error_code == E.topic_authorization_failed
        assert (hidden.num_partitions, hidden.replication_factor, hidden.configs) == (-1, -1, ())
        assert hidden.topic_id == image.topics_by_name[TOPIC].topic_id
        assert image.topic_configs(TOPIC) == {"retention.ms": "1000"}
        assert shown.topic_config_error_code == E.none
        assert (shown.num_partitions, shown.replication_factor) == (1, 1)
        assert "cleanup.policy" in {c.name for c in shown.configs}

    run(scenario())


def test_create_on_the_cluster_creates_any_topic_but_shows_no_topic_configs(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        context = guarded(
            admin_context(one),
            cluster_acl(Op.CREATE),
            cluster_acl(Op.DESCRIBE_CONFIGS),  # not the topic's: no configs
            acl(Op.DESCRIBE_CONFIGS, "b"),
        )
        answer = await answered(
            admin.handle_create_topics,
            context,
            by_alice(create_topics(("a", 1, 1, {}), ("b", 1, 1, {}), validate_only=True)),
        )
        assert [(t.name, t.error_code, t.topic_config_error_code) for t in answer.topics] == [
            ("a", E.none, E.topic_authorization_failed),
            ("b", E.none, E.none),
        ]
        assert answer.topics[0].configs == () and answer.topics[1].configs != ()
        assert {"a", "b"}.isdisjoint(one.metadata.image.topics_by_name)

    run(scenario())


def test_a_topic_named_twice_is_invalid_whatever_the_acls(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = await answered(
            admin.handle_create_topics,
            guarded(admin_context(one)),
            by_alice(create_topics(("twice", 1, 1, {}), ("twice", 1, 1, {}), ("once", 1, 1, {}))),
        )
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("twice", E.invalid_request),
            ("twice", E.invalid_request),
            ("once", E.topic_authorization_failed),
        ]
        assert "twice" not in one.metadata.image.topics_by_name

    run(scenario())


def test_only_the_allowed_topics_are_forwarded_and_none_when_all_are_refused(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        link = loopback_to(one)
        at_two = guarded(admin_context(two, channel=link), acl(Op.CREATE, "mine"))
        answer = await answered(
            admin.handle_create_topics,
            at_two,
            by_alice(create_topics(("theirs", 1, 1, {}), ("mine", 1, 1, {}))),
        )
        assert [(t.name, t.error_code) for t in answer.topics] == [
            ("theirs", E.topic_authorization_failed),
            ("mine", E.none),
        ]
        (sent,) = forwarded(link.sent)
        assert [t.name for t in sent.body.topics] == ["mine"]
        assert "mine" in two.metadata.image.topics_by_name

        answer = await answered(
            admin.handle_create_topics, at_two, by_alice(create_topics(("theirs", 1, 1, {})))
        )
        assert answer.topics[0].error_code == E.topic_authorization_failed
        assert len(link.sent) == 1  # nothing left to ask the controller

    run(scenario())


def test_the_controller_checks_a_forwarded_request_again_with_its_own_acls(
    tmp_path: Path,
) -> None:
    """The broker two still allows alice to create "mine" (its image lags behind the
    removal of that ACL); the controller, whose ACLs allow only "ours" and only from
    alice's host, refuses it: the forwarded request carries her principal and host."""

    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2, config=[AUTHORIZER])
        from_her_host = AclBinding(
            AclResourceType.TOPIC, "ours", PatternType.LITERAL, ALICE, HOST, Op.CREATE, ALLOW
        )
        refusals = (
            await admin_context(one)
            .active_controller()
            .decide(
                lambda image: acl_changes.create_acls(image, [from_her_host], znode_names=False)
            )
        )
        assert refusals == [None]
        link = loopback_to(one)
        lagging = guarded(
            admin_context(two, channel=link), acl(Op.CREATE, "mine"), acl(Op.CREATE, "ours")
        )
        answer = await answered(
            admin.handle_create_topics,
            lagging,
            by_alice(create_topics(("mine", 1, 1, {}), ("ours", 1, 1, {}))),
        )
        assert [(t.name, t.error_code, t.error_message) for t in answer.topics] == [
            ("mine", E.topic_authorization_failed, "Authorization failed."),
            ("ours", E.none, None),
        ]
        assert "mine" not in one.metadata.image.topics_by_name
        (sent,) = forwarded(link.sent)
        assert (sent.principal, sent.client_host) == (ALICE, HOST)

        elsewhere = dataclasses.replace(
            by_alice(create_topics(("ours-too", 1, 1, {}))), client_host="10.9.9.9"
        )
        lagging = guarded(admin_context(two, channel=link), acl(Op.CREATE, "ours-too"))
        answer = await answered(admin.handle_create_topics, lagging, elsewhere)
        assert answer.topics[0].error_code == E.topic_authorization_failed

        # The broker's own request (a topic it auto-creates) is not a principal's.
        (result,) = await admin.create_topics(
            admin_context(two, channel=link), [NewTopic("auto", 1, 1)]
        )
        assert result.error_code == E.none
        assert [version for _key, version, _payload in link.sent] == [1, 1, 0]

    run(scenario())


def test_without_an_authorizer_create_topics_is_unchanged(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = await answered(
            admin.handle_create_topics,
            admin_context(one),
            by_alice(create_topics((TOPIC, 2, 1, {}))),
        )
        (topic,) = answer.topics
        assert (topic.error_code, topic.topic_config_error_code) == (E.none, E.none)
        assert topic.num_partitions == 2 and topic.configs != ()

    run(scenario())


# --- DeleteTopics ---------------------------------------------------------------------


def test_delete_topics_tells_of_existence_only_what_describe_allows(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "hidden", "seen", "gone")
        context = guarded(
            admin_context(one),
            acl(Op.DESCRIBE, "seen"),
            acl(Op.DESCRIBE, "seen-missing"),
            acl(Op.DELETE, "gone"),  # allows DESCRIBE too
        )
        answer = await answered(
            admin.handle_delete_topics,
            context,
            by_alice(delete_named("hidden", "ghost", "seen", "seen-missing", "gone")),
        )
        assert [(r.name, r.error_code) for r in answer.responses] == [
            ("hidden", E.topic_authorization_failed),
            ("ghost", E.topic_authorization_failed),  # missing, and not told so
            ("seen", E.topic_authorization_failed),
            ("seen-missing", E.unknown_topic_or_partition),
            ("gone", E.none),
        ]
        assert answer.responses[0].error_message == "Topic authorization failed."
        names = one.metadata.image.topics_by_name
        assert "gone" not in names and {"hidden", "seen"} <= set(names)

    run(scenario())


def test_delete_topics_by_id_names_only_topics_the_principal_may_describe(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "hidden", "seen", "gone")
        ids = {name: t.topic_id for name, t in one.metadata.image.topics_by_name.items()}
        unknown = type(ids["seen"])(int=99)
        context = guarded(
            admin_context(one), acl(Op.DESCRIBE, "seen"), acl(Op.DELETE, "g", pattern=PREFIXED)
        )
        answer = await answered(
            admin.handle_delete_topics,
            context,
            by_alice(delete_topic_ids(ids["hidden"], unknown, ids["seen"], ids["gone"])),
        )
        assert [(r.name, r.topic_id, r.error_code) for r in answer.responses] == [
            (None, ids["hidden"], E.topic_authorization_failed),
            (None, unknown, E.unknown_topic_id),  # ids are no secret
            ("seen", ids["seen"], E.topic_authorization_failed),
            ("gone", ids["gone"], E.none),
        ]
        assert set(one.metadata.image.topics_by_name) == {"hidden", "seen"}

    run(scenario())


def test_delete_on_the_cluster_deletes_any_topic_and_without_an_authorizer_all_do(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "a", "b")
        context = guarded(admin_context(one), cluster_acl(Op.DELETE))
        answer = await answered(admin.handle_delete_topics, context, by_alice(delete_topics("a")))
        assert [(r.name, r.error_code) for r in answer.responses] == [("a", E.none)]
        refused = await answered(
            admin.handle_delete_topics,
            guarded(admin_context(one), acl(Op.DELETE, "x")),
            by_alice(delete_topics("b", "x")),
        )
        assert [(r.name, r.error_code) for r in refused.responses] == [
            ("b", E.topic_authorization_failed),
            ("x", E.unknown_topic_or_partition),
        ]
        assert set(one.metadata.image.topics_by_name) == {"b"}

        unchanged = await answered(
            admin.handle_delete_topics, admin_context(one), by_alice(delete_topics("b", "x"))
        )
        assert [(r.name, r.error_code) for r in unchanged.responses] == [
            ("b", E.none),
            ("x", E.unknown_topic_or_partition),
        ]
        assert one.metadata.image.topics_by_name == {}

    run(scenario())


def test_disabled_deletion_is_said_before_any_acl(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, TOPIC)
        disabled = load_config(
            overrides=["node.id=1", f"log.dirs={tmp_path / 'x'}", "delete.topic.enable=false"]
        )
        answer = await answered(
            admin.handle_delete_topics,
            guarded(admin_context(one, config=disabled)),
            by_alice(delete_named(TOPIC, "ghost")),
        )
        assert {r.error_code for r in answer.responses} == {E.topic_deletion_disabled}
        assert TOPIC in one.metadata.image.topics_by_name

    run(scenario())


# --- CreatePartitions -----------------------------------------------------------------


def create_partitions_of(*names: str, count: int = 3) -> Request:
    return request(
        ApiKey.CREATE_PARTITIONS,
        3,
        {
            "topics": [{"name": n, "count": count, "assignments": None} for n in names],
            "timeout": 30_000,
            "validate_only": False,
        },
    )


def test_create_partitions_needs_alter_on_each_topic(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, TOPIC, "other")
        context = guarded(
            admin_context(one),
            acl(Op.ALTER, TOPIC),
            cluster_acl(Op.ALTER),  # no cluster-wide shortcut
            acl(Op.DESCRIBE, "other"),
        )
        answer = await answered(
            admin.handle_create_partitions,
            context,
            by_alice(create_partitions_of("other", TOPIC, "ghost")),
        )
        assert [(r.name, r.error_code, r.error_message) for r in answer.results] == [
            ("other", E.topic_authorization_failed, None),
            (TOPIC, E.none, None),
            ("ghost", E.topic_authorization_failed, None),  # not UNKNOWN_TOPIC_OR_PARTITION
        ]
        image = one.metadata.image
        assert len(image.topics_by_name[TOPIC].partitions) == 3
        assert len(image.topics_by_name["other"].partitions) == 1

        unchanged = await answered(
            admin.handle_create_partitions, admin_context(one), by_alice(create_partitions(4))
        )
        assert unchanged.results[0].error_code == E.none

    run(scenario())
