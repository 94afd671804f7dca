"""CreatePartitions with a topic named twice, and with refused topics beside allowed ones,
around a real ControllerService on the in-memory metadata store: each entry of a name
asked twice is INVALID_REQUEST "Duplicate topic name." (as Kafka's controller answers)
before any ACL is asked, with or without an authorizer, and that topic is left as it
was; a refused topic never stops an allowed one from growing. No socket, no sleep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acl_admin_helpers import Op, acl, by_alice, cluster_acl, guarded
from admin_harness import controller_with_brokers
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to
from server_harness import run
from test_acl_admin import create_partitions_of, forwarded, topics

from strom.server.broker import Broker
from strom.server.handlers import admin

E = ErrorCode
DUPLICATE = (E.invalid_request, "Duplicate topic name.")


def outcomes(answer: Any) -> list[tuple[str, ErrorCode, str | None]]:
    return [(r.name, E(r.error_code), r.error_message) for r in answer.results]


def partitions(node: Broker) -> dict[str, int]:
    """How many partitions each topic has."""
    return {name: len(t.partitions) for name, t in node.metadata.image.topics_by_name.items()}


def test_a_topic_named_twice_is_invalid_without_an_authorizer(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "twice", "once")
        answer = await answered(
            admin.handle_create_partitions,
            admin_context(one),
            by_alice(create_partitions_of("twice", "once", "twice")),
        )
        assert outcomes(answer) == [
            ("twice", *DUPLICATE),
            ("once", E.none, None),
            ("twice", *DUPLICATE),
        ]
        assert partitions(one) == {"twice": 1, "once": 3}

        only_twice = await answered(
            admin.handle_create_partitions,
            admin_context(one),
            by_alice(create_partitions_of("twice", "twice")),
        )
        assert outcomes(only_twice) == [("twice", *DUPLICATE)] * 2
        assert partitions(one) == {"twice": 1, "once": 3}

    run(scenario())


def test_a_topic_named_twice_is_invalid_before_any_acl(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        await topics(one, "twice", "mine", "theirs")
        context = guarded(
            admin_context(one),
            acl(Op.ALTER, "twice"),
            acl(Op.ALTER, "mine"),
            acl(Op.DESCRIBE, "theirs"),
            cluster_acl(Op.ALTER),  # no cluster-wide shortcut
        )
        asked = create_partitions_of("twice", "theirs", "mine", "twice", "ghost", "ghost")
        answer = await answered(admin.handle_create_partitions, context, by_alice(asked))
        assert outcomes(answer) == [
            ("twice", *DUPLICATE),  # allowed, yet named twice
            ("theirs", E.topic_authorization_failed, None),
            ("mine", E.none, None),  # beside the refused ones, it grows
            ("twice", *DUPLICATE),
            ("ghost", *DUPLICATE),  # neither allowed nor existing: still a duplicate
            ("ghost", *DUPLICATE),
        ]
        assert partitions(one) == {"twice": 1, "mine": 3, "theirs": 1}

        nothing_allowed = guarded(admin_context(one), acl(Op.ALTER, "mine"))
        refused = await answered(
            admin.handle_create_partitions,
            nothing_allowed,
            by_alice(create_partitions_of("theirs", "twice", "twice", count=4)),
        )
        assert outcomes(refused) == [
            ("theirs", E.topic_authorization_failed, None),
            ("twice", *DUPLICATE),
            ("twice", *DUPLICATE),
        ]
        assert partitions(one) == {"twice": 1, "mine": 3, "theirs": 1}

    run(scenario())


def test_only_the_allowed_single_topics_are_forwarded(tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        await topics(one, "twice", "mine", "theirs")
        link = loopback_to(one)
        at_two = guarded(
            admin_context(two, channel=link), acl(Op.ALTER, "twice"), acl(Op.ALTER, "mine")
        )
        answer = await answered(
            admin.handle_create_partitions,
            at_two,
            by_alice(create_partitions_of("twice", "mine", "theirs", "twice")),
        )
        assert [(name, code) for name, code, _ in outcomes(answer)] == [
            ("twice", E.invalid_request),
            ("mine", E.none),
            ("theirs", E.topic_authorization_failed),
            ("twice", E.invalid_request),
        ]
        (sent,) = forwarded(link.sent)
        assert [t.name for t in sent.body.topics] == ["mine"]
        assert partitions(two) == {"twice": 1, "mine": 3, "theirs": 1}

        # Nothing left to ask the controller: nothing is forwarded.
        again = await answered(
            admin.handle_create_partitions,
            at_two,
            by_alice(create_partitions_of("twice", "twice", "theirs", count=5)),
        )
        assert {code for _, code, _ in outcomes(again)} == {
            E.invalid_request,
            E.topic_authorization_failed,
        }
        assert len(link.sent) == 1

    run(scenario())
