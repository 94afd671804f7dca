"""strom's commands on strom's own client logging in with SASL/OAUTHBEARER, as
librdkafka's keys in --command-config say: unsecured JWTs on the broker's UNSECURED
listener, and tokens from a client credentials token endpoint (an https server in this
test, issuing RS256 JWTs the SIGNED listener's JWKS trusts). The broker's ACLs show it
saw the token's principal; a wrong secret, a token endpoint that is down, a token the
broker refuses and a config without a principal each end the command with one sentence
and its exit code.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from broker import free_port
from client_helpers import CLIENT_TIMEOUT_S, admin_client, strom_with
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)
from oauth_helpers import (
    KeyServer,
    OAuthBroker,
    TokenServer,
    running_oauth_broker,
    running_token_server,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tls_material import TlsMaterial, make_tls_material

SECRET = "orders-secret-0123"


@pytest.fixture(scope="module")
def idp(tls: TlsMaterial, keys: KeyServer) -> Iterator[TokenServer]:
    with running_token_server(tls, keys, {"svc-orders": SECRET}) as server:
        yield server


@pytest.fixture(scope="module")
def oauth_broker(
    tmp_path_factory: pytest.TempPathFactory, keys: KeyServer, tls: TlsMaterial
) -> Iterator[OAuthBroker]:
    data = tmp_path_factory.mktemp("oauth-client-broker") / "data"
    with running_oauth_broker(data, keys, tls) as broker:
        # Anyone may do anything with the cluster but mallory, who may not describe it.
        bindings = [
            AclBinding(
                ResourceType.BROKER,
                "kafka-cluster",
                ResourcePatternType.LITERAL,
                principal,
                "*",
                operation,
                permission,
            )
            for principal, operation, permission in [
                ("User:*", AclOperation.ALL, AclPermissionType.ALLOW),
                ("User:mallory", AclOperation.DESCRIBE, AclPermissionType.DENY),
            ]
        ]
        admin = admin_client(broker.process.bootstrap)
        for future in admin.create_acls(bindings).values():
            future.result(timeout=CLIENT_TIMEOUT_S)
        yield broker


def unsecured(principal: str) -> str:
    return (
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "enable.sasl.oauthbearer.unsecure.jwt=true\n"
        f"sasl.oauthbearer.config=principal={principal} scope=kafka extension_traceId=t1\n"
    )


def oidc(url: str, ca: Path, secret: str = SECRET) -> str:
    return (
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=OAUTHBEARER\n"
        "sasl.oauthbearer.method=oidc\n"
        "sasl.oauthbearer.client.id=svc-orders\n"
        f"sasl.oauthbearer.client.secret={secret}\n"
        f"sasl.oauthbearer.token.endpoint.url={url}\n"
        "sasl.oauthbearer.scope=kafka.admin\n"
        "sasl.oauthbearer.extensions=logicalCluster=lkc-1\n"
        f"https.ca.location={ca}\n"
    )


def test_unsecured_jwts_log_in_as_their_principal(
    oauth_broker: OAuthBroker, tmp_path: Path
) -> None:
    port = oauth_broker.unsecured_port
    alice = strom_with(tmp_path / "alice.properties", unsecured("alice"), port, "acl", "list")
    assert alice.returncode == 0, alice.stderr
    assert "User:mallory" in alice.stdout and "DENY" in alice.stdout
    mallory = strom_with(tmp_path / "mallory.properties", unsecured("mallory"), port, "acl", "list")
    assert mallory.returncode == 1, mallory.stderr
    assert "CLUSTER_AUTHORIZATION_FAILED" in mallory.stderr
    log = oauth_broker.process.read_log()
    assert "authenticated with OAUTHBEARER on UNSECURED as User:alice" in log
    assert "authenticated with OAUTHBEARER on UNSECURED as User:mallory" in log


def test_client_credentials_ask_the_endpoint_once_for_every_connection(
    oauth_broker: OAuthBroker, idp: TokenServer, tls: TlsMaterial, tmp_path: Path
) -> None:
    asked = len(idp.grants)
    config = oidc(idp.url, tls.ca_cert_path)
    # log-dirs opens one connection to the bootstrap server and one to each broker.
    done = strom_with(
        tmp_path / "oidc.properties", config, oauth_broker.signed_port, "cluster", "log-dirs"
    )
    assert done.returncode == 0, done.stderr
    grants = idp.grants[asked:]
    assert [(g.client_id, g.status) for g in grants] == [("svc-orders", 200)]
    assert grants[0].form == {"grant_type": ["client_credentials"], "scope": ["kafka.admin"]}
    log = oauth_broker.process.read_log()
    assert log.count("authenticated with OAUTHBEARER on SIGNED as User:svc-orders") >= 2
    assert SECRET not in done.stdout + done.stderr + log


def test_a_wrong_secret_and_an_endpoint_that_is_down_are_one_sentence_each(
    oauth_broker: OAuthBroker, idp: TokenServer, tls: TlsMaterial, tmp_path: Path
) -> None:
    port = oauth_broker.signed_port
    wrong = strom_with(
        tmp_path / "wrong.properties",
        oidc(idp.url, tls.ca_cert_path, secret="not-the-secret"),
        port,
        "acl",
        "list",
    )
    assert wrong.returncode == 3, wrong.stderr
    assert wrong.stderr.strip() == (
        f"strom: cannot connect to localhost:{port}: cannot get an OAUTHBEARER token: the "
        f"token endpoint {idp.url} refused the request: HTTP 401, invalid_client (unknown "
        "client or wrong secret); check sasl.oauthbearer.client.id and "
        "sasl.oauthbearer.client.secret"
    )
    down = f"https://127.0.0.1:{free_port()}/token"
    gone = strom_with(
        tmp_path / "down.properties", oidc(down, tls.ca_cert_path), port, "acl", "list"
    )
    assert gone.returncode == 3, gone.stderr
    assert gone.stderr.strip() == (
        f"strom: cannot connect to localhost:{port}: cannot get an OAUTHBEARER token from "
        f"{down} (sasl.oauthbearer.token.endpoint.url): connection refused"
    )
    other_ca = make_tls_material(tmp_path / "other-ca")
    untrusted = strom_with(
        tmp_path / "ca.properties", oidc(idp.url, other_ca.ca_cert_path), port, "acl", "list"
    )
    assert untrusted.returncode == 3, untrusted.stderr
    assert "its certificate is not trusted (" in untrusted.stderr
    assert "set https.ca.location to its CA" in untrusted.stderr
    for done in (wrong, gone, untrusted):
        assert "Traceback" not in done.stderr and SECRET not in done.stderr
        assert "not-the-secret" not in done.stderr


def test_a_token_the_broker_refuses_and_a_config_without_a_principal(
    oauth_broker: OAuthBroker, tmp_path: Path
) -> None:
    # An unsecured token at the listener that checks signatures.
    port = oauth_broker.signed_port
    refused = strom_with(tmp_path / "r.properties", unsecured("alice"), port, "acl", "list")
    assert refused.returncode == 3, refused.stderr
    assert refused.stderr.strip() == (
        f"strom: cannot connect to localhost:{port}: the broker refused the OAUTHBEARER "
        'token of alice: {"status":"invalid_token"} (its log says why)'
    )
    config = tmp_path / "p.properties"
    text = unsecured("alice").replace("principal=alice ", "")
    missing = strom_with(config, text, oauth_broker.unsecured_port, "acl", "list")
    assert missing.returncode == 2, missing.stderr
    assert missing.stderr.strip() == (
        f"strom: --command-config {config}: sasl.oauthbearer.config has no principal=<name>: "
        "an unsecured token needs one (for example sasl.oauthbearer.config=principal=alice)"
    )
