"""AlterUserScramCredentials and DescribeUserScramCredentials (handlers/scram.py) with a
real ControllerService on the in-memory metadata store: the credential is committed and
every node describes it; a node that is not the controller forwards the change; answers
carry Kafka's codes; hostile requests get error codes. No socket, no sleep."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from admin_harness import controller_with_brokers
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from quorum_harness import admin_context, answered, loopback_to, wire
from server_harness import request, run

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request
from strom.server.handlers import scram

SALT = b"sixteen byte slt"


def upsertion(name: str, mechanism: int = 1, iterations: int = 4096) -> dict[str, Any]:
    salted = hashlib.pbkdf2_hmac("sha256", b"pw", SALT, iterations)
    return {
        "name": name,
        "mechanism": mechanism,
        "iterations": iterations,
        "salt": SALT,
        "salted_password": salted,
    }


def alter(
    upsertions: list[dict[str, Any]], deletions: list[dict[str, Any]] | None = None
) -> Request:
    return request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        0,
        {"deletions": deletions or [], "upsertions": upsertions},
    )


def describe(*names: str, every: bool = False) -> Request:
    users = None if every else [{"name": name} for name in names]
    return request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": users})


def test_a_user_is_committed_and_described_without_its_keys(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = wire(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            0,
            await one.dispatch(alter([upsertion("alice"), upsertion("bob", 2, 8192)])),
        )
        assert [(r.user, r.error_code) for r in answer.results] == [
            ("alice", ErrorCode.none),
            ("bob", ErrorCode.none),
        ]
        record = one.metadata.image.scram_credential("alice", 1)
        assert record is not None and record.salt == SALT and record.iterations == 4096
        described = wire(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, await one.dispatch(describe(every=True))
        )
        assert described.error_code == ErrorCode.none
        assert [
            (r.user, [(c.mechanism, c.iterations) for c in r.credential_infos])
            for r in described.results
        ] == [("alice", [(1, 4096)]), ("bob", [(2, 8192)])]

        missing = wire(
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, await one.dispatch(describe("carol"))
        )
        (result,) = missing.results
        assert result.error_code == ErrorCode.resource_not_found
        assert result.error_message == (
            "Attempt to describe a user credential that does not exist: carol"
        )

    run(scenario())


def test_a_node_that_is_not_the_controller_forwards_the_change(tmp_path: Path) -> None:
    async def scenario() -> None:
        one, two = await controller_with_brokers(tmp_path, 1, 2)
        answer = await answered(
            scram.handle_alter_user_scram_credentials,
            admin_context(two, channel=loopback_to(one)),
            alter([upsertion("alice")]),
        )
        assert [(r.user, r.error_code) for r in answer.results] == [("alice", ErrorCode.none)]
        assert two.metadata.image.scram_credential("alice", 1) is not None

    run(scenario())


def test_refusals_carry_kafkas_codes(tmp_path: Path) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path, 1)
        answer = wire(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
            0,
            await one.dispatch(
                alter(
                    [upsertion("few", iterations=10), upsertion("odd", mechanism=7)],
                    [{"name": "ghost", "mechanism": 1}],
                )
            ),
        )
        assert {r.user: r.error_code for r in answer.results} == {
            "few": ErrorCode.unacceptable_credential,
            "odd": ErrorCode.unsupported_sasl_mechanism,
            "ghost": ErrorCode.resource_not_found,
        }
        assert one.metadata.image.scram_users == {}

    run(scenario())


NAMES = st.text(max_size=8)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    upserts=st.lists(
        st.fixed_dictionaries(
            {
                "name": NAMES,
                "mechanism": st.integers(-128, 127),
                "iterations": st.integers(-(2**31), 2**31 - 1),
                "salt": st.binary(max_size=40),
                "salted_password": st.binary(max_size=80),
            }
        ),
        max_size=4,
    ),
    deletes=st.lists(
        st.fixed_dictionaries({"name": NAMES, "mechanism": st.integers(-128, 127)}), max_size=3
    ),
)
def test_hostile_alterations_get_an_answer_per_user(
    tmp_path: Path, upserts: list[dict[str, Any]], deletes: list[dict[str, Any]]
) -> None:
    async def scenario() -> None:
        (one,) = await controller_with_brokers(tmp_path / str(id(upserts)), 1)
        answer = wire(
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, await one.dispatch(alter(upserts, deletes))
        )
        named = {u["name"] for u in upserts} | {d["name"] for d in deletes}
        assert sorted(r.user for r in answer.results) == sorted(named)
        for user, credentials in one.metadata.image.scram_users.items():
            assert user in named and user
            assert all(4096 <= c.iterations <= 16384 for c in credentials.values())

    run(scenario())
