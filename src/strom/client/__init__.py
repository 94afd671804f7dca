"""strom's asyncio client for broker-to-broker and admin calls.

KafkaConnection is one pipelined connection; NodeClient connects to one node on demand
and reconnects after failures. Requests and responses are kio's message classes (or
plain mappings of their fields, see build_request); strom's private node-to-node APIs
travel as raw payloads with raw_request() and send_oneway().
"""

from strom.client.backoff import ReconnectBackoff
from strom.client.codec import build_request
from strom.client.connection import KafkaConnection
from strom.client.errors import (
    BrokerError,
    ClientConnectionError,
    ClientError,
    MalformedResponseError,
    UnsupportedVersionError,
)
from strom.client.node import NodeClient
from strom.client.security import ClientAuthenticationError, ClientSecurity, SaslLogin
from strom.client.versions import pick_version

__all__ = [
    "BrokerError",
    "ClientAuthenticationError",
    "ClientConnectionError",
    "ClientError",
    "ClientSecurity",
    "KafkaConnection",
    "MalformedResponseError",
    "NodeClient",
    "ReconnectBackoff",
    "SaslLogin",
    "UnsupportedVersionError",
    "build_request",
    "pick_version",
]
