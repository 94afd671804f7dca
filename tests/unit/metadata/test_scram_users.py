"""The controller's SCRAM user decisions: Kafka's rules for AlterUserScramCredentials and
DescribeUserScramCredentials, and the records they leave in the image."""

from __future__ import annotations

import hashlib
import hmac

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.metadata.image import MetadataImage
from strom.metadata.records import RemoveUserScramCredentialRecord, UserScramCredentialRecord
from strom.metadata.scram_users import (
    DescribedUser,
    ScramDeletion,
    ScramUpsertion,
    UserResult,
    alter_scram_credentials,
    describe_scram_credentials,
    replace_user_credentials,
)

SHA256, SHA512 = 1, 2
SALT = b"0123456789abcdef"
TWICE = "A user credential cannot be altered twice in the same request"


def salted(password: str, mechanism: int = SHA256, iterations: int = 4096) -> bytes:
    name = "sha256" if mechanism == SHA256 else "sha512"
    return hashlib.pbkdf2_hmac(name, password.encode(), SALT, iterations)


def upsert(name: str, mechanism: int = SHA256, iterations: int = 4096) -> ScramUpsertion:
    return ScramUpsertion(name, mechanism, iterations, SALT, salted("pw", mechanism, iterations))


def applied(
    image: MetadataImage,
    deletions: list[ScramDeletion] | None = None,
    upsertions: list[ScramUpsertion] | None = None,
) -> tuple[MetadataImage, list[UserResult]]:
    records, results = alter_scram_credentials(image, deletions or [], upsertions or [])
    return image.replay(records), results


def test_an_upsertion_stores_the_keys_rfc_5802_derives_from_the_salted_password() -> None:
    image, results = applied(MetadataImage.empty(), upsertions=[upsert("alice")])
    assert results == [UserResult("alice")]
    record = image.scram_credential("alice", SHA256)
    assert record is not None
    salted_password = salted("pw")
    client_key = hmac.digest(salted_password, b"Client Key", "sha256")
    assert record.stored_key == hashlib.sha256(client_key).digest()
    assert record.server_key == hmac.digest(salted_password, b"Server Key", "sha256")
    assert (record.salt, record.iterations) == (SALT, 4096)


def test_describe_lists_every_user_with_mechanisms_and_iterations_never_keys() -> None:
    image, _ = applied(
        MetadataImage.empty(), upsertions=[upsert("bob", SHA512, 8192), upsert("alice")]
    )
    image, _ = applied(image, upsertions=[upsert("alice", SHA512)])
    assert describe_scram_credentials(image, None) == [
        DescribedUser("alice", credentials=((SHA256, 4096), (SHA512, 4096))),
        DescribedUser("bob", credentials=((SHA512, 8192),)),
    ]
    assert describe_scram_credentials(image, []) == describe_scram_credentials(image, None)


def test_describe_names_missing_and_twice_asked_users_as_kafka_does() -> None:
    image, _ = applied(MetadataImage.empty(), upsertions=[upsert("alice")])
    assert describe_scram_credentials(image, ["alice", "carol", "dave", "dave"]) == [
        DescribedUser("alice", credentials=((SHA256, 4096),)),
        DescribedUser(
            "carol",
            ErrorCode.resource_not_found,
            "Attempt to describe a user credential that does not exist: carol",
        ),
        DescribedUser(
            "dave",
            ErrorCode.duplicate_resource,
            "Cannot describe SCRAM credentials for the same user twice in a single request: dave",
        ),
    ]


def test_deleting_removes_one_mechanism_and_then_the_user() -> None:
    image, _ = applied(MetadataImage.empty(), upsertions=[upsert("alice")])
    image, _ = applied(image, upsertions=[upsert("alice", SHA512)])
    image, results = applied(image, deletions=[ScramDeletion("alice", SHA256)])
    assert results == [UserResult("alice")]
    assert set(image.scram_users["alice"]) == {SHA512}
    image, _ = applied(image, deletions=[ScramDeletion("alice", SHA512)])
    assert image.scram_users == {}


def test_refusals_carry_kafkas_codes_and_leave_no_records() -> None:
    image, _ = applied(MetadataImage.empty(), upsertions=[upsert("alice")])
    records, results = alter_scram_credentials(
        image,
        [ScramDeletion("nobody", SHA256), ScramDeletion("", SHA256), ScramDeletion("x", 9)],
        [
            upsert("few", iterations=4095),
            upsert("many", iterations=16385),
            ScramUpsertion("empty", SHA256, 4096, b"", b""),
            upsert("weird", mechanism=0),
        ],
    )
    assert records == []
    codes = {r.user: (r.error_code, r.error_message) for r in results}
    assert codes == {
        "nobody": (
            ErrorCode.resource_not_found,
            "Attempt to delete a user credential that does not exist",
        ),
        "": (ErrorCode.unacceptable_credential, "Username must not be empty"),
        "x": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
        "few": (ErrorCode.unacceptable_credential, codes["few"][1]),
        "many": (ErrorCode.unacceptable_credential, codes["many"][1]),
        "empty": (
            ErrorCode.unacceptable_credential,
            "The salt and the salted password must not be empty",
        ),
        "weird": (ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism"),
    }
    assert "few" in (codes["few"][1] or "").lower() and "many" in (codes["many"][1] or "").lower()


def test_a_user_named_twice_in_one_request_is_refused_as_a_duplicate() -> None:
    image, _ = applied(MetadataImage.empty(), upsertions=[upsert("alice"), upsert("bob")])
    image, _ = applied(image, upsertions=[upsert("alice", SHA512)])
    records, results = alter_scram_credentials(
        image,
        # Kafka keys by user, not by (user, mechanism): two deletions of one user clash.
        [ScramDeletion("alice", SHA256), ScramDeletion("alice", SHA512)],
        [upsert("bob"), upsert("bob", SHA512), upsert("carol")],
    )
    assert {r.user: r.error_code for r in results} == {
        "carol": ErrorCode.none,
        "alice": ErrorCode.duplicate_resource,
        "bob": ErrorCode.duplicate_resource,
    }
    assert [r.error_message for r in results if r.user != "carol"] == [TWICE, TWICE]
    assert [type(r) for r in records] == [UserScramCredentialRecord]


def test_a_stored_users_credentials_replace_the_images() -> None:
    image, _ = applied(MetadataImage.empty(), upsertions=[upsert("alice"), upsert("alice2")])
    stored = UserScramCredentialRecord("alice", SHA512, b"s", b"k", b"v", 4096)
    records = replace_user_credentials(image, "alice", [stored])
    assert records == [RemoveUserScramCredentialRecord("alice", SHA256), stored]
    image = image.replay(records)
    assert replace_user_credentials(image, "alice", [stored]) == []
    assert replace_user_credentials(image, "alice", []) == [
        RemoveUserScramCredentialRecord("alice", SHA512)
    ]


NAMES = st.sampled_from(["a", "b", "c"])
MECHANISMS = st.sampled_from([SHA256, SHA512])
REQUESTS = st.tuples(
    st.lists(st.builds(ScramDeletion, NAMES, MECHANISMS), max_size=3),
    st.lists(st.builds(upsert, NAMES, MECHANISMS), max_size=3),
)


@settings(max_examples=200, deadline=None)  # PBKDF2 per upsertion: slow on a loaded machine
@given(st.lists(REQUESTS, max_size=8))
def test_the_image_follows_a_model_of_successful_alterations(
    requests: list[tuple[list[ScramDeletion], list[ScramUpsertion]]],
) -> None:
    """A model: a dict of (user, mechanism) -> iterations, changed only for users whose
    result is a success; every user named gets exactly one result."""
    image, model = MetadataImage.empty(), dict[tuple[str, int], int]()
    for deletions, upsertions in requests:
        image, results = applied(image, deletions, upsertions)
        named = {d.name for d in deletions} | {u.name for u in upsertions}
        assert sorted(r.user for r in results) == sorted(named)
        succeeded = {r.user for r in results if r.error_code == ErrorCode.none}
        for deletion in deletions:
            if deletion.name in succeeded:
                del model[(deletion.name, deletion.mechanism)]
        for upsertion in upsertions:
            if upsertion.name in succeeded:
                model[(upsertion.name, upsertion.mechanism)] = upsertion.iterations
        seen = {
            (name, mechanism): record.iterations
            for name, credentials in image.scram_users.items()
            for mechanism, record in credentials.items()
        }
        assert seen == model
