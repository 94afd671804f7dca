"""The produce path's record walk compiled (strom.protocol._walk) against the same walk in
Python (STROM_PURE_PYTHON=1), alone and in a broker, alternating in one run.

    .venv/bin/python bench/record_walk.py [--records 1000000] [--record-bytes 100]
        [--rounds 3]

First the walk alone: validate_batches on one 1 MB batch of records, in this process,
each way. Then, each round, a fresh broker (fsync durability) with the Python walk and one
with the compiled walk take the same produce (acks=all, the producer of
produce_consume.py, one partition); it prints records/s and the broker's CPU
microseconds per record, their medians, and the ratios compiled/Python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from produce_consume import cpu_s, create_topic, log, produce, start_strom, stop


def walk_alone(record_bytes: int) -> dict[str, float]:
    """Microseconds per record of validate_batches on a 1 MB batch, each way (a child
    process each, as the choice is made at import)."""
    code = f"""
import time
from strom.protocol.records import COMPILED_WALK, encode_batch, validate_batches
n = 1_000_000 // ({record_bytes} + 8)
batch = encode_batch([(None, bytes({record_bytes}), ())] * n, base_timestamp_ms=0)
times = []
for _ in range(30):
    started = time.perf_counter()
    validate_batches(batch, max_batch_bytes=2**30)
    times.append(time.perf_counter() - started)
print(COMPILED_WALK, min(times) / n * 1e6)
"""
    found = {}
    for label, env in (("python", {"STROM_PURE_PYTHON": "1"}), ("compiled", {})):
        answer = subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if (answer[0] == "True") != (label == "compiled"):
            raise SystemExit(f"the {label} walk is not what ran: {answer}")
        found[label] = float(answer[1])
    return found


def produce_round(pure: bool, records: int, record_bytes: int) -> tuple[float, float]:
    """(records/s, broker CPU µs per record) of one produce into a fresh broker."""
    if pure:
        os.environ["STROM_PURE_PYTHON"] = "1"
    else:
        os.environ.pop("STROM_PURE_PYTHON", None)
    broker = start_strom("fsync")
    try:
        create_topic(broker.bootstrap, "walked", 1, 1)
        pid = broker.process.pid if broker.process else None
        before = cpu_s(pid)
        started = time.perf_counter()
        elapsed = produce(broker.bootstrap, "walked", records, record_bytes)
        after = cpu_s(pid)
        assert before is not None and after is not None and elapsed <= time.perf_counter() - started
        return records / elapsed, (after - before) / records * 1e6
    finally:
        stop(broker)
        os.environ.pop("STROM_PURE_PYTHON", None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--record-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    alone = walk_alone(args.record_bytes)
    print(
        f"validate_batches, 1 MB batch of {args.record_bytes} B records: python "
        f"{alone['python']:.3f} µs/record, compiled {alone['compiled']:.3f} µs/record "
        f"({alone['python'] / alone['compiled']:.1f}x)"
    )
    results: dict[str, list[tuple[float, float]]] = {"python": [], "compiled": []}
    for round_ in range(args.rounds):
        for label in ("python", "compiled"):
            rate, cpu = produce_round(label == "python", args.records, args.record_bytes)
            results[label].append((rate, cpu))
            log(f"round {round_ + 1} {label}: {rate:,.0f} rec/s, {cpu:.2f} µs broker CPU/record")
    print(f"\nproduce, {args.records:,} records of {args.record_bytes} B, {args.rounds} rounds")
    medians = {}
    for label, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        medians[label] = (rate, cpu)
        rates = ", ".join(f"{r:,.0f}" for r, _ in runs)
        cpus = ", ".join(f"{c:.2f}" for _, c in runs)
        print(f"{label:8} {rate:>10,.0f} rec/s ({rates}); {cpu:.2f} µs CPU/record ({cpus})")
    print(
        f"compiled / python: {medians['compiled'][0] / medians['python'][0]:.2f}x records/s, "
        f"{medians['compiled'][1] / medians['python'][1]:.2f}x CPU per record"
    )


if __name__ == "__main__":
    main()
