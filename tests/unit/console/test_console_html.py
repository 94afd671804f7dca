"""The console's pages: what they show, and that no name or value can inject markup."""

from __future__ import annotations

from html.parser import HTMLParser

from hypothesis import given
from hypothesis import strategies as st

from strom.cli.cluster import BrokerState, ClusterStatus, MemberRole, Quorum, QuorumMember
from strom.console.backend import (
    ClusterOverview,
    ConfigValue,
    PartitionInfo,
    TopicDetail,
    TopicSummary,
)
from strom.console.browse import BrowseQuery, FoundRecord
from strom.console.html import Notice, page, path_part, table
from strom.console.pages import cluster_body, messages_body, search_results, topic_body, topics_body
from strom.console.search import Search

HOSTILE = st.text(alphabet=st.sampled_from("<>\"&' /ascript=x"), min_size=1, max_size=30)


class Shape(HTMLParser):
    """The tags and attribute names of a document, and its text."""

    def __init__(self, document: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, tuple[str, ...]]] = []
        self.text: list[str] = []
        self.feed(document)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, tuple(name for name, _ in attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def renderings(name: str) -> list[str]:
    summary = TopicSummary(name, 1, 1, 0, 0, None, internal=False)
    record = FoundRecord(0, 0, None, name.encode(), name.encode(), ((name, name.encode()),))
    search = Search("t", BrowseQuery.parse({}), found=[record])
    search.finished.set()
    return [
        topics_body([summary], show_internal=True),
        page(name, "", notices=[Notice(name, error=True)]),
        search_results(search),
    ]


@given(HOSTILE)
def test_no_name_or_value_changes_a_pages_markup(name: str) -> None:
    for hostile, benign in zip(renderings(name), renderings("x"), strict=True):
        assert Shape(hostile).tags == Shape(benign).tags
        assert name in "".join(Shape(hostile).text)
    assert f'href="/topics/{path_part(name)}"' in renderings(name)[0]


def test_a_cluster_page_shows_brokers_the_quorum_and_partition_health() -> None:
    status = ClusterStatus(
        cluster_id="abc",
        cluster_name="prod",
        controller_id=2,
        brokers=(BrokerState(1, "h1:9092", None, False), BrokerState(2, "h2:9092", "r1", True)),
        quorum=Quorum(2, 5, 40, (QuorumMember(2, MemberRole.LEADER, "h2:9093", 40, 0, 10),)),
        quorum_error=None,
    )
    rendered = cluster_body(ClusterOverview(status, 3, 9, 1, 0), charts=None)
    for expected in ("abc", "prod", "h2:9092", "fenced", "Leader 2, epoch 5", "--metrics"):
        assert expected in rendered
    assert "<dt>Under-replicated partitions</dt><dd>1</dd>" in rendered


def test_a_topic_page_marks_under_replicated_partitions_and_own_configs() -> None:
    detail = TopicDetail(
        "orders",
        (PartitionInfo(0, 1, (1, 2, 3), (1, 3), 0, 12, {1: 2048, 3: 2048}),),
        (
            ConfigValue("retention.ms", "1000", "dynamic topic config", False, False, False),
            ConfigValue("segment.bytes", "1073741824", "default config", True, False, False),
        ),
    )
    rendered = topic_body(detail)
    assert "1,3 (under-replicated)" in rendered
    assert "1: 2.0 kB, 3: 2.0 kB" in rendered
    assert "<strong>retention.ms</strong>" in rendered
    assert "Use default" in rendered  # only the topic's own value can be reset


def test_a_running_search_shows_its_progress_and_a_finished_one_its_records() -> None:
    search = Search("t", BrowseQuery.parse({}), total=200, scanned=50)
    running = search_results(search)
    assert 'data-state="running"' in running
    assert '<progress max="200" value="50">' in running
    search.finished.set()
    search.found.append(FoundRecord(1, 3, 1000, None, b"needle", ()))
    done = search_results(search)
    assert 'data-state="done"' in done and "needle" in done
    search.error = "topic 't' does not exist"
    assert "Search failed: topic &#x27;t&#x27; does not exist" in search_results(search)


def test_the_message_page_offers_each_partition_and_a_produce_form() -> None:
    rendered = messages_body("t", 3, None, None)
    for partition in ("0", "1", "2"):
        assert f'<option value="{partition}">' in rendered
    assert 'action="/topics/t/produce"' in rendered


def test_an_empty_table_says_so() -> None:
    assert table(("A",), [], empty="No topics yet.") == '<p class="empty">No topics yet.</p>'
