"""The long fault run before a release, in one command:

    .venv/bin/python -m tests.fault.soak --minutes 10 --seed 7
    .venv/bin/python -m tests.fault.soak --minutes 10 --seed 7 --store zookeeper
    .venv/bin/python -m tests.fault.soak --network --minutes 10 --seed 7
    .venv/bin/python -m tests.fault.soak --replay tests/fault/failures/soak-seed7.json

About every 10 s one fault from schedule.mixed(): kill a random node, kill a partition's
leader, kill the active controller, pause a leader past the session timeout, or kill two
followers of a partition at once. With --network (as root: the nodes then run in network
namespaces) about every 12 s one from schedule.network_mixed() instead: cut a leader from
the other nodes, isolate the controller or a random node, split a node and ZooKeeper from
the others, a bridge, a flapping network, a cut with a kill meanwhile, or a kill; every
partition must then take writes within 15 s of each heal, and every replica be back in
its ISR at the end. Then the run heals and is checked as the tests are.
Exit status 0 with no anomalies, 1 with anomalies (the run is saved for replay), 2 when
the harness itself could not finish (the cluster did not heal, a client thread died).
The nodes' logs and the clients' log stay in the run's directory, printed at the end.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from .history import Note
from .runner import STORES, Scenario, failure_message, load_saved, run_and_check, save_failure
from .schedule import mixed, network_mixed
from .workload import CLIENT_LOG


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.fault.soak", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="how long (default 10)")
    parser.add_argument("--seed", type=int, default=7, help="the schedule's seed (default 7)")
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--consumers", type=int, default=2)
    parser.add_argument("--rate", type=float, default=40.0, help="writes/s per producer")
    parser.add_argument(
        "--store", choices=STORES, default="raft", help="where the metadata lives (default raft)"
    )
    parser.add_argument(
        "--network",
        action="store_true",
        help="network faults (cuts, splits, bridges, flapping) and kills: needs root",
    )
    parser.add_argument("--replay", type=Path, help="run the scenario saved in this file")
    parser.add_argument("--dir", type=Path, help="where the run's files go (default: a temp dir)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.replay is not None:
        scenario, _ = load_saved(args.replay)
    else:
        seconds = args.minutes * 60
        scenario = Scenario(
            "soak-network" if args.network else "soak",
            network_mixed(seconds, args.seed) if args.network else mixed(seconds, args.seed),
            producers=args.producers,
            consumers=args.consumers,
            rate_per_producer=args.rate,
            store=args.store,
        )
    root = args.dir or Path(tempfile.mkdtemp(prefix="strom-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    client_log = logging.FileHandler(root / "clients.log")
    client_log.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    CLIENT_LOG.addHandler(client_log)
    CLIENT_LOG.propagate = False

    print(scenario.schedule.describe(), flush=True)
    print(f"the run's files: {root}", flush=True)
    started = time.monotonic()
    try:
        outcome = run_and_check(scenario, root)
    except Exception as exc:
        print(f"\nthe run did not finish after {time.monotonic() - started:.0f} s: {exc}")
        for note in getattr(exc, "__notes__", []):
            print(note)
        return 2
    result = outcome.result
    print(f"\nfinished after {time.monotonic() - started:.0f} s ({outcome.timings()})")
    for event in outcome.history.events:
        if isinstance(event, Note) and event.source == "faults":
            print(f"  {event.at_s:.2f}s {event.text}")
    print(result.summary(), flush=True)
    if outcome.isr_not_full is not None:
        print(f"the ISR was not full again at the end: {outcome.isr_not_full}")
    if result.ok and outcome.isr_not_full is None:
        return 0
    paths = save_failure(scenario, outcome.history, result, root)
    print(f"\n{failure_message(scenario, paths)}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
