"""`python -m strom.testing.child CONFIG`: `strom serve` for a child node of a test
cluster, dialing through the cluster's network (strom.testing.network).

The parent passes the node's id in STROM_TESTING_NODE_ID and the network's public
addresses (host:port,...) in STROM_TESTING_PUBLIC.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from strom.client.dial import set_dialer
from strom.config import ConfigError, load_config
from strom.server.app import run_server
from strom.testing.network import node_dialer

NODE_ID_ENV = "STROM_TESTING_NODE_ID"
PUBLIC_ENV = "STROM_TESTING_PUBLIC"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m strom.testing.child CONFIG", file=sys.stderr)
        return 2
    public = set()
    for address in filter(None, os.environ.get(PUBLIC_ENV, "").split(",")):
        host, _, port = address.rpartition(":")
        public.add((host, int(port)))
    set_dialer(node_dialer(int(os.environ[NODE_ID_ENV]), frozenset(public)))
    try:
        config = load_config(file_text=Path(argv[1]).read_text())
    except (OSError, ConfigError) as exc:
        print(f"strom: {exc}", file=sys.stderr)
        return 1
    return run_server(config)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
