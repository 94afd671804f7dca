"""What every znode layout shares (znodes.py, acl_znodes.py): the ops a diff returns, the
error a znode that does not parse raises, and znode JSON written and read.

JSON is written compact with sorted keys, so equal data is equal bytes. Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["OpKind", "ZnodeError", "ZnodeOp", "json_bytes", "json_object"]


class ZnodeError(ValueError):
    """A znode that does not parse; the message names the znode and what is wrong."""


class OpKind(Enum):
    CREATE = "create"
    SET = "set"
    DELETE = "delete"
    NOTIFY = "notify"
    """Create a sequential child: `path` is the prefix of its name (a change notification:
    znodes.CONFIG_CHANGE_PREFIX, acl_znodes.ACL_CHANGE_PREFIX, ...)."""


@dataclass(frozen=True, slots=True)
class ZnodeOp:
    kind: OpKind
    path: str
    data: bytes = b""


def json_bytes(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """The JSON object `data` holds; ZnodeError naming `what` for anything else."""
    try:
        body = json.loads(data)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ZnodeError(f"{what} is not JSON ({exc}): {data[:100]!r}") from None
    if not isinstance(body, dict):
        raise ZnodeError(f"{what} must hold a JSON object, not {data[:100]!r}")
    return body
