"""The indexed authorizer against the reference model (a plain scan of every binding) on
generated bindings, principals, hosts (addresses and CIDR ranges), names and prefixes;
and an index built change by change against one built at once."""

from __future__ import annotations

from acl_helpers import (
    KINDS,
    Request,
    binding_sets,
    bindings,
    model_authorize,
    model_by_resource_type,
    model_operations,
    requests,
    scenarios,
    super_user_sets,
)
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.security.acls import AclBinding, AclBindingFilter
from strom.security.authorizer import AclIndex, Authorizer
from strom.security.operations import AclOperation

Scenario = tuple[list[AclBinding], Request]


@settings(max_examples=400, deadline=None)
@given(scenario=scenarios(), supers=super_user_sets, default=st.booleans())
def test_authorize_agrees_with_the_model(
    scenario: Scenario, supers: frozenset[str], default: bool
) -> None:
    held, request = scenario
    authorizer = Authorizer(AclIndex(held), supers, default)
    assert authorizer.authorize(*request) is model_authorize(held, supers, default, request)


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios(), supers=super_user_sets, default=st.booleans())
def test_authorized_operations_agree_with_the_model(
    scenario: Scenario, supers: frozenset[str], default: bool
) -> None:
    held, (principal, host, _, kind, name) = scenario
    authorizer = Authorizer(AclIndex(held), supers, default)
    found = authorizer.authorized_operations(principal, host, kind, name)
    assert found == model_operations(held, supers, default, (principal, host, kind, name))
    for operation in found:
        assert authorizer.authorize(principal, host, operation, kind, name)


@settings(max_examples=400, deadline=None)
@given(scenario=scenarios(), supers=super_user_sets, default=st.booleans())
def test_authorize_by_resource_type_agrees_with_the_model(
    scenario: Scenario, supers: frozenset[str], default: bool
) -> None:
    held, (principal, host, operation, kind, _) = scenario
    authorizer = Authorizer(AclIndex(held), supers, default)
    question = (principal, host, operation, kind)
    expected = model_by_resource_type(held, supers, default, question)
    assert authorizer.authorize_by_resource_type(*question) is expected


@settings(max_examples=200, deadline=None)
@given(scenario=scenarios())
def test_a_resource_allowed_means_its_type_is_allowed(scenario: Scenario) -> None:
    # (not the other way round: the type is allowed when some resource is, not this one)
    # except for DESCRIBE and DESCRIBE_CONFIGS: the by-type check implies no operation
    held, (principal, host, operation, kind, name) = scenario
    authorizer = Authorizer(AclIndex(held))
    implied = operation in (AclOperation.DESCRIBE, AclOperation.DESCRIBE_CONFIGS)
    if not implied and authorizer.authorize(principal, host, operation, kind, name):
        assert authorizer.authorize_by_resource_type(principal, host, operation, kind)


changes = st.lists(st.tuples(st.booleans(), bindings), max_size=25)


@settings(max_examples=150, deadline=None)
@given(start=binding_sets, steps=changes, request=requests)
def test_an_index_changed_step_by_step_decides_as_one_built_at_once(
    start: list[AclBinding], steps: list[tuple[bool, AclBinding]], request: Request
) -> None:
    index = AclIndex(start)
    held = set(start)
    history = [(index, frozenset(held))]
    for add, binding in steps:
        if add:
            index, held = index.with_changes(added=[binding]), held | {binding}
        else:
            index, held = index.with_changes(removed=[binding]), held - {binding}
        history.append((index, frozenset(held)))
    # every index, the old ones too, still holds and decides as its own bindings say
    for each, expected in history:
        fresh = Authorizer(AclIndex(expected))
        assert set(each) == expected and len(each) == len(expected)
        assert each.matching(AclBindingFilter()) == sorted(expected)
        assert Authorizer(each).authorize(*request) is fresh.authorize(*request)
        principal, host, _, _, name = request
        for kind in KINDS:
            assert Authorizer(each).authorized_operations(
                principal, host, kind, name
            ) == fresh.authorized_operations(principal, host, kind, name)
