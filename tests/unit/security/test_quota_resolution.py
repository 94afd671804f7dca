"""Which client quota applies to a connection: Kafka's eight user/client-id levels, checked
against a model that ranks every matching entity, and the IP fallback to its default."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.metadata.quota_entities import QuotaEntity
from strom.security.quota_resolution import ResolvedQuota, client_quota, ip_quota, precedence

KEY = "producer_byte_rate"


def test_the_eight_levels_in_kafkas_order() -> None:
    assert precedence("alice", "app") == [
        QuotaEntity.user_client("alice", "app"),
        QuotaEntity.user_client("alice", None),
        QuotaEntity.user("alice"),
        QuotaEntity.user_client(None, "app"),
        QuotaEntity.user_client(None, None),
        QuotaEntity.user(None),
        QuotaEntity.client("app"),
        QuotaEntity.client(None),
    ]


def test_an_empty_client_id_only_reaches_the_user_levels() -> None:
    assert precedence("alice", "") == [QuotaEntity.user("alice"), QuotaEntity.user(None)]
    assert precedence("", "app") == [QuotaEntity.client("app"), QuotaEntity.client(None)]


def test_each_level_wins_over_the_ones_below_it_per_key() -> None:
    levels = precedence("alice", "app")
    for winner in range(len(levels)):
        quotas = {entity: {KEY: float(i + 1)} for i, entity in enumerate(levels[winner:])}
        quotas[levels[winner]]["consumer_byte_rate"] = 99.0
        quotas[QuotaEntity.user("bob")] = {KEY: 1000.0}
        assert client_quota(quotas, KEY, user="alice", client_id="app") == ResolvedQuota(
            1.0, levels[winner]
        )
    # Another key falls through to the levels that set it.
    quotas = {QuotaEntity.user("alice"): {KEY: 5.0}, QuotaEntity.client(None): {"x": 1.0}}
    assert client_quota(quotas, "x", user="alice", client_id="app") == ResolvedQuota(
        1.0, QuotaEntity.client(None)
    )
    assert client_quota(quotas, "y", user="alice", client_id="app") is None


def test_an_ip_takes_its_own_quota_else_the_default() -> None:
    quotas = {
        QuotaEntity.ip("10.0.0.1"): {"connection_creation_rate": 5.0},
        QuotaEntity.ip(None): {"connection_creation_rate": 50.0},
    }
    assert ip_quota(quotas, "10.0.0.1") == ResolvedQuota(5.0, QuotaEntity.ip("10.0.0.1"))
    assert ip_quota(quotas, "10.0.0.2") == ResolvedQuota(50.0, QuotaEntity.ip(None))
    assert ip_quota({}, "10.0.0.2") is None


def _rank(part: tuple[str, str | None] | None, name: str) -> int | None:
    """0: the entity names this user (client id); 1: its default; 2: it has no such part;
    None: it names another one, or one the client cannot match (empty)."""
    if part is None:
        return 2
    if not name:
        return None
    return 0 if part[1] == name else 1 if part[1] is None else None


def model(quotas: dict[QuotaEntity, dict[str, float]], user: str, client_id: str) -> float | None:
    """The value of the matching entity with the lowest (user rank, client rank)."""
    best: tuple[tuple[int, int], float] | None = None
    for entity, values in quotas.items():
        if KEY not in values or entity.has("ip"):
            continue
        parts = dict(entity.parts)
        user_rank = _rank(("user", parts["user"]) if "user" in parts else None, user)
        client_rank = _rank(
            ("client-id", parts["client-id"]) if "client-id" in parts else None, client_id
        )
        if user_rank is None or client_rank is None:
            continue
        if best is None or (user_rank, client_rank) < best[0]:
            best = ((user_rank, client_rank), values[KEY])
    return None if best is None else best[1]


_NAMES = st.sampled_from(["alice", "bob", ""])
_CLIENTS = st.sampled_from(["app", "cli", ""])
_ENTITY = st.one_of(
    st.builds(QuotaEntity.user, st.sampled_from(["alice", "bob", None])),
    st.builds(QuotaEntity.client, st.sampled_from(["app", "cli", None])),
    st.builds(
        QuotaEntity.user_client,
        st.sampled_from(["alice", "bob", None]),
        st.sampled_from(["app", "cli", None]),
    ),
    st.builds(QuotaEntity.ip, st.sampled_from(["10.0.0.1", None])),
)


@settings(max_examples=300)
@given(
    st.dictionaries(
        _ENTITY,
        st.dictionaries(st.sampled_from([KEY, "request_percentage"]), st.floats(1, 1e6)),
        max_size=10,
    ),
    _NAMES,
    _CLIENTS,
)
def test_resolution_matches_a_model_that_ranks_every_matching_entity(
    quotas: dict[QuotaEntity, dict[str, float]], user: str, client_id: str
) -> None:
    resolved = client_quota(quotas, KEY, user=user, client_id=client_id)
    assert (None if resolved is None else resolved.value) == model(quotas, user, client_id)
