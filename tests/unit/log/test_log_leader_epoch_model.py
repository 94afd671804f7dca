"""Leader epochs in a PartitionLog against a model: random appends, truncations,
retention and reopens keep the stored epochs and end offsets the model predicts.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import replace
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from leader_epoch_helpers import Entries, copied, make_batch, open_log, stored, stored_headers

from strom.log import LogConfig, PartitionLog
from strom.protocol.records import replica_batches

# ---------------------------------------------------------------------------- the model


def model_entries(history: list[tuple[int, int]], explicit: Entries, log_start: int) -> Entries:
    """The expected cache: the first offset of each epoch among the batches not truncated
    away (``history``: base offset, epoch; retention's victims included) and the
    epochs recorded at election; an epoch that a later one starts at or before is gone;
    then what lies before the log start is clipped, as retention does."""
    first: dict[int, int] = {}
    for base, epoch in history:
        if epoch >= 0:
            first.setdefault(epoch, base)
    for epoch, start in explicit:
        first[epoch] = min(first.get(epoch, start), start)
    entries = sorted(first.items())
    entries = [(e, s) for e, s in entries if not any(e2 > e and s2 <= s for e2, s2 in entries)]
    before = [entry for entry in entries if entry[1] <= log_start]
    after = [entry for entry in entries if entry[1] > log_start]
    return ([(before[-1][0], log_start)] if before else []) + after


def brute_end_offset(entries: Entries, requested: int, log_end: int) -> tuple[int, int]:
    if requested == -1:
        return -1, -1
    if entries and entries[-1][0] == requested:
        return requested, log_end
    higher = [entry for entry in entries if entry[0] > requested]
    if not higher:
        return -1, -1
    floor = [entry for entry in entries if entry[0] <= requested]
    return (floor[-1][0] if floor else requested), higher[0][1]


class LeaderEpochMachine(RuleBasedStateMachine):
    """Leaders and followers appending, truncations, retention and reopens."""

    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp())
        self.directory = self.tmp / "p"
        self.config = LogConfig(segment_bytes=300, index_interval_bytes=64)
        self.log = PartitionLog.open(self.directory, self.config, now_ms=0)
        self.epoch = 0  # the newest epoch handed out: epochs never go back
        self.history: list[tuple[int, int]] = []  # (base offset, epoch) of batches
        self.explicit: Entries = []  # assign_epoch_start calls

    def teardown(self) -> None:
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def cut(self, end: int) -> None:
        """The log was cut at ``end``: so were the model's records."""
        self.history = [(base, epoch) for base, epoch in self.history if base < end]
        self.explicit = [(epoch, start) for epoch, start in self.explicit if start < end]
        if end <= self.log.log_start_offset:
            self.history.clear()
            self.explicit.clear()

    @rule(sizes=st.lists(st.integers(1, 3), min_size=1, max_size=3), bump=st.integers(0, 2))
    def leader_append(self, sizes: list[int], bump: int) -> None:
        self.epoch += bump
        base = self.log.append(
            [make_batch(n) for n in sizes], now_ms=0, leader_epoch=self.epoch
        ).base_offset
        for n in sizes:
            self.history.append((base, self.epoch))
            base += n

    @rule(
        bumps=st.lists(st.integers(0, 2), min_size=1, max_size=3),
        partial=st.integers(0, 40),
    )
    def follower_append(self, bumps: list[int], partial: int) -> None:
        epochs = []
        for bump in bumps:
            self.epoch += bump
            epochs.append(self.epoch)
        end = self.log.log_end_offset
        data = copied(end, epochs)
        data += copied(end + 2 * len(epochs), [self.epoch])[:partial]  # a cut-off batch
        batches = replica_batches(data)
        assert len(batches) == len(epochs)
        self.log.append(
            batches, now_ms=0, leader_epoch=0, assign_offsets=False, producer_check=False
        )
        self.history += [(end + 2 * i, epoch) for i, epoch in enumerate(epochs)]

    @rule(bump=st.integers(0, 2))
    def elected(self, bump: int) -> None:
        self.epoch += bump
        self.log.assign_epoch_start(self.epoch, self.log.log_end_offset)
        self.explicit.append((self.epoch, self.log.log_end_offset))

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log.log_end_offset + 2), label="offset")
        if offset < self.log.log_end_offset:
            self.cut(self.log.truncate_to(offset))
        else:  # no record goes, but epochs starting at the log end do
            end = self.log.log_end_offset
            assert self.log.truncate_to(offset) == end
            self.cut(end)

    @rule(data=st.data())
    def truncate_fully(self, data: st.DataObject) -> None:
        offset = data.draw(st.integers(0, self.log.log_end_offset + 30), label="offset")
        self.log.truncate_fully_and_start_at(offset)
        self.history.clear()
        self.explicit.clear()

    @rule()
    def roll(self) -> None:
        self.log.roll(0)

    @rule(keep_bytes=st.integers(0, 1_000))
    def retention(self, keep_bytes: int) -> None:
        self.log.reconfigure(replace(self.config, retention_bytes=keep_bytes))
        self.log.delete_old_segments(now_ms=0)
        self.log.reconfigure(self.config)

    @rule(clean=st.booleans())
    def reopen(self, clean: bool) -> None:
        self.log.close(clean=clean)
        self.log = PartitionLog.open(self.directory, self.config, now_ms=0)
        self.cut(self.log.log_end_offset)

    @invariant()
    def matches_the_model(self) -> None:
        log = self.log
        start, end = log.log_start_offset, log.log_end_offset
        in_log = [(h.base_offset, h.partition_leader_epoch) for h in stored_headers(log)]
        assert in_log == [(base, epoch) for base, epoch in self.history if base >= start]
        expected = model_entries(self.history, self.explicit, start)
        assert list(log.leader_epochs.entries) == expected
        assert stored(self.directory) in ((None, []) if not expected else (expected,))
        for requested in range(-1, self.epoch + 3):
            assert log.end_offset_for_epoch(requested) == brute_end_offset(expected, requested, end)


LeaderEpochMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=30, deadline=None
)
test_leader_epochs_match_a_model = LeaderEpochMachine.TestCase


def test_truncating_at_the_log_end_drops_an_epoch_that_wrote_nothing(tmp_path: Path) -> None:
    """A replica that became leader (epoch 3 at its end, 4) and appended nothing before
    leadership moved on: its next leader knows nothing of epoch 3, so the follower's
    truncation to its own log end must drop it, or it would be its last fetched epoch
    forever and every fetch would diverge at the same offset."""
    log = open_log(tmp_path / "p")
    log.append([make_batch(4)], now_ms=0, leader_epoch=1)
    log.assign_epoch_start(3, log.log_end_offset)
    assert log.leader_epochs.entries == ((1, 0), (3, 4))
    assert log.truncate_to(4) == 4
    assert log.leader_epochs.entries == ((1, 0),)
    assert stored(tmp_path / "p") == [(1, 0)]
    log.close()
