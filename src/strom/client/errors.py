"""What the client raises: one base class and one class per way a call can fail."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class ClientError(Exception):
    """Base class of everything strom's client raises on purpose."""


class ClientConnectionError(ClientError):
    """The connection could not be made, was lost, or a call on it timed out.

    The connection is closed when this is raised: no later response can be matched to
    the wrong request.
    """


class UnsupportedVersionError(ClientError):
    """No version of the API is spoken by both sides (or allowed by the caller)."""


class MalformedResponseError(ClientError):
    """A correctly framed response whose body does not decode as the expected message."""


class BrokerError(ClientError):
    """A response that carries an error code where the client needed success."""

    def __init__(self, message: str, error_code: ErrorCode) -> None:
        super().__init__(message)
        self.error_code = error_code
