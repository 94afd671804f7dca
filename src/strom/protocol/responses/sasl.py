"""SaslHandshake and SaslAuthenticate responses."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from kio.schema.errors import ErrorCode


class SaslHandshakeResponse(TypedDict):
    error_code: ErrorCode
    mechanisms: list[str]
    """The mechanisms the listener offers."""


class SaslAuthenticateResponse(TypedDict):
    error_code: ErrorCode
    error_message: str | None
    auth_bytes: bytes
    session_lifetime: NotRequired[int]
    """v1+: milliseconds until the client must authenticate again (KIP-368); 0: never."""
