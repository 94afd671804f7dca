"""The test network's pure cores: which links are cut, which requests are answered."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode

from strom.protocol.apis import ApiKey
from strom.testing.faults import Injection, RequestFaults
from strom.testing.links import CLIENTS, LinkRules

NOT_LEADER = Injection(ErrorCode.not_leader_or_follower)


def test_a_cut_link_is_cut_both_ways_and_only_that_link() -> None:
    rules = LinkRules()
    rules.cut(1, 2)
    assert rules.is_cut(1, 2) and rules.is_cut(2, 1)
    assert not rules.is_cut(1, 3) and not rules.is_cut(2, CLIENTS)
    assert rules.cut_links == [(1, 2)]


def test_isolating_a_node_cuts_it_from_every_other_node_and_the_clients() -> None:
    rules = LinkRules()
    rules.isolate(2, [1, 2, 3])
    assert rules.cut_links == [(CLIENTS, 2), (1, 2), (2, 3)]
    assert not rules.is_cut(1, 3)


def test_heal_one_link_one_node_or_everything() -> None:
    rules = LinkRules()
    rules.isolate(1, [1, 2, 3])
    rules.cut(2, 3)
    rules.heal(1, CLIENTS)
    assert rules.cut_links == [(1, 2), (1, 3), (2, 3)]
    rules.heal(1)
    assert rules.cut_links == [(2, 3)]
    rules.heal()
    assert rules.cut_links == []


def test_an_endpoint_has_no_link_to_itself() -> None:
    rules = LinkRules()
    with pytest.raises(ValueError, match="two different endpoints"):
        rules.cut(1, 1)
    assert not rules.is_cut(1, 1)


def test_a_rule_answers_exactly_count_requests_of_its_api() -> None:
    faults = RequestFaults()
    faults.add(ApiKey.PRODUCE, NOT_LEADER, count=2)
    assert faults.take(1, ApiKey.FETCH) is None
    assert faults.take(1, ApiKey.PRODUCE) == NOT_LEADER
    assert faults.remaining() == 1
    assert faults.take(3, ApiKey.PRODUCE) == NOT_LEADER
    assert faults.take(1, ApiKey.PRODUCE) is None
    assert faults.remaining() == 0


def test_a_rule_for_one_node_leaves_the_others_alone() -> None:
    faults = RequestFaults()
    faults.add(ApiKey.FETCH, Injection(None, 0.5), node_id=2)
    assert faults.take(1, ApiKey.FETCH) is None
    assert faults.take(2, ApiKey.FETCH) == Injection(None, 0.5)
    assert faults.take(2, ApiKey.FETCH) is None


def test_rules_apply_in_the_order_they_were_added() -> None:
    faults = RequestFaults()
    delay = Injection(None, 1.0)
    faults.add(ApiKey.PRODUCE, delay, count=1)
    faults.add(ApiKey.PRODUCE, NOT_LEADER, count=1)
    assert [faults.take(1, ApiKey.PRODUCE) for _ in range(3)] == [delay, NOT_LEADER, None]


def test_counts_and_delays_are_checked() -> None:
    faults = RequestFaults()
    with pytest.raises(ValueError, match="at least 1"):
        faults.add(ApiKey.PRODUCE, NOT_LEADER, count=0)
    with pytest.raises(ValueError, match="negative"):
        faults.add(ApiKey.PRODUCE, Injection(None, -1.0))
    faults.add(ApiKey.PRODUCE, NOT_LEADER, count=5)
    assert faults.remaining(ApiKey.PRODUCE) == 5 and faults.remaining(ApiKey.FETCH) == 0
    faults.clear()
    assert faults.remaining() == 0
