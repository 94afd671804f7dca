"""A stand-in for the active controller (server/controller_link.py's ActiveController):
it records every call a service makes and answers from a script, so a service's requests
and its reading of the answers are tested without a controller or a socket."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from strom.protocol.codec import build_response
from strom.server.controller import NotController
from strom.server.controller_link import A, ControllerCall


def response(call: ControllerCall[Any], data: Mapping[str, Any]) -> Any:
    """The controller's response to `call` with these fields, as the channel decodes it."""
    return build_response(call.api_key, call.api_version, data)


@dataclass(slots=True)
class ScriptedController:
    """Answers each call with the next of `script`: the response fields (read with the
    call's own `read`, as a remote controller's response is) or an exception to raise
    (NotController, a lost connection). As the port promises, NOT_CONTROLLER in an answer
    raises NotController unless the call reads it itself."""

    script: list[Mapping[str, Any] | Exception] = field(default_factory=list)
    calls: list[ControllerCall[Any]] = field(default_factory=list)

    async def call(self, call: ControllerCall[A]) -> A:
        self.calls.append(call)
        assert self.script, f"no answer scripted for call {len(self.calls)}: {call.api_key.name}"
        answer = self.script.pop(0)
        if isinstance(answer, Exception):
            raise answer
        read = call.read(response(call, answer))
        if call.not_controller_raises and read.error_code == ErrorCode.not_controller:
            raise NotController(None)
        return read
