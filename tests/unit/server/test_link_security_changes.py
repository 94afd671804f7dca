"""The node's cached clients of other brokers (transaction markers, KIP-890's
verification) take a changed inter-broker security (a dynamic config: a new password, a
new trust store) at their next request, instead of keeping what they were made with."""

from __future__ import annotations

from server_harness import NODE_ID, image_of
from test_txn_markers import appender
from txn_harness import CoreTxns

from strom.client.security import ClientSecurity, SaslLogin
from strom.server.txn_markers import TxnMarkerSender
from strom.server.txn_verifier import TxnVerifier, VerifierPorts

FIRST = ClientSecurity(sasl=SaslLogin("PLAIN", "broker", "old-secret"))
SECOND = ClientSecurity(sasl=SaslLogin("PLAIN", "broker", "new-secret"))


def test_the_marker_sender_makes_a_new_client_when_the_security_changes() -> None:
    image = image_of(partitions=1)
    now = [FIRST]
    markers = TxnMarkerSender(
        node_id=NODE_ID,
        image=lambda: image,
        here=appender(lambda: image, {})[0],
        security=lambda: now[0],
    )
    client = markers._clients.get(2)
    assert client is not None and client.security is FIRST
    assert markers._clients.get(2) is client  # nothing changed: kept
    now[0] = SECOND
    renewed = markers._clients.get(2)
    assert renewed is not None and renewed is not client and renewed.security is SECOND
    assert client.is_closed
    markers.close()


def test_the_verifier_makes_a_new_link_when_the_security_changes() -> None:
    image = image_of(partitions=1)
    now = [FIRST]
    verifier = TxnVerifier(
        VerifierPorts(NODE_ID, lambda: image, CoreTxns(), security=lambda: now[0])
    )
    link = verifier._link(2, ("localhost", 9002))
    assert link.client.security is FIRST
    assert verifier._link(2, ("localhost", 9002)) is link
    now[0] = SECOND
    renewed = verifier._link(2, ("localhost", 9002))
    assert renewed is not link and renewed.client.security is SECOND
    assert link.client.is_closed
