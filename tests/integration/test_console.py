"""`strom console` against a real three-node cluster, driven in Debian's headless Chromium
by Playwright: every page renders, the message search finds a planted record, a topic is
created, changed and deleted from the console, a group's offsets are reset; and hostile
or wrong requests get clear errors while the console keeps serving.

STROM_CONSOLE_SCREENSHOTS=docs/console .venv/bin/pytest tests/integration/test_console.py
refreshes the screenshots docs/console.md shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))

from broker import free_port
from cluster import TestCluster, free_ports, running_cluster
from console_process import ConsoleProcess, chromium_page, running_console

SETTINGS = [
    "offsets.topic.replication.factor=3",
    "offsets.topic.num.partitions=3",
    "group.initial.rebalance.delay.ms=0",
]
SHOTS = os.environ.get("STROM_CONSOLE_SCREENSHOTS")


def wait_for(check: Callable[[], bool], what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def shot(page: Any, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestCluster, list[int]]]:
    root = tmp_path_factory.mktemp("console-cluster")
    ports = free_ports(3)
    node_settings = {i + 1: [f"metrics.listener=127.0.0.1:{ports[i]}"] for i in range(3)}
    with running_cluster(root, 3, settings=SETTINGS, node_settings=node_settings) as running:
        yield running, ports


@pytest.fixture(scope="module")
def console(
    cluster: tuple[TestCluster, list[int]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ConsoleProcess]:
    running, ports = cluster
    metrics = [arg for port in ports for arg in ("--metrics", f"http://127.0.0.1:{port}/metrics")]
    root = tmp_path_factory.mktemp("console")
    with running_console(root, running.bootstrap, metrics) as process:
        yield process


@pytest.fixture(scope="module")
def planted(cluster: tuple[TestCluster, list[int]]) -> tuple[int, int]:
    """Topic `orders` (3 partitions, 3 replicas) with 3,000 records, one of them planted
    in the middle; returns the planted record's (partition, offset)."""
    running, _ = cluster
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    admin.create_topics([NewTopic("orders", 3, 3)])["orders"].result(30)
    producer = Producer({"bootstrap.servers": running.bootstrap, "linger.ms": 5})
    where: list[tuple[int, int]] = []

    def delivered(error: Any, message: Any) -> None:
        assert error is None, error
        if message.key() == b"planted-key":
            where.append((message.partition(), message.offset()))

    for n in range(3000):
        if n == 1500:
            producer.produce(
                "orders",
                key=b"planted-key",
                value=b'{"order": 1500, "note": "the needle in the haystack"}',
                headers=[("source", b"test")],
                on_delivery=delivered,
            )
        producer.produce("orders", key=f"k{n}".encode(), value=f"order {n}".encode())
        producer.poll(0)
    assert producer.flush(30) == 0
    assert len(where) == 1
    return where[0]


def test_every_page_renders_against_the_cluster(
    console: ConsoleProcess, planted: tuple[int, int], cluster: tuple[TestCluster, list[int]]
) -> None:
    running, _ = cluster
    group = "console-readers"
    consumer = Consumer(
        {
            "bootstrap.servers": running.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["orders"])
    read = 0
    deadline = time.monotonic() + 60
    while read < 1000 and time.monotonic() < deadline:
        read += len([m for m in consumer.consume(500, 1.0) if m.error() is None])
    consumer.commit(asynchronous=False)
    with chromium_page() as page:
        page.goto(console.url + "/")
        assert page.locator("h1").inner_text() == "Cluster"
        assert page.locator("table[aria-label=Brokers] tbody tr").count() == 3
        assert page.locator("table[aria-label=Quorum] tbody tr").count() == 3
        page.wait_for_selector("#throughput svg polyline", timeout=30_000)
        shot(page, "cluster")

        page.goto(console.url + "/topics")
        row = page.locator("table[aria-label=Topics] tr", has_text="orders")
        assert row.locator("td").nth(1).inner_text() == "3"  # partitions
        assert row.locator("td").nth(2).inner_text() == "3"  # replicas
        shot(page, "topics")

        page.click("text=orders")
        assert page.locator("h1").inner_text() == "Topic orders"
        assert page.locator("table[aria-label=Partitions] tbody tr").count() == 3
        assert "cleanup.policy" in page.locator("table[aria-label=Configs]").inner_text()
        shot(page, "topic")

        page.goto(console.url + "/groups")
        group_row = page.locator("table[aria-label=Groups] tr", has_text=group)
        assert group_row.locator("td").nth(3).inner_text() == "1"  # members
        page.click(f"text={group}")
        lag = page.locator("table[aria-label=Lag] tbody tr")
        assert lag.count() == 3
        assert "Offsets can be reset once the group has no members" in page.content()
        shot(page, "group")

        page.goto(console.url + "/security")
        assert page.locator("h1").inner_text() == "Security"
        assert "Cannot list ACLs: the broker has no authorizer" in page.content()
    consumer.close()


def test_the_message_search_finds_the_planted_record(
    console: ConsoleProcess, planted: tuple[int, int]
) -> None:
    partition, offset = planted
    with chromium_page() as page:
        page.goto(console.url + "/topics/orders/messages")
        page.select_option("select[name=start]", "earliest")
        page.fill("input[name=search]", "NEEDLE in the")
        page.select_option("select[name=format]", "json")
        page.click("form[name='Search messages'] button")
        page.wait_for_selector("#results [data-state=done]")
        status = page.locator("#results [role=status]").inner_text()
        assert status.startswith("Read 3001 of 3001 records, 1 found"), status
        cells = page.locator("table[aria-label=Records] tbody tr td")
        assert cells.nth(0).inner_text() == str(partition)
        assert cells.nth(1).inner_text() == str(offset)
        assert cells.nth(3).inner_text() == "planted-key"
        assert '"order": 1500' in cells.nth(4).inner_text()  # shown as indented JSON
        assert cells.nth(5).inner_text() == "source: test"
        shot(page, "messages")

        # By key, in hex, starting at the planted record's offset in its partition.
        page.select_option("select[name=partition]", str(partition))
        page.select_option("select[name=start]", "offset")
        page.fill("input[name=offset]", str(offset))
        page.fill("input[name=search]", "^planted")
        page.check("input[name=regex]")
        page.select_option("select[name=in]", "key")
        page.select_option("select[name=format]", "hex")
        page.click("form[name='Search messages'] button")
        page.wait_for_selector("#results [data-state=done]")
        cells = page.locator("table[aria-label=Records] tbody tr td")
        assert cells.nth(3).inner_text() == b"planted-key".hex(" ")

        # A search the page cannot run says why.
        page.fill("input[name=search]", "(")
        page.click("form[name='Search messages'] button")
        page.wait_for_selector("#results .notice.error")
        assert "is not a regular expression" in page.locator("#results").inner_text()


def test_the_search_and_forms_work_without_javascript(
    console: ConsoleProcess, planted: tuple[int, int]
) -> None:
    partition, offset = planted
    with chromium_page(javascript=False) as page:
        page.goto(console.url + "/topics/orders/messages")
        page.select_option("select[name=start]", "time")
        page.fill("input[name=time]", "0")
        page.fill("input[name=search]", "haystack")
        page.click("form[name='Search messages'] button")
        page.wait_for_selector("#results [data-state=done]")
        assert "/topics/orders/messages?" in page.url  # the form's own GET
        cells = page.locator("table[aria-label=Records] tbody tr td")
        assert [cells.nth(0).inner_text(), cells.nth(1).inner_text()] == [
            str(partition),
            str(offset),
        ]


def test_a_topic_is_created_changed_and_deleted_from_the_console(
    console: ConsoleProcess, cluster: tuple[TestCluster, list[int]]
) -> None:
    running, _ = cluster
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    with chromium_page() as page:
        page.goto(console.url + "/topics")
        form = page.locator("form[name='Create topic']")
        form.locator("input[name=name]").fill("made-in-console")
        form.locator("input[name=partitions]").fill("2")
        form.locator("input[name=replication_factor]").fill("3")
        form.locator("textarea[name=configs]").fill("retention.ms=3600000")
        form.locator("button").click()
        page.wait_for_selector("text=Created topic made-in-console")
        described = admin.list_topics("made-in-console", timeout=10).topics["made-in-console"]
        assert len(described.partitions) == 2
        assert all(len(p.replicas) == 3 for p in described.partitions.values())
        assert _config(admin, "made-in-console", "retention.ms") == "3600000"

        set_config(page, "retention.ms", "7200000")
        page.wait_for_selector("text=Set retention.ms to '7200000'")
        assert _config(admin, "made-in-console", "retention.ms") == "7200000"

        set_config(page, "retention.ms", "soon")
        page.wait_for_selector(".notice.error")
        assert "INVALID_CONFIG" in page.locator(".notice.error").inner_text()

        grow = page.locator("form[name='Add partitions']")
        grow.locator("input[name=count]").fill("4")
        grow.locator("button").click()
        page.wait_for_selector("text=made-in-console has 4 partitions")
        wait_for(
            lambda: (
                len(
                    admin.list_topics("made-in-console", timeout=10)
                    .topics["made-in-console"]
                    .partitions
                )
                == 4
            ),
            "four partitions",
        )

        page.click("text=Browse and search messages")
        produce = page.locator("form[name='Produce record']")
        produce.locator("input[name=key]").fill("from-console")
        produce.locator("textarea[name=value]").fill("hello from the console")
        produce.locator("textarea[name=headers]").fill("origin: console")
        produce.locator("button").click()
        page.wait_for_selector("text=Produced to partition")
        page.select_option("select[name=start]", "earliest")
        page.fill("input[name=search]", "hello from")
        page.click("form[name='Search messages'] button")
        page.wait_for_selector("#results [data-state=done]")
        assert "origin: console" in page.locator("table[aria-label=Records]").inner_text()

        page.goto(console.url + "/topics/made-in-console")
        delete = page.locator("form[name='Delete topic']")
        delete.locator("input[name=confirm]").fill("made-in")
        delete.locator("button").click()
        page.wait_for_selector("text=Not deleted: type made-in-console exactly to confirm")
        delete = page.locator("form[name='Delete topic']")
        delete.locator("input[name=confirm]").fill("made-in-console")
        delete.locator("button").click()
        page.wait_for_selector("text=Deleted topic made-in-console")
        wait_for(
            lambda: "made-in-console" not in admin.list_topics(timeout=10).topics,
            "the topic to go",
        )


def set_config(page: Any, key: str, value: str) -> None:
    edit = page.locator("form[name='Set config']")
    edit.locator("input[name=key]").fill(key)
    edit.locator("input[name=value]").fill(value)
    edit.locator("button").click()


def _config(admin: AdminClient, topic: str, key: str) -> str:
    resource = ConfigResource("TOPIC", topic)
    return str(admin.describe_configs([resource])[resource].result(10)[key].value)


def test_an_empty_groups_offsets_are_reset_from_the_console(
    console: ConsoleProcess, planted: tuple[int, int], cluster: tuple[TestCluster, list[int]]
) -> None:
    running, _ = cluster
    group = "console-resettable"
    consumer = Consumer({"bootstrap.servers": running.bootstrap, "group.id": group})
    consumer.commit(
        offsets=[TopicPartition("orders", p, 500) for p in range(3)], asynchronous=False
    )
    consumer.close()
    with chromium_page() as page:
        page.goto(console.url + f"/groups/{group}")
        committed = page.locator("table[aria-label=Lag] tbody tr td:nth-child(3)")
        assert committed.all_inner_texts() == ["500", "500", "500"]
        reset = page.locator("form[name='Reset offsets']")
        reset.locator("select[name=to]").select_option("earliest")
        reset.locator("button").click()
        page.wait_for_selector("text=Committed orders:0 → 0")
    admin = AdminClient({"bootstrap.servers": running.bootstrap})
    from confluent_kafka import ConsumerGroupTopicPartitions

    found = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group]
    offsets = {tp.partition: tp.offset for tp in found.result(10).topic_partitions}
    assert offsets == {0: 0, 1: 0, 2: 0}


def test_wrong_and_hostile_requests_get_clear_errors_and_the_console_keeps_serving(
    console: ConsoleProcess, planted: tuple[int, int]
) -> None:
    status, text = console.get("/no/such/page")
    assert status == 404 and "no page at /no/such/page" in text
    status, text = console.get("/topics/missing-topic")
    assert status == 404 and "topic &#x27;missing-topic&#x27; does not exist" in text
    status, text = console.get("/topics/orders/search?limit=0")
    assert status == 400 and "limit: 0 is not between 1 and 1000" in text
    status, text = console.get("/topics/orders/search?partition=7")
    assert status == 202  # the search starts, then fails with the reason
    status, text = console.get("/searches/not-a-search")
    assert status == 400 and "no longer kept" in text
    status, text = console.post("/topics", b"x" * (2 * 1024 * 1024), "text/plain")
    assert status == 413 and "the form is larger than 1048576 bytes" in text
    status, text = console.post(
        "/topics", b"name=&partitions=2", "application/x-www-form-urlencoded"
    )
    assert status == 400 and "a topic needs a name" in text
    status, text = console.post(
        "/topics", b"name=t&partitions=many", "application/x-www-form-urlencoded"
    )
    assert status == 400 and "partitions: &#x27;many&#x27; is not a whole number" in text
    status, text = console.get("/topics/%3Cscript%3E")
    assert status == 404 and "<script>" not in text
    status, _ = console.get("/")
    assert status == 200


PATHS = st.sampled_from(
    [
        "/",
        "/topics",
        "/topics/orders",
        "/topics/orders/messages",
        "/topics/orders/search",
        "/groups",
        "/groups/g",
        "/searches/x",
        "/static/x",
        "/security",
        "/nothing",
    ]
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    PATHS,
    st.text(max_size=20).map(lambda t: quote(t, safe="")),
    st.dictionaries(
        st.sampled_from(["partition", "start", "limit", "search", "regex", "x"]),
        st.text(max_size=10),
        max_size=4,
    ),
)
def test_random_requests_get_an_answer_never_a_dropped_connection(
    console: ConsoleProcess, planted: tuple[int, int], path: str, tail: str, query: dict[str, str]
) -> None:
    url = path + ("/" + tail if tail and path == "/topics" else "")
    status, text = console.get(url + "?" + urlencode(query) if query else url)
    assert status in (200, 202, 400, 404), (url, status, text[:500])
    if status >= 400:
        assert 'class="notice error"' in text


def test_a_console_without_a_reachable_cluster_says_so(tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    with running_console(tmp_path, dead, ["--timeout", "1"]) as console:
        status, text = console.get("/topics")
        assert status == 502
        assert f"cannot reach a broker at {dead} (connection refused)" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--listen", "nowhere"], "--listen"),
        (["--metrics", "ftp://x/metrics"], "give an http:// or https:// URL"),
    ],
)
def test_console_usage_errors_exit_2(args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "strom", "console", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_the_console_takes_a_command_config_and_names_a_bad_key(
    tmp_path: Path, cluster: tuple[TestCluster, list[int]], planted: tuple[int, int]
) -> None:
    running, _ = cluster
    good = tmp_path / "client.properties"
    good.write_text("# the console's own settings\nclient.id = ops-console\n")
    with running_console(tmp_path, running.bootstrap, ["--command-config", str(good)]) as console:
        status, text = console.get("/topics")
        assert status == 200 and "orders" in text
    bad = tmp_path / "bad.properties"
    bad.write_text("no.such.setting=1\n")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "strom",
            "console",
            "-b",
            running.bootstrap,
            "--command-config",
            str(bad),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown key 'no.such.setting'" in done.stderr and str(bad) in done.stderr
