"""The JWKS of a listener that checks signed OAUTHBEARER tokens: read at start, fetched
again in the background, as Kafka's JWKS validator does.

- **At start** the key set is read once (`load`). A key set that cannot be read, or is
  not a JWKS, stops the broker with a message naming the listener and the URL, as
  Kafka's broker fails to start when its validator cannot initialise its keys.
- **A `file:` URL** is read at start only, as in Kafka: a token whose key id the file
  lacks is refused until the broker restarts.
- **An `https:` URL** is fetched over TLS checked with the `ssl.*` options of the
  listener's OAuthBearerLoginModule JAAS entry, as Kafka reads them (its client
  `ssl.*` keys, for example `ssl.truststore.type="PEM" ssl.truststore.location="..."` for
  a private CA); without them, against the system's CAs, the host name checked.
- **An `http:` or `https:` URL** is fetched again every
  `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and at once when a token names a key id
  the set lacks (once a minute per key id, strom.security.jwks_refresh). A fetch that
  fails is retried with a doubling wait within the retry budget; meanwhile, and if it
  never succeeds, the keys already held stay in use, and the failure is logged.

The fetch is blocking urllib in a thread; the validation that uses the keys is pure
(strom.security.jwt_validation) and reads `keys` as it stands.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import logging
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

from strom.config.errors import ConfigError
from strom.config.schema import ConfigValue, check_value
from strom.config.security_keys import SSL_KEYS, tls_settings
from strom.security.jwks_refresh import MissingKidRefreshes, retry_wait_ms
from strom.security.jwt_validation import KeySet, parse_jwks
from strom.security.tls import client_context
from strom.server.clock import now_ms

__all__ = ["JwksLoadError", "JwksSource", "jwks_tls_context"]

log = logging.getLogger(__name__)

FETCH_TIMEOUT_S = 10.0
MAX_JWKS_BYTES = 1 << 20


class JwksLoadError(RuntimeError):
    """The key set could not be read or is not a JWKS."""


def _shown(url: str) -> str:
    """The URL without its query and fragment (which might carry a secret)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


def jwks_tls_context(options: Mapping[str, str], jaas_key: str) -> ssl.SSLContext:
    """The TLS context an https JWKS is fetched with: the JAAS entry's `ssl.*` options,
    typed as the broker's `ssl.*` keys; ConfigError naming `jaas_key` and the option."""
    prefix = f"{jaas_key} option "
    values: dict[str, ConfigValue] = {}
    for key in SSL_KEYS:
        text = options.get(key.name)
        if text is not None:
            values[key.name] = check_value(prefix + key.name, key.type, key.validator, text)
    check = str(values.get("ssl.endpoint.identification.algorithm", "https") or "")
    if check.strip().lower() not in ("https", ""):
        raise ConfigError(
            f"'{prefix}ssl.endpoint.identification.algorithm' must be https or empty",
            key=jaas_key,
        )
    context = client_context(
        tls_settings(values), key_prefix=prefix, check_hostname=check.strip() != ""
    )
    return context


def _read(url: str, tls: ssl.SSLContext | None) -> bytes:
    """The document at `url` (blocking: run in a thread). OSError or ValueError."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() == "file":
        path = urllib.request.url2pathname(parts.path)
        with open(path, "rb") as file:
            data = file.read(MAX_JWKS_BYTES + 1)
    else:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S, context=tls) as response:
            data = response.read(MAX_JWKS_BYTES + 1)
    if len(data) > MAX_JWKS_BYTES:
        raise ValueError(f"larger than {MAX_JWKS_BYTES} bytes")
    return data


class JwksSource:
    """One listener's key set: `keys` as last read, kept fresh by `run()`."""

    def __init__(
        self,
        node_id: int,
        listener: str,
        url: str,
        *,
        refresh_ms: int,
        retry_backoff_ms: int,
        retry_backoff_max_ms: int,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: how an https URL's server is checked (None: the system's CAs)."""
        self._node_id = node_id
        self._listener = listener
        self._url = url
        self._refresh_ms = refresh_ms
        self._backoff_ms = retry_backoff_ms
        self._backoff_max_ms = retry_backoff_max_ms
        self._tls = tls
        self._refreshes = MissingKidRefreshes()
        self._wake = asyncio.Event()
        self.keys = KeySet()
        self.refreshing = urllib.parse.urlsplit(url).scheme.lower() != "file"
        """Whether the key set is fetched again (http and https; not a file)."""

    async def _fetch(self) -> KeySet:
        try:
            data = await asyncio.to_thread(_read, self._url, self._tls)
            return parse_jwks(data)
        except (OSError, ValueError, http.client.HTTPException) as exc:  # JwksError: ValueError
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise JwksLoadError(
                f"listener {self._listener} cannot read its OAUTHBEARER key set from "
                f"{_shown(self._url)}: {reason}"
            ) from None

    def _take(self, keys: KeySet) -> None:
        self.keys = keys
        self._refreshes.found(keys.kids)
        skipped = f", {keys.skipped} unusable skipped" if keys.skipped else ""
        log.info(
            "[node %d] listener %s read %d OAUTHBEARER verification keys from %s%s",
            self._node_id,
            self._listener,
            len(keys.keys),
            _shown(self._url),
            skipped,
        )

    async def load(self) -> None:
        """Read the key set once, at start; JwksLoadError if it cannot be used."""
        self._take(await self._fetch())

    def missing_kid(self, kid: str) -> None:
        """A token named a key id the set lacks: fetch again soon (rate-limited)."""
        if self.refreshing and self._refreshes.missing(kid, now_ms()):
            log.info(
                "[node %d] listener %s fetches its JWKS again: a token names a key id it lacks",
                self._node_id,
                self._listener,
            )
            self._wake.set()

    async def run(self) -> None:
        """Refresh the key set until cancelled (returns at once for a file)."""
        if not self.refreshing:
            return
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._refresh_ms / 1000):  # wait_for can eat a cancel
                    await self._wake.wait()
            self._wake.clear()
            await self._refresh()

    async def _refresh(self) -> None:
        started, attempt = now_ms(), 0
        while True:
            attempt += 1
            try:
                keys = await self._fetch()
            except JwksLoadError as exc:
                wait_ms = retry_wait_ms(
                    attempt, started, now_ms(), self._backoff_ms, self._backoff_max_ms
                )
                if wait_ms <= 0:
                    log.warning("[node %d] %s; keeping the keys it has", self._node_id, exc)
                    return
                await asyncio.sleep(wait_ms / 1000)
                continue
            except Exception:  # a bug: log it, keep the keys, keep the broker serving
                log.exception("[node %d] JWKS refresh failed", self._node_id)
                return
            self._take(keys)
            return
