"""AlterClientQuotas and DescribeClientQuotas (handlers/quotas.py) with a real
ControllerService on the in-memory metadata store: quotas are committed and every node
describes them; a node that is not the controller forwards the change; `validate_only`
writes nothing; Kafka's refusals; and the ACLs Kafka checks (ALTER_CONFIGS and
DESCRIBE_CONFIGS on the cluster). No socket, no sleep."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acl_admin_helpers import Op, by_alice, cluster_acl, guarded
from admin_harness import controller_with_brokers
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to, wire
from server_harness import request, run

from strom.metadata.quota_entities import QuotaEntity
from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers import quotas

Entity = dict[str, str | None]


def entry(entity: Entity, **ops: float | None) -> dict[str, Any]:
    return {
        "entity": [{"entity_type": k, "entity_name": v} for k, v in entity.items()],
        "ops": [
            {"key": key, "value": 0.0 if value is None else value, "remove": value is None}
            for key, value in ops.items()
        ],
    }


def alter(*entries: dict[str, Any], validate_only: bool = False, version: int = 1) -> Request:
    return request(
        ApiKey.ALTER_CLIENT_QUOTAS,
        version,
        {"entries": list(entries), "validate_only": validate_only},
    )


def describe(*components: tuple[str, int, str | None], strict: bool = False) -> Request:
    return request(
        ApiKey.DESCRIBE_CLIENT_QUOTAS,
        1,
        {
            "components": [
                {"entity_type": kind, "match_type": match_type, "match": match}
                for kind, match_type, match in components
            ],
            "strict": strict,
        },
    )


def entities(answer: Any) -> list[tuple[tuple[tuple[str, str | None], ...], dict[str, float]]]:
    return [
        (
            tuple((e.entity_type, e.entity_name) for e in item.entity),
            {v.key: v.value for v in item.values},
        )
        for item in answer.entries
    ]


def test_quotas_are_committed_and_described(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = wire(
            ApiKey.ALTER_CLIENT_QUOTAS,
            1,
            await one.dispatch(
                alter(
                    entry({"user": "alice", "client-id": "app"}, producer_byte_rate=1048576),
                    entry({"user": None}, request_percentage=50.5),
                    entry({"ip": "10.0.0.7"}, connection_creation_rate=20),
                )
            ),
        )
        assert [(r.error_code, r.error_message) for r in answer.entries] == [
            (ErrorCode.none, None)
        ] * 3
        assert [(e.entity_type, e.entity_name) for e in answer.entries[0].entity] == [
            ("user", "alice"),
            ("client-id", "app"),
        ]
        assert one.metadata.image.client_quotas[QuotaEntity.user(None)] == {
            "request_percentage": 50.5
        }
        described = wire(
            ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, await one.dispatch(describe(("user", 2, None)))
        )
        assert (described.error_code, described.error_message) == (ErrorCode.none, None)
        assert entities(described) == [
            ((("user", "alice"), ("client-id", "app")), {"producer_byte_rate": 1048576.0}),
            ((("user", None),), {"request_percentage": 50.5}),
        ]
        refused = wire(
            ApiKey.DESCRIBE_CLIENT_QUOTAS,
            1,
            await one.dispatch(describe(("ip", 2, None), ("user", 0, "alice"))),
        )
        assert refused.error_code == ErrorCode.invalid_request and refused.entries is None

    run(scenario())


def test_a_node_that_is_not_the_controller_forwards_the_change(tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        answer = await answered(
            quotas.handle_alter_client_quotas,
            admin_context(two, channel=loopback_to(one)),
            alter(entry({"client-id": None}, consumer_byte_rate=4096), version=0),
        )
        assert [r.error_code for r in answer.entries] == [ErrorCode.none]
        assert two.metadata.image.client_quotas == {
            QuotaEntity.client(None): {"consumer_byte_rate": 4096.0}
        }

    run(scenario())


def test_validate_only_and_refusals_write_nothing(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = wire(
            ApiKey.ALTER_CLIENT_QUOTAS,
            1,
            await one.dispatch(
                alter(
                    entry({"user": "alice"}, producer_byte_rate=10),
                    entry({"user": "bob"}, producer_byte_rate=1.5),
                    entry({"ip": "10.0.0.1", "user": "carol"}, connection_creation_rate=1),
                    validate_only=True,
                )
            ),
        )
        assert [(r.error_code, r.error_message) for r in answer.entries] == [
            (ErrorCode.none, None),
            (ErrorCode.invalid_request, "producer_byte_rate cannot be a fractional value."),
            (
                ErrorCode.invalid_request,
                "Invalid quota entity combination, IP entity should not be combined with "
                "User or ClientId",
            ),
        ]
        assert one.metadata.image.client_quotas == {}

    run(scenario())


def test_an_ip_entity_may_name_a_host_that_resolves(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = wire(
            ApiKey.ALTER_CLIENT_QUOTAS,
            1,
            await one.dispatch(
                alter(
                    entry({"ip": "localhost"}, connection_creation_rate=5),
                    entry({"ip": "no-such-host.invalid"}, connection_creation_rate=5),
                )
            ),
        )
        assert [r.error_code for r in answer.entries] == [
            ErrorCode.none,
            ErrorCode.invalid_request,
        ]
        assert answer.entries[1].error_message == (
            "no-such-host.invalid is not a valid IP or resolvable host."
        )

    run(scenario())


def test_quotas_need_alter_configs_and_describe_configs_on_the_cluster(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        denied = ErrorCode.cluster_authorization_failed
        refusing = guarded(admin_context(one), cluster_acl(Op.ALTER), cluster_acl(Op.DESCRIBE))
        changed = await answered(
            quotas.handle_alter_client_quotas,
            refusing,
            by_alice(
                alter(
                    entry({"user": "alice"}, producer_byte_rate=10),
                    entry({"client-id": "x"}, producer_byte_rate=10),
                )
            ),
        )
        assert [(r.error_code, r.error_message) for r in changed.entries] == [
            (denied, "Cluster authorization failed.")
        ] * 2
        assert [(e.entity_type, e.entity_name) for e in changed.entries[1].entity] == [
            ("client-id", "x")
        ]
        assert one.metadata.image.client_quotas == {}
        looked = await answered(
            quotas.handle_describe_client_quotas, refusing, by_alice(describe())
        )
        assert (looked.error_code, looked.error_message, looked.entries) == (
            denied,
            "Cluster authorization failed.",
            None,
        )

        allowed = guarded(
            admin_context(one), cluster_acl(Op.ALTER_CONFIGS), cluster_acl(Op.DESCRIBE_CONFIGS)
        )
        changed = await answered(
            quotas.handle_alter_client_quotas,
            allowed,
            by_alice(alter(entry({"user": "alice"}, producer_byte_rate=10))),
        )
        assert [r.error_code for r in changed.entries] == [ErrorCode.none]
        looked = await answered(quotas.handle_describe_client_quotas, allowed, by_alice(describe()))
        assert looked.error_code == ErrorCode.none and len(looked.entries) == 1

    run(scenario())
