"""The controller's client quota decisions and DescribeClientQuotas' filter: Kafka's rules,
codes and messages, and the records they leave in the image."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from strom.metadata.client_quotas import (
    DescribedQuotas,
    FilterComponent,
    MatchType,
    QuotaAlteration,
    QuotaOp,
    QuotaResult,
    alter_client_quotas,
    describe_client_quotas,
    replace_entity_quotas,
)
from strom.metadata.image import MetadataImage
from strom.metadata.quota_entities import QuotaEntity
from strom.metadata.records import ClientQuotaRecord

INVALID = ErrorCode.invalid_request
ALICE = QuotaEntity.user("alice")


def alteration(parts: dict[str, str | None], **ops: float | None) -> QuotaAlteration:
    return QuotaAlteration(
        tuple(parts.items()), tuple(QuotaOp(key, value) for key, value in ops.items())
    )


def applied(
    image: MetadataImage, *alterations: QuotaAlteration, validate_only: bool = False
) -> tuple[MetadataImage, list[QuotaResult]]:
    records, results = alter_client_quotas(image, alterations, validate_only=validate_only)
    return image.replay(records), results


def refusal(parts: dict[str, str | None], **ops: float | None) -> str | None:
    _image, [result] = applied(MetadataImage.empty(), alteration(parts, **ops))
    assert result.error_code in (INVALID, ErrorCode.none)
    return result.error_message


def test_set_then_remove_leaves_records_and_then_nothing() -> None:
    image, results = applied(
        MetadataImage.empty(),
        alteration({"user": "alice"}, producer_byte_rate=1048576, request_percentage=12.5),
        alteration({"user": None, "client-id": "app"}, consumer_byte_rate=2048),
    )
    assert results == [
        QuotaResult(ALICE),
        QuotaResult(QuotaEntity.user_client(None, "app")),
    ]
    assert image.client_quotas == {
        ALICE: {"producer_byte_rate": 1048576.0, "request_percentage": 12.5},
        QuotaEntity.user_client(None, "app"): {"consumer_byte_rate": 2048.0},
    }
    image, results = applied(
        image, alteration({"user": "alice"}, producer_byte_rate=None, request_percentage=None)
    )
    assert results == [QuotaResult(ALICE)]
    assert ALICE not in image.client_quotas


def test_unchanged_values_and_removals_of_absent_keys_write_nothing() -> None:
    image, _ = applied(MetadataImage.empty(), alteration({"user": "alice"}, producer_byte_rate=5))
    records, results = alter_client_quotas(
        image,
        [alteration({"user": "alice"}, producer_byte_rate=5.0, consumer_byte_rate=None)],
    )
    assert records == []
    assert results == [QuotaResult(ALICE)]
    # A removal is not checked: Kafka answers a removal of an unknown key with success.
    assert refusal({"user": "alice"}, no_such_key=None) is None


def test_validate_only_answers_without_records() -> None:
    records, results = alter_client_quotas(
        MetadataImage.empty(),
        [alteration({"ip": "10.0.0.1"}, connection_creation_rate=20)],
        validate_only=True,
    )
    assert (records, results) == ([], [QuotaResult(QuotaEntity.ip("10.0.0.1"))])


def test_entities_are_refused_with_kafkas_messages() -> None:
    assert refusal({}, producer_byte_rate=1) == "Invalid empty client quota entity"
    assert refusal({"group": "g"}, producer_byte_rate=1) == (
        "Unhandled client quota entity type: group"
    )
    assert refusal({"user": ""}, producer_byte_rate=1) == "Empty user not supported"
    assert refusal({"client-id": ""}, producer_byte_rate=1) == "Empty client-id not supported"
    assert refusal({"ip": "1.2.3.4", "user": "a"}, connection_creation_rate=1) == (
        "Invalid quota entity combination, IP entity should not be combined with User or ClientId"
    )
    assert refusal({"ip": "not an address"}, connection_creation_rate=1) == (
        "not an address is not a valid IP or resolvable host."
    )
    _image, [result] = applied(
        MetadataImage.empty(),
        QuotaAlteration((("user", "a"), ("user", "b")), (QuotaOp("producer_byte_rate", 1),)),
    )
    assert result.error_message == "Invalid client quota entity, duplicate entity entry user"


def test_an_ip_may_be_an_ipv6_address_the_default_or_a_host_that_resolves() -> None:
    assert refusal({"ip": "::1"}, connection_creation_rate=1) is None
    assert refusal({"ip": None}, connection_creation_rate=1) is None
    _records, [result] = alter_client_quotas(
        MetadataImage.empty(),
        [alteration({"ip": "broker1.example"}, connection_creation_rate=1)],
        resolves=lambda host: host == "broker1.example",
    )
    assert result.error_code == ErrorCode.none


def test_keys_and_values_are_checked_as_kafka_checks_them() -> None:
    assert refusal({"user": "a"}, connection_creation_rate=1) == (
        "Invalid configuration key connection_creation_rate"
    )
    assert refusal({"ip": "1.2.3.4"}, producer_byte_rate=1) == (
        "Invalid configuration key producer_byte_rate"
    )
    assert refusal({"user": "a"}, producer_byte_rate=0) == (
        "Quota producer_byte_rate must be greater than 0"
    )
    assert refusal({"user": "a"}, request_percentage=-1.5) == (
        "Quota request_percentage must be greater than 0"
    )
    assert refusal({"user": "a"}, producer_byte_rate=1.5) == (
        "producer_byte_rate cannot be a fractional value."
    )
    assert refusal({"user": "a"}, producer_byte_rate=2.0**64) == (
        "Proposed value for producer_byte_rate is too large for a LONG."
    )
    assert refusal({"ip": None}, connection_creation_rate=2.0**31) == (
        "Proposed value for connection_creation_rate is too large for an INT."
    )
    assert refusal({"user": "a"}, controller_mutation_rate=0.25) is None
    assert refusal({"user": "a"}, request_percentage=float("nan")) == (
        "Quota request_percentage must be a finite number"
    )


def test_a_refused_key_refuses_its_whole_entity_but_not_the_others() -> None:
    image, results = applied(
        MetadataImage.empty(),
        alteration({"user": "alice"}, producer_byte_rate=10, consumer_byte_rate=-1),
        alteration({"client-id": "app"}, producer_byte_rate=10),
    )
    assert [r.error_code for r in results] == [INVALID, ErrorCode.none]
    assert list(image.client_quotas) == [QuotaEntity.client("app")]


def test_an_entity_or_a_key_named_twice_is_refused_and_nothing_of_it_written() -> None:
    image, results = applied(
        MetadataImage.empty(),
        alteration({"user": "alice"}, producer_byte_rate=10),
        alteration({"client-id": "x"}, producer_byte_rate=10),
        alteration({"user": "alice"}, consumer_byte_rate=10),
    )
    assert results[0] == QuotaResult(
        ALICE, INVALID, "Ignoring duplicate entity ClientQuotaEntity(entries={user=alice})"
    )
    assert len(results) == 2 and results[1].error_code == ErrorCode.none
    assert list(image.client_quotas) == [QuotaEntity.client("x")]
    _records, [result] = alter_client_quotas(
        MetadataImage.empty(),
        [
            QuotaAlteration(
                (("user", None), ("client-id", "c")),
                (QuotaOp("producer_byte_rate", 1), QuotaOp("producer_byte_rate", None)),
            )
        ],
    )
    assert result.error_message == (
        "Duplicate quota key producer_byte_rate not updating quota for this entity "
        "ClientQuotaEntity(entries={user=null, client-id=c})"
    )


# --- describe ------------------------------------------------------------------------------

EVERY = [
    QuotaEntity.user("alice"),
    QuotaEntity.user(None),
    QuotaEntity.user_client("alice", "app"),
    QuotaEntity.user_client("alice", None),
    QuotaEntity.user_client(None, "app"),
    QuotaEntity.client("app"),
    QuotaEntity.client(None),
    QuotaEntity.ip("10.0.0.1"),
    QuotaEntity.ip(None),
]


def populated() -> MetadataImage:
    return MetadataImage.empty().replay(
        [
            ClientQuotaRecord(
                entity,
                "connection_creation_rate" if entity.has("ip") else "producer_byte_rate",
                float(index + 1),
            )
            for index, entity in enumerate(EVERY)
        ]
    )


def described(*components: FilterComponent, strict: bool = False) -> list[QuotaEntity]:
    result = describe_client_quotas(populated(), components, strict=strict)
    assert result.error_code == ErrorCode.none and result.entries is not None
    return [entity for entity, _quotas in result.entries]


def test_an_empty_filter_matches_everything_unless_strict() -> None:
    assert set(described()) == set(EVERY)
    assert described(strict=True) == []


def test_exact_default_and_any_match_as_kafka_matches() -> None:
    exact = FilterComponent("user", MatchType.EXACT, "alice")
    default = FilterComponent("user", MatchType.DEFAULT)
    any_client = FilterComponent("client-id", MatchType.ANY)
    assert set(described(exact)) == {
        QuotaEntity.user("alice"),
        QuotaEntity.user_client("alice", "app"),
        QuotaEntity.user_client("alice", None),
    }
    assert described(exact, strict=True) == [QuotaEntity.user("alice")]
    assert set(described(default)) == {QuotaEntity.user(None), QuotaEntity.user_client(None, "app")}
    assert set(described(exact, any_client, strict=True)) == {
        QuotaEntity.user_client("alice", "app"),
        QuotaEntity.user_client("alice", None),
    }
    assert described(FilterComponent("ip", MatchType.ANY), strict=True) == [
        QuotaEntity.ip(None),
        QuotaEntity.ip("10.0.0.1"),
    ]


def test_an_entry_carries_its_values() -> None:
    result = describe_client_quotas(
        populated(), [FilterComponent("ip", MatchType.EXACT, "10.0.0.1")], strict=True
    )
    assert result == DescribedQuotas(
        entries=((QuotaEntity.ip("10.0.0.1"), {"connection_creation_rate": 8.0}),)
    )


def test_malformed_filters_are_refused_whole() -> None:
    cases = [
        ([FilterComponent("", 0, "x")], INVALID, "Invalid empty entity type."),
        (
            [FilterComponent("user", 2), FilterComponent("user", 1)],
            INVALID,
            "Entity type user cannot appear more than once in the filter.",
        ),
        (
            [FilterComponent("group", 2)],
            ErrorCode.unsupported_version,
            "Unsupported entity type group",
        ),
        (
            [FilterComponent("user", 0)],
            INVALID,
            "Request specified MATCH_TYPE_EXACT, but set match string to null.",
        ),
        (
            [FilterComponent("user", 1, "a")],
            INVALID,
            "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
        ),
        (
            [FilterComponent("user", 2, "a")],
            INVALID,
            "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
        ),
        ([FilterComponent("user", 7)], INVALID, "Unknown match type 7"),
        (
            [FilterComponent("ip", 2), FilterComponent("client-id", 1)],
            INVALID,
            "Invalid entity filter component combination. IP filter component should not be "
            "used with user or clientId filter component.",
        ),
    ]
    for components, code, message in cases:
        assert describe_client_quotas(populated(), components, strict=False) == DescribedQuotas(
            code, message, None
        )


def test_replacing_an_entitys_quotas_with_what_zookeeper_holds() -> None:
    image = populated()
    records = replace_entity_quotas(image, ALICE, {"consumer_byte_rate": 7.0})
    assert records == [
        ClientQuotaRecord(ALICE, "producer_byte_rate", None),
        ClientQuotaRecord(ALICE, "consumer_byte_rate", 7.0),
    ]
    assert image.replay(records).client_quotas[ALICE] == {"consumer_byte_rate": 7.0}
    assert replace_entity_quotas(image, ALICE, {"producer_byte_rate": 1.0}) == []


# --- alter, then describe ------------------------------------------------------------------

_ENTITIES = st.sampled_from(EVERY[:7])
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["producer_byte_rate", "consumer_byte_rate", "request_percentage"]),
        st.one_of(st.none(), st.integers(1, 10**9).map(float)),
    ),
    max_size=4,
    unique_by=lambda op: op[0],
)


@settings(max_examples=150)
@given(st.lists(st.lists(st.tuples(_ENTITIES, _OPS), max_size=4), max_size=6))
def test_alter_then_describe_matches_a_dictionary_of_the_requests(
    requests: list[list[tuple[QuotaEntity, list[tuple[str, float | None]]]]],
) -> None:
    image = MetadataImage.empty()
    model: dict[QuotaEntity, dict[str, float]] = {}
    for request in requests:
        alterations = [
            QuotaAlteration(entity.parts, tuple(QuotaOp(k, v) for k, v in ops))
            for entity, ops in request
        ]
        image, results = applied(image, *alterations)
        named = [entity for entity, _ops in request]
        assert [result.entity for result in results] == list(dict.fromkeys(named))
        for entity, ops in request:
            if named.count(entity) > 1:
                continue
            quotas = model.setdefault(entity, {})
            for key, value in ops:
                if value is None:
                    quotas.pop(key, None)
                else:
                    quotas[key] = value
            if not quotas:
                del model[entity]
        everything = describe_client_quotas(image, [], strict=False).entries
        assert everything is not None
        assert {entity: dict(quotas) for entity, quotas in everything} == model


_ANY_PARTS = st.lists(
    st.tuples(
        st.sampled_from(["user", "client-id", "ip", "group", ""]),
        st.none() | st.sampled_from(["", "a", "10.0.0.1", "::1", "not ip"]),
    ),
    max_size=3,
)
_ANY_OPS = st.lists(
    st.builds(
        QuotaOp,
        st.sampled_from(["producer_byte_rate", "request_percentage", "connection_creation_rate"])
        | st.text(max_size=5),
        st.none() | st.floats(allow_nan=True, allow_infinity=True),
    ),
    max_size=3,
)


@settings(max_examples=300)
@given(st.lists(st.builds(QuotaAlteration, _ANY_PARTS.map(tuple), _ANY_OPS.map(tuple)), max_size=4))
def test_any_request_is_answered_and_writes_only_what_kafka_accepts(
    alterations: list[QuotaAlteration],
) -> None:
    records, results = alter_client_quotas(MetadataImage.empty(), alterations)
    assert {result.error_code for result in results} <= {ErrorCode.none, INVALID}
    accepted = {result.entity for result in results if result.error_code == ErrorCode.none}
    for record in records:
        assert isinstance(record, ClientQuotaRecord)
        assert record.entity in accepted
        assert record.key in record.entity.quota_keys()
        assert record.value is not None and 0 < record.value < float("inf")
    image = MetadataImage.empty().replay(records)
    assert describe_client_quotas(image, [], strict=False).entries is not None
