"""The one exception the controller's decisions raise internally: a refused command."""

from __future__ import annotations

from kio.schema.errors import ErrorCode


class Refused(Exception):
    """A command refused with a Kafka error code and a message for the client; decisions
    catch it and put both in the command's result."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
