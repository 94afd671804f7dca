"""Version negotiation: the highest version both sides speak, within the caller's bounds.

Kafka's clients do the same: ask the broker with ApiVersions once per connection, then
use, per API, the highest version in the intersection of the broker's range and their
own. No I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from strom.client.codec import API_VERSIONS_KEY, client_versions
from strom.client.errors import UnsupportedVersionError

# ApiVersions v3 is the first flexible version, the one Kafka's clients start with.
API_VERSIONS_VERSION = 3


def pick_version(
    api_key: int,
    broker_versions: Mapping[int, tuple[int, int]],
    *,
    min_version: int | None = None,
    max_version: int | None = None,
) -> int:
    """The highest version of `api_key` the broker and kio both have, within the bounds."""
    ours = client_versions(api_key)
    if ours is None:
        raise UnsupportedVersionError(f"this client has no schema for API {api_key}")
    theirs = broker_versions.get(api_key)
    if theirs is None:
        raise UnsupportedVersionError(f"the broker does not serve API {api_key}")
    low = max(ours[0], theirs[0], 0 if min_version is None else min_version)
    high = min(ours[1], theirs[1], ours[1] if max_version is None else max_version)
    if low > high:
        raise UnsupportedVersionError(
            f"no common version of API {api_key}: client {ours[0]}..{ours[1]}, broker "
            f"{theirs[0]}..{theirs[1]}, asked {min_version}..{max_version}"
        )
    return high


def api_versions_retry(asked: int, broker_versions: Mapping[int, tuple[int, int]]) -> int | None:
    """The ApiVersions version to retry with after UNSUPPORTED_VERSION, None to give up.

    The v0 answer lists the broker's own range for ApiVersions (Kafka's NetworkClient
    retries with its max); without it, fall back to v0.
    """
    if asked == 0:
        return None
    theirs = broker_versions.get(API_VERSIONS_KEY)
    retry = 0 if theirs is None else min(theirs[1], asked - 1)
    return max(retry, 0)
