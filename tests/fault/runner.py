"""One fault run from start to verdict, and the files a failing run leaves behind.

run_and_check(scenario, root):
1. start `scenario.nodes` combined nodes (running_cluster, free ports under root) keeping
   their metadata in `scenario.store`: the built-in Raft quorum, or a private ZooKeeper
   server started under root; with network faults in the schedule, each node and the
   ZooKeeper server in a network namespace of its own (clusters.py); create the topic
   (partitions, replication factor, min.insync.replicas) and wait until every partition
   has a leader;
2. start the producers and consumers (workload.py), apply the schedule (injector.py);
3. heal: make the network whole, restart and continue every node, wait until all are
   ready and recovered; after a network fault, let the producers write until every
   partition took a write sent after the heal (at most RECOVERY_BOUND_S), then `tail_s`
   longer, stop them and wait for their answers;
4. wait until recovered again (the followers have the last writes), let the consumers
   catch up to the high watermarks, stop them, and read every partition from its start
   to its high watermark with a fresh consumer: the final log;
5. check the history (checker.py).
Every process and thread is stopped on the way out, also when something fails.

A failing run is saved as JSON (scenario, schedule, history, anomalies) to the pytest tmp
dir and to tests/fault/failures/<name>-seed<seed>.json; STROM_FAULT_REPLAY=<that file>
runs the same scenario again.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from cluster import TestCluster
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from . import history as history_json
from . import schedule as schedule_json
from .checker import CheckResult, check
from .cluster_view import leaderless, topic_views
from .clusters import started_cluster
from .history import Acked, History, NetworkChanged, Sent, TopicSetup
from .injector import FaultInjector
from .recovery import RECOVERY_BOUND_S
from .schedule import Schedule
from .workload import (
    FLUSH_TIMEOUT_S,
    ConsumerWorker,
    ProducerWorker,
    Recorder,
    final_read,
    watermarks,
)

FAILURES_DIR = Path(__file__).parent / "failures"
CATCH_UP_TIMEOUT_S = 15.0
FINAL_RECOVERY_TIMEOUT_S = 10.0
"""The cluster was recovered before the producers' last seconds; this only lets the
followers catch up on those, and gives up (with a Note) rather than hold up every run."""
FINAL_ISR_TIMEOUT_S = 10.0
"""After a network fault: how long, once the producers stopped, every follower may take
to be back in its partition's ISR (on top of the heal's own wait for it, up to 20 s)."""
FINAL_READ_TIMEOUT_S = 60.0
JOIN_TIMEOUT_S = 10.0
STORES = ("raft", "zookeeper")
DEFAULT_SETTINGS = (
    "broker.session.timeout.ms=4000",
    "broker.heartbeat.interval.ms=500",
    "replica.lag.time.max.ms=4000",
    "default.replication.factor=3",
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
    # Preferred leaders move back within a run, but not seconds after a broker returns:
    # clients are still backing off from it (librdkafka up to 10 s) and their writes wait
    # (docs/operations.md, "Under network partitions"). Kafka's default is 300 s.
    "leader.imbalance.check.interval.seconds=30",
)
FAST_FAILBACK = "leader.imbalance.check.interval.seconds=2"
"""For a test that needs a returning broker to lead its preferred partitions soon."""


def with_setting(settings: tuple[str, ...], setting: str) -> tuple[str, ...]:
    """`settings` with `setting` (`key=value`) in place of any value of its key."""
    key = setting.split("=", 1)[0]
    return (*(s for s in settings if s.split("=", 1)[0] != key), setting)


@dataclass(frozen=True, slots=True)
class Scenario:
    """Everything a run depends on, so that a saved one replays the same."""

    name: str
    schedule: Schedule
    nodes: int = 3
    partitions: int = 3
    replication_factor: int = 3
    min_insync_replicas: int = 2
    producers: int = 4
    consumers: int = 2
    rate_per_producer: float = 40.0
    """Writes per second of each producer."""
    tail_s: float = 3.0
    """How long the producers go on writing once the cluster has healed."""
    settings: tuple[str, ...] = DEFAULT_SETTINGS
    """Every node's extra config keys (`key=value`)."""
    topic: str = "faults"
    store: str = "raft"
    """Where the metadata lives: "raft" (the built-in quorum) or "zookeeper" (a private
    server; the nodes' ZooKeeper session timeout is their broker.session.timeout.ms, so a
    dead or paused broker is fenced as soon on either store)."""

    def __post_init__(self) -> None:
        if self.store not in STORES:
            raise ValueError(f"store must be one of {STORES}, got {self.store!r}")

    @property
    def needs_network(self) -> bool:
        """Whether the schedule cuts the network: the nodes then run in namespaces."""
        return any(fault.action.is_network for fault in self.schedule.faults)

    def to_json(self) -> dict[str, Any]:
        data = {spec.name: getattr(self, spec.name) for spec in fields(self)}
        data["schedule"] = schedule_json.to_json(self.schedule)
        data["settings"] = list(self.settings)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Scenario:
        values = dict(data)
        values["schedule"] = schedule_json.from_json(values["schedule"])
        values["settings"] = tuple(values["settings"])
        return cls(**values)


@dataclass(slots=True)
class RunOutcome:
    scenario: Scenario
    history: History
    result: CheckResult
    timings_s: dict[str, float] = field(default_factory=dict)
    isr_not_full: str | None = None
    """After a network fault: what was missing from the ISR at the end (None: every
    replica of every partition was back in its ISR)."""

    def timings(self) -> str:
        return ", ".join(f"{phase} {seconds:.1f}s" for phase, seconds in self.timings_s.items())


class FaultRun:
    """One run; `history` is there as soon as the workload starts, for saving a run that
    fails half way."""

    def __init__(self, scenario: Scenario, root: Path) -> None:
        self.scenario = scenario
        self.root = root
        self.history: History | None = None
        self.timings_s: dict[str, float] = {}
        self.isr_not_full: str | None = None
        self._phase_started = time.monotonic()

    def _phase(self, name: str) -> None:
        now = time.monotonic()
        self.timings_s[name] = now - self._phase_started
        self._phase_started = now

    def execute(self) -> History:
        s = self.scenario
        with started_cluster(
            self.root,
            nodes=s.nodes,
            settings=s.settings,
            store=s.store,
            session_timeout_ms=session_timeout_ms(s.settings),
            network=s.needs_network,
        ) as (cluster, network):
            setup = create_topic(
                cluster, s.topic, s.partitions, s.replication_factor, s.min_insync_replicas
            )
            self._phase("start")
            history = self.history = History(setup)
            recorder = Recorder(history)
            injector = FaultInjector(
                cluster,
                s.schedule,
                recorder,
                topic=s.topic,
                partitions=setup.partitions,
                network=network,
            )
            producers = [
                ProducerWorker(
                    f"p{i}",
                    recorder,
                    bootstrap=cluster.bootstrap,
                    topic=s.topic,
                    partitions=s.partitions,
                    rate_per_s=s.rate_per_producer,
                )
                for i in range(s.producers)
            ]
            consumers = [
                ConsumerWorker(
                    f"c{i}",
                    recorder,
                    bootstrap=cluster.bootstrap,
                    topic=s.topic,
                    partitions=s.partitions,
                )
                for i in range(s.consumers)
            ]
            with _running(producers, consumers):
                injector.run_schedule()
                self._phase("schedule")
                self._heal_and_stop_producers(injector, recorder, producers)
                self._phase("heal")
                marks = self._catch_up(cluster, injector, recorder, consumers)
            workers = (*producers, *consumers)
            crashed = [f"{w.client_name}: {w.crash!r}" for w in workers if w.crash is not None]
            crashed += [f"{w.client_name} did not stop" for w in workers if w.is_alive()]
            if crashed:
                raise AssertionError(f"client threads failed: {'; '.join(crashed)}")
            history.final_log = final_read(cluster.bootstrap, s.topic, marks, FINAL_READ_TIMEOUT_S)
            self._phase("final read")
        return history

    def _heal_and_stop_producers(
        self, injector: FaultInjector, recorder: Recorder, producers: list[ProducerWorker]
    ) -> None:
        recorder.note("runner", "healing")
        injector.heal()
        recorder.note("runner", "healed")
        self._wait_for_writes_after_heal(injector, recorder)
        injector.idle_until(recorder.now_s() + self.scenario.tail_s)
        for producer in producers:
            producer.stop_sending.set()
        deadline = time.monotonic() + FLUSH_TIMEOUT_S + JOIN_TIMEOUT_S
        for producer in producers:
            producer.join(max(0.0, deadline - time.monotonic()))
        recorder.note("runner", "producers stopped")

    def _wait_for_writes_after_heal(self, injector: FaultInjector, recorder: Recorder) -> None:
        """After the last heal of the network, go on until every partition acknowledged a
        write sent after it, or the recovery check's bound has passed: the last heal of a
        run is measured too (recovery.py)."""
        events = recorder.events()
        heals = [e.at_s for e in events if isinstance(e, NetworkChanged) and not e.cuts]
        if not heals:
            return
        heal_s = heals[-1]
        partitions = set(range(self.scenario.partitions))
        deadline_s = heal_s + RECOVERY_BOUND_S + 1.0
        while True:
            events = recorder.events()
            sent = {e.value for e in events if isinstance(e, Sent) and e.at_s >= heal_s}
            written = {e.partition for e in events if isinstance(e, Acked) and e.value in sent}
            if partitions <= written:
                return
            if recorder.now_s() >= deadline_s:
                break
            injector.step(0.2)
        missing = sorted(partitions - written)
        recorder.note(
            "runner",
            f"partitions {missing} took no write within {RECOVERY_BOUND_S:g} s of the heal",
        )

    def _catch_up(
        self,
        cluster: TestCluster,
        injector: FaultInjector,
        recorder: Recorder,
        consumers: list[ConsumerWorker],
    ) -> dict[int, tuple[int, int]]:
        """Wait until the followers have the last writes too (noted if not), let the
        consumers read up to the high watermarks (for at most CATCH_UP_TIMEOUT_S), stop
        them; the watermarks to read the final log up to."""
        s = self.scenario
        injector.wait_recovered(FINAL_RECOVERY_TIMEOUT_S, "after the producers stopped")
        if s.needs_network:
            self.isr_not_full = injector.isr_not_full(FINAL_ISR_TIMEOUT_S)
            if self.isr_not_full is not None:
                recorder.note("runner", f"the ISR is not full at the end: {self.isr_not_full}")
        marks = cluster.wait_until(
            lambda: watermarks(cluster.bootstrap, s.topic, s.partitions),
            30,
            "the high watermarks",
        )
        highs = {p: high for p, (_, high) in marks.items()}
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while time.monotonic() < deadline and not all(c.caught_up(highs) for c in consumers):
            injector.step(0.2)
        for consumer in consumers:
            consumer.stop.set()
        recorder.note("runner", f"final read up to the high watermarks {highs}")
        return marks


def create_topic(
    cluster: TestCluster,
    topic: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
) -> TopicSetup:
    """Create `topic` and wait until every node knows a leader for every partition; its
    replica assignment."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    new_topic = NewTopic(
        topic,
        partitions,
        replication_factor,
        config={"min.insync.replicas": str(min_insync_replicas)},
    )
    admin.create_topics([new_topic])[topic].result(30)
    addresses = {n: cluster.address(n) for n in cluster.node_ids}
    indexes = list(range(partitions))

    def created() -> dict[int, tuple[int, ...]] | None:
        views = topic_views(addresses, topic)
        if len(views) < len(addresses) or leaderless(views, indexes):
            return None
        view = next(iter(views.values()))
        return {p: view.partitions[p].replicas for p in indexes}

    replicas = cluster.wait_until(created, 30, f"a leader for every partition of {topic}")
    return TopicSetup(topic, replicas, min_insync_replicas, tuple(cluster.node_ids))


@contextmanager
def _running(producers: list[ProducerWorker], consumers: list[ConsumerWorker]) -> Iterator[None]:
    """Start the client threads; on the way out tell them all to stop and wait for them
    (bounded: they are daemon threads, a stuck one cannot keep the process alive)."""
    for worker in (*producers, *consumers):
        worker.start()
    try:
        yield
    finally:
        for producer in producers:
            producer.stop_sending.set()
        for consumer in consumers:
            consumer.stop.set()
        deadline = time.monotonic() + FLUSH_TIMEOUT_S + JOIN_TIMEOUT_S
        for worker in (*producers, *consumers):
            worker.join(max(0.0, deadline - time.monotonic()))


def session_timeout_ms(settings: tuple[str, ...]) -> int:
    """The nodes' broker.session.timeout.ms, also their ZooKeeper session's."""
    for setting in settings:
        key, _, value = setting.partition("=")
        if key == "broker.session.timeout.ms":
            return int(value)
    return 4000


def run_and_check(scenario: Scenario, root: Path) -> RunOutcome:
    """Run the scenario and check its history. A run that breaks down half way (a
    cluster that does not heal, a client thread that crashes) raises, with the path of
    its history so far in the error's notes."""
    run = FaultRun(scenario, root)
    try:
        history = run.execute()
    except BaseException as exc:
        if run.history is not None:
            paths = save_failure(scenario, run.history, None, root, error=repr(exc))
            exc.add_note(failure_message(scenario, paths))
        raise
    started = time.monotonic()
    result = check(history)
    run.timings_s["check"] = time.monotonic() - started
    return RunOutcome(scenario, history, result, run.timings_s, run.isr_not_full)


# --- failures and replays ----------------------------------------------------------------


def failure_name(scenario: Scenario) -> str:
    store = "" if scenario.store == "raft" else f"-{scenario.store}"
    return f"{scenario.name}{store}-seed{scenario.schedule.seed}.json"


def save_failure(
    scenario: Scenario,
    history: History,
    result: CheckResult | None,
    tmp_dir: Path,
    *,
    error: str | None = None,
) -> list[Path]:
    """Write the run (scenario, history, anomalies) to `tmp_dir` and FAILURES_DIR."""
    data: dict[str, Any] = {
        "scenario": scenario.to_json(),
        "error": error,
        "summary": None if result is None else result.summary(per_kind=20),
        "anomalies": []
        if result is None
        else [
            {
                "kind": a.kind.name,
                "partition": a.partition,
                "offset": a.offset,
                "value": a.value,
                "at_s": a.at_s,
                "detail": a.detail,
                "faults": list(a.faults),
            }
            for a in result.anomalies
        ],
        "history": history_json.to_json(history),
    }
    text = json.dumps(data)
    paths = [tmp_dir / failure_name(scenario), FAILURES_DIR / failure_name(scenario)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return paths


def replay_command(scenario: Scenario, path: Path) -> str:
    if scenario.name.startswith("soak"):
        return f".venv/bin/python -m tests.fault.soak --replay {path}"
    return f"STROM_FAULT_REPLAY={path} .venv/bin/pytest tests/fault -k {scenario.name}"


def failure_message(scenario: Scenario, paths: list[Path]) -> str:
    return (
        f"{scenario.schedule.describe()}\n"
        f"schedule and history: {paths[-1]} (also {paths[0]})\n"
        f"replay: {replay_command(scenario, paths[-1])}"
    )


def load_saved(path: Path) -> tuple[Scenario, History]:
    data = json.loads(path.read_text(encoding="utf-8"))
    return Scenario.from_json(data["scenario"]), history_json.from_json(data["history"])


def seed_from_env(default: int) -> int:
    return int(os.environ.get("STROM_FAULT_SEED", default))


def seconds_from_env(default: float = 60.0) -> float:
    return float(os.environ.get("STROM_FAULT_SECONDS", default))


def replay_from_env() -> Scenario | None:
    """The scenario saved at $STROM_FAULT_REPLAY, if set."""
    path = os.environ.get("STROM_FAULT_REPLAY")
    if not path:
        return None
    scenario, _ = load_saved(Path(path))
    return scenario
