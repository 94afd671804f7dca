"""When a broker fetches its JWKS again, as Kafka's RefreshingHttpsJwks decides: every
refresh interval, and at once when a token names a key id the set lacks, but for one key
id at most once a minute (a client sending made-up key ids cannot make the broker hammer
its identity provider). A refresh that fails is retried with a doubling wait until the
retry budget (`sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms`) is spent; the keys
already held stay in use.

Pure: the shell passes `now_ms`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable

__all__ = ["MISSING_KID_INTERVAL_MS", "MissingKidRefreshes", "retry_wait_ms"]

MISSING_KID_INTERVAL_MS = 60_000
"""Kafka's: a key id that was missing is not asked for again within this time."""
_MAX_KIDS = 16
_MAX_KID_LENGTH = 1000


class MissingKidRefreshes:
    """The key ids recently found missing, and when each may trigger a refresh again.

    Legal transitions of one key id:
        unknown --missing(kid, now)-->                 waiting until now + 60 s (refresh now)
        waiting --missing(kid, now < until)-->         waiting (no refresh)
        waiting --missing(kid, now >= until)-->        waiting until now + 60 s (refresh now)
        waiting --found(kid) after a refresh-->        unknown
    At most 16 key ids are remembered, the least recently asked for forgotten first; a
    key id longer than 1000 characters never triggers a refresh.
    """

    def __init__(self) -> None:
        self._until: OrderedDict[str, int] = OrderedDict()

    def missing(self, kid: str, now_ms: int) -> bool:
        """A token named `kid`, which the key set lacks: whether to refresh now."""
        if len(kid) > _MAX_KID_LENGTH:
            return False
        until = self._until.get(kid)
        if until is not None:
            self._until.move_to_end(kid)
            if now_ms < until:
                return False
        self._until[kid] = now_ms + MISSING_KID_INTERVAL_MS
        self._until.move_to_end(kid)
        while len(self._until) > _MAX_KIDS:
            self._until.popitem(last=False)
        return True

    def found(self, kids: Iterable[str]) -> None:
        """A refresh brought these key ids: they are no longer missing."""
        for kid in kids:
            self._until.pop(kid, None)


def retry_wait_ms(attempt: int, started_ms: int, now_ms: int, backoff_ms: int, max_ms: int) -> int:
    """How long to wait after failed attempt number `attempt` (1, 2, ...) of a refresh
    that started at `started_ms`: `backoff_ms` doubled each attempt, cut to what is left
    of `max_ms`; 0 when nothing is left (give up)."""
    left = started_ms + max_ms - now_ms
    wait = backoff_ms * (1 << min(attempt - 1, 40))
    return max(0, min(wait, left))
