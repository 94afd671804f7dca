"""FindCoordinator's error messages, as a client reads them off the wire: Kafka's default
text for each error, "NONE" for a coordinator found (Errors.NONE.message()), in the
one-key answer of v1-v3 (v0 has no message) and in each entry of the batched v4+ answer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from group_service_harness import answered, find_coordinator, group_node, offsets_image, serving
from kio.schema.errors import ErrorCode
from server_harness import NODE_ID, run

from strom.server.handlers.coordinator import handle_find_coordinator

GROUP = "orders-app"
VERSIONS = [1, 2, 3, 4, 5, 6]
NOT_AVAILABLE = "The coordinator is not available."
INVALID_REQUEST = (
    "This most likely occurs because of a request being malformed by the client library or "
    "the message was sent to an incompatible broker. See the broker logs for more details."
)


def answer_of(response: Any, version: int) -> Any:
    """The part of the answer that names the key's coordinator: the whole answer before
    v4, its one entry from v4 on."""
    if version < 4:
        return response
    (entry,) = response.coordinators
    return entry


def find(tmp_path: Path, version: int, *, fenced: tuple[int, ...] = (), key_type: int = 0) -> Any:
    at = group_node(tmp_path, offsets_image(leader=2 if fenced else NODE_ID, fenced=fenced))

    async def scenario() -> Any:
        async with serving(at) as context:
            asked = find_coordinator(GROUP, key_type=key_type, version=version)
            return await answered(handle_find_coordinator, context, asked)

    return answer_of(run(scenario()), version)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_coordinator_found_carries_kafkas_none_text(tmp_path: Path, version: int) -> None:
    """Kafka sets the message of every answer from its Errors value, NONE's included."""
    found = find(tmp_path, version)
    assert (found.error_code, found.error_message, found.node_id) == (
        ErrorCode.none,
        "NONE",
        NODE_ID,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_a_partition_without_a_live_leader_carries_kafkas_text(
    tmp_path: Path, version: int
) -> None:
    missing = find(tmp_path, version, fenced=(2,))
    assert (missing.error_code, missing.error_message, missing.node_id) == (
        ErrorCode.coordinator_not_available,
        NOT_AVAILABLE,
        -1,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_an_unknown_key_type_carries_kafkas_text(tmp_path: Path, version: int) -> None:
    refused = find(tmp_path, version, key_type=7)
    assert (refused.error_code, refused.error_message) == (
        ErrorCode.invalid_request,
        INVALID_REQUEST,
    )


def test_v0_has_only_the_error_code(tmp_path: Path) -> None:
    missing = find(tmp_path, 0, fenced=(2,))
    assert missing.error_code == ErrorCode.coordinator_not_available
    assert not hasattr(missing, "error_message")
