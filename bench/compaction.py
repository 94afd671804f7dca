"""Log cleaner throughput: how fast a cleaning pass turns a dirty log into a compacted one.

    .venv/bin/python bench/compaction.py [--records 1000000] [--keys 10000]
        [--value-bytes 100] [--batch 500] [--compression none,lz4] [--json FILE]

In-process, on a PartitionLog in a temporary directory (no broker, no network): the
log is filled with batches of `--batch` records whose keys are drawn from `--keys`
keys, sealed, and cleaned once from scratch ("first pass": the whole log is dirty).
Then 10 % more updates are written and the log is cleaned again ("incremental pass":
a small dirty part, and the clean part is copied again). Each pass is timed in its two
parts: building the cleaned segments (the worker thread's share: the key map, the
copy, the fsyncs) and swapping them in (the event loop's share). Throughput is the
dirty log's bytes and records per second of build time.
"""

from __future__ import annotations

import argparse
import json
import random
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from strom.log import LogConfig, PartitionLog
from strom.log.cleaner_build import build_cleaned
from strom.protocol.records import Compression, NewRecord, encode_batch, validate_batches

MB = 1_000_000


@dataclass(frozen=True, slots=True)
class PassResult:
    scenario: str
    compression: str
    dirty_records: int
    dirty_mb: float
    log_mb_before: float
    log_mb_after: float
    records_removed: int
    build_s: float
    swap_ms: float

    @property
    def mb_per_s(self) -> float:
        return self.dirty_mb / self.build_s

    @property
    def records_per_s(self) -> float:
        return self.dirty_records / self.build_s


def fill(
    log: PartitionLog,
    rng: random.Random,
    records: int,
    args: argparse.Namespace,
    codec: Compression,
    now_ms: int,
) -> None:
    value = b"v" * (args.value_bytes // 2)
    for start in range(0, records, args.batch):
        count = min(args.batch, records - start)
        batch = [
            NewRecord(
                b"key-%08d" % rng.randrange(args.keys),
                value + rng.randbytes(args.value_bytes - len(value)),
            )
            for _ in range(count)
        ]
        data = encode_batch(batch, base_timestamp_ms=now_ms, compression=codec)
        log.append(validate_batches(data, max_batch_bytes=1 << 30), now_ms=now_ms, leader_epoch=0)
    log.roll(now_ms)


def clean_once(log: PartitionLog, scenario: str, codec: Compression, now_ms: int) -> PassResult:
    state = log.cleanability(now_ms)
    assert state is not None
    dirty_start = state.dirty_start
    dirty_records = log.segments[-1].base_offset - dirty_start
    size_before = log.size_bytes
    plan = log.cleaning_plan(now_ms)
    assert plan is not None
    started = time.perf_counter()
    result = build_cleaned(plan)
    built = time.perf_counter()
    assert log.swap_cleaned(result, now_ms=now_ms)
    swapped = time.perf_counter()
    return PassResult(
        scenario=scenario,
        compression=codec.name.lower(),
        dirty_records=dirty_records,
        dirty_mb=state.dirty_bytes / MB,
        log_mb_before=size_before / MB,
        log_mb_after=log.size_bytes / MB,
        records_removed=result.records_removed,
        build_s=built - started,
        swap_ms=(swapped - built) * 1000,
    )


def run(args: argparse.Namespace, codec: Compression) -> list[PassResult]:
    rng = random.Random(args.seed)
    config = LogConfig(
        segment_bytes=args.segment_bytes,
        cleanup_policy="compact",
        min_cleanable_dirty_ratio=0.0,
        flush_messages=1 << 40,
    )
    with tempfile.TemporaryDirectory(prefix="strom-bench-") as tmp:
        log = PartitionLog.open(Path(tmp) / "bench-0", config, now_ms=0)
        try:
            fill(log, rng, args.records, args, codec, now_ms=0)
            log.flush()
            first = clean_once(log, "first pass", codec, now_ms=1)
            fill(log, rng, args.records // 10, args, codec, now_ms=2)
            log.flush()
            again = clean_once(log, "incremental pass", codec, now_ms=3)
        finally:
            log.close()
    return [first, again]


def codec_list(text: str) -> list[Compression]:
    try:
        return [Compression[name.strip().upper()] for name in text.split(",")]
    except KeyError as exc:
        raise argparse.ArgumentTypeError(f"unknown codec {exc}") from None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500, help="records per batch")
    parser.add_argument("--segment-bytes", type=int, default=64 * 1024 * 1024)
    parser.add_argument("--compression", type=codec_list, default=codec_list("none,lz4"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write results here")
    args = parser.parse_args()
    results: list[PassResult] = []
    print(
        f"{'pass':<17} {'codec':<6} {'dirty records':>13} {'dirty MB':>9} {'MB/s':>7} "
        f"{'records/s':>10} {'log MB before -> after':>23} {'swap ms':>8}"
    )
    for codec in args.compression:
        for r in run(args, codec):
            results.append(r)
            print(
                f"{r.scenario:<17} {r.compression:<6} {r.dirty_records:>13,} {r.dirty_mb:>9.1f} "
                f"{r.mb_per_s:>7.1f} {r.records_per_s:>10,.0f} "
                f"{r.log_mb_before:>12.1f} -> {r.log_mb_after:<8.1f} {r.swap_ms:>8.1f}"
            )
    if args.json:
        args.json.write_text(
            json.dumps([asdict(r) | {"mb_per_s": r.mb_per_s} for r in results], indent=2)
        )
    print(shlex.join(["python", *sys.argv]))


if __name__ == "__main__":
    main()
