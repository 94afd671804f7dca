"""What one ACL decision costs: the authorizer's core (security/authorizer.py) deciding
for a principal among many bindings, as each request's checks ask it.

    .venv/bin/python bench/authorizer.py [--bindings 100000]

Builds an index of --bindings grants to other users (half literal topic names, half
prefixes of many lengths) plus the wildcard and prefixed grants of the principal asked,
then times decisions that are allowed through a literal `*` grant, allowed through a
prefix, and denied (a principal with no grant). Prints microseconds per decision."""

from __future__ import annotations

import argparse
import time

from strom.security.acls import AclBinding, AclPermissionType, PatternType
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation, AclResourceType

TOPIC = AclResourceType.TOPIC
ALLOW = AclPermissionType.ALLOW


def grant(name: str, pattern: PatternType, principal: str, op: AclOperation) -> AclBinding:
    return AclBinding(TOPIC, name, pattern, principal, "*", op, ALLOW)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bindings", type=int, default=100_000)
    parser.add_argument("--decisions", type=int, default=200_000)
    args = parser.parse_args()
    others = [
        grant(f"topic-{i}", PatternType.LITERAL, f"User:user{i}", AclOperation.WRITE)
        if i % 2
        else grant(f"team-{i % 97}-{i}-", PatternType.PREFIXED, f"User:user{i}", AclOperation.READ)
        for i in range(args.bindings)
    ]
    mine = [
        grant("*", PatternType.LITERAL, "User:app", AclOperation.WRITE),
        grant("orders-", PatternType.PREFIXED, "User:app", AclOperation.READ),
    ]
    started = time.perf_counter()
    authorizer = Authorizer(AclIndex([*others, *mine]))
    built_s = time.perf_counter() - started
    print(f"{len(others) + len(mine):,} bindings indexed in {built_s:.2f} s")
    cases = {
        "allowed by the literal * grant": ("User:app", AclOperation.WRITE, "payments"),
        "allowed by a prefix": ("User:app", AclOperation.READ, "orders-eu-1"),
        "denied (no grant applies)": ("User:eve", AclOperation.READ, "orders-eu-1"),
    }
    for what, (principal, operation, name) in cases.items():
        decide = authorizer.authorize
        started = time.perf_counter()
        for _ in range(args.decisions):
            decide(principal, "10.0.0.7", operation, TOPIC, name)
        each_us = (time.perf_counter() - started) / args.decisions * 1e6
        print(f"{what:34} {each_us:6.2f} µs per decision")


if __name__ == "__main__":
    main()
