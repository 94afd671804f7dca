"""SaslHandshake and SaslAuthenticate where no authentication is under way: on a listener
without SASL, as Kafka answers them, with ILLEGAL_SASL_STATE. On a SASL listener the
connection answers them itself until its client has authenticated (server/sasl_gate.py),
and closes a connection that sends them again afterwards."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from strom.protocol.apis import ApiKey
from strom.protocol.codec import Request, build_response
from strom.protocol.responses.sasl import SaslAuthenticateResponse, SaslHandshakeResponse


async def handle_sasl_handshake(request: Request) -> Any:
    response: SaslHandshakeResponse = {"error_code": ErrorCode.illegal_sasl_state, "mechanisms": []}
    return build_response(ApiKey.SASL_HANDSHAKE, request.api_version, response)


async def handle_sasl_authenticate(request: Request) -> Any:
    response: SaslAuthenticateResponse = {
        "error_code": ErrorCode.illegal_sasl_state,
        "error_message": f"listener {request.listener or '(none)'} does not use SASL",
        "auth_bytes": b"",
        "session_lifetime": 0,
    }
    return build_response(ApiKey.SASL_AUTHENTICATE, request.api_version, response)
