"""Raft storage and wire throughput: fsynced appends, and message encode/decode.

    .venv/bin/python bench/raft_storage.py [--entries 20000] [--entry-bytes 200]
        [--directory DIR]

In-process, no broker. Storage: `RaftStorage.persist` with batches of 1, 10 and 100
entries of `--entry-bytes` each, every call ending with its fdatasync (as the controller
does before it sends anything), in a fresh directory under `--directory` (default: a
temporary directory; point it at the disk the controller will use). Wire: `encode` and
`decode` of an AppendRequest holding about 1 MiB of such entries, of an empty
AppendRequest (a heartbeat), and of a VoteRequest.
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from strom.raft import wire
from strom.raft.messages import AppendRequest, Entry, Message, Ready, VoteRequest
from strom.raft.storage import RaftStorage

MB = 1_000_000


def bench_persist(directory: Path, batch: int, total: int, entry_bytes: int) -> None:
    storage = RaftStorage.open(directory)
    data = b"x" * entry_bytes
    batches = max(1, total // batch)
    readies = [
        Ready(entries=tuple(Entry(1 + b * batch + i, 1, data) for i in range(batch)))
        for b in range(batches)
    ]
    started = time.perf_counter()
    for ready in readies:
        storage.persist(ready)
    elapsed_s = time.perf_counter() - started
    storage.close()
    entries = batches * batch
    print(
        f"persist batch {batch:>3}: {entries / elapsed_s:>10,.0f} entries/s "
        f"{entries * entry_bytes / elapsed_s / MB:>7.1f} MB/s "
        f"{batches / elapsed_s:>8,.0f} fsyncs/s ({entries} entries in {elapsed_s:.2f} s)"
    )


def timed(function: Callable[[], object], min_s: float = 0.5) -> float:
    """Seconds per call, over at least `min_s`."""
    calls = 0
    started = time.perf_counter()
    while True:
        function()
        calls += 1
        elapsed_s = time.perf_counter() - started
        if elapsed_s >= min_s:
            return elapsed_s / calls


def bench_wire(name: str, message: Message) -> None:
    data = wire.encode(message)
    encode_s = timed(lambda: wire.encode(message))
    decode_s = timed(lambda: wire.decode(data))
    print(
        f"wire {name:<22} {len(data):>9,} bytes: encode {1 / encode_s:>9,.0f}/s "
        f"({len(data) / encode_s / MB:>6.0f} MB/s), decode {1 / decode_s:>9,.0f}/s "
        f"({len(data) / decode_s / MB:>6.0f} MB/s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=20_000)
    parser.add_argument("--entry-bytes", type=int, default=200)
    parser.add_argument("--directory", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.directory) as tmp:
        for batch in (1, 10, 100):
            total = args.entries if batch > 1 else max(1, args.entries // 10)
            bench_persist(Path(tmp) / f"batch-{batch}", batch, total, args.entry_bytes)
    data = b"x" * args.entry_bytes
    count = (1 << 20) // (args.entry_bytes + 20)
    entries = tuple(Entry(101 + i, 3, data) for i in range(count))
    bench_wire(f"AppendRequest x{count}", AppendRequest(1, 2, 3, 100, 3, entries, 90))
    bench_wire("heartbeat", AppendRequest(1, 2, 3, 100, 3, (), 90))
    bench_wire(
        "VoteRequest", VoteRequest(1, 2, 4, 100, 3, pre_vote=True, leadership_transfer=False)
    )
    print(shlex.join([Path(sys.executable).name, *sys.argv]))


if __name__ == "__main__":
    main()
