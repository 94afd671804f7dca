"""The typed response shapes (protocol/responses/) against Kafka's message definitions
(kio's schema), for every version strom serves: every key is a field of some version at
that place, and every field a version requires is a required key."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import pytest

from strom.protocol.apis import SERVED_APIS, ApiKey
from strom.protocol.codec import response_class
from strom.protocol.responses import SHAPES


def _entity_of(annotation: Any) -> type | None:
    """The kio entity a field holds (itself, in a tuple, or optional), else None."""
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return annotation
    for argument in typing.get_args(annotation):
        found = _entity_of(argument)
        if found is not None:
            return found
    return None


def _shape_of(annotation: Any) -> type | None:
    """The TypedDict a key holds (itself, in a list, or optional), else None."""
    if typing.is_typeddict(annotation):
        return typing.cast(type, annotation)
    for argument in typing.get_args(annotation):
        found = _shape_of(argument)
        if found is not None:
            return found
    return None


def _compare(shape: type, entity: type, seen: set[tuple[str, str]], where: str) -> list[str]:
    problems = []
    hints = typing.get_type_hints(shape)
    required: frozenset[str] = shape.__required_keys__  # type: ignore[attr-defined]
    entity_hints = typing.get_type_hints(entity)
    for field in dataclasses.fields(entity):
        needed = (
            field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        )
        if field.name not in hints:
            if needed:
                problems.append(f"{where}.{field.name}: required by the protocol, missing")
            continue
        seen.add((shape.__qualname__, field.name))
        if needed and field.name not in required:
            problems.append(f"{where}.{field.name}: required by the protocol, optional here")
        nested_entity = _entity_of(entity_hints[field.name])
        nested_shape = _shape_of(hints[field.name])
        if nested_entity is not None:
            if nested_shape is None:
                problems.append(f"{where}.{field.name}: an entity, not a shape here")
            else:
                problems.extend(
                    _compare(nested_shape, nested_entity, seen, f"{where}.{field.name}")
                )
    return problems


def _keys(shape: type, into: set[tuple[str, str]]) -> set[tuple[str, str]]:
    for key, annotation in typing.get_type_hints(shape).items():
        into.add((shape.__qualname__, key))
        nested = _shape_of(annotation)
        if nested is not None:
            _keys(nested, into)
    return into


@pytest.mark.parametrize("api_key", sorted(SHAPES), ids=lambda key: ApiKey(key).name)
def test_a_shape_matches_every_version_strom_serves(api_key: ApiKey) -> None:
    shape = SHAPES[api_key]
    served = SERVED_APIS[api_key]
    seen: set[tuple[str, str]] = set()
    problems = []
    for version in range(served.min_version, served.max_version + 1):
        entity = response_class(api_key, version)
        problems.extend(_compare(shape, entity, seen, f"v{version}"))
    assert not problems, "\n".join(["", *problems])
    unknown = _keys(shape, set()) - seen
    assert not unknown, f"keys no served version has: {sorted(unknown)}"


def test_the_check_catches_a_wrong_shape() -> None:
    class Broken(typing.TypedDict):
        responses: list[int]
        throttle_time: int
        no_such_field: int

    seen: set[tuple[str, str]] = set()
    problems = _compare(Broken, response_class(ApiKey.PRODUCE, 12), seen, "v12")
    assert problems == ["v12.responses: an entity, not a shape here"]
    assert _keys(Broken, set()) - seen == {(Broken.__qualname__, "no_such_field")}


def test_every_api_strom_serves_has_a_shape() -> None:
    assert set(SERVED_APIS) - set(SHAPES) == set()
