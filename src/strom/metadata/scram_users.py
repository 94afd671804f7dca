"""The controller's SCRAM user decisions, as pure functions of the image.

    alter_scram_credentials(image, deletions, upsertions) -> (records, results)
    describe_scram_credentials(image, names) -> results

The rules are Kafka's (its ScramControlManager and ScramImage): a user may be named once
per request, deletions and upsertions together (a second mention is DUPLICATE_RESOURCE
for that user); an unknown mechanism is UNSUPPORTED_SASL_MECHANISM; an empty name or an
iteration count outside the mechanism's bounds is UNACCEPTABLE_CREDENTIAL; deleting a
credential that does not exist is RESOURCE_NOT_FOUND. The client sends the salted
password (never the password); the controller turns it into the stored and server keys,
which is all a broker needs to check a client. strom also refuses an empty salt or salted
password, which no client that means it sends.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from strom.metadata.image import MetadataImage
from strom.metadata.records import (
    MetadataRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
)
from strom.security.scram import (
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
    validate_iterations,
)

__all__ = [
    "DescribedUser",
    "ScramDeletion",
    "ScramUpsertion",
    "UserResult",
    "alter_scram_credentials",
    "credential_of",
    "credential_record",
    "describe_scram_credentials",
    "replace_user_credentials",
]

_TWICE = "A user credential cannot be altered twice in the same request"
_DESCRIBED_TWICE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
_NO_SUCH_USER = "Attempt to describe a user credential that does not exist: "


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    name: str
    mechanism: int
    """Kafka's ScramMechanism type: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512."""


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    name: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class UserResult:
    user: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedUser:
    user: str
    error_code: ErrorCode = ErrorCode.none
    error_message: str | None = None
    credentials: tuple[tuple[int, int], ...] = ()
    """(mechanism type, iterations) of each credential the user has, by mechanism."""


def credential_of(record: UserScramCredentialRecord) -> ScramCredential:
    """What a broker checks a SCRAM client against, from the record that stores it."""
    return ScramCredential(record.salt, record.stored_key, record.server_key, record.iterations)


def credential_record(
    name: str, mechanism_type: int, credential: ScramCredential
) -> UserScramCredentialRecord:
    """The record storing `name`'s credential for a mechanism (Kafka's type number)."""
    return UserScramCredentialRecord(
        name,
        mechanism_type,
        credential.salt,
        credential.stored_key,
        credential.server_key,
        credential.iterations,
    )


class _Refusal(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.result_code = code
        self.message = message


def _mechanism(name: str, mechanism_type: int) -> ScramMechanism:
    if not name:
        raise _Refusal(ErrorCode.unacceptable_credential, "Username must not be empty")
    mechanism = ScramMechanism.from_kafka_type(mechanism_type)
    if mechanism is None:
        raise _Refusal(ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return mechanism


def _check_deletion(image: MetadataImage, deletion: ScramDeletion) -> None:
    _mechanism(deletion.name, deletion.mechanism)
    if image.scram_credential(deletion.name, deletion.mechanism) is None:
        raise _Refusal(
            ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"
        )


def _upsertion_record(upsertion: ScramUpsertion) -> UserScramCredentialRecord:
    mechanism = _mechanism(upsertion.name, upsertion.mechanism)
    problem = validate_iterations(mechanism, upsertion.iterations)
    if problem is not None:
        raise _Refusal(ErrorCode.unacceptable_credential, problem)
    if not upsertion.salt or not upsertion.salted_password:
        raise _Refusal(
            ErrorCode.unacceptable_credential, "The salt and the salted password must not be empty"
        )
    credential = credential_from_salted_password(
        mechanism, upsertion.salted_password, upsertion.salt, upsertion.iterations
    )
    return credential_record(upsertion.name, upsertion.mechanism, credential)


def alter_scram_credentials(
    image: MetadataImage,
    deletions: Sequence[ScramDeletion],
    upsertions: Sequence[ScramUpsertion],
) -> tuple[list[MetadataRecord], list[UserResult]]:
    """The records of one AlterUserScramCredentials request, and one result per user:
    the deletions', then the upsertions', then the refused users'."""
    errors: dict[str, UserResult] = {}
    deleting: dict[str, ScramDeletion] = {}
    upserting: dict[str, UserScramCredentialRecord] = {}
    for deletion in deletions:
        if deletion.name in errors:
            continue
        if deleting.pop(deletion.name, None) is not None:
            errors[deletion.name] = UserResult(deletion.name, ErrorCode.duplicate_resource, _TWICE)
            continue
        try:
            _check_deletion(image, deletion)
        except _Refusal as refusal:
            errors[deletion.name] = UserResult(deletion.name, refusal.result_code, refusal.message)
            continue
        deleting[deletion.name] = deletion
    for upsertion in upsertions:
        if upsertion.name in errors:
            continue
        if (
            deleting.pop(upsertion.name, None) is not None
            or upserting.pop(upsertion.name, None) is not None
        ):
            errors[upsertion.name] = UserResult(
                upsertion.name, ErrorCode.duplicate_resource, _TWICE
            )
            continue
        try:
            upserting[upsertion.name] = _upsertion_record(upsertion)
        except _Refusal as refusal:
            errors[upsertion.name] = UserResult(
                upsertion.name, refusal.result_code, refusal.message
            )
    records: list[MetadataRecord] = [
        RemoveUserScramCredentialRecord(d.name, d.mechanism) for d in deleting.values()
    ]
    records.extend(upserting.values())
    results = [UserResult(name) for name in deleting]
    results.extend(UserResult(name) for name in upserting)
    results.extend(errors.values())
    return records, results


def describe_scram_credentials(
    image: MetadataImage, names: Sequence[str] | None
) -> list[DescribedUser]:
    """One result per user asked for (every user when `names` is None or empty): its
    credentials' mechanisms and iterations, never their keys."""
    if not names:
        return [_described(image, name) for name in sorted(image.scram_users)]
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    results = []
    for name, count in counts.items():
        if count > 1:
            results.append(
                DescribedUser(name, ErrorCode.duplicate_resource, _DESCRIBED_TWICE + name)
            )
        else:
            results.append(_described(image, name))
    return results


def _described(image: MetadataImage, name: str) -> DescribedUser:
    credentials = image.scram_users.get(name)
    if not credentials:
        return DescribedUser(name, ErrorCode.resource_not_found, _NO_SUCH_USER + name)
    return DescribedUser(
        name,
        credentials=tuple(
            (mechanism, credentials[mechanism].iterations) for mechanism in sorted(credentials)
        ),
    )


def replace_user_credentials(
    image: MetadataImage, name: str, credentials: Sequence[UserScramCredentialRecord]
) -> list[MetadataRecord]:
    """The records that make `name`'s credentials exactly `credentials` (what an operator
    wrote into ZooKeeper); none if they are already."""
    stored = {record.mechanism: record for record in credentials}
    known = image.scram_users.get(name, {})
    records: list[MetadataRecord] = [
        RemoveUserScramCredentialRecord(name, mechanism)
        for mechanism in sorted(known.keys() - stored.keys())
    ]
    records += [record for m, record in sorted(stored.items()) if known.get(m) != record]
    return records
